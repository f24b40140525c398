"""The memory a run held over its work, and the rests in it (pure: a run's samples in, figures out).

The work span: with ``--load``, the load's own time (from its start to its end); otherwise from
the run's start (memgap starts the command at t = 0) to the start of the final rest, the rest
that ends in the idle figure: for a quiet spell, the moment its rest began; for any other idle
(marked, before exit, the last sample), the end of the last sampling interval in which the tree
worked (used more than BUSY_SHARE of a CPU) at or before that moment.

The mean over the work is time-weighted: each sampling round's figure (the RSS of the tree's
processes summed, or of the one process ``--process`` names) holds until the next round. The
samples hold RSS only (reading smaps_rollup at the sampling rate would cost the sampling its
rate), so a page two processes share counts twice, as in the tree's peak.

A rest within the work is a stretch of at least MIN_REST seconds in which the tree did not work,
between two intervals in which it did; a workload that rested at least BURSTY_RESTS times in its
work works in bursts (a service driven by its load, a job that pauses between batches), and the
lab judges it by the mean over its work by default (memgap.lab.objective).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from memgap.documents.recorded import RecordedSample

BUSY_SHARE = 0.1      # of one CPU: an interval in which the tree used more than this is work
CPU_SLACK = 0.02      # seconds: a clock tick or two over an interval is not work
MIN_REST = 0.5        # seconds: a shorter stretch without work is a pause within a burst
BURSTY_RESTS = 2      # rests within the work that make a workload bursty (three bursts or more)


@dataclass(frozen=True)
class Round:
    """One sampling round of the tree: its time (seconds after the start), the summed RSS of
    the processes counted, and their CPU seconds (None where the samples hold none)."""

    t: float
    rss: int
    cpu: dict[int, float] | None


@dataclass(frozen=True)
class Work:
    """A run's work span (seconds after its start), its time-weighted mean over it, and its rests."""

    start: float
    end: float
    mean: int | None
    rests: list[float] | None  # each rest's length, in order; None where the samples hold no CPU time


def rounds_of(timeline: list[RecordedSample], pids: set[int] | None = None) -> list[Round]:
    """The timeline's samples grouped by round (the sampler stamps one time per round); ``pids``:
    the processes counted (default: every one). CPU is kept only where every sample has it."""
    by_t: dict[float, list[RecordedSample]] = {}
    for s in timeline:
        if pids is None or s["pid"] in pids:
            by_t.setdefault(s["t"], []).append(s)
    rounds = []
    for t in sorted(by_t):
        samples = by_t[t]
        cpu = {s["pid"]: float(s["cpu"]) for s in samples if "cpu" in s}
        rounds.append(Round(t, sum(s["rss"] for s in samples), cpu if len(cpu) == len(samples) else None))
    return rounds


def busy_intervals(rounds: list[Round]) -> list[tuple[float, float, bool]] | None:
    """(from, to, worked) for each pair of consecutive rounds: worked when the tree's CPU time over
    it grew by more than BUSY_SHARE of a CPU (a process first seen in the later round counts with all
    its CPU time). None where a round has no CPU time."""
    if any(r.cpu is None for r in rounds):
        return None
    out = []
    for a, b in itertools.pairwise(rounds):
        assert a.cpu is not None and b.cpu is not None
        used = sum(cpu - a.cpu.get(pid, 0.0) for pid, cpu in b.cpu.items())
        out.append((a.t, b.t, used > BUSY_SHARE * (b.t - a.t) + CPU_SLACK))
    return out


def last_work_before(intervals: list[tuple[float, float, bool]], moment: float) -> float | None:
    """The end of the last interval in which the tree worked, at or before ``moment``."""
    ends = [to for _, to, worked in intervals if worked and to <= moment]
    return max(ends) if ends else None


def rests_within(intervals: list[tuple[float, float, bool]], start: float, end: float) -> list[float]:
    """The rests between start and end: stretches without work, of at least MIN_REST seconds, with
    work before and after them (the final rest is not one: it follows the work)."""
    inside = [i for i in intervals if i[0] >= start and i[1] <= end]
    rests: list[float] = []
    since: float | None = None  # when the current stretch without work began, once work came before it
    worked_yet = False
    for a, _, worked in inside:
        if worked:
            if since is not None and a - since >= MIN_REST:
                rests.append(round(a - since, 2))
            since, worked_yet = None, True
        elif worked_yet and since is None:
            since = a
    return rests


def time_weighted_mean(rounds: list[Round], start: float, end: float) -> int | None:
    """The mean of the rounds' RSS over [start, end], each round's figure holding until the next."""
    if end <= start:
        return None
    total = 0.0
    covered = 0.0
    for k, r in enumerate(rounds):
        until = rounds[k + 1].t if k + 1 < len(rounds) else end
        a, b = max(r.t, start), min(until, end)
        if b > a:
            total += r.rss * (b - a)
            covered += b - a
    return round(total / covered) if covered > 0 else None


def work_of(rounds: list[Round], start: float, idle_at: float | None, rest_began: float | None,
            duration: float) -> Work:
    """The work span and its figures. ``start``: where the work begins (0, or the load's start);
    ``rest_began``: where a quiet spell says the final rest began, or the load's end; ``idle_at``:
    the moment of the idle figure otherwise (None: the run's end, ``duration``)."""
    intervals = busy_intervals(rounds)
    end = rest_began
    if end is None:
        moment = idle_at if idle_at is not None else duration
        end = (last_work_before(intervals, moment) if intervals else None) or moment
    rests = rests_within(intervals, start, end) if intervals is not None else None
    return Work(round(start, 4), round(end, 4), time_weighted_mean(rounds, start, end), rests)
