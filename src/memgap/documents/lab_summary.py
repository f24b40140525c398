"""The parts of a lab document (``documents.LabDocument``) that summarize its runs: each
variant's summary, the recommendation, each cell of a sweep, the sweep's table and the top
recommendation's fate across the cells.

The lab makes them (``lab.verdict.summarize``, ``lab.runner.lab_document``); they live here,
below the lab, so that the documents and the report read them without importing it. Each has
``to_dict()``, the JSON the lab has always written (docs/json.md), and ``from_dict()``, which
checks it (``MalformedInput`` naming the field) and fills in what a lab of an earlier memgap lacks.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from memgap.documents.fields import dataclass_fields
from memgap.documents.json_value import JsonObject

# how a reason in a lab document's ``chosen`` that a finding of the baseline's gave begins (memgap.lab.choose)
CHOSEN = "chosen because: "


def noise_allowance(spread: float, budget: float) -> float:
    """What the baseline's own spread between its runs adds to the slowdown budget: the spread, at most the
    budget again (a rate that varies by half between the baseline's own runs would otherwise let a remedy
    twice as slow pass: a spread wider than the budget is said, not granted)."""
    return min(spread, budget)

# (median, min, max) over a variant's runs: the median of an even number of runs is a mean, so
# a float even for byte counts
Spread = tuple[float, float, float]


_P = TypeVar("_P", bound="_Summary")


class _Summary:
    """A part written as its fields (``dataclasses.asdict``) and read back checked; ``WHAT``
    names it in an error."""

    WHAT: ClassVar[str] = "lab document part"

    def to_dict(self) -> JsonObject:
        out: JsonObject = dataclasses.asdict(self)  # type: ignore[call-overload]  # every subclass is a dataclass
        return out

    @classmethod
    def from_dict(cls: type[_P], data: Any, what: str = "") -> _P:
        return cls(**dataclass_fields(cls, data, what or cls.WHAT))


@dataclass
class VariantSummary(_Summary):
    """One variant's runs in one cell, summed up, and what the verdict made of them."""

    WHAT = "variant summary"
    SIGNED = frozenset({"throughput", "slowdown"})  # the workload's own metric, any sign, and ratios of it

    spec: str
    cost: int
    settings: int
    runs: int
    ok: int
    statuses: dict[str, int] = field(default_factory=dict)
    idle: Spread | None = None
    after_trim: Spread | None = None
    peak: Spread | None = None
    cgroup_peak: Spread | None = None  # the run cgroup's peak, OOM-killed runs included (the limit)
    baseline: Spread | None = None    # post-import RSS
    wall: Spread | None = None
    throughput: Spread | None = None
    tree: bool = False              # its idle is a tree's sum by PSS (several processes alive at idle)
    slowdown: float | None = None   # median over reps: wall / baseline wall, or baseline throughput / throughput
    patterns: list[str] = field(default_factory=list)
    pattern_counts: dict[str, int] = field(default_factory=dict)
    better: bool = False
    within_budget: bool = True
    reason: str = ""
    mean: Spread | None = None      # the time-weighted mean RSS over the work (since issue 32: where known)
    # since issue 32 item 2: a burst's CPU seconds (RunFigures.work_cpu), where its slowdown is by them,
    # and what its slowdown is by where not by its throughput or wall time (verdict.BURSTS_CPU)
    work_cpu: Spread | None = None
    slowdown_by: str = ""
    # since session 15: the baseline's burst length (seconds: its runs' RunFigures.work_wall, their median) that
    # the CPU a variant adds to a burst is weighed against, where its slowdown is by a burst's time
    burst_length: float | None = None
    # since issue 33, where its runs recorded device memory: the tree's GPU memory at idle and at its highest
    gpu_idle: Spread | None = None
    gpu_peak: Spread | None = None

    def to_dict(self) -> JsonObject:
        out = super().to_dict()
        # a lab saved before them is written back as it was
        for name in ("mean", "work_cpu", "slowdown_by", "burst_length", "gpu_idle", "gpu_peak"):
            if not out[name]:
                del out[name]
        return out

    def word(self, recommended: str | None, baseline: str | None) -> str:
        """Its word in a lab's table (and in a sweep's cells)."""
        if self.spec == recommended:
            return "recommended"
        if self.reason:
            return self.reason
        if self.better:
            return "better" if self.within_budget else "too slow"
        return "baseline" if self.spec == baseline else "not better"



@dataclass
class Recommendation(_Summary):
    """The variant the verdict chose, why, and the lines that apply it in every form
    (``report.remedy.remedy_forms``).

    The lab stores their data (``env``, ``setup``, ``python_plain``, ``notes``: memgap.lab.remedy_lines)
    and leaves the forms (``shell``, ``dockerfile``, ``systemd``, ``kubernetes``, ``python``) empty; the
    report renders them from it (``report.remedy.with_forms``), and the lab's JSON carries them as
    rendered then: a saved lab is shown with the forms it was written with."""

    WHAT = "recommendation"

    variant: str
    reason: str
    env: dict[str, str] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    shell: list[str] = field(default_factory=list)
    dockerfile: str = ""
    systemd: list[str] = field(default_factory=list)
    kubernetes: str = ""  # added since 8a6ec88: "" where there is nothing to set, as for a lab saved before
    python: str = ""
    python_plain: str = ""
    notes: list[str] = field(default_factory=list)

    def carries_forms(self) -> bool:
        """Whether its forms are here: a saved lab's are (every memgap wrote the Python form, never
        empty: it sets os.environ), the lab's own are not (the report renders them from its data)."""
        return bool(self.python)



@dataclass
class Cell(_Summary):
    """One setting of the swept parameters (the one empty cell without any): its variants,
    ranked as the verdict ranked them, and its own verdict."""

    WHAT = "lab cell"

    params: dict[str, str]
    variants: list[VariantSummary]
    verdict: str
    recommendation: Recommendation | None
    baseline_idle: float  # the baseline's idle median; 0 where it has none
    time_spread: float = 0.0  # the baseline's run-to-run spread (verdict.run_to_run_spread)
    objective: str = ""  # the figure that decided its verdict (memgap.lab.objective); "" in a lab before it

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"params": self.params, "variants": [v.to_dict() for v in self.variants],
                           "verdict": self.verdict,
                           "recommendation": self.recommendation.to_dict() if self.recommendation else None,
                           "baseline_idle": self.baseline_idle, "time_spread": self.time_spread}
        if self.objective:
            out["objective"] = self.objective
        return out



@dataclass
class SweepRow(_Summary):
    """One variant in one cell of a sweep: its idle and peak medians, and their growth over
    the first cell's (None where either is unknown)."""

    WHAT = "sweep row"
    SIGNED = frozenset({"idle_growth", "peak_growth"})

    params: dict[str, str]
    idle: float | None
    peak: float | None
    idle_growth: float | None = None
    peak_growth: float | None = None



@dataclass
class AcrossCell(_Summary):
    """The top recommendation in one cell of a sweep: its word there, its idle median and the
    baseline's (None where unknown)."""

    WHAT = "across-cells row"

    params: dict[str, str]
    word: str
    idle: float | None
    baseline_idle: float | None

