"""Idle, found without the program's help.

A program that marks no ``idle`` phase still has one: the last quiet spell
before it ends (CPU below a small share of one core and RSS steady, for long
enough), or, for a program that exits straight after its work, the moment
before its exit begins. ``QuietSpell`` tells the spells apart from a stream of
(time, CPU seconds, RSS) readings; the recorder feeds it from /proc and reads
the process from outside as a spell begins, and the bootstrap takes a Python
program's own snapshot as its interpreter begins to shut down.
``find_idle`` picks, from what a run recorded, the moment that counts and says
which rule found it.

Why the spells are watched from outside, Python programs included: a watcher
thread inside the process costs it a glibc arena (any Python thread mallocs as
it starts), which also fixes glibc's arena cap before the program's own
mallopt(M_ARENA_MAX) can set it, and its snapshot's garbage stays in that
arena (measured: +0.35 MiB during the work, +1.4 MiB after the spell, one
arena more). Reading from outside changes nothing in the process.

Rules, strongest first: ``idle`` marked by the program (or found by the
recorder's ``--idle-after``); the last quiet spell, when the process stayed
quiet until it ended or until its shutdown began; the moment before exit (the bootstrap's snapshot as the
interpreter begins to shut down, or the last RSS sample of a process that is
not Python); the last quiet spell even with work after it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memgap.documents.recorded import ProcessEntry, RecordedSample, RecordedSnapshot
from memgap.record.envnames import (
    BEFORE_EXIT_PHASE as BEFORE_EXIT_PHASE,  # a snapshot taken as the interpreter began to shut down
)
from memgap.report.units import MiB

if TYPE_CHECKING:  # the run document's module, imported by idle_of_process (at the run's end): the
    # recorder imports this module for its constants before it starts the command
    from memgap.documents.records import ProcessIdle

QUIET_AFTER = 1.0     # seconds of quiet that make a spell (MEMGAP_QUIET overrides it)
BUSY_SHARE = 0.1      # of one CPU: using more than this over a spell ends it
CPU_SLACK = 0.03      # seconds: a clock tick or two of CPU is not work
WANTED_SHARE = 0.5    # of one CPU: running or waiting to run more than this over a spell is work, starved
RSS_SLACK = 2 * MiB   # RSS that moves by more than this, or by RSS_SHARE, ends a spell
RSS_SHARE = 0.02
QUIET_PHASE = "quiet"           # a snapshot taken as a quiet spell began
QUIET_ENV = "MEMGAP_QUIET"
SHUTDOWN = 1.5  # seconds: a spell that ended this close to the process's end ended in its shutdown


def rss_slack(rss: int) -> int:
    """RSS that moves less than this is still: a quiet spell's slack."""
    return max(RSS_SLACK, int(RSS_SHARE * rss))


def quiet_after() -> float:
    """Seconds of quiet that make a spell: MEMGAP_QUIET, else QUIET_AFTER."""
    try:
        value = float(os.environ.get(QUIET_ENV, ""))
    except ValueError:
        return QUIET_AFTER
    return value if value > 0 else QUIET_AFTER


class QuietSpell:
    """Quiet spells in a stream of readings (pure: no clock, no /proc).

    ``update`` returns "quiet" once a spell has lasted ``after`` seconds, again at
    the first steady reading after memory was given back during it (its figure
    now the lower one), and "end" when a spell that was reported ends (the
    process worked again). ``waited``: the seconds its threads have waited on a
    run queue (schedstat): a process starved of CPU on a busy machine uses little
    of it, and is working, not resting (a Python program starting at load 20 was
    read "quiet" 1 s in, before its first phase).
    """

    def __init__(self, after: float = QUIET_AFTER) -> None:
        self.after = after
        self.since: float | None = None  # when the current spell began
        self.rested_since: float | None = None  # when the last work ended
        self.reported = False
        self._lowered = False  # a told spell whose RSS fell at rest: told again once it holds
        self._cpu0 = 0.0
        self._rss0 = 0
        self._wanted0 = 0.0
        self._recent: list[tuple[float, float, float]] = []  # (time, CPU, wanted) of the last ``after`` seconds

    def update(self, now: float, cpu: float, rss: int, waited: float = 0.0) -> str | None:
        wanted = cpu + waited  # the time it ran or was ready to
        if self.since is None:
            self._restart(now, cpu, rss, wanted)
            self.rested_since = now
            return None
        elapsed = now - self.since
        # over the spell, and over its last ``after`` seconds: a long spell would otherwise absorb
        # a short burst (a forked worker's request, whose copies on write move no RSS)
        self._recent = [r for r in self._recent if r[0] >= now - self.after] or self._recent[-1:]
        t0, cpu0, wanted0 = self._recent[0]
        self._recent.append((now, cpu, wanted))
        busy = (cpu - self._cpu0 > BUSY_SHARE * elapsed + CPU_SLACK
                or cpu - cpu0 > BUSY_SHARE * (now - t0) + CPU_SLACK
                or wanted - self._wanted0 > WANTED_SHARE * elapsed + CPU_SLACK
                or wanted - wanted0 > WANTED_SHARE * (now - t0) + CPU_SLACK)
        slack = rss_slack(self._rss0)
        if not busy and rss < self._rss0 - slack:
            # memory given back at rest (a runtime's scavenger, a collector shrinking its heap, a trim):
            # still rest; the spell keeps its start, and its figure is the lower one. A spell told
            # already is told again once RSS holds (Go's scavenger gave 174 of 344 MiB back 1.2 s into
            # a 2 s rest: the spell, ended there, had no second before the exit to be told again in)
            self._rss0, self._lowered = rss, self.reported
            if self._lowered:
                return None  # falling still, maybe: told at the next reading that holds
        elif busy or abs(rss - self._rss0) > slack:  # work: CPU, or RSS that rose
            ended = self.reported
            self.rested_since = now
            self._restart(now, cpu, rss, wanted)
            return "end" if ended else None
        if (not self.reported and elapsed >= self.after) or self._lowered:
            self.reported, self._lowered = True, False
            return "quiet"
        return None

    def _restart(self, now: float, cpu: float, rss: int, wanted: float) -> None:
        self.since, self._cpu0, self._rss0, self.reported, self._lowered = now, cpu, rss, False, False
        self._wanted0 = wanted
        # the window starts with the spell: kept, the work before it would restart the spell at
        # every reading for ``after`` seconds more (a spell then reported 2 s after the work, not 1)
        self._recent = [(now, cpu, wanted)]


@dataclass(frozen=True)
class FoundIdle:
    """The moment a run's process counts as idle, and the rule that found it."""

    rss: int
    rule: str               # "marked", "quiet", "before exit", "last sample"
    label: str              # for people: "idle (quiet 2.1 s)"
    snapshot: RecordedSnapshot | None  # the layered snapshot at that moment, when there is one


def told_spells(snapshots: list[RecordedSnapshot], told: list[list[float]] | None) -> list[RecordedSnapshot]:
    """The quiet spells the recorder told (``told``: [when, its start, its rest's start, its RSS]) that no
    quiet snapshot read, each as a snapshot's record of that moment with no layers: its read waited
    behind the others' and the process had exited first (beside 2-4 busy loops, a gunicorn master told
    quiet after its 4 workers was read 3-4 s later, 0.6-0.8 s a worker: its tree had stopped)."""
    read = [s for s in snapshots if s.get("phase") == QUIET_PHASE]
    out = []
    for when, since, rested, rss in (t[:4] for t in told or []):
        if not any(s.get("quiet_since") == since and s.get("time", 0.0) >= when for s in read):
            out.append(RecordedSnapshot(phase=QUIET_PHASE, time=when, quiet_since=since, rested_since=rested,
                                        rss=int(rss), status={}))
    return out


def find_idle(snapshots: list[RecordedSnapshot], quiet_ends: list[float],
              last_seen: float | None, last_rss: int | None,
              told: list[list[float]] | None = None) -> FoundIdle | None:
    """The idle of one process from what its run recorded (snapshots in time order,
    the times its quiet spells ended, when it was last seen, its last sampled RSS, its
    quiet spells as the recorder told them: ``told_spells``)."""
    marked = [s for s in snapshots if s.get("phase") == "idle"]
    if marked:
        snap = marked[-1]
        if snap.get("quiet_since"):  # found by the recorder's --idle-after
            return FoundIdle(_rss(snap), "quiet", f"idle (quiet {_spell(snap, last_seen)}, --idle-after)", snap)
        return FoundIdle(_rss(snap), "marked", "idle (marked)", snap)
    unread = told_spells(snapshots, told)
    quiet = sorted([s for s in snapshots if s.get("phase") == QUIET_PHASE] + unread, key=lambda s: s.get("time", 0.0))
    last_quiet = quiet[-1] if quiet else None
    ended = [t for t in quiet_ends if last_quiet is not None and t > last_quiet["time"]]
    unread_said = "; not read: it exited first" if any(last_quiet is s for s in unread) else ""
    if last_quiet is not None and not ended:
        return FoundIdle(_rss(last_quiet), "quiet", f"idle (quiet {_spell(last_quiet, last_seen)}{unread_said})",
                         last_quiet)
    before = [s for s in snapshots if s.get("phase") == BEFORE_EXIT_PHASE]
    if last_quiet is not None and _ended_in_shutdown(ended[0], last_seen, before):
        # what ended it was the process's own shutdown (a server told to stop), not more work
        return FoundIdle(_rss(last_quiet), "quiet",
                         f"idle (quiet {_spell(last_quiet, ended[0])}, then its shutdown{unread_said})", last_quiet)
    if before:
        return FoundIdle(_rss(before[-1]), "before exit", "idle (before exit)", before[-1])
    if last_quiet is not None:
        return FoundIdle(_rss(last_quiet), "quiet", "idle (last quiet spell; work followed it)", last_quiet)
    if last_rss:
        return FoundIdle(last_rss, "last sample", "idle (last sample before exit)", None)
    return None


def _ended_in_shutdown(ended: float, last_seen: float | None, before: list[RecordedSnapshot]) -> bool:
    """Whether a quiet spell that ended at ``ended`` ended in the process's shutdown: it was last seen within
    SHUTDOWN of it, or its exit began then (its ``before-exit`` snapshot's start: a long shutdown is still
    one, as a gunicorn master's with PYTHONMALLOC=malloc, 3 s of freeing its objects beside busy loops)."""
    if last_seen is not None and last_seen - ended <= SHUTDOWN:
        return True
    return any(0 <= t - ended <= SHUTDOWN for t in exit_starts(before))


def exit_starts(snapshots: list[RecordedSnapshot]) -> list[float]:
    """When each ``before-exit`` snapshot among ``snapshots`` began: its read from outside's start (the agent
    held the exit for it), else its time less what the snapshot took (in-process, as the interpreter began to
    shut down)."""
    return [s.get("read_began") or s["time"] - float(s.get("collect_seconds") or 0.0)
            for s in snapshots if s.get("phase") == BEFORE_EXIT_PHASE and s.get("time")]


def _rss(snap: RecordedSnapshot) -> int:
    return int(snap.get("rss_at_mark") or snap["rss"])


def _spell(snap: RecordedSnapshot, last_seen: float | None) -> str:
    """How long a spell lasted: from its start to when the process was last seen."""
    since = snap.get("quiet_since")
    if not since or last_seen is None or last_seen < since:
        return "spell"
    return f"{last_seen - since:.1f} s"


def idle_of_process(entry: ProcessEntry, timeline: list[RecordedSample],
                    start: float | None) -> ProcessIdle | None:
    """A run document's process entry -> its idle, as the run document keeps it."""
    from memgap.documents.records import ProcessIdle  # see the TYPE_CHECKING import above

    samples = [s for s in timeline if s["pid"] == entry["pid"]]
    last_seen = max([s.get("time", 0) for s in entry["snapshots"]]
                    + ([start + samples[-1]["t"]] if samples and start else []), default=None)
    # a process read as it exits (a zombie) shows no RSS: the last figure is the last one it had
    last_rss = next((s["rss"] for s in reversed(samples) if s["rss"]), None)
    found = find_idle(entry["snapshots"], entry.get("quiet_ends", []), last_seen, last_rss, entry.get("quiet_told"))
    if found is None:
        return None
    snap = found.snapshot or {}
    # when the work ended, for a found idle: its rest began (a trim in the rest restarts a spell,
    # not the rest), or the exit did
    ended = snap.get("rested_since") or snap.get("quiet_since") or (snap.get("time") if found.rule == "before exit"
                                                                      else None)
    return ProcessIdle(found.rss, found.rule, found.label, snap.get("time"), _pss_at_idle(snap, entry), ended)


def _pss_at_idle(snap: RecordedSnapshot, entry: ProcessEntry) -> int | None:
    """A process's PSS at its idle: the last reading of it within the quiet spell its idle
    snapshot opened (the recorder reads the quiet ones again as each other process goes quiet),
    else the snapshot's. A reading whose RSS moved beyond a spell's slack came after the spell:
    a process that exits while quiet frees its memory in its shutdown, with no spell end seen."""
    pss = (snap.get("status") or {}).get("Pss")
    if snap.get("phase") != QUIET_PHASE or snap.get("time") is None:
        return pss
    end = min((t for t in entry.get("quiet_ends", []) if t > snap["time"]), default=float("inf"))
    rss = snap.get("rss") or 0
    later = [read[1] for read in entry.get("pss_reads", []) if snap["time"] < read[0] < end
             and (len(read) < 3 or abs(read[2] - rss) <= rss_slack(rss))]
    return int(later[-1]) if later else pss  # a PSS read: bytes, kept in a list of floats with its time
