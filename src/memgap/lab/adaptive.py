"""Runs spent where they decide something: after a first round of every variant,
the ones that cannot win are dropped, and the repetitions go to the contenders
until two rounds in a row give the same verdict (or the repetitions run out).

A variant cannot win when none of its runs was usable (crashed, killed, not
applied, no idle), when none of its runs idled below the baseline's highest by
the material margin (the verdict asks for its whole range below the baseline's
and its median lower by that margin: later runs would have to move both by more
than that), or when it is far too slow (beyond FAR_TOO_SLOW times the budget's
limit), or when another variant within the budget idled below every one of its
runs by twice the material margin (the verdict never picks a variant another
one's range clearly undercuts). A verdict is settled when two rounds in a row give it, and, where it
prefers a costlier remedy to a simpler one that also beats the baseline, when
every contender has had all its repetitions: with fewer runs a range clears
another's by chance more easily. ``memgap lab --reps N`` keeps the full grid.
"""
from __future__ import annotations

from memgap.allocators.variants import Variant, parse_variant
from memgap.documents.records import RunFigures
from memgap.lab.objective import IDLE, run_figure, words
from memgap.lab.verdict import MATERIAL_BYTES, MATERIAL_SHARE, Verdict, summarize

FAR_TOO_SLOW = 1.5  # x the slowest a variant may be (1 + budget): no later run brings it back


def cannot_win(variant: Variant, baseline: Variant, runs: list[RunFigures], max_slowdown: float,
               objective: str = IDLE) -> str:
    """Why ``variant`` cannot be recommended, from its runs and the baseline's so far
    (one cell of the lab), judged by ``objective`` (memgap.lab.objective); "" while it still can."""
    if variant.is_baseline:
        return ""
    mine = [r for r in runs if r.variant == variant.spec]
    base = [r for r in runs if r.variant == baseline.spec and r.status == "ok" and r.idle is not None]
    usable = [r for r in mine if r.status == "ok" and r.idle is not None]
    if mine and not usable:
        statuses = sorted({r.status for r in mine})
        return f"no usable run ({', '.join(statuses)})"
    theirs = [f for r in base if (f := run_figure(r, objective)) is not None]
    ours = [f for r in usable if (f := run_figure(r, objective)) is not None]
    if not ours or not theirs:
        return ""
    highest = max(theirs)
    if min(ours) > highest - max(MATERIAL_SHARE * highest, MATERIAL_BYTES):
        return f"its {words(objective)} was not materially below the baseline's in any run"
    slowdown = _slowdown(variant, runs, baseline)
    if slowdown is not None and slowdown > FAR_TOO_SLOW * (1 + max_slowdown):
        return f"far too slow (x{slowdown:.2f} against a budget of x{1 + max_slowdown:.2f})"
    for other in sorted({r.variant for r in runs} - {variant.spec, baseline.spec}):
        if _dominates(other, usable, runs, baseline, max_slowdown, objective):
            below = "idled" if objective == IDLE else f"had its {words(objective)}"
            return f"{other} {below} far below it in every run, within the budget"
    return ""


def _slowdown(variant: Variant, runs: list[RunFigures], baseline: Variant) -> float | None:
    mine = [r for r in runs if r.variant == variant.spec]
    return summarize(variant, mine, [r for r in runs if r.variant == baseline.spec]).slowdown


def _dominates(spec: str, usable: list[RunFigures], runs: list[RunFigures], baseline: Variant,
               max_slowdown: float, objective: str = IDLE) -> bool:
    """Whether variant ``spec`` idled (by ``objective``'s figure) below every one of these runs by
    twice the material margin in all its own runs, within the time budget: the verdict would never
    pick the dominated one (the other one's range lies clearly below it), whatever the costs."""
    theirs = [r for r in runs if r.variant == spec]
    if not theirs or any(r.status != "ok" or r.idle is None or run_figure(r, objective) is None for r in theirs):
        return False
    ours = [f for r in usable if (f := run_figure(r, objective)) is not None]
    if not ours:
        return False
    lowest = min(ours)
    gap = max(2 * MATERIAL_SHARE * lowest, 2 * MATERIAL_BYTES)
    slowdown = _slowdown(parse_variant(spec), runs, baseline)
    highest = max(f for r in theirs if (f := run_figure(r, objective)) is not None)
    return highest < lowest - gap and (slowdown or 1.0) <= 1 + max_slowdown


def needs_every_rep(verdict: Verdict) -> bool:
    """Whether the verdict picks a costlier remedy over a simpler one that also beats the
    baseline: a choice that rests on one range clearing another, which fewer runs fake."""
    chosen = verdict.recommended
    if chosen is None:
        return False
    simpler = [s for s in verdict.summaries if s.better and s.within_budget and s is not chosen
               and (s.cost, s.settings) < (chosen.cost, chosen.settings)]
    return bool(simpler)
