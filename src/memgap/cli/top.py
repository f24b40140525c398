"""Watch a process (or a tree) from outside, live.

Layers over time, the largest arenas and the findings, refreshed in place; for a
tree, each process's private memory over time and what it copied from its parent,
so that copy-on-write growth in forked workers is seen as it happens.

A full look (the breakdown) takes what the process's mappings cost to read: seconds for one
that maps large C++ libraries. So the looks are made one after another in a thread beside the
refreshes (``Looks``), and each refresh reads RSS (and a tree's PSS) afresh and shows the last
breakdown with its age: the view keeps its interval whatever a look costs.

  memgap top PID [--interval S] [--tree] [--iterations N]
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

from rich.console import Group, RenderableType

from memgap.cli import _common
from memgap.documents.records import TreeDocument
from memgap.documents.snapshot import TreeSnapshot, by_pss, layer_figure, tree_layer_names
from memgap.errors import MemgapError, NoSuchProcess, PidReused
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
from memgap.explain.tree import snapshot_tree, tree_document
from memgap.report.live import Glance, Refresh, frame, glance_line
from memgap.report.terminal import console_on
from memgap.sources.processes import ProcessIdentity, tree_pids
from memgap.sources.procfs import ProcReader, status_int

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
class Look:
    """One full look, as the looks' thread made it: the tree read, when the read began (wall
    time) and how long it took."""

    tree: TreeDocument
    began: float
    seconds: float


class Looks:
    """Full looks at the process (or tree), one after another in a thread of their own, each an
    ``interval`` after the last ended; ``latest`` is the newest, ``failed`` what ended them (the
    process exited, or its PID names another one now)."""

    def __init__(self, pid: int, tree: bool, interval: float) -> None:
        self.pid, self.tree, self.interval = pid, tree, interval
        self.latest: Look | None = None
        self.failed: MemgapError | None = None
        self.reading_since = time.time()  # when the look under way began
        self._stop = threading.Event()
        self._first = threading.Event()  # the first look made (or failed)
        self._thread = threading.Thread(target=self._loop, name="memgap-top-looks", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        shown: ProcessIdentity | None = None
        while not self._stop.is_set():
            began = self.reading_since = time.time()
            try:
                snaps, shown = _snapshots(self.pid, self.tree, shown)
            except MemgapError as exc:
                self.failed = exc
                self._first.set()
                return
            self.latest = Look(tree_document(snaps), began, time.time() - began)  # one assignment: read whole
            self._first.set()
            self._stop.wait(self.interval)

    def first(self) -> None:
        """Wait for the first look (the last refresh of ``--iterations`` shows a breakdown)."""
        self._first.wait()

    def stop(self) -> None:
        self._stop.set()


def glance(pid: int, tree: bool, shown: ProcessIdentity) -> Glance:
    """RSS now (a tree's summed, with its PSS from smaps_rollup): a refresh's own reading, cheap
    beside a look (the kernel's counters, no mapping parsed)."""
    if ProcessIdentity.asked_for(pid) != shown:
        raise PidReused(pid, "another process has it since the last refresh")
    rss, pss = 0, 0
    for member in tree_pids(pid) if tree else [pid]:
        reader = ProcReader(member)
        try:
            rss += status_int(reader.status(), "VmRSS")
            rollup = reader.smaps_rollup() if tree else None
        except MemgapError:
            if member == pid:
                raise
            continue  # a descendant that exited meanwhile
        pss += int(rollup.get("Pss") or 0) if rollup else 0
    return Glance(time.time(), rss, pss if tree else None)


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
    layers = {name: [sum(layer_figure(s.layers[name], pss) or 0 for s in tree.processes if name in s.layers)
                     for tree in history] for name in tree_layer_names(now.processes)}
    private = {s.pid: [next((p.uss or 0 for p in tree.processes if p.pid == s.pid), 0) for tree in history]
               for s in now.processes}
    return Refresh(now, len(history), pss, layers, private)


def main(args: argparse.Namespace) -> int:
    return execute(TopRequest.from_args(args))


def execute(request: TopRequest) -> int:
    console = console_on(sys.stdout)
    shown = ProcessIdentity.asked_for(request.pid)  # the process every refresh shows (NoSuchProcess: none)
    history: deque[TreeDocument] = deque(maxlen=HISTORY)  # the looks' breakdowns
    glances: deque[Glance] = deque(maxlen=HISTORY)  # the refreshes' own readings
    looks = Looks(request.pid, request.tree, request.interval)
    live = None
    if sys.stdout.isatty():
        from rich.live import Live

        live = Live(console=console, auto_refresh=False, screen=False)
        live.start()
    count, due = 0, time.monotonic()
    try:
        while True:
            if request.iterations and count + 1 >= request.iterations:
                looks.first()  # the last refresh shows a breakdown, however long the first look takes
            try:
                glances.append(glance(request.pid, request.tree, shown))
            except PidReused:
                raise
            except NoSuchProcess:
                if count:
                    console.print(f"PID {request.pid} exited")
                    return 0
                raise
            if looks.failed is not None and (isinstance(looks.failed, PidReused) or looks.latest is None):
                raise looks.failed  # another process has the PID, or no look could be made at all
            latest = looks.latest
            if latest is not None and (not history or history[-1] is not latest.tree):
                history.append(latest.tree)
            view = _view(console.width, list(glances), latest, looks.reading_since, history)
            if live is not None:
                live.update(view, refresh=True)
            else:
                console.print(f"--- {time.strftime('%H:%M:%S')}")
                console.print(view)
            count += 1
            if request.iterations and count >= request.iterations:
                return 0
            due = max(due + request.interval, time.monotonic())  # one refresh an interval, from the first
            time.sleep(max(0.0, due - time.monotonic()))
    finally:
        looks.stop()
        if live is not None:
            live.stop()


def _view(width: int, glances: list[Glance], latest: Look | None, reading_since: float,
          history: deque[TreeDocument]) -> RenderableType:
    """A refresh: its RSS line, then the last breakdown (none yet: the first look is under way)."""
    line = glance_line(glances, None if latest is None else (latest.began, latest.seconds), reading_since)
    if latest is None:
        return Group(line)
    return Group(line, frame(refresh_of(history), width))  # width read each time: the terminal may be resized
