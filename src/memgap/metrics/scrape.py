"""Collections and scrapes: find the processes asked for, read each from outside, render the metrics.

Targets are found afresh at every collection (at every scrape, or every ``refresh`` seconds in
a thread of their own): a worker that exited drops out, a new one or a new match appears. Each
is read with ``snapshot_pid``, which never stops or changes it. A process that exits while it
is read is left out silently: in a fleet that is a restart, not an error.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

import psutil

from memgap.errors import MemgapError, NoSuchProcess
from memgap.explain.cow import add_copied_from_parent
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
from memgap.metrics.export import (
    Process,
    Target,
    collection_families,
    label_by_command,
    label_tree,
    process_families,
    render,
    scrape_families,
)
from memgap.sources.processes import ProcessIdentity
from memgap.sources.procfs import ProcReader
from memgap.sources.pymalloc_pools import TreeHeaders


@dataclass(frozen=True)
class Selection:
    """What to read at each scrape: one PID, a tree under a PID, or every process whose
    command line matches a pattern (``re.search`` over its arguments joined by spaces)."""

    pid: int | None = None
    tree: bool = False
    match: re.Pattern[str] | None = None

    def describe(self) -> str:
        if self.match is not None:
            return f"processes matching {self.match.pattern!r}"
        return f"the tree of PID {self.pid}" if self.tree else f"PID {self.pid}"


def _process(pid: int, root: bool = False, match: re.Pattern[str] | None = None) -> Process | None:
    """The process's identity for labels, or None where it is gone, a zombie (nothing to read)
    or, given ``match``, its command line does not match (the stat is then not read)."""
    try:
        reader = ProcReader(pid)
        cmdline = tuple(reader.cmdline())
        # kernel threads have no command line; an unreadable one (another user's) is not a match
        if match is not None and not (cmdline and match.search(" ".join(cmdline))):
            return None
        stat = reader.stat()
        if stat.state in ("Z", "X"):
            return None
        return Process(pid, stat.start_time, cmdline, root)
    except MemgapError:  # gone, or not ours to read: not a target
        return None


def _own_lineage() -> set[int]:
    """This process and its ancestors: their command lines hold the pattern too."""
    out = {os.getpid()}
    try:
        out.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    return out


def find_processes(selection: Selection, exclude: set[int] | None = None) -> list[Process]:
    """The processes of ``selection`` now (an empty list where all are gone)."""
    if selection.match is None:
        assert selection.pid is not None
        root = _process(selection.pid, root=selection.tree)
        if root is None or not selection.tree:
            return [root] if root is not None else []
        try:
            children = [c.pid for c in psutil.Process(selection.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        return [root, *(p for p in map(_process, children) if p is not None)]
    exclude = exclude if exclude is not None else _own_lineage()
    found = (_process(pid, match=selection.match) for pid in psutil.pids() if pid not in exclude)
    return [p for p in found if p is not None]


@dataclass(frozen=True)
class Collection:
    """One complete read of every target: what a scrape serves until the next one."""

    body: str          # the per-process families, rendered
    processes: int
    started: float     # time.monotonic() when the reading began
    cpu: float         # CPU seconds (user + system) of the thread that read them
    number: int        # 1 for the first since the server started
    up: bool | None = None  # the PID given still the process found at the start (None: --match)


class Scraper:
    """Reads the selection and serves it. ``refresh`` 0: every ``scrape`` reads the processes
    afresh; else ``scrape`` serves the last complete collection, which a thread started by
    ``start`` renews ``refresh`` seconds after the previous one ended (or at ``refresh_now``).
    Collections run one at a time; the error count is kept across them."""

    def __init__(self, selection: Selection, log: TextIO | None = None, refresh: float = 0.0,
                 pinned: ProcessIdentity | None = None) -> None:
        self.selection = selection
        self.pinned = pinned  # the PID given (a tree's root) as it was found: never another one that takes it
        self.up: bool | None = None if pinned is None else True
        self.refresh = refresh
        self.errors_total = 0
        self.collections = 0
        self.last_errors: list[MemgapError] = []
        self.last_processes = 0
        self._log = log if log is not None else sys.stderr
        self._lock = threading.Lock()
        self._exclude = _own_lineage() if selection.match is not None else set()
        self._last: Collection | None = None
        self._ready = threading.Event()
        self._wake = threading.Event()

    def _read(self, proc: Process, headers: TreeHeaders) -> Target:
        # a tree's regions split each worker's copies of its master's pages by layer (then they go)
        snap = snapshot_pid(proc.pid, SnapshotOptions(regions=self.selection.tree), tree=headers)
        # a PID reused since it was found names another process (PidReused): it is found afresh next scrape
        ProcessIdentity(proc.pid, proc.start).check()
        return Target(snap, "", 0)

    def _pinned(self, found: list[Process]) -> list[Process]:
        """``found``, or none once the PID given no longer names the process found at the start
        (exited, or another took its PID: said once in the log, then served as gone)."""
        if self.pinned is None or not self.up:
            return found if self.pinned is None else []
        root = next((p for p in found if p.pid == self.pinned.pid), None)
        try:
            if root is None:
                raise NoSuchProcess(self.pinned.pid, "it exited")
            self.pinned.check(f"started at tick {root.start}, not {self.pinned.start_time}", now=root.start)
            return found
        except NoSuchProcess as exc:  # PidReused included
            print(f"memgap: serve-metrics: {exc}; not followed: its series are gone", file=self._log, flush=True)
            self.up = False
            return []

    def targets(self) -> list[Target]:
        """Every process of the selection read now, labelled; errors counted and logged."""
        errors: list[MemgapError] = []
        read: list[tuple[Process, Target]] = []
        headers = TreeHeaders()  # one per collection: a worker's headers on its master's frames read once
        for proc in self._pinned(find_processes(self.selection, self._exclude)):
            try:
                target = self._read(proc, headers)
            except NoSuchProcess:  # PidReused included: it exited, or its PID names another now
                continue
            except MemgapError as exc:
                errors.append(exc)
                print(f"memgap: serve-metrics: {exc}", file=self._log, flush=True)
                continue
            read.append((proc, target))
        procs = [p for p, _ in read]
        if self.selection.tree:  # what each forked worker copied from its parent (memgap.explain.cow)
            add_copied_from_parent([t.snapshot for _, t in read])
            for _, t in read:
                t.snapshot.regions = []
        labels = label_tree(procs) if self.selection.tree else label_by_command(procs)
        self.errors_total += len(errors)
        self.last_errors = errors
        self.last_processes = len(read)
        return [Target(t.snapshot, *labels[p.pid]) for p, t in read]

    def collect(self) -> Collection:
        """Every target read now and rendered, kept as the collection scrapes serve."""
        with self._lock:
            started, cpu = time.monotonic(), time.thread_time()
            targets = self.targets()
            body = render(process_families(targets))
            self.collections += 1
            self._last = Collection(body, len(targets), started, time.thread_time() - cpu, self.collections, self.up)
            self._ready.set()
            return self._last

    def _renew(self) -> None:
        while True:
            self._wake.wait(self.refresh)
            self._wake.clear()
            try:
                self.collect()
            except Exception as exc:  # noqa: BLE001 - a bug must not end the refreshes: the age gauge shows it
                print(f"memgap: serve-metrics: collection failed: {exc!r}", file=self._log, flush=True)

    def start(self) -> None:
        """The thread that renews the collection (with ``refresh`` > 0)."""
        threading.Thread(target=self._renew, name="memgap-collect", daemon=True).start()

    def refresh_now(self) -> None:
        """Start the next collection now rather than at the end of the refresh interval."""
        self._wake.set()

    def scrape(self) -> str:
        """The /metrics page: the last collection (read now where ``refresh`` is 0), its age and
        cost, and the scrape's own figures."""
        began = time.perf_counter()
        if self.refresh == 0:
            last = self.collect()
        else:
            self._ready.wait()  # a scrape before the first collection waits for it
            if self._last is None:
                raise RuntimeError("serve-metrics: no collection after the first one was signalled")
            last = self._last
        took = time.perf_counter() - began
        tail = [*scrape_families(last.processes, took, self.errors_total, last.up),
                *collection_families(time.monotonic() - last.started, last.cpu, last.number)]
        return last.body + render(tail)
