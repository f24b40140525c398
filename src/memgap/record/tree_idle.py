"""A run's process tree at idle, summed without counting a shared page twice: each process's
PSS at its own idle (``memgap.record.idle``), over the processes still alive when the tree went
quiet. ``memgap run``'s document (``RunDocument.tree``) and the lab's figures both sum it
here, and the lab's peak of a tree too (``peak_of_tree``: the samples of one round summed).

A forked worker shares its master's pages: the RSS sum counts each such page once per
process that maps it, the PSS sum splits it among them, and is what the tree costs. So a
process's PSS is summed as read while the tree was whole (``pss_while_whole``): a sharer that
has begun to exit splits its pages among fewer, and the others' PSS rises with no RSS of their
own (a gunicorn master read at 150 MiB at rest was read again at 281 MiB as its 4 workers
exited, and the lab summed its tree at 910 MiB where the driver read 763 MiB at rest), and
before any process began to exit (``exit_began``): a Python worker's finalization copies the
pages it frees objects in, its RSS steady (843 MiB summed where the driver read 754).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from memgap.documents.recorded import RecordedSample, RecordedSnapshot, TreeIdle
from memgap.documents.records import ProcessRecord, RunDocument
from memgap.record.idle import exit_starts, rss_slack, told_spells

ALIVE_SLACK = 0.5  # s: a process last sampled this long before the idle moment was still there
SAME_READING = 0.01  # s: a spell's end this close after a spell's start ended the one before


@dataclass(frozen=True)
class TreeAtIdle:
    """The processes alive at the tree's idle, and their sums."""

    processes: list[ProcessRecord]  # each with its idle
    pss: int     # each one's PSS at its idle, summed (its RSS where no PSS was read)
    rss: int     # each one's RSS at its idle, summed: a shared page counted once per process
    by_rss: int  # how many had no PSS read: their RSS stands in
    each: dict[int, int]  # pid -> what was summed of it: its PSS read while the tree was whole (pss_while_whole)

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
    return _idle_snapshot(proc).get("quiet_since") or proc.idle.time


def _idle_snapshot(proc: ProcessRecord) -> RecordedSnapshot:
    """The snapshot of its idle: one read, or a quiet spell told and never read (``told_spells``)."""
    at = proc.idle.time if proc.idle is not None else None
    snaps = [*proc.snapshots, *told_spells(proc.snapshots, proc.quiet_told)]
    return next((s for s in snaps if at is not None and s.get("time") == at), RecordedSnapshot())


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
    whole = pss_while_whole(run, alive)
    each = {p.pid: pss if (pss := whole.get(p.pid)) is not None else p.idle.rss for p in alive if p.idle}
    return TreeAtIdle(alive, sum(each.values()), sum(p.idle.rss for p in alive if p.idle),
                      sum(whole.get(p.pid) is None for p in alive), each)


def pss_while_whole(run: RunDocument, alive: list[ProcessRecord]) -> dict[int, int | None]:
    """Each process's PSS at its idle, as read while the tree was whole: its last reading from
    outside within the spell its idle opened (memgap.record.idle's ``_pss_at_idle``), at its idle
    RSS, made while every other process of ``alive`` was there at a steady RSS (``_whole_at``);
    where none in that spell was (a spell that began as the tree's teardown did), its last such
    reading at its idle RSS from an earlier spell; else its idle's own PSS (None where it has none).
    A gunicorn master's last quiet spell began while its workers' finalization gave their pages back
    under tcmalloc: its PSS read then rose from 152 to 239 MiB as they let go of what it shares, and the
    lab summed the tree at 855 MiB where the driver read 768 at rest; its reading of 152 MiB at the
    same RSS in the spell before, the tree whole, sums it at 763."""
    start = run.start or 0.0
    series: dict[int, list[tuple[float, int]]] = {p.pid: [] for p in alive}
    for s in run.timeline:
        if s["pid"] in series:
            series[s["pid"]].append((start + s["t"], s["rss"]))
    exited = {p.pid: p.exit is not None for p in alive}
    # no process had begun to exit: a gunicorn worker's finalization writes every object it frees (its
    # pages copied, its RSS unchanged), and its master's PSS read then rose from 151 to 166 MiB
    whole_until = min(filter(None, (exit_began(p) for p in alive)), default=float("inf"))
    out: dict[int, int | None] = {}
    for p in alive:
        if p.idle is None:
            continue
        def read_whole(readings: list[tuple[float, int]], p: ProcessRecord = p) -> list[int]:
            return [pss for t, pss in readings if t < whole_until
                    and all(_whole_at(series[q.pid], exited[q.pid], t) for q in alive if q is not p)]

        whole = read_whole(_readings(p)) or read_whole(_at_idle_rss(p))
        out[p.pid] = whole[-1] if whole else p.idle.pss
    return out


def exit_began(p: ProcessRecord) -> float | None:
    """When a process began to exit, where its recording tells: its ``before-exit`` snapshot's start
    (a Python program's, as its interpreter began to shut down; a read from outside while its agent
    held the exit), or the start of that hold."""
    starts = exit_starts(p.snapshots)
    held = p.exit.get("held") if p.exit is not None and p.exit.get("by") == "agent" else None
    if held is not None and p.exit is not None:
        starts.append(p.exit["time"] - held)
    return min(starts, default=None)


def _readings(p: ProcessRecord) -> list[tuple[float, int]]:
    """(time, PSS) of a process at its idle, in time order: its idle snapshot's, and its PSS read from
    outside within the spell that snapshot opened, at its idle RSS (the RSS is unknown in a recording
    made before it was kept)."""
    idle = p.idle
    if idle is None or idle.time is None:
        return []
    snap = _idle_snapshot(p)
    # the spell from its start: its snapshot's read may have waited for others, its PSS read meanwhile
    since = snap.get("quiet_since") or idle.time
    # a spell's end is stamped at the reading that began the next one (before, a few microseconds after it)
    end = min((t for t in p.quiet_ends or [] if t > since + SAME_READING), default=float("inf"))
    pss = (snap.get("status") or {}).get("Pss")
    out = [(idle.time, int(pss))] if pss is not None and idle.time < end else []
    slack = rss_slack(idle.rss)
    out += [(read[0], int(read[1])) for read in p.pss_reads or []
            if since <= read[0] < end and (len(read) < 3 or abs(read[2] - idle.rss) <= slack)]
    return sorted(out)


def _at_idle_rss(p: ProcessRecord) -> list[tuple[float, int]]:
    """(time, PSS) of each reading of a process's PSS from outside at its idle RSS, in any spell, in time order
    (none in a recording made before reads kept their RSS)."""
    if p.idle is None:
        return []
    slack = rss_slack(p.idle.rss)
    return sorted((read[0], int(read[1])) for read in p.pss_reads or []
                  if len(read) > 2 and abs(read[2] - p.idle.rss) <= slack)


def _whole_at(samples: list[tuple[float, int]], exited: bool, when: float) -> bool:
    """Whether a process was there, its pages all mapped, at ``when``: sampled before it and after it
    at one RSS (a process that exits frees them on its way out); with no sample after it, one that
    was never seen to exit (still running as the recording ended)."""
    i = bisect.bisect_right(samples, (when, float("inf")))
    if i == 0:
        return False
    if i == len(samples):
        return not exited
    before, after = samples[i - 1][1], samples[i][1]
    return after > 0 and abs(after - before) <= rss_slack(before)


def peak_of_tree(timeline: list[RecordedSample]) -> tuple[int, int] | None:
    """The highest sum of the processes' RSS sampled in one round (the samples of one round share
    their ``t``), and how many processes that round sampled; None where no round sampled two."""
    rounds: dict[float, list[int]] = {}
    for s in timeline:
        rounds.setdefault(s["t"], []).append(s["rss"])
    several = [(sum(values), len(values)) for values in rounds.values() if len(values) > 1]
    return max(several) if several else None
