"""The JSON shapes of ``memgap run``'s recording and of the run document assembled from it
(memgap.record.assemble.load_run, memgap.documents.records.RunDocument): a recording's events, the
snapshots and samples a run keeps as JSON, and what it adds about each process (its agent's last
words, its exit, the tree at idle). TypedDicts: the run document keeps them as the JSON it read (its
keys in their order, and a newer memgap's keys with them), and its reader checks the keys they name
(memgap.documents.fields). Below the records, which hold them.
"""
from __future__ import annotations

from typing import TypedDict

from memgap.documents.fields import signed_keys
from memgap.documents.json_value import JsonObject

RUN_SCHEMA = "memgap.run/1"  # the run document's; the recording's header names it too


class RecordedLayer(TypedDict, total=False):
    """A layer in a recorded snapshot (``documents.snapshot.Layer`` as JSON)."""

    name: str
    resident: int | None
    virtual: int | None
    derivation: str
    note: str
    source: str
    detail: JsonObject
    private: int | None
    shared: int | None
    pss: int | None


class RecordedSnapshot(TypedDict, total=False):
    """A snapshot as a run keeps it: ``Snapshot.to_dict(regions=False)`` with its phase (checked by
    ``Snapshot.from_dict``), and what the recording adds to one read from outside."""

    schema: str
    pid: int
    time: float
    rss: int
    layers: dict[str, RecordedLayer]
    unexplained: int
    allocator: JsonObject
    phase: str  # a run's snapshots are each at a phase: the program's, or the recorder's (peak, quiet...)
    route: str
    status: dict[str, int]
    pymalloc: JsonObject | None
    python_heap: JsonObject | None
    findings: list[RecordedFinding]
    collect_seconds: float
    cmd: list[str]
    trim: JsonObject | None
    quiet_since: float | None
    rested_since: float | None
    cgroup: JsonObject | None
    copied_from_parent: JsonObject | None
    pss_unexplained: int | None
    pss_note: str
    start_time: int | None
    rss_at_mark: int     # read from outside: its VmRSS as the mark came (the read takes a while)
    read_began: float    # ...and when the read began (a mark's: as its line came)
    read_started: float  # when memgap began to read it (it may have waited for the reads asked before it)
    read_seconds: float  # ...and how long the read took
    asked: float         # when the recorder asked for it (the reads asked before it came first)
    held_exit: bool      # read as its agent held its exit
    same_read_as: str    # a held exit's phase read once for two: the phase whose read this is (memgap._hook)
    copies_seconds: float  # how long measuring what it copied from its parent took (memgap.explain.cow)
    moving: bool         # its RSS moved by more than a quiet spell's slack while it was read


class _Sampled(TypedDict):
    t: float          # seconds after the run began
    pid: int
    rss: int


class RecordedSample(_Sampled, total=False):
    """One RSS sample of a run's timeline (the sampler's ``sample`` event without its type)."""

    anon: int
    file: int
    threads: int
    cpu: float  # user + system seconds the process has run so far (since issue 32: the lab's rests)
    gpu: int    # device memory the driver counts for it, over its GPUs (NVML): only where it has some (issue 33)


class AgentTrimmer(TypedDict, total=False):
    """The trimmer an agent ran in its process (its ``trimmer`` line: the mode, then its figures)."""

    mode: str
    trims: float
    released: float


class AgentJemalloc(TypedDict):
    """jemalloc's statistics as its agent read them (``sources.jemalloc.JemallocStats`` as JSON)."""

    allocated: int
    active: int
    resident: int
    retained: int
    mapped: int
    metadata: int
    narenas: int
    version: str
    muzzy: int


class AgentExit(TypedDict, total=False):
    """What a process's agent wrote as it exited (``AgentReport.summary``): its allocator's figures,
    its hold for the recorder and its command line."""

    allocator: str
    malloc_from: str
    rss: int
    trimmer: dict[str, str | float]
    seconds: float
    mallinfo2: dict[str, int]
    arenas: int
    mmap_count: int
    mmap_bytes: int
    jemalloc: AgentJemalloc
    tcmalloc: dict[str, int]
    exit: dict[str, float]  # time, held, answered, tried
    cmdline: list[str]
    trims: list[JsonObject]  # its trimmers' trims (TrimRecord.to_dict: time, rss_before, rss_after, started, cpu)


class _Found(TypedDict):
    code: str
    severity: str
    summary: str


class RecordedFinding(_Found, total=False):
    """A finding over a run's process's phases (``documents.snapshot.Finding`` as JSON, with its PID)."""

    evidence: list[str]
    remedy: str
    pid: int


class _ExitBy(TypedDict):
    time: float
    by: str  # "agent": its agent held the exit; "sampled": the first round that found it gone


class ProcessExit(_ExitBy, total=False):
    """How close a process's last snapshot came to its exit (memgap.record.tree_watch.exit_of)."""

    held: float | None   # by its agent: how long it held the exit
    answered: bool       # ...and whether memgap answered
    passed: list[float]  # [seconds it lived, its VmHWM]: it passed through, its exit let go unread
    last_snapshot: float | None
    gap: float | None


class RecordedError(TypedDict, total=False):
    """Something the recording could not do (an ``error`` event without its type, or a file refused)."""

    error: str
    pid: int | None
    phase: str
    file: str


class MachineInfo(TypedDict, total=False):
    """The machine a run or a lab ran on (memgap.record.recorder.machine_info)."""

    cpus: int | None
    glibc: str
    python: str
    kernel: str


class CgroupCharge(TypedDict, total=False):
    """A run's own memory cgroup (``memgap lab --memory-limit``): its limit, peak and OOM kills."""

    limit: int | None
    peak: int | None
    oom_kills: int | None
    limit_hits: int | None


class TreeIdle(TypedDict):
    """A run's tree at idle, summed (memgap.record.tree_idle.TreeAtIdle.to_dict)."""

    processes: int
    pids: list[int]
    pss: int
    rss_sum: int
    by_rss: int
    how: str


class StopEnding(TypedDict):
    """How a stopped run's tree ended (memgap.record.tree_end.Ending.to_dict)."""

    signal: str
    forwarded: str | None
    grace: float
    killed: int


class _Entry(TypedDict):
    pid: int
    ppid: int | None
    cmd: list[str]
    snapshots: list[RecordedSnapshot]


class RecordedSplit(TypedDict):
    """``CowSplit``'s JSON: what a forked process copied from its parent (memgap.explain.cow)."""

    parent: int
    copied: int
    own: int
    inherited: int
    by_group: dict[str, int]


class CopiesRead(TypedDict):
    """What a forked process had copied from its parent at one read from outside (a run's process's
    ``copies``, oldest first): when, at what (its peak, a quiet spell, ...), its private memory (USS)
    then, and the split (``CowSplit``'s JSON: parent, copied, own, inherited, by_group)."""

    time: float
    phase: str
    uss: int | None
    split: RecordedSplit


class ProcessEntry(_Entry, total=False):
    """A run's process as load_run assembles it from the events (``ProcessRecord``'s JSON), with what
    it gathers on the way and drops before the document (``peak_reads``, ``gone``)."""

    trimmer: str
    trims: list[JsonObject]
    quiet_ends: list[float]
    quiet_told: list[list[float]]
    agent_exit: AgentExit
    pss_reads: list[list[float]]
    idle: JsonObject | None
    peak: RecordedSnapshot | None
    exit: ProcessExit | None
    copies: list[CopiesRead]
    peak_reads: list[RecordedSnapshot]  # its new highs read on the way (best_peak keeps one)
    gone: float                         # when the sampler found it gone (seconds after the start)
    passed: list[float]                 # it passed through (a ``passed`` event): [seconds it lived, VmHWM]


class RecordedEvent(TypedDict, total=False):
    """A line of a recording, any kind (``type``): the keys of every kind the reader takes apart
    (header, process, sample, snapshot, peak, gone, passed, quiet, quiet-end, pss, metric, error, trimmer,
    trimmer-start, load, cgroup, end); a trimmer's line holds its trim record's keys besides."""

    type: str
    schema: str
    pid: int | None
    ppid: int | None
    cmd: list[str]
    exec: bool
    t: float
    time: float
    start: float
    interval: float
    machine: MachineInfo
    env: dict[str, str]
    agent: dict[str, str]
    snapshot: RecordedSnapshot
    name: str
    value: float
    mode: str
    pss: int
    rss: int | None
    anon: int
    file: int
    threads: int
    lived: float  # a process that passed through: how long it lived (its VmHWM: ``hwm``)
    hwm: int
    since: float  # a quiet spell told: when it began (``rested_since``: when the process's rest did)
    rested_since: float | None
    phase: str
    error: str
    limit: int | None
    peak: int | None
    oom_kills: int | None
    limit_hits: int | None
    exit_code: int | None
    timed_out: bool
    stopped_at_idle: bool
    load_seconds: float | None
    interrupted: bool
    stopped: StopEnding | None


# the figures of these shapes that may be negative: the layers may add up to more than RSS; VmRSS may
# grow during a trim; an exit status -N is a signal
signed_keys(RecordedSnapshot, "unexplained", "pss_unexplained")
signed_keys(AgentTrimmer, "released")
signed_keys(RecordedEvent, "exit_code", "value")  # a metric's value is the program's own, any sign
# the last snapshot's time is read in the process, the exit's by the sampler: the gap may come out below 0
signed_keys(ProcessExit, "gap")
