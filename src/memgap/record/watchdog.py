"""memgap's watchdog: ends a recorded run's tree when memgap itself is killed (SIGKILL, the OOM
killer), where no handler of memgap's runs. See memgap.record.tree_end.

memgap forks it (memgap.record.tree_end.Watchdog) into a session of its own (a terminal's signals do
not reach it) with a pipe on its stdin, whose other end only memgap holds (and its reader, which dies
with it), and writes there what to end: ``group PGID`` for the command's process group, ``pid PID
START`` for each process of the tree as the sampler first sees it (with its start time, so that a PID
reused meanwhile is left alone), ``gone PID`` as one exits.
``done`` ends the watch (memgap ended the run itself). The pipe's end without ``done`` means memgap
is gone: SIGTERM to each process and the group, GRACE seconds, then SIGKILL to what is left.
The standard library only: memgap loads it before its command starts (it also runs as a script,
``python -S -E``, where it is tried by hand).
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterable

GRACE = 5.0  # as memgap.record.tree_end.GRACE


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process, None where there is none."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _running(pids: dict[int, int]) -> dict[int, int]:
    """Those still the same process (the start time told), and not zombies."""
    out = {}
    for pid, start in pids.items():
        found = _stat(pid)
        if found is not None and found[1] == start and found[0] != "Z":
            out[pid] = start
    return out


def _signal(pids: dict[int, int], groups: set[int], sig: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for pid in _running(pids):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _group_left(groups: set[int]) -> bool:
    for pgid in groups:
        try:
            os.killpg(pgid, 0)
            return True
        except OSError:
            continue
    return False


def end(pids: dict[int, int], groups: set[int]) -> None:
    """SIGTERM, GRACE seconds for them to go, SIGKILL to what is left."""
    _signal(pids, groups, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while (_running(pids) or _group_left(groups)) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal(pids, groups, signal.SIGKILL)


def watch(stream: Iterable[bytes]) -> bool:
    """Read memgap's lines until ``done`` (False: nothing to end) or the pipe's end (True: memgap is
    gone, the tree ended)."""
    pids: dict[int, int] = {}
    groups: set[int] = set()
    for line in stream:
        words = line.split()
        try:
            if words == [b"done"]:
                return False
            if len(words) == 3 and words[0] == b"pid":
                pids[int(words[1])] = int(words[2])
            elif len(words) == 2 and words[0] == b"gone":
                pids.pop(int(words[1]), None)
            elif len(words) == 2 and words[0] == b"group":
                groups.add(int(words[1]))
        except ValueError:
            continue
    end(pids, groups)
    return True


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM,))  # memgap held it off as it started this
    for ignored in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(ignored, signal.SIG_IGN)
    watch(sys.stdin.buffer)
