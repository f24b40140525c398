"""The documents that cross modules, as classes: a run (`memgap run`'s
recording assembled by ``runs.load_run``) and its processes, one lab run's figures, and a
lab's result (``lab.runner.lab_document``), whose summaries are memgap.documents.lab_summary's classes
(importable from here too), as the trim record is memgap.documents.trim's.

Each has ``to_dict()``, the JSON memgap writes (docs/json.md), and ``from_dict()``, which
checks the fields it knows (missing or of the wrong type: ``MalformedInput``, exit code 6)
and fills in what a document of an earlier version of the same schema lacks (fields are
only ever added within a version). This module sits below the lab and the report: it
imports neither; a notebook shows a lab (``LabDocument._repr_html_``) through the renderer
memgap registers (memgap.documents.display), as a Snapshot does. How fields are read and checked:
memgap.documents.fields.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypedDict

from memgap.documents.display import as_html
from memgap.documents.fields import check_schema, dataclass_fields, of_type
from memgap.documents.json_value import JsonObject, shaped
from memgap.documents.lab_summary import AcrossCell, Cell, Recommendation, SweepRow, VariantSummary
from memgap.documents.recorded import (
    AgentExit,
    CgroupCharge,
    CopiesRead,
    MachineInfo,
    ProcessEntry,
    ProcessExit,
    RecordedError,
    RecordedFinding,
    RecordedSample,
    RecordedSnapshot,
    StopEnding,
    TreeIdle,
)
from memgap.documents.snapshot import RUN_SCHEMA, Finding, Snapshot, TreeSnapshot, TreeTotals
from memgap.documents.trim import (
    TrimDetails as TrimDetails,  # the trim record's names, importable from here too
    TrimPart as TrimPart,
    TrimRecord,
    TrimRoute as TrimRoute,
    Word,
)
from memgap.errors import MalformedInput

LAB_SCHEMA = "memgap.lab/1"


class RunStatus(Word):
    """How one lab run ended, as its figures say (``RunFigures.status``)."""

    OK = "ok"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    KILLED = "killed"
    OOM_KILLED = "oom-killed"
    NO_IDLE = "no-idle"
    NOT_APPLIED = "not-applied"
    NO_PROCESS = "no-process"  # --process matched no process of the tree
    NO_METRIC = "no-metric"    # --metric: the workload reported none


class TrimMode(Word):
    """A lab variant's ``trim=`` setting (``Variant.trim``: ``every`` carries ``:SECONDS``)."""

    IDLE = "idle"    # one malloc_trim(0) after the phase named idle
    QUIET = "quiet"  # the idle trimmer
    EVERY = "every"  # a periodic trim

    @classmethod
    def of(cls, setting: str) -> TrimMode | None:
        """The mode of a ``trim=`` setting (``every:5`` is EVERY); None for no trim."""
        return cls(setting.split(":", 1)[0]) if setting else None


@dataclass
class ProcessIdle:
    """A process's idle in a run (``memgap.record.idle.idle_of_process``): its RSS then, by which rule
    it was found, and when."""

    rss: int
    rule: str                       # marked, quiet, before exit, last (memgap.record.idle's rules)
    label: str                      # the rule in words, as tables show it ("idle (quiet 1.8 s)")
    time: float | None = None       # the snapshot's time (None: no snapshot at idle)
    pss: int | None = None          # its PSS then: a tree is summed by it
    work_ended: float | None = None  # when its work ended (its rest began, or it exited)

    def to_dict(self) -> JsonObject:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, what: str = "process idle") -> ProcessIdle:
        return cls(**dataclass_fields(cls, data, what))


@dataclass
class ProcessRecord:
    """One process of a run: what memgap saw of it, its snapshots (each a snapshot's JSON
    with its ``phase``; one read from outside also has ``rss_at_mark`` and ``read_began``) and its idle."""

    pid: int
    snapshots: list[RecordedSnapshot]
    ppid: int | None = None
    cmd: list[str] = field(default_factory=list)
    trimmer: str | None = None          # the bootstrap started a trimmer in it: its mode
    trims: list[TrimRecord] | None = None  # the trimmer's trims
    quiet_ends: list[float] | None = None  # when its quiet spells ended
    quiet_told: list[list[float]] | None = None  # its quiet spells as told: [when, start, rest's start, RSS]
    agent_exit: AgentExit | None = None  # the statistics its agent wrote as it exited
    idle: ProcessIdle | None = None  # the idle found, with its rule
    pss_reads: list[list[float]] | None = None  # [time, Pss, Rss] read again while it was quiet (a tree's idle)
    peak: RecordedSnapshot | None = None  # the snapshot read from outside at its highest RSS (memgap.record.tree_watch)
    exit: ProcessExit | None = None  # when it exited and how close its last snapshot came (tree_watch.exit_of)
    copies: list[CopiesRead] | None = None  # a forked process: what it had copied from its parent at each read

    def to_dict(self) -> ProcessEntry:
        out: ProcessEntry = {"pid": self.pid, "ppid": self.ppid, "cmd": self.cmd, "snapshots": self.snapshots}
        # written only where the events were
        if self.trimmer is not None:
            out["trimmer"] = self.trimmer
        if self.trims is not None:
            out["trims"] = [t.to_dict() for t in self.trims]
        if self.quiet_ends is not None:
            out["quiet_ends"] = self.quiet_ends
        if self.quiet_told is not None:
            out["quiet_told"] = self.quiet_told
        if self.agent_exit is not None:
            out["agent_exit"] = self.agent_exit
        if self.pss_reads is not None:
            out["pss_reads"] = self.pss_reads
        if self.peak is not None:
            out["peak"] = self.peak
        if self.exit is not None:
            out["exit"] = self.exit
        if self.copies is not None:
            out["copies"] = self.copies
        out["idle"] = self.idle.to_dict() if self.idle is not None else None
        return out

    @classmethod
    def from_dict(cls, data: Any, what: str = "run's process") -> ProcessRecord:
        # its snapshots kept as JSON, but checked as snapshots are (once: not again as RecordedSnapshots)
        fields = dataclass_fields(cls, data, what, skip=("snapshots",))
        if "snapshots" not in data:
            raise MalformedInput(what, "no field 'snapshots'")
        snapshots = of_type(data["snapshots"], list, f"{what}, field 'snapshots'")
        for i, snap in enumerate(snapshots):
            Snapshot.from_dict(snap, f"{what}, snapshot {i}")
        return cls(snapshots=snapshots, **fields)

    def phases(self) -> list[Snapshot]:
        """Its snapshots as Snapshot objects (what a recording adds to them left out)."""
        return [Snapshot.from_dict(s) for s in self.snapshots]

    def trims_at_marks(self) -> list[TrimRecord]:
        """The trims of its ``after-trim`` snapshots (the one trim at a marked phase), in time order."""
        return [TrimRecord.from_dict(s["trim"], f"PID {self.pid}'s trim") for s in self.snapshots
                if s.get("phase") == "after-trim" and s.get("trim")]


@dataclass
class RunDocument:
    """``memgap run``'s recording assembled (``memgap.run/1``, docs/json.md)."""

    SIGNED = frozenset({"exit_code", "metrics"})  # -N: killed by signal N; a program's metrics are its own

    processes: list[ProcessRecord]
    cmd: list[str] = field(default_factory=list)
    start: float | None = None
    machine: MachineInfo = field(default_factory=lambda: MachineInfo())
    interval: float | None = None
    exit_code: int | None = None
    complete: bool = False
    timed_out: bool = False
    stopped_at_idle: bool = False
    load_seconds: float | None = None
    load_started: float | None = None  # with --load: when the load began, seconds after the start
    oom_kills: int | None = None
    cgroup: CgroupCharge | None = None
    env: dict[str, str] = field(default_factory=dict)
    agent: dict[str, str] = field(default_factory=dict)  # the agent preloaded: its library, its mode
    duration: float = 0.0
    timeline: list[RecordedSample] = field(default_factory=list)
    findings: list[RecordedFinding] = field(default_factory=list)
    errors: list[RecordedError] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    record_dir: str = ""
    tree: TreeIdle | None = None  # the tree at idle, summed (memgap.record.tree_idle.TreeAtIdle.to_dict)
    stopped: StopEnding | None = None  # a stop signal to memgap: how the tree ended (memgap.record.tree_end.Ending)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"schema": RUN_SCHEMA}
        for f in dataclasses.fields(self):
            out[f.name] = getattr(self, f.name)
        out["processes"] = [shaped(p.to_dict()) for p in self.processes]
        return {k: out[k] for k in _RUN_ORDER if k not in _RUN_OPTIONAL or out[k] is not None}

    @classmethod
    def from_dict(cls, data: Any, what: str = "run document") -> RunDocument:
        check_schema(data, "memgap.run", RUN_SCHEMA, what)
        # its samples and findings kept as JSON for the renderers, but checked (RecordedSample, RecordedFinding):
        # one missing a figure is refused here, not met as a KeyError in a table
        return cls(**dataclass_fields(cls, data, what))


def finding_of(data: RecordedFinding) -> Finding:
    """A finding kept as JSON (a run's, with its PID; a recorded snapshot's) as a Finding."""
    return Finding(data["code"], data["severity"], data["summary"], data.get("evidence", []), data.get("remedy", ""))


# The run document's fields in the order load_run has always written them.
_RUN_ORDER = ("schema", "cmd", "start", "machine", "interval", "exit_code", "complete", "timed_out",
              "stopped_at_idle", "load_seconds", "load_started", "oom_kills", "cgroup", "env", "agent", "duration",
              "processes", "timeline", "findings", "errors", "metrics", "record_dir", "tree", "stopped")
# added since 8a6ec88 (tree), issue 23 (stopped), issue 32 (load_started): written where there is one
_RUN_OPTIONAL = ("tree", "stopped", "load_started")


@dataclass
class RunFigures:
    """What one lab run of a variant measured (``runs`` of a lab document)."""

    SIGNED = frozenset({"exit_code", "trim_released", "throughput"})  # throughput: the workload's own metric, any sign

    variant: str
    rep: int
    order: int                 # position in the interleaved sequence
    status: RunStatus
    exit_code: int | None = None
    wall: float = 0.0          # seconds of work: start to exit, or to the last phase before idle
    duration: float = 0.0      # seconds the lab spent on the run (start to exit or stop)
    cpu: float = 0.0           # user + system seconds of the workload's processes
    baseline: int | None = None    # RSS at the first phase (post-import)
    peak: int | None = None        # highest RSS sampled or reported (VmHWM)
    idle: int | None = None        # RSS at the phase named idle (trim=quiet: after the rest)
    post_rest: int | None = None   # RSS last sampled before the program ended or was stopped
    after_trim: int | None = None  # RSS right after one malloc_trim(0) at idle
    trim_released: int | None = None
    vm_peak: int | None = None
    throughput: float | None = None  # the workload's own metric (--metric), higher is better
    pattern: str = ""
    pattern_evidence: str = ""
    phases: list[tuple[str, int]] = field(default_factory=list)
    record_dir: str = ""
    note: str = ""
    params: dict[str, str] = field(default_factory=dict)  # the swept parameters of this run
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (seconds, RSS) of the main process
    layers: list[PhaseLayers] = field(default_factory=list)  # per phase
    python: bool = False           # the main process recorded its own phases (memgap's bootstrap)
    idle_rule: str = ""            # how idle was found: "idle (marked)", "idle (quiet 2.1 s)", ...
    process: str = ""              # the command line of the process the figures describe
    processes: int = 0             # how many processes the workload's tree ran
    tree: list[TreeMember] = field(default_factory=list)  # every process's idle
    process_idle: int | None = None  # the measured process's own idle figure, where idle is the tree's total
    tree_how: str = ""             # how the tree's total was summed, where idle is the tree's total
    process_peak: int | None = None  # the measured process's own peak, where peak is the tree's
    cgroup_peak: int | None = None   # the run's own memory cgroup's highest charge (its tree's, page cache included)
    cgroup_limit: int | None = None  # that cgroup's limit (memgap lab --memory-limit)
    # added since issue 32, written where known (memgap.lab.work): the time-weighted mean RSS over the
    # work, the work's span (seconds after the start) and the rests within it (None: no CPU time sampled)
    work_mean: int | None = None
    work_span: list[float] | None = None
    rests: list[float] | None = None
    # added by issue 31: what the tree's forked processes had copied from their parents, summed at their
    # idles (memgap.record.tree_copies; None: none of its processes was forked from another)
    copied: int | None = None
    # added since issue 32 item 2, written where known: the CPU seconds the tree used in a burst within the
    # work, their mean from its first rest to its final one (without --load: memgap.lab.work.bursts_cpu)
    work_cpu: float | None = None
    # added since issue 32 item 2 (session 15), written where known: a burst's length, as the samples tell it
    # (memgap.lab.work.bursts_wall): what the CPU a variant adds to a burst is weighed against
    work_wall: float | None = None
    # added by issue 33, written where the run's samples held device memory (NVML, per process): the tree's GPU
    # memory summed per sampling round, at the round of its idle (else its last) and at its highest
    gpu_idle: int | None = None
    gpu_peak: int | None = None

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)  # a status given as its word is the same status

    def to_dict(self) -> JsonObject:
        out = dataclasses.asdict(self)
        out["status"] = self.status.value
        for name in ("process_peak", "work_mean", "work_span", "rests", "copied", "work_cpu", "work_wall",
                     "gpu_idle", "gpu_peak"):  # since 8a6ec88
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: Any, what: str = "lab run") -> RunFigures:
        return cls(**dataclass_fields(cls, data, what))


@dataclass
class RemedyLines:
    """What applies a lab's recommendation where the program is deployed, as data (``report.remedy``
    renders it for a shell, a Dockerfile, systemd and Python; the lab document holds both).

    ``env``: the variables to set; ``setup``: commands to run once (each may end in a
    ``   # comment``); ``python_plain``: plain Python doing the same without memgap ("" where
    none can); ``notes``: what was measured and what the lines do (gunicorn's and uWSGI's
    hooks among them)."""

    env: dict[str, str] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    python_plain: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class LabDocument:
    """A lab's result (``memgap.lab/1``, docs/json.md): every run's figures, each variant's
    summary per cell (``variants``, ``cells``: memgap.documents.lab_summary's classes) and the verdict."""

    cmd: list[str]
    runs: list[RunFigures]
    machine: MachineInfo = field(default_factory=lambda: MachineInfo())
    python: str = ""
    reps: int = 0
    max_slowdown: float = 0.05
    material: LabMaterial = field(default_factory=lambda: LabMaterial())
    metric: str = "wall time"
    params: dict[str, list[str]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    baseline: str | None = None
    cell: dict[str, str] = field(default_factory=dict)
    variants: list[VariantSummary] = field(default_factory=list)  # the worst cell's (``cell``), ranked
    verdict: str = ""
    # added since issue 32, written where there is one: the figure that decided the verdict (idle, mean,
    # peak: memgap.lab.objective) and why that one ("" where an earlier memgap's runs cannot say)
    objective: str = ""
    objective_why: str = ""
    stopped: str = ""
    recommendation: Recommendation | None = None
    time_spread: float = 0.0
    cells: list[Cell] = field(default_factory=list)
    sweep: dict[str, list[SweepRow]] = field(default_factory=dict)  # per variant, where more than one cell ran
    across_cells: list[AcrossCell] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    # variant -> why it ran (the default set, named, or a finding of the baseline's: memgap.lab.choose);
    # added since b87b24e: written where there is one
    chosen: dict[str, str] = field(default_factory=dict)
    adaptive: bool = False
    dropped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lab_seconds: float = 0.0
    workload_seconds: float = 0.0
    complete: bool = False
    lab_dir: str = ""
    cgroup: LabCgroup = field(default_factory=lambda: LabCgroup())
    # ``material`` and ``cgroup`` stay JSON objects: the lab's settings, stated as given, that a lab of
    # 04f183d lacks and is written back with as {}

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"schema": LAB_SCHEMA}
        for f in dataclasses.fields(self):
            out[f.name] = getattr(self, f.name)
        out["runs"] = [r.to_dict() for r in self.runs]
        out["variants"] = [v.to_dict() for v in self.variants]
        out["recommendation"] = self.recommendation.to_dict() if self.recommendation else None
        out["cells"] = [c.to_dict() for c in self.cells]
        out["sweep"] = {spec: [row.to_dict() for row in rows] for spec, rows in self.sweep.items()}
        out["across_cells"] = [a.to_dict() for a in self.across_cells]
        return {k: out[k] for k in _LAB_ORDER if out[k] or k not in _LAB_OPTIONAL}

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the verdict, the variants table and the lines that apply the
        recommendation, as self-contained HTML (no script, no network), by the renderer memgap
        registers (``memgap.documents.display``)."""
        return as_html("lab", self)

    @classmethod
    def from_dict(cls, data: Any, what: str = "lab document") -> LabDocument:
        check_schema(data, "memgap.lab", LAB_SCHEMA, what)
        lab = cls(**dataclass_fields(cls, data, what))
        if lab.material and not {"share", "bytes"} <= lab.material.keys():  # stated whole, or not at all
            raise MalformedInput(f"{what}, field 'material'", "no field 'share' or 'bytes'")
        return lab


class LabMaterial(TypedDict, total=False):
    """A lab's ``material``: what a variant must save to be better ({} in a lab from before it)."""

    share: float
    bytes: int


class LabCgroup(TypedDict, total=False):
    """A lab's ``cgroup``: its runs' memory limit, or why they ran without one ({} before it)."""

    limit: int | None
    note: str | None
    per_run: bool


class PhaseLayers(TypedDict):
    """A lab run's main process at one phase: its RSS and each layer's resident bytes."""

    phase: str | None
    rss: int
    layers: dict[str, int | None]


class TreeMember(TypedDict):
    """A process of a lab run's tree at its idle."""

    cmd: str
    idle: int
    pss: int | None
    rule: str


# The lab document's fields in the order lab_document has always written them.
_LAB_ORDER = ("schema", "cmd", "machine", "python", "reps", "max_slowdown", "material", "metric", "params", "order",
              "runs", "baseline", "cell", "variants", "verdict", "objective", "objective_why", "stopped",
              "recommendation", "time_spread", "cells",
              "sweep", "across_cells", "skipped", "chosen", "adaptive", "dropped", "warnings", "lab_seconds",
              "workload_seconds", "complete", "lab_dir", "cgroup")
# written where there is one: a lab saved before it is written back as it was
_LAB_OPTIONAL = ("chosen", "objective", "objective_why")


def load_document(data: Any, what: str = "document") -> RunDocument | LabDocument:
    """A run or a lab document, by its schema (anything else: MalformedInput)."""
    schema = str(of_type(data, dict, what).get("schema", ""))
    if schema.startswith("memgap.lab/"):
        return LabDocument.from_dict(data, what)
    if schema.startswith("memgap.run/"):
        return RunDocument.from_dict(data, what)
    raise MalformedInput(what, f"not a memgap run or lab (schema {schema!r})")



TREE_SCHEMA = "memgap.tree/1"


@dataclass
class TreeDocument:
    """A process and its descendants read at one moment (`memgap inspect PID --tree --json`): each
    process's snapshot, the tree summed (``documents.snapshot.tree_totals``: by PSS, what the tree
    costs) and the findings over the tree."""

    pid: int
    processes: list[Snapshot]
    total_rss: int   # counts a page shared by N processes N times
    total_pss: int | None  # what the tree costs
    totals: TreeTotals
    findings: list[Finding] = field(default_factory=list)

    @classmethod
    def of(cls, tree: TreeSnapshot, findings: list[Finding]) -> TreeDocument:
        totals = tree.totals
        return cls(tree.pid, tree.processes, totals.rss_sum, totals.pss, totals, findings)

    def to_dict(self) -> JsonObject:
        return {"schema": TREE_SCHEMA, "pid": self.pid, "processes": [s.to_dict(regions=False) for s in self.processes],
                "total_rss": self.total_rss, "total_pss": self.total_pss, "totals": dataclasses.asdict(self.totals),
                "findings": [dataclasses.asdict(f) for f in self.findings]}

    @classmethod
    def from_dict(cls, data: Any, what: str = "tree document") -> TreeDocument:
        check_schema(data, "memgap.tree", TREE_SCHEMA, what)
        return cls(**dataclass_fields(cls, data, what))
