"""A run's process tree at idle, summed without counting a shared page twice: each process's
PSS at its own idle (``memgap.record.idle``), over the processes still alive when the tree went
quiet. ``memgap run``'s document (``RunDocument.tree``) and the lab's figures both sum it
here, and the lab's peak of a tree too (``peak_of_tree``: the samples of one round summed).

A forked worker shares its master's pages: the RSS sum counts each such page once per
process that maps it, the PSS sum splits it among them, and is what the tree costs.
"""
from __future__ import annotations

from dataclasses import dataclass

from memgap.documents.recorded import RecordedSample, RecordedSnapshot, TreeIdle
from memgap.documents.records import ProcessRecord, RunDocument

ALIVE_SLACK = 0.5  # s: a process last sampled this long before the idle moment was still there


@dataclass(frozen=True)
class TreeAtIdle:
    """The processes alive at the tree's idle, and their sums."""

    processes: list[ProcessRecord]  # each with its idle
    pss: int     # each one's PSS at its idle, summed (its RSS where no PSS was read)
    rss: int     # each one's RSS at its idle, summed: a shared page counted once per process
    by_rss: int  # how many had no PSS read: their RSS stands in

    def how(self) -> str:
        """How the total was summed, in words."""
        return (f"the sum over the {len(self.processes)} processes alive at idle of each one's PSS at its idle"
                + (f" (RSS for {self.by_rss} read without a snapshot)" if self.by_rss else ""))

    def to_dict(self) -> TreeIdle:
        """The run document's ``tree`` (docs/json.md)."""
        return {"processes": len(self.processes), "pids": [p.pid for p in self.processes], "pss": self.pss,
                "rss_sum": self.rss, "by_rss": self.by_rss, "how": self.how()}


def idle_began(proc: ProcessRecord) -> float | None:
    """When a process's idle began: its quiet spell's start where a spell found it (processes
    alive during that spell are its tree at idle), else the idle moment."""
    if proc.idle is None:
        return None
    snap: RecordedSnapshot = next((s for s in proc.snapshots if s.get("time") == proc.idle.time), RecordedSnapshot())
    return snap.get("quiet_since") or proc.idle.time


def alive_at_idle(run: RunDocument, proc: ProcessRecord) -> list[ProcessRecord]:
    """The processes of the run that have an idle and were still alive as ``proc``'s idle
    began (``proc`` among them); empty when that moment is unknown."""
    at, start = idle_began(proc), run.start
    if at is None or start is None or proc.idle is None:
        return []
    last_seen: dict[int, float] = {}
    for s in run.timeline:
        last_seen[s["pid"]] = max(last_seen.get(s["pid"], 0.0), start + s["t"])
    for p in run.processes:  # read from outside later than sampled: the recorder's rounds wait on snapshots
        times = [s.get("time") or 0.0 for s in p.snapshots] + [read[0] for read in p.pss_reads or []]
        last_seen[p.pid] = max([last_seen.get(p.pid, 0.0), *times])
    return [p for p in run.processes if p.idle and (p is proc or last_seen.get(p.pid, 0.0) >= at - ALIVE_SLACK)]


def tree_at_idle(run: RunDocument, proc: ProcessRecord | None = None) -> TreeAtIdle | None:
    """The tree at ``proc``'s idle (default: the process whose RSS at idle is the highest),
    where two processes or more were alive then; else None."""
    if proc is None:
        idled = [p for p in run.processes if p.idle]
        proc = max(idled, key=lambda p: p.idle.rss if p.idle else 0) if idled else None
    alive = alive_at_idle(run, proc) if proc is not None else []
    if len(alive) < 2:
        return None
    idles = [p.idle for p in alive if p.idle is not None]
    return TreeAtIdle(alive, sum(i.pss if i.pss is not None else i.rss for i in idles),
                      sum(i.rss for i in idles), sum(i.pss is None for i in idles))


def peak_of_tree(timeline: list[RecordedSample]) -> tuple[int, int] | None:
    """The highest sum of the processes' RSS sampled in one round (the samples of one round share
    their ``t``), and how many processes that round sampled; None where no round sampled two."""
    rounds: dict[float, list[int]] = {}
    for s in timeline:
        rounds.setdefault(s["t"], []).append(s["rss"])
    several = [(sum(values), len(values)) for values in rounds.values() if len(values) > 1]
    return max(several) if several else None
