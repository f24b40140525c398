"""Watch a process (or a tree) from outside, live.

Layers over time, the largest arenas and the findings, refreshed in place; for a
tree, each process's private memory over time and what it copied from its parent,
so that copy-on-write growth in forked workers is seen as it happens.

  memgap top PID [--interval S] [--tree] [--iterations N]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from dataclasses import dataclass

from memgap.cli import _common
from memgap.documents.snapshot import Snapshot
from memgap.errors import NoSuchProcess, PidReused
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
from memgap.explain.tree import snapshot_tree
from memgap.report.live import frame
from memgap.report.terminal import console_on
from memgap.sources.processes import ProcessIdentity

HISTORY = 60


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=_common.pid, help="process ID")
    p.add_argument("--interval", type=_common.seconds, default=1.0, metavar="S", help="seconds between refreshes (1)")
    p.add_argument("--tree", action="store_true", help="the process and its descendants, summed")
    p.add_argument("--iterations", type=_common.count_or_zero, default=0, metavar="N",
                   help="stop after N refreshes (0: until Ctrl-C)")


def _snapshots(pid: int, tree: bool, shown: ProcessIdentity | None) -> tuple[list[Snapshot], ProcessIdentity]:
    """One refresh, and the process it shows: a PID that now names another process than
    the one the first refresh showed is PidReused, not a new view."""
    identity = ProcessIdentity.asked_for(pid)
    if shown is not None and identity != shown:
        raise PidReused(pid, "another process has it since the last refresh")
    snaps = snapshot_tree(pid).processes if tree else [snapshot_pid(pid, SnapshotOptions(regions=False))]
    identity.check()
    return snaps, identity


@dataclass(frozen=True)
class TopRequest:
    """``memgap top``'s options."""

    pid: int
    interval: float = 1.0
    tree: bool = False
    iterations: int = 0  # 0: until Ctrl-C

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TopRequest:
        return cls(pid=args.pid, interval=args.interval, tree=args.tree, iterations=args.iterations)


def main(args: argparse.Namespace) -> int:
    return execute(TopRequest.from_args(args))


def execute(request: TopRequest) -> int:
    console = console_on(sys.stdout)
    history: deque[list[Snapshot]] = deque(maxlen=HISTORY)
    live = None
    if sys.stdout.isatty():
        from rich.live import Live

        live = Live(console=console, auto_refresh=False, screen=False)
        live.start()
    count = 0
    shown: ProcessIdentity | None = None
    try:
        while True:
            try:
                snaps, shown = _snapshots(request.pid, request.tree, shown)
            except PidReused:
                raise
            except NoSuchProcess:
                if count:
                    console.print(f"PID {request.pid} exited")
                    return 0
                raise
            history.append(snaps)
            view = frame(history, snaps, console.width)  # read each time: the terminal may be resized
            if live is not None:
                live.update(view, refresh=True)
            else:
                console.print(f"--- {time.strftime('%H:%M:%S')}")
                console.print(view)
            count += 1
            if request.iterations and count >= request.iterations:
                return 0
            time.sleep(request.interval)
    finally:
        if live is not None:
            live.stop()
