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
from memgap.documents.records import TreeDocument
from memgap.documents.snapshot import TreeSnapshot, by_pss, layer_figure
from memgap.errors import NoSuchProcess, PidReused
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
from memgap.explain.tree import snapshot_tree, tree_document
from memgap.report.live import Refresh, frame
from memgap.report.terminal import console_on
from memgap.sources.processes import ProcessIdentity

HISTORY = 60


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=_common.pid, help="process ID")
    p.add_argument("--interval", type=_common.seconds, default=1.0, metavar="S", help="seconds between refreshes (1)")
    p.add_argument("--tree", action="store_true", help="the process and its descendants, summed")
    p.add_argument("--iterations", type=_common.count_or_zero, default=0, metavar="N",
                   help="stop after N refreshes (0: until Ctrl-C)")


def _snapshots(pid: int, tree: bool, shown: ProcessIdentity | None) -> tuple[TreeSnapshot, ProcessIdentity]:
    """One refresh, and the process it shows: a PID that now names another process than
    the one the first refresh showed is PidReused, not a new view."""
    identity = ProcessIdentity.asked_for(pid)
    if shown is not None and identity != shown:
        raise PidReused(pid, "another process has it since the last refresh")
    snaps = snapshot_tree(pid) if tree else TreeSnapshot(pid, [snapshot_pid(pid, SnapshotOptions(regions=False))])
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


def refresh_of(history: deque[TreeDocument]) -> Refresh:
    """What a refresh shows, computed here once: the tree now, and each layer's figure and each
    process's private memory over the refreshes kept (a tree's layers by PSS where every refresh has
    it, else by resident bytes)."""
    now = history[-1]
    pss = len(now.processes) > 1 and all(by_pss(tree.processes) for tree in history)
    layers = {name: [sum(layer_figure(s.layers[name], pss) or 0 for s in tree.processes) for tree in history]
              for name in now.processes[0].layers}
    private = {s.pid: [next((p.uss or 0 for p in tree.processes if p.pid == s.pid), 0) for tree in history]
               for s in now.processes}
    return Refresh(now, len(history), pss, layers, private)


def main(args: argparse.Namespace) -> int:
    return execute(TopRequest.from_args(args))


def execute(request: TopRequest) -> int:
    console = console_on(sys.stdout)
    history: deque[TreeDocument] = deque(maxlen=HISTORY)
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
            history.append(tree_document(snaps))
            view = frame(refresh_of(history), console.width)  # read each time: the terminal may be resized
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
