"""A lab's options, as given and frozen, and its state, which the runner changes as the lab goes.

``LabOptions`` is what the caller asks (the command's ``LabRequest.lab_options``, or a lab
rebuilt from its journal); ``LabState`` is what the lab learns and decides meanwhile: the
variants the baseline's findings add (memgap.lab.choose) and why each runs, the variants
skipped and dropped, the runs so far, the adaptive schedule's last verdicts, where each run's
cgroup is made. The lab document (memgap.lab.document) is made from the two.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from memgap.allocators.variants import Variant
from memgap.documents.records import RunFigures
from memgap.lab.cgroup_limit import CgroupParent
from memgap.lab.choose import first_reasons


@dataclass(frozen=True)
class LabOptions:
    cmd: tuple[str, ...]
    variants: tuple[Variant, ...]
    reps: int = 3
    timeout: float = 600.0
    max_slowdown: float = 0.05
    interval: float = 0.1
    lab_dir: str = ""
    quiet_workload: bool = True
    metric: str = ""  # a throughput the workload reports with memgap.metric(); else wall time counts
    params: tuple[tuple[str, tuple[str, ...]], ...] = ()  # swept env vars and their values, in order
    phase_regex: str = ""    # stdout lines that mark a phase (see memgap.record.marks)
    idle_after: float = 0.0  # seconds without a new phase: idle, measured from outside, then stopped
    agent: bool = True       # preload the native agent (statistics, trims and trimmers in non-Python programs)
    metric_regex: str = ""   # stdout lines that report the --metric value (group 1)
    skipped: tuple[str, ...] = ()  # variants the caller could not run here, with the install line
    adaptive: bool = False   # after the first round, only the contenders run on (see lab.adaptive)
    process: str = ""        # a regular expression: the process of the tree the figures describe
    load: tuple[str, ...] = ()  # a load command against a service (see memgap.record.load)
    rest: float = 3.0        # with a load: the service's quiet after it, before it is measured and stopped
    memory_limit: int | None = None  # bytes: each run in a memory cgroup of its own capped there
    choose: bool = False     # the default set: the baseline's first runs' findings add variants (lab.choose)
    objective: str = ""      # the figure that decides (mean, idle, peak); "": by the workload (lab.objective)

    def cells(self) -> list[dict[str, str]]:
        """Every combination of the swept parameters (one empty cell without any)."""
        names = [name for name, _ in self.params]
        return [dict(zip(names, values, strict=True)) for values in itertools.product(*(v for _, v in self.params))]


@dataclass
class LabState:
    """What a lab changes as it runs; the runner owns it (``LabState.start``), a lab rebuilt from its
    journal replays it (memgap.lab.journal)."""

    variants: list[Variant]  # the options' and those the baseline's findings added, right after the baseline
    chosen: dict[str, str]   # variant -> why it runs (lab.choose)
    skipped: list[str]       # variants not run, with why (the install line, not a Python program)
    results: list[RunFigures] = field(default_factory=list)  # the runs so far, in their order
    dropped: dict[str, str] = field(default_factory=dict)    # variant (and cell) an adaptive lab stopped -> why
    verdicts: dict[int, str | None] = field(default_factory=dict)  # adaptive: each cell's pick after its last round
    cgroup_parent: CgroupParent | None = None  # where run cgroups are made (found as the lab starts)
    cgroup_note: str = ""    # why runs have no cgroup peak, where memgap itself runs in a limited cgroup

    @classmethod
    def start(cls, options: LabOptions) -> LabState:
        """A lab's state before its first run: its variants, each one's first reason, its skipped."""
        return cls(list(options.variants), first_reasons(options.variants, options.choose), list(options.skipped))

    def baseline(self) -> Variant | None:
        return next((v for v in self.variants if v.is_baseline), None)

    def in_order(self) -> list[Variant]:
        """The variants in a round's order: the baseline first."""
        return sorted(self.variants, key=lambda v: not v.is_baseline)
