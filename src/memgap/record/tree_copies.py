"""What a run's forked processes copied from their parents (``memgap run`` and the lab's runs).

memgap's reader measures it beside each read from outside of a process whose parent is in the tree
(memgap.record.outside.add_copies: its peak reads, its quiet spells), so a run's document keeps, per
forked process, its copies over time (``ProcessRecord.copies``). Here they are gathered: each one's
copies at its idle (else at its last read), its series, the finding in the words of the cause
(memgap.diagnose.copies), and their sum (the lab compares it across variants).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from memgap.diagnose.copies import FrozenCopies, WorkerCopies, copies_finding
from memgap.documents.recorded import CopiesRead, RecordedEvent, RecordedFinding, RecordedSnapshot, RecordedSplit
from memgap.documents.records import ProcessRecord, RunDocument
from memgap.documents.snapshot import CowSplit


@dataclass
class Collections:
    """What memgap's bootstrap counted of the collector in a run (memgap._hook): the processes that forked
    with it watching (each from its first fork on, and each child it forked), and the full collections in
    them since, by PID. Events of their own (``forks-watched``, ``full-collection``), in process-PID.gc.jsonl."""

    watched: set[int] = field(default_factory=set)
    full: dict[int, list[float]] = field(default_factory=dict)  # pid -> when each full collection began

    def add(self, event: RecordedEvent) -> bool:
        """Takes an event of its kinds (True), else leaves it (False)."""
        kind, pid = event.get("type"), event.get("pid")
        if kind not in ("forks-watched", "full-collection") or not isinstance(pid, int):
            return False
        if kind == "forks-watched":
            self.watched.add(pid)
        else:
            self.full.setdefault(pid, []).append(float(event.get("time") or 0.0))
        return True

    def since_fork(self, pid: int, parent: int, until: float) -> int | None:
        """Full collections in a worker and in its parent from the parent's first fork to ``until`` (the read
        of its copies: a later one made none of them, as the parent's at its exit); None where its parent
        forked unwatched (not a Python process started by memgap, or a recording from before)."""
        if parent not in self.watched:
            return None
        return sum(t <= until for t in [*self.full.get(pid, []), *self.full.get(parent, [])])


def copies_over_time(reads: Sequence[RecordedSnapshot]) -> list[CopiesRead]:
    """A process's reads that measured its copies (its peak reads and its snapshots), oldest first."""
    out: list[CopiesRead] = [{"time": r["time"], "phase": str(r.get("phase") or ""),
                              "uss": (r.get("status") or {}).get("Uss"), "split": cast(RecordedSplit, cow)}
                             for r in reads if (cow := r.get("copied_from_parent"))]  # CowSplit's keys, asdict
    return sorted(out, key=lambda c: c["time"])


def _split(read: CopiesRead) -> CowSplit:
    split = read["split"]
    return CowSplit(split["parent"], split["copied"], split["own"], split["inherited"], dict(split["by_group"]))


def _at_idle(proc: ProcessRecord) -> CopiesRead | None:
    """Its copies at its idle (the read at its idle's moment), else at its last read."""
    reads = proc.copies or []
    at = proc.idle.time if proc.idle is not None else None
    return next((c for c in reads if at is not None and c["time"] == at), reads[-1] if reads else None)


def workers_of(run: RunDocument, collections: Collections | None = None) -> list[WorkerCopies]:
    """Each forked process of the run with its copies at its idle, their series (seconds after the start),
    and the full collections in it and its parent since the fork, where ``collections`` counted them."""
    out = []
    start = run.start or 0.0
    for proc in run.processes:
        read = _at_idle(proc)
        if read is None:
            continue
        series = tuple((c["time"] - start, c["phase"], _split(c).copied) for c in proc.copies or [])
        split = _split(read)
        full = collections.since_fork(proc.pid, split.parent, read["time"]) if collections is not None else None
        out.append(WorkerCopies(proc.pid, split, int(read["uss"] or 0), series, full))
    return out


def copied_at_idle(run: RunDocument) -> int | None:
    """What the run's forked processes had copied from their parents, summed at their idles; None where
    no process of it was measured (a tree that forked none)."""
    workers = workers_of(run)
    return sum(w.split.copied for w in workers) if workers else None


def tree_copies_findings(run: RunDocument, frozen: FrozenCopies | None = None,
                         collections: Collections | None = None) -> list[RecordedFinding]:
    """The finding on the run's forked workers' copies (none where they copied little), as the run keeps
    its findings: with the PID of the parent they copied from (the one most of them did)."""
    workers = workers_of(run, collections)
    finding = copies_finding(workers, frozen)
    if finding is None:
        return []
    parent = Counter(w.split.parent for w in workers).most_common(1)[0][0]
    return [RecordedFinding(code=finding.code, severity=finding.severity, summary=finding.summary,
                            evidence=finding.evidence, remedy=finding.remedy, pid=parent)]
