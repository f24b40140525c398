"""Rank the variants and choose the cheapest one that works (pure).

The figure that decides is the lab's objective (memgap.lab.objective): the idle at the end (the
default, and what "idle" says below), the mean over the work, or the peak.
A variant counts as better than the baseline only when its whole idle range
(min-max over repetitions) lies below the baseline's and its idle median is
lower by a material margin: at least MATERIAL_SHARE of the baseline's median
and at least MATERIAL_BYTES (a lab on a workload whose memory does not depend
on the allocator saw ranges clear each other by a few KiB). Its slowdown is the
median over repetitions of its wall time over the baseline's in the same
repetition (the runs are interleaved, so a repetition shares the machine's
weather). It is too slow when that slowdown exceeds the budget by more than
the baseline's own spread from run to run ((max - min) / median of its wall
times or throughputs): a difference the baseline shows against itself is
noise, not a cost. That allowance is at most the budget again: a baseline whose
own runs spread wider says its measure cannot tell a cost below that, and the
report says so, rather than letting a remedy half as fast through. Among the
variants that are better and within the slowdown budget, the lab picks the
cheapest kind of remedy (environment only, then a trimmer, then another
allocator), with the fewest settings, that no other one clearly undercuts: the
other's whole idle range lies below this one's, and its median is more than
MATERIAL_SHARE lower.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from memgap.allocators.variants import COST_WORDS, Variant
from memgap.documents.lab_summary import Spread, VariantSummary, noise_allowance
from memgap.documents.records import LabMaterial, RunFigures
from memgap.lab.objective import GPU, IDLE, summary_figure, words, works_in_bursts

# The share is the default slowdown budget (5% of time), asked of memory in turn. The bytes
# are one transparent huge page: where THP is on, one touched byte can move RSS by 2 MiB.
MATERIAL_SHARE = 0.05  # a lower idle median by less than this share is not worth a remedy
MATERIAL_BYTES = 2 << 20  # ... nor by fewer bytes than this, against the baseline
BURSTS_CPU = "its bursts' CPU time"  # what a bursty workload's slowdown was by, in labs saved before BURSTS_TIME
# what it is by since: the CPU a variant adds to a burst (or takes from it) over the baseline's burst length,
# a burst's time at most (RunFigures.work_cpu, work_wall: each added CPU second delays a burst by a second at
# most, where its threads do it one after another; less where they run at once, or the burst waits on I/O)
BURSTS_TIME = "its bursts' time, at most (the CPU it adds to a burst, over a burst's length)"


def material() -> LabMaterial:
    """The margin that makes a variant better than the baseline, as the lab document states it."""
    return {"share": MATERIAL_SHARE, "bytes": MATERIAL_BYTES}


def material_words(objective: str = IDLE) -> str:
    return (f"its whole {words(objective)} range below the baseline's, and its median at least {MATERIAL_SHARE:.0%} "
            f"and {MATERIAL_BYTES / 2**20:g} MiB lower")


def _spread(values: list[Any]) -> tuple[Any, Any, Any] | None:  # ints or floats; the median of ints may be x.5
    return (statistics.median(values), min(values), max(values)) if values else None


def summarize(variant: Variant, runs: list[RunFigures], baseline_runs: list[RunFigures]) -> VariantSummary:
    ok = [r for r in runs if r.status == "ok"]
    statuses: dict[str, int] = {}
    for r in runs:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    s = VariantSummary(variant.spec, variant.cost, variant.settings, len(runs), len(ok), statuses)
    s.idle = _spread([r.idle for r in ok if r.idle is not None])
    s.after_trim = _spread([r.after_trim for r in ok if r.after_trim is not None])
    s.peak = _spread([r.peak for r in ok if r.peak is not None])
    s.mean = _spread([r.work_mean for r in ok if r.work_mean is not None])
    s.cgroup_peak = _spread([r.cgroup_peak for r in runs if r.cgroup_peak is not None
                             and r.status in ("ok", "oom-killed")])
    s.baseline = _spread([r.baseline for r in ok if r.baseline is not None])
    s.wall = _spread([r.wall for r in ok])
    s.throughput = _spread([r.throughput for r in ok if r.throughput is not None])
    s.tree = any(r.tree_how for r in ok)
    s.gpu_idle = _spread([r.gpu_idle for r in ok if r.gpu_idle is not None])
    s.gpu_peak = _spread([r.gpu_peak for r in ok if r.gpu_peak is not None])
    s.slowdown, s.slowdown_by = _slowdown(s, ok, baseline_runs)
    s.patterns = sorted({r.pattern for r in ok if r.pattern})
    for r in ok:
        if r.pattern:
            s.pattern_counts[r.pattern] = s.pattern_counts.get(r.pattern, 0) + 1
    return s


def _slowdown(s: VariantSummary, ok: list[RunFigures], baseline_runs: list[RunFigures]) -> tuple[float | None, str]:
    """The median over reps of the variant's time over the baseline's in the same rep, and by what:
    the workload's throughput where it reports one; for a workload that works in bursts (its
    baseline's runs, memgap.lab.objective) a burst's time at most: 1 + the CPU seconds the variant adds to
    a burst (RunFigures.work_cpu) over the baseline's burst length (its runs' work_wall, their median;
    the CPU ratio itself where the runs hold no length: labs saved before it); else the wall time. The
    user's chart shows the bursts' time (a request's latency); the samples, 0.1 s apart, cannot time a
    0.12 s burst to 10%, and its CPU can be told to the tick, but a CPU ratio makes a burst that waits on
    I/O as slow as one that computes throughout."""
    base_ok = [r for r in baseline_runs if r.status == "ok"]
    if s.throughput is not None:  # the workload's own figure, higher is better
        base_tp = {r.rep: r.throughput for r in base_ok if r.throughput}
        ratios = [base_tp[r.rep] / r.throughput for r in ok if r.rep in base_tp and r.throughput]
        by = ""
    elif works_in_bursts(base_ok) and ok and all(r.work_cpu for r in [*ok, *base_ok]):
        s.work_cpu = _spread([r.work_cpu for r in ok if r.work_cpu])
        base_cpu = {r.rep: r.work_cpu for r in base_ok if r.work_cpu}
        lengths = [r.work_wall for r in base_ok if r.work_wall]
        if len(lengths) == len(base_ok):
            s.burst_length = statistics.median(lengths)
            ratios = [1 + (r.work_cpu - base_cpu[r.rep]) / s.burst_length for r in ok
                      if r.rep in base_cpu and r.work_cpu]
            by = BURSTS_TIME
        else:
            ratios = [r.work_cpu / base_cpu[r.rep] for r in ok if r.rep in base_cpu and r.work_cpu]
            by = BURSTS_CPU
    else:
        base_by_rep = {r.rep: r.wall for r in base_ok if r.wall > 0}
        ratios = [r.wall / base_by_rep[r.rep] for r in ok if r.rep in base_by_rep]
        by = ""
    return (statistics.median(ratios) if ratios else None), by


@dataclass
class Verdict:
    summaries: list[VariantSummary]        # ranked: eligible by the objective's median, then the rest
    baseline: VariantSummary | None
    recommended: VariantSummary | None
    reason: str
    objective: str = IDLE                  # the figure that decided (memgap.lab.objective)


def run_to_run_spread(summary: VariantSummary | None) -> float:
    """(max - min) / median of a variant's throughputs, else of the times its slowdown is by (its
    bursts' CPU, or its wall times), in the slowdown's own terms: a burst's CPU range over its length
    where the slowdown is a burst's time at most (BURSTS_TIME); 0 when unknown."""
    figures = summary and (summary.throughput or (summary.work_cpu if summary.slowdown_by else summary.wall))
    if not figures or figures[0] <= 0:
        return 0.0
    if summary and summary.slowdown_by == BURSTS_TIME and summary.burst_length:
        return (figures[2] - figures[1]) / summary.burst_length
    return (figures[2] - figures[1]) / figures[0]


def _idle(s: VariantSummary, objective: str = IDLE) -> Spread:
    """The idle (or the objective's figure: median, min, max) of a variant found better, or that ran
    within the limit: it has one."""
    figure = summary_figure(s, objective)
    if figure is None:
        raise ValueError(f"{s.spec} has no {words(objective)} figures")
    return figure


def _rank(s: VariantSummary, objective: str) -> tuple[bool, float]:
    """Where a variant that is not eligible stands: by its figure's median, those without one last."""
    figure = summary_figure(s, objective)
    return figure is None, figure[0] if figure else 0.0


def _figure_words(objective: str, tree: bool) -> str:
    """What the verdict's figure is, in words: the idle's as it always said it."""
    if objective == IDLE:
        return f"idle {'PSS summed over the tree' if tree else 'RSS'}"
    if objective == GPU:
        return "idle GPU memory (the tree's device memory as the driver counts it, NVML; not RSS)"
    if objective == "mean":
        return f"mean {'RSS of the tree' if tree else 'RSS'} over the work"
    return f"peak {'RSS of the tree' if tree else 'RSS'}"


def decide(summaries: list[VariantSummary], baseline_spec: str, max_slowdown: float,
           objective: str = IDLE) -> Verdict:
    base = next((s for s in summaries if s.spec == baseline_spec), None)
    noise = run_to_run_spread(base)
    for s in summaries:
        if s.ok < s.runs:
            s.reason = ", ".join(f"{n} {k}" for k, n in sorted(s.statuses.items()) if k != "ok")
        if s.slowdown is not None and s.slowdown > 1 + max_slowdown + noise_allowance(noise, max_slowdown):
            s.within_budget = False
        mine, theirs = summary_figure(s, objective), base and summary_figure(base, objective)
        if base is not None and theirs and mine and s is not base and s.ok == s.runs:
            s.better = materially_lower(mine, theirs)
    eligible = sorted((s for s in summaries if s.better and s.within_budget), key=lambda s: _idle(s, objective)[0])
    ranked = eligible + sorted([s for s in summaries if s not in eligible], key=lambda s: _rank(s, objective))
    if base is not None and base.statuses.get("oom-killed"):
        return _within_the_limit(summaries, base)
    if base is None or not base.idle:
        return Verdict(ranked, base, None, "the baseline variant (glibc) did not reach idle: nothing to compare",
                       objective)
    if not summary_figure(base, objective):
        return Verdict(ranked, base, None, f"the baseline variant (glibc) has no {words(objective)}: nothing to "
                                           "compare", objective)
    if not eligible:
        below = "idled" if objective == IDLE else f"had its {words(objective)}"
        return Verdict(ranked, base, None,
                       f"no variant {below} materially below the baseline ({material_words(objective)}) within the "
                       "slowdown budget: keep the defaults", objective)
    # The best median is never undercut (the whole range of anything clearly lower would lie below it).
    standing = [s for s in eligible if not any(clearly_lower(t, s, objective) for t in eligible)]
    choice = min(standing, key=lambda s: (s.cost, s.settings, _idle(s, objective)[0]))
    idle, base_idle = _idle(choice, objective), _idle(base, objective)
    reason = (f"{_figure_words(objective, choice.tree)} {idle[0] / 2**20:.0f} MiB "
              f"(range {idle[1] / 2**20:.0f}-{idle[2] / 2**20:.0f}) against the baseline's "
              f"{base_idle[0] / 2**20:.0f} ({base_idle[1] / 2**20:.0f}-{base_idle[2] / 2**20:.0f}), "
              f"slowdown x{choice.slowdown or 1:.2f} (by {_by_words(choice)}); "
              f"{COST_WORDS[choice.cost]}")
    if choice is not eligible[0]:
        reason += (f"; chosen over {eligible[0].spec} ({_idle(eligible[0], objective)[0] / 2**20:.0f} MiB) "
                   f"as the simpler remedy: that one's range does not clear it by {MATERIAL_SHARE:.0%}")
    return Verdict(ranked, base, choice, reason, objective)


def _by_words(s: VariantSummary) -> str:
    """What a variant's slowdown is measured by, in words."""
    return "its throughput" if s.throughput else s.slowdown_by or "wall time"


def _within_the_limit(summaries: list[VariantSummary], base: VariantSummary) -> Verdict:
    """The baseline was OOM-killed at the lab's memory limit: a variant that ran within it in
    every run is a fix by itself (the cheapest one no other clearly undercuts). Its cost in
    time cannot be measured against a baseline that did not finish."""
    fit = sorted((s for s in summaries if s is not base and s.idle and s.ok == s.runs), key=lambda s: _idle(s)[0])
    for s in fit:
        s.better = True
    ranked = fit + [s for s in summaries if s not in fit]
    killed = (f"the baseline ({base.spec}) was OOM-killed at the memory limit in {base.statuses['oom-killed']} "
              f"of {base.runs} runs")
    if not fit:
        return Verdict(ranked, base, None, f"{killed}, and no variant ran within it in every run")
    standing = [s for s in fit if not any(clearly_lower(t, s) for t in fit)]
    choice = min(standing, key=lambda s: (s.cost, s.settings, _idle(s)[0]))
    peak = f", cgroup peak {choice.cgroup_peak[2] / 2**20:.0f} MiB at most" if choice.cgroup_peak else ""
    runs = f"{choice.runs} run{'s' * (choice.runs != 1)}"
    return Verdict(ranked, base, choice, f"{killed}; {choice.spec} ran within it in each of its {runs} (idle RSS "
                                         f"{_idle(choice)[0] / 2**20:.0f} MiB{peak}); {COST_WORDS[choice.cost]}; "
                                         "its cost in time is not measured: the baseline did not finish")


def materially_lower(idle: Spread, base: Spread) -> bool:
    """Whether an idle (median, min, max) is below the baseline's by the material margin."""
    margin = base[0] - idle[0]
    return idle[2] < base[1] and margin >= MATERIAL_SHARE * base[0] and margin >= MATERIAL_BYTES


def clearly_lower(other: VariantSummary, this: VariantSummary, objective: str = IDLE) -> bool:
    """Whether ``other`` idles (or has its objective's figure) clearly below ``this``: its whole
    range below this one's, and its median more than MATERIAL_SHARE lower. No byte floor here: it
    guards the step from the defaults to a remedy; between two remedies that both took that
    step, a range wholly below by the share is the better one to pick."""
    theirs, mine = summary_figure(other, objective), summary_figure(this, objective)
    if theirs is None or mine is None:
        return False
    return theirs[2] < mine[1] and theirs[0] < mine[0] * (1 - MATERIAL_SHARE)
