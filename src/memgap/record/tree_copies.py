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
from typing import cast

from memgap.diagnose.copies import FrozenCopies, WorkerCopies, copies_finding
from memgap.documents.recorded import CopiesRead, RecordedFinding, RecordedSnapshot, RecordedSplit
from memgap.documents.records import ProcessRecord, RunDocument
from memgap.documents.snapshot import CowSplit


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


def workers_of(run: RunDocument) -> list[WorkerCopies]:
    """Each forked process of the run with its copies at its idle, and their series (seconds after the start)."""
    out = []
    start = run.start or 0.0
    for proc in run.processes:
        read = _at_idle(proc)
        if read is None:
            continue
        series = tuple((c["time"] - start, c["phase"], _split(c).copied) for c in proc.copies or [])
        out.append(WorkerCopies(proc.pid, _split(read), int(read["uss"] or 0), series))
    return out


def copied_at_idle(run: RunDocument) -> int | None:
    """What the run's forked processes had copied from their parents, summed at their idles; None where
    no process of it was measured (a tree that forked none)."""
    workers = workers_of(run)
    return sum(w.split.copied for w in workers) if workers else None


def tree_copies_findings(run: RunDocument, frozen: FrozenCopies | None = None) -> list[RecordedFinding]:
    """The finding on the run's forked workers' copies (none where they copied little), as the run keeps
    its findings: with the PID of the parent they copied from (the one most of them did)."""
    workers = workers_of(run)
    finding = copies_finding(workers, frozen)
    if finding is None:
        return []
    parent = Counter(w.split.parent for w in workers).most_common(1)[0][0]
    return [RecordedFinding(code=finding.code, severity=finding.severity, summary=finding.summary,
                            evidence=finding.evidence, remedy=finding.remedy, pid=parent)]
