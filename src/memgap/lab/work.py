"""The memory a run held over its work, and the rests in it (pure: a run's samples in, figures out).

The work span: with ``--load``, the load's own time (from its start to its end); otherwise from
the run's start (memgap starts the command at t = 0), or, for a run that rested during its work,
from its first rest (its first burst holds its start-up: an interpreter's imports, a driver's
server starting, whose length swings with the machine's load and would weigh on a short run's
mean), to the start of the final rest, the rest that ends in the idle figure: for an idle read
in a quiet spell, the start of the last rest (below) that ended after that reading (the spell's
own rule, 10% of a CPU, misses bursts of a few ticks, and may have read it a burst or two
early); for any other idle (marked, before exit), the end of the last burst at or before its
moment; where the samples hold no CPU time, the moment the quiet spell's rest began, else the
idle's.

The mean over the work is time-weighted: each sampling round's figure (the RSS of the tree's
processes summed, or of the one process ``--process`` names) holds until the next round. The
samples hold RSS only (reading smaps_rollup at the sampling rate would cost the sampling its
rate), so a page two processes share counts twice, as in the tree's peak.

A rest within the work is a stretch of at least MIN_REST seconds in which the tree used no CPU
tick (USER_HZ), between two bursts, each of MIN_BURST_CPU or more (a blip of a timer between two
rests is part of the rest); a workload that rested at least BURSTY_RESTS times in its
work works in bursts (a service driven by its load, a job that pauses between batches), and the
lab judges it by the mean over its work by default (memgap.lab.objective).
"""
from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from memgap.documents.recorded import RecordedSample

TICK = 0.005          # CPU seconds: less than this in an interval is no clock tick (USER_HZ is 100)
CPU_TICK = 0.01       # CPU seconds: one clock tick, the samples' unit (/proc/PID/stat counts USER_HZ ticks)
MIN_BURST_CPU = 0.02  # CPU seconds: a stretch between rests that used less is a blip, not a burst
MIN_REST = 0.5        # seconds: a shorter stretch without work is a pause within a burst
BURSTY_RESTS = 2      # rests within the work that make a workload bursty (three bursts or more)
LATE = 2.0            # a round later than this many typical intervals after the last one came late


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
    cpu: float | None = None   # CPU seconds the tree used in a burst within the span, their mean (bursts_cpu)
    wall: float | None = None  # a burst's length within the span, as the samples tell it (bursts_wall)


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


@dataclass(frozen=True)
class OwnTrim:
    """One of memgap's own trims in the tree (its idle or periodic trimmer's; seconds after the run's
    start): from ``start`` to ``end``, using ``cpu`` seconds of its thread's CPU (None in a recording
    from before they were timed, which holds only when the trim returned: ``start`` = ``end``)."""

    start: float
    end: float
    cpu: float | None = None


def intervals_of(rounds: list[Round], trims: Sequence[OwnTrim | float] = ()) -> list[tuple[float, float, float]] | None:
    """(from, to, CPU seconds the tree used) for each pair of consecutive rounds (a process first
    seen in the later round counts with all its CPU time), less memgap's own trims' CPU
    (``_less_trims``). None where a round has no CPU time. ``trims``: memgap's trims in the tree
    (a bare float: a trim's moment as it returned, as recordings before their span held them)."""
    if any(r.cpu is None for r in rounds):
        return None
    out = []
    for a, b in itertools.pairwise(rounds):
        assert a.cpu is not None and b.cpu is not None
        out.append((a.t, b.t, sum(cpu - a.cpu.get(pid, 0.0) for pid, cpu in b.cpu.items())))
    return _less_trims(out, [t if isinstance(t, OwnTrim) else OwnTrim(t, t) for t in trims])


def _less_trims(out: list[tuple[float, float, float]], trims: list[OwnTrim]) -> list[tuple[float, float, float]]:
    """The intervals less each trim's CPU: a trim's CPU (the kernel freeing the pages it gives back:
    0.02 s and more for 130 MiB under load) is the remedy's, not a burst of the workload's. It is
    taken from the intervals its span overlaps, then from the one on either side (a round's stamp
    comes before its reads of /proc, which may see the trim's CPU a round late), in whole ticks
    rounded up (the samples count whole ticks; 0.013 s of the thread's may read as two). A trim
    without its CPU (an older recording) had its interval and the one on either side count as
    used none: the idle trimmer trims only after 2 s in which malloc's figures did not move."""
    used = [u for _, _, u in out]
    for trim in trims:
        span = [k for k, (a, b, _) in enumerate(out)  # the intervals it overlaps; a moment's, the one that holds it
                if (a < trim.end and b > trim.start) or a < trim.start == trim.end <= b]
        if not span:
            continue
        near = span + [k for k in (span[0] - 1, span[-1] + 1) if 0 <= k < len(out)]
        if trim.cpu is None:
            for k in near:
                used[k] = 0.0
            continue
        left = math.ceil(trim.cpu / CPU_TICK - 1e-6) * CPU_TICK
        for k in near:
            taken = min(left, used[k])
            used[k], left = used[k] - taken, left - taken
    return [(a, b, u) for (a, b, _), u in zip(out, used, strict=True)]


def stretches(intervals: list[tuple[float, float, float]]) -> list[tuple[float, float, bool]]:
    """The run cut into (from, to, rest) stretches: a rest is MIN_REST seconds or more in which the
    tree used no CPU tick; what lies between two rests is a burst, unless it used less than
    MIN_BURST_CPU (a tick or two of a timer, a runtime's housekeeping): then the rest goes on
    through it. The stretch before the first burst is no rest (the run had not worked yet)."""
    runs: list[list[float]] = []  # [from, to, quiet, cpu]: intervals with and without a tick
    typical = statistics.median(b - a for a, b, _ in intervals) if intervals else 0.0
    for a, b, used in intervals:
        _extend(runs, a, b, float(used < TICK or _late_blip(b - a, used, typical)), used)
    parts: list[list[float]] = []  # [from, to, rest, cpu]: a short quiet run belongs to the work around it
    for a, b, quiet, used in _blips_quiet(runs):
        _extend(parts, a, b, float(bool(quiet) and b - a >= MIN_REST), used)
    out: list[list[float]] = []
    for a, b, rest, used in parts:
        if not rest and used < MIN_BURST_CPU and out and out[-1][2]:
            out[-1][1] = b  # a blip after a rest: the rest goes on
        else:
            _extend(out, a, b, rest, used)
    if out:
        out[0][2] = 0.0
    return [(a, b, bool(rest)) for a, b, rest, _ in out]


def _blips_quiet(runs: list[list[float]]) -> list[list[float]]:
    """The quiet runs with each blip between two of them (under MIN_BURST_CPU) taken in: a tick
    of a timer in the middle of a 1 s rest (the test service's poll, every 0.5 s) cut it into
    two quiet runs of 0.49 s, each too short for a rest, and the rest was lost."""
    out: list[list[float]] = []
    for k, (a, b, quiet, used) in enumerate(runs):
        between = 0 < k < len(runs) - 1 and runs[k - 1][2] and runs[k + 1][2]
        _extend(out, a, b, float(bool(quiet) or (between and used < MIN_BURST_CPU)), used)
    return out


def _late_blip(length: float, used: float, typical: float) -> bool:
    """Whether an interval whose round came late (the sampler held up: 0.9-1.9 s between rounds
    of 0.1 s beside 3 busy loops, where memgap's reads held the recorder's GIL) used no more than a
    blip: it is quiet then. Its tick is a timer's, or a burst's last one; the rest of its length is
    the rest it cuts through, which by whole quiet intervals alone would be lost (a 1 s rest seen
    as 0.1 s)."""
    return length > LATE * typical and used < MIN_BURST_CPU


def _extend(parts: list[list[float]], a: float, b: float, kind: float, used: float) -> None:
    """Add [a, b) of ``kind`` to ``parts``: onto the last one where it is of the same kind."""
    if parts and parts[-1][2] == kind:
        parts[-1][1] = b
        parts[-1][3] += used
    else:
        parts.append([a, b, kind, used])


def last_burst_before(parts: list[tuple[float, float, bool]], moment: float) -> float | None:
    """The end of the last burst that ended at or before ``moment``."""
    ends = [to for _, to, rest in parts if not rest and to <= moment]
    return max(ends) if ends else None


def rests_within(parts: list[tuple[float, float, bool]], start: float, end: float) -> list[float]:
    """The rests between start and end with a burst before and after them (the final rest is not
    one: it follows the work)."""
    inside = [p for p in parts if p[0] >= start and p[1] <= end]
    return [round(to - a, 2) for k, (a, to, rest) in enumerate(inside) if rest and 0 < k < len(inside) - 1]


def bursts_wall(intervals: list[tuple[float, float, float]], parts: list[tuple[float, float, bool]],
                start: float, end: float) -> float | None:
    """A burst's length between ``start`` and ``end``, their mean by the typical burst as ``bursts_cpu``
    takes it (None where there is none), from the samples: each burst's stretch less one sampling
    interval, at least half of one. A stretch runs from the round before a burst's first CPU tick to the
    round after its last: it is longer than the burst by up to an interval at each end (by one on average
    where the burst's edges fall anywhere in a step, less where an edge's step holds no whole tick). So the
    length errs short (the bound ``verdict`` makes with it errs slow), by up to an interval for one burst,
    less over many (a 0.12 s burst of the test service's: 0.1-0.2 s each)."""
    step = statistics.median(b - a for a, b, _ in intervals) if intervals else 0.0
    bursts, each = _bursts(intervals, parts, start, end)
    return _per_typical(each, [max(b - a - step, step / 2) for a, b in bursts])


def bursts_cpu(intervals: list[tuple[float, float, float]], parts: list[tuple[float, float, bool]],
               start: float, end: float) -> float | None:
    """The CPU seconds the tree used in a burst between ``start`` and ``end``, their mean (None
    where there is none). A burst's CPU is its time as the samples can tell it: its ends lie in
    rests, which used no CPU, so it does not hang on where in a sampling step the burst began or
    ended (their lengths, cut at the samples' 0.1 s steps, do: bursts of 0.1-0.2 s). The mean is
    taken by the typical burst (the median's CPU), so that it stands where the samples cut the
    bursts otherwise: a first rest missed (one burst fewer), a trim that cut a rest short (a small
    burst of its own, under half the median: left out), a rest missed between two bursts (one burst
    twice the median: counted as two). Over all of them, not the median alone: the CPU is read in
    ticks of 0.01 s, a seventh of one burst of the test service's."""
    _, each = _bursts(intervals, parts, start, end)
    return _per_typical(each, each)


def _bursts(intervals: list[tuple[float, float, float]], parts: list[tuple[float, float, bool]],
            start: float, end: float) -> tuple[list[tuple[float, float]], list[float]]:
    """The bursts between ``start`` and ``end`` (from, to), and the CPU seconds the tree used in each."""
    bursts = [(a, b) for a, b, rest in parts if not rest and a >= start and b <= end]
    return bursts, [sum(u for a, b, u in intervals if x <= a and b <= y) for x, y in bursts]


def _per_typical(each: list[float], values: list[float]) -> float | None:
    """The mean of ``values`` (one per burst) per typical burst, the bursts told apart by their CPU
    (``each``): those under half the median's left out, one twice the median's counted as two."""
    typical = statistics.median(each) if each else 0.0
    if typical <= 0:
        return None
    kept = [k for k, c in enumerate(each) if c >= typical / 2]
    count = sum(max(1, round(each[k] / typical)) for k in kept)
    return round(sum(values[k] for k in kept) / count, 4)


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


def work_of(rounds: list[Round], start: float, idle_at: float | None, duration: float,
            load_end: float | None = None, rested: float | None = None,
            trims: Sequence[OwnTrim | float] = ()) -> Work:
    """The work span and its figures. ``start``: where the work begins (0, or the load's start);
    ``load_end``: where the load ended (the work ends there); ``idle_at``: the moment of the idle
    figure (None: the run's end, ``duration``); ``rested``: where its quiet spell says the rest
    began, for an idle found in a quiet spell (the end itself where the samples hold no CPU time);
    ``trims``: memgap's own trims in the tree (``intervals_of``)."""
    intervals = intervals_of(rounds, trims)
    parts = stretches(intervals) if intervals is not None else None
    moment = idle_at if idle_at is not None else duration
    if load_end is not None:
        end = load_end
    elif parts is not None and rested is not None:
        # a quiet spell lasts from its reading to the end: the final rest is the last rest after the reading
        # (the spell's own rule, 10% of a CPU, misses bursts of a few ticks, and may have read it a burst early)
        end = max((a for a, to, rest in parts if rest and to > moment), default=None) \
            or last_burst_before(parts, moment) or moment
    elif parts is not None:
        end = last_burst_before(parts, moment) or moment
    else:
        end = rested or moment
    rests = rests_within(parts, start, end) if parts is not None else None
    if rests and load_end is None and parts is not None:  # a bursty run: its steady state, from its first rest
        start = next(a for a, _, rest in parts if rest and a >= start)
    # the bursts' CPU from the raw intervals: a trim's own CPU in a rest is in no burst
    raw = intervals_of(rounds) if trims else intervals
    used = bursts_cpu(raw, parts, start, end) if raw is not None and parts is not None else None
    wall = bursts_wall(raw, parts, start, end) if raw is not None and parts is not None else None
    return Work(round(start, 4), round(end, 4), time_weighted_mean(rounds, start, end), rests, used, wall)
