"""What a lab run's forked processes copied from their parents, read from outside while it
runs: for the findings that pick the default set's additions (memgap.lab.choose).

A run's recording holds each process's snapshots, not what a forked worker copied from its
master: that takes both processes' pagemaps at one moment, while they live. So around the
baseline's first run the lab watches the processes it started; whenever their tree holds a
process started by another one of it and has gone quiet (memgap.record.idle's rule, over the
tree's CPU, its threads' waits on a run queue and its RSS, as for a run's process), it reads the
whole tree (memgap.explain.tree.snapshot_tree: from /proc only, nothing stopped) and keeps its
findings (memgap.diagnose.findings.diagnose_tree, and each process's own). A workload of one
process is never read; a tree at most MAX_READS times, and no more once it has shown its copies.
"""
from __future__ import annotations

import os
import threading
import time
from types import TracebackType

from memgap.diagnose.findings import diagnose_tree
from memgap.documents.snapshot import Finding
from memgap.errors import MemgapError
from memgap.record.idle import QuietSpell, quiet_after
from memgap.sources.processes import tree_pids
from memgap.sources.procfs import ProcReader, status_int

INTERVAL = 0.5   # seconds between two looks at the tree (its CPU and RSS)
MAX_READS = 3    # whole-tree reads per workload tree: each costs about 0.4 s of a CPU on a 6-process, 1.5 GiB tree


class ForkProbe:
    """Watches the trees of the processes this one starts while it is open (a context manager);
    ``findings`` and ``allocators`` are what its reads found."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self.findings: list[Finding] = []
        self.allocators: set[str] = set()
        self.reads = 0
        self._own = os.getpid()
        self._before: set[int] = set()
        self._spells: dict[int, QuietSpell] = {}
        self._reads: dict[int, int] = {}
        self._done: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="memgap-fork-probe", daemon=True)
        self._hz = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> ForkProbe:
        self._before = set(_children(self._own))  # those already there are not the run's
        return self

    def start(self) -> None:
        """Its thread started: once the run has forked memgap's reader (RunOptions.forked), so that the
        reader is never a copy made while this thread ran (an import or a lock of it half done)."""
        self._thread.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            for root in _children(self._own):
                if root not in self._before and root not in self._done:
                    self._look(root)

    def _look(self, root: int) -> None:
        """One look at a tree: its CPU, run-queue waits and RSS to its quiet spell; read at the spell's
        start. A tree starved of CPU on a busy machine uses little of it and is working, not resting
        (QuietSpell's WANTED_SHARE): read then, its workers would not yet hold what they copy."""
        processes, cpu, rss, waited = _tree_state(root)
        spell = self._spells.setdefault(root, QuietSpell(quiet_after()))
        if spell.update(time.time(), cpu / self._hz, rss, waited) != "quiet" or processes < 2:
            return
        self._reads[root] = self._reads.get(root, 0) + 1
        if self._read(root) or self._reads[root] >= MAX_READS:
            self._done.add(root)

    def _read(self, root: int) -> bool:
        """Read the tree whole; whether its forked processes showed their copies."""
        from memgap.explain.tree import snapshot_tree  # the snapshot machinery: only for a tree that forked

        try:
            snaps = snapshot_tree(root).processes
        except MemgapError:
            return False  # it ended meanwhile
        self.reads += 1
        copies = diagnose_tree(snaps)
        self.findings.extend(copies)
        self.findings.extend(f for s in snaps for f in s.findings)
        self.allocators.update(s.allocator.name for s in snaps if s.allocator.name)
        return bool(copies)


def _children(pid: int) -> list[int]:
    try:
        return ProcReader(pid).children_pids()
    except MemgapError:
        return []


def _tree_state(root: int) -> tuple[int, int, int, float]:
    """(how many processes the tree has, their CPU ticks, their RSS, the seconds their threads
    have waited on a run queue)."""
    processes, ticks, rss, waited = 0, 0, 0, 0.0
    for pid in tree_pids(root):
        reader = ProcReader(pid)
        try:
            status, stat = reader.status(), reader.stat()
        except MemgapError:
            continue  # exited between the listing and the reading
        processes, ticks, rss = processes + 1, ticks + stat.cpu_ticks, rss + status_int(status, "VmRSS")
        waited += reader.run_delay()
    return processes, ticks, rss, waited
