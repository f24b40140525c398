"""``memgap run``'s sampler: every process of the command's tree, whatever its language, read
from outside (the snapshot ``memgap inspect PID`` takes: ``collect.snapshot_pid``) at

- its quiet spells (``OutsideQuiet``, by memgap.record.idle's rule), unless it marks phases itself;
- its peak: a snapshot as the sampler first sees it, then whenever its sampled RSS passes the
  RSS of its last peak snapshot by PEAK_STEP (10%) or PEAK_STEP_MIN (8 MiB), whichever is
  larger. So the cost stays bounded: a process that grows to R MiB is read at most
  11 + log1.1(R / 80 MiB) times on the way (about 21 for 200 MiB, fewer where it grows faster
  than the samples), and a read that took d seconds is followed by none of the same process for
  4 d more, 2 s at most (PEAK_DUTY: its peak reads take a fifth of the reads' time at most: a Python
  heap's pool census can take 0.1-0.4 s on a loaded machine; PEAK_WAIT_MOST: a first look at large
  C++ libraries takes seconds, the next far less). A read during which its RSS moved
  (``moving``) is read again once the process is still at that high. The run's document keeps
  the highest steady read (``best_peak``);
- its exit: memgap's agent, preloaded in it (or, under ``memgap run``, Python's bootstrap), says so
  on memgap.record.exit_hold's socket as the process exits and waits (1 s at most, Python 3 s) while the
  recorder reads it; the agent's exit record says when the process went on to exit (the
  document's ``exit``: how close the last snapshot came).

None of these reads is made in the sampler's loop: it asks, and memgap.record.outside's thread
reads (``OutsideReads``), so that the timeline keeps its interval whatever a read costs.

The sampler also names each process: its command line, read again after an exec (its comm or
its VmHWM changed), else its comm in brackets; a process seen no longer is recorded ``gone``.
"""
from __future__ import annotations

import os
import queue
import time
from typing import TYPE_CHECKING

from memgap.documents.json_value import JsonObject
from memgap.documents.recorded import ProcessEntry, ProcessExit, RecordedSnapshot
from memgap.errors import MemgapError
from memgap.record.idle import QUIET_PHASE, QuietSpell, quiet_after, rss_slack
from memgap.record.outside import PSS_EVENT, OutsideReads, ReadAsked, ReadMade
from memgap.record.recording import child_recording_path
from memgap.report.units import MiB
from memgap.sources.nvml import device_memory
from memgap.sources.processes import tree_pids
from memgap.sources.procfs import ProcReader, status_int

if TYPE_CHECKING:
    from memgap.record.tree_end import Watchdog

PEAK_PHASE = "peak"
PEAK_STEP = 0.10         # of the last peak snapshot's RSS: a new high this much above it is read again
PEAK_STEP_MIN = 8 * MiB  # ...and at least this much
PEAK_DUTY = 0.2          # a process's peak reads take at most this share of the reads' time...
PEAK_WAIT_MOST = 2.0     # ...but the next waits this long at most (s): a first look at large libraries takes
                         # seconds, the reader's next ones far less (what it parsed, it keeps: its caches)
PASSING_PEAK = 16 * MiB  # VmHWM: a shell's subshell (bash: 4 MiB), a script's short command (coreutils: 1-2 MiB)
TOO_MANY = "not read: too many reads from outside were waiting (memgap.record.outside.MAX_PENDING)"


def peak_due(last: int | None, rss: int) -> bool:
    """Whether a process at ``rss`` is read for its peak: at first sight (``last`` None), then again
    at each new high PEAK_STEP (PEAK_STEP_MIN at least) above its last peak snapshot's ``last``."""
    return last is None or rss >= last + max(PEAK_STEP_MIN, int(PEAK_STEP * last))


def best_peak(reads: list[RecordedSnapshot]) -> RecordedSnapshot | None:
    """The peak snapshot a run's document keeps of a process's snapshots (its peak reads and its
    phases): the highest steady one, unless a read that moved (RSS changed while it was read: its
    layers add up less well) is higher than that by more than the peak's margin."""
    if not reads:
        return None
    top = max(reads, key=lambda r: r["rss"])
    steady = [r for r in reads if not r.get("moving")]
    best = max(steady, key=lambda r: r["rss"]) if steady else top
    return top if peak_due(best["rss"], top["rss"]) else best


def command_of(reader: ProcReader, status: dict[str, int | str]) -> list[str]:
    """A process's command line; its comm in brackets where it has none (a zombie, a kernel thread)."""
    try:
        cmd = reader.cmdline()
    except MemgapError:
        cmd = []
    return cmd or [f"[{status.get('Name') or '?'}]"]


class TreeSampler:
    """One round of samples of the tree at a time: RSS of every process, and the reads from outside
    that its quiet spells (``quiet``) and its new highs call for."""

    def __init__(self, reads: OutsideReads, start: float, quiet: OutsideQuiet | None,
                 watchdog: Watchdog | None = None) -> None:
        self.reads, self.writer, self.start, self.quiet = reads, reads.writer, start, quiet
        self.watchdog = watchdog  # told each process as it is first seen, and as it goes (memgap.record.tree_end)
        self.names: dict[int, tuple[str, int]] = {}  # pid -> (comm, VmPeak) at the last look: an exec changes them
        self.cmds: dict[int, list[str]] = {}  # pid -> the command line last recorded
        self.peaks: dict[int, int] = {}  # pid -> RSS of its last peak snapshot
        self.last_rss: dict[int, int] = {}  # pid -> its RSS at the last round
        self.unsteady: dict[int, int] = {}  # pid -> RSS of a peak read while it moved: read again once still
        self.next_peak: dict[int, float] = {}  # pid -> monotonic time before which it is not read for a peak
        self.alive: set[int] = set()
        self.hz = os.sysconf("SC_CLK_TCK")
        self._read: queue.SimpleQueue[tuple[int, ReadMade]] = queue.SimpleQueue()  # peak reads made

    def sample(self, root: int) -> None:
        self._peaks_read()
        now = time.time() - self.start
        seen: set[int] = set()
        pids = list(tree_pids(root))
        gpu = device_memory(pids)
        for pid in pids:
            reader = ProcReader(pid)
            try:
                status = reader.status()
                if str(status.get("State", "")).startswith("Z"):
                    continue  # exited, not yet waited for: its memory is gone
                self._name(pid, reader, status, now)
                cpu = reader.stat().cpu_ticks  # the lab tells a workload's bursts and rests by it
            except Exception:  # noqa: BLE001 - a process that exits between listing and reading is skipped
                continue
            seen.add(pid)
            rss = status_int(status, "VmRSS")
            self.writer.write({"type": "sample", "t": round(now, 4), "pid": pid, "rss": rss,
                               "anon": status_int(status, "RssAnon"), "file": status_int(status, "RssFile"),
                               "threads": status_int(status, "Threads"), "cpu": round(cpu / self.hz, 2),
                               **({"gpu": gpu[pid]} if pid in gpu else {})})
            if self.quiet is not None:
                self.quiet.update(self.reads, pid, cpu, rss, self.start)
            prev, self.last_rss[pid] = self.last_rss.get(pid), rss
            if (peak_due(self.peaks.get(pid), rss) or self._settled(pid, rss, prev)) and \
                    time.monotonic() >= self.next_peak.get(pid, 0.0) and not self.reads.under_way((PEAK_PHASE, pid)):
                self._ask_peak(pid, rss)
        self._gone(self.alive - seen)
        self.alive = seen

    def _ask_peak(self, pid: int, rss: int) -> None:
        """A peak read of ``pid`` asked of the reads (replacing one of its asked before and not begun: the
        newest high wins); what it found comes back to ``_peaks_read``."""
        def done(made: ReadMade) -> None:
            self._read.put((pid, made))

        read = ReadAsked(pid, PEAK_PHASE, self.start, time.time(), event="peak")
        if self.reads.ask(read, (PEAK_PHASE, pid), done):
            self.peaks[pid] = rss

    def _peaks_read(self) -> None:
        """The peak reads made since the last round: a moving one is read again once still, and each
        process's next peak read waits (PEAK_DUTY of the reads' time at most)."""
        while not self._read.empty():
            pid, made = self._read.get()
            if made.moving and made.rss is not None:
                self.unsteady[pid] = made.rss  # the level the read found, not the older one it was asked at
            else:
                self.unsteady.pop(pid, None)
            spent = made.ended - made.began
            self.next_peak[pid] = made.ended + min(spent * (1 / PEAK_DUTY - 1), PEAK_WAIT_MOST)

    def _settled(self, pid: int, rss: int, prev: int | None) -> bool:
        """Whether a process whose last peak read moved (its RSS grew or fell while it was read) has
        come to rest at that high since: then it is read once more, steady. A high it has left
        already is not waited for."""
        level = self.unsteady.get(pid)
        if level is None or prev is None:
            return False
        if rss < level - rss_slack(level):
            del self.unsteady[pid]  # the high has passed: its moving read is all there is
            return False
        return abs(rss - prev) <= rss_slack(rss)

    def _gone(self, pids: set[int]) -> None:
        for pid in sorted(pids):
            if self.watchdog is not None and not os.path.exists(f"/proc/{pid}"):  # not an orphan that left
                self.watchdog.forget(pid)
            self.writer.write({"type": "gone", "pid": pid, "t": round(time.time() - self.start, 4)})

    def finish(self) -> None:
        """The command has ended: those of the last round that are no more exited (the command's own
        process among them, once waited for); the others are left running, or stopped by memgap."""
        self._gone({pid for pid in self.alive if not os.path.exists(f"/proc/{pid}")})

    def _name(self, pid: int, reader: ProcReader, status: dict[str, int | str], now: float) -> None:
        """A process seen for the first time, or again after an exec: its command line recorded."""
        if "VmPeak" not in status and pid in self.cmds:
            return  # exiting: its memory is gone, and with it its VmPeak (a fall that is no exec) and its cmdline
        comm, vm_peak = str(status.get("Name", "")), status_int(status, "VmPeak")
        known, self.names[pid] = self.names.get(pid), (comm, vm_peak)
        if known is not None and known[0] == comm and vm_peak >= known[1]:
            return  # the same program: its VmPeak only grows until an exec starts a new one (VmHWM can dip)
        if known is None and pid not in self.cmds and self.watchdog is not None:
            self.watchdog.watch(pid)
        cmd = command_of(reader, status)
        if cmd[0].startswith("[") and pid in self.cmds and not self.cmds[pid][0].startswith("["):
            return  # no command line to read now: the one read before stands (a stopped server read '[python]')
        if cmd[0].startswith("[") and not str(status.get("State", "")).startswith("Z"):
            # no command line yet, in the middle of an exec (a server started by a driver read as "[python]"
            # once): asked again at the next sample, recorded again once it has one
            self.names.pop(pid, None)
        if cmd == self.cmds.get(pid) and known is None:
            return
        self.cmds[pid] = cmd
        event: JsonObject = {"type": "process", "pid": pid, "ppid": status_int(status, "PPid"), "cmd": cmd,
                             "t": round(now, 4)}
        if known is not None:  # a new program in it: its peak starts again
            event["exec"] = True
            self.peaks.pop(pid, None)
        self.writer.write(event)


class OutsideQuiet:
    """Quiet spells of the tree's processes: a snapshot from outside as each spell
    begins (see memgap.record.idle). A process that marks phases of its own (it has written
    its own recording, or printed a --phase-regex line) is left to its marks."""

    def __init__(self, record_dir: str) -> None:
        self.record_dir = record_dir
        self.spells: dict[int, QuietSpell] = {}
        self.after = quiet_after()
        self.hz = os.sysconf("SC_CLK_TCK")
        self.marked: set[int] = set()  # processes whose marks were read from their output

    def update(self, reads: OutsideReads, pid: int, cpu_ticks: int, rss: int, start: float) -> None:
        if pid in self.marked or os.path.exists(child_recording_path(self.record_dir, pid)):
            return
        spell = self.spells.setdefault(pid, QuietSpell(self.after))
        writer, asked = reads.writer, time.time()
        # wall time: the recording's clock; its run-queue wait: a process starved of CPU is not at rest
        event = spell.update(asked, cpu_ticks / self.hz, rss, ProcReader(pid).run_delay())
        if event == "quiet":
            # the spell itself, apart from its snapshot: a read that waits behind others may come after the
            # process exited, and the idle found is still this spell (memgap.record.idle.told_spells)
            writer.write({"type": "quiet", "pid": pid, "time": asked, "since": spell.since,
                          "rested_since": spell.rested_since, "rss": rss})
            others = tuple(other for other, known in self.spells.items() if other != pid and known.reported)
            if others:  # the quiet ones' PSS now, before the snapshot (its read may wait for others): one
                # batch waiting, the newest (all that are quiet then); memgap.record.tree_idle sums a tree by it
                reads.ask(ReadAsked(pid, QUIET_PHASE, start, asked, event=PSS_EVENT, then_pss=others), PSS_EVENT)
            read = ReadAsked(pid, QUIET_PHASE, start, asked, quiet_since=spell.since,
                             rested_since=spell.rested_since, then_pss=others)
            if not reads.ask(read):
                writer.write({"type": "error", "pid": pid, "phase": QUIET_PHASE, "error": TOO_MANY})
        elif event == "end":
            writer.write({"type": "quiet-end", "pid": pid, "time": asked})  # the reading that began the next spell


def passing_through(pid: int, interval: float) -> tuple[float, int] | None:
    """(seconds it lived, its VmHWM) of a process that says it exits and only passed through the tree,
    its exit not worth a read from outside: it lived less than one interval (it came and went between
    two rounds of samples), its RSS never reached PASSING_PEAK, and memgap did not start it (nor
    adopt it: its parent is not memgap). A pyenv-like shim's subshells and short commands, 20 of them
    each read at exit, made a 1 s Python program's run take 6 s. None otherwise, or where it cannot
    be told: then it is read."""
    reader = ProcReader(pid)
    try:
        stat, status = reader.stat(), reader.status()
    except (MemgapError, OSError):
        return None
    lived = time.clock_gettime(time.CLOCK_BOOTTIME) - stat.start_time / os.sysconf("SC_CLK_TCK")
    hwm = status_int(status, "VmHWM")
    if stat.ppid == os.getpid() or lived >= interval or hwm >= PASSING_PEAK:
        return None
    return max(0.0, round(lived, 3)), hwm


def exit_of(entry: ProcessEntry, start: float | None) -> ProcessExit | None:
    """How close a process's last snapshot came to its exit (the run document's ``exit``), from a
    run document's process entry: the exit's time by its agent (which held it for the recorder),
    else the first round of samples that found it gone (the exit came at or before then: ``gap``
    is an upper bound); None where neither is known (it ran to the end, or was stopped). A process
    that passed through (``passing_through``) has its exit let go unread: ``passed`` says why."""
    held = (entry.get("agent_exit") or {}).get("exit") or {}
    gone = entry.pop("gone", None)
    passed = entry.pop("passed", None)
    if held.get("time"):
        out: ProcessExit = {"time": held["time"], "by": "agent", "held": held.get("held"),
                               "answered": bool(held.get("answered"))}
        if passed:
            out["passed"] = passed
    elif gone is not None and start is not None:
        out = {"time": round(start + gone, 4), "by": "sampled"}
    else:
        return None
    snaps = [*entry["snapshots"], *entry.get("peak_reads", [])]
    last = max((s["time"] for s in snaps if s.get("time")), default=None)
    out["last_snapshot"] = last
    out["gap"] = round(out["time"] - last, 4) if last is not None else None
    return out
