"""The snapshot types (Snapshot, Layer, Region, Finding) and their versioned JSON form.

A recording holds snapshots in this form; a run document (RUN_SCHEMA) and a lab document
carry them (their classes: memgap.documents.records). Bump a schema when a field changes meaning;
adding a field keeps the version.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from memgap.documents.allocator import AllocatorInfo
from memgap.documents.display import as_html
from memgap.documents.fields import check_schema, dataclass_fields, of_type
from memgap.documents.gpu import GpuMemory
from memgap.documents.json_value import JsonObject
from memgap.documents.parts import CgroupMemory, PymallocStats, PythonHeap
from memgap.documents.recorded import RUN_SCHEMA as RUN_SCHEMA  # re-exported: named here since schema 1
from memgap.documents.trim import TrimRecord

SCHEMA = "memgap.snapshot/1"
MIB = 1 << 20

# Layer names in the order they are shown; they add up to RSS with ``unexplained``.
LAYER_NAMES = (
    "files",
    "shared_memory",
    "gpu_driver",         # only in a process that maps the GPU driver's device files (/dev/nvidia*)
    "pinned_host",        # ...and its shared anonymous memory there: likely CUDA's pinned host memory
    "python_objects",
    "pymalloc_free",
    "runtime_heap",       # only where a runtime with its own heap (Go, a JVM, V8) was read
    "runtime_metadata",
    "allocator_in_use",
    "allocator_free",
    "stacks",
    "static_data",        # libraries' and the program's zero-filled static data (.bss)
    "other_anon",
)
# Layers added after documents were saved: a table shows one only where a document holds it, so an older
# document reports as it did (its phases and its lab's page have no such column)
LATER_LAYERS = frozenset({"static_data", "gpu_driver", "pinned_host"})
PYTHON_LAYERS = ("python_objects", "pymalloc_free")
# The Python layers' note in a process with no Python interpreter: tables then leave those layers out
NOT_PYTHON = "not a Python process (no Python interpreter in its maps)"


@dataclass
class Layer:
    """One slice of RSS: resident bytes, virtual bytes where known, and how it was derived."""

    name: str
    resident: int | None            # None: not measured (``note`` says why)
    virtual: int | None = None
    derivation: str = ""   # how it was measured, in full
    note: str = ""
    source: str = ""       # the same in a few words, for tables
    detail: dict[str, Any] = field(default_factory=dict)
    # Of ``resident``: pages no other process maps (pagemap bit 56), the rest, and the layer's
    # share of the process's PSS. None where not read (in-process: see Snapshot.pss_note).
    private: int | None = None
    shared: int | None = None
    pss: int | None = None

    @property
    def measured(self) -> bool:
        return self.resident is not None


@dataclass
class Finding:
    """A diagnosis with the numbers behind it."""

    code: str          # stable identifier, e.g. "glibc-retention"
    severity: str      # "info", "warning"
    summary: str       # one line, with the figures
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""


@dataclass(slots=True)
class Region:
    """A labelled range of the memory map (the evidence under the layers)."""

    start: int
    end: int
    owner: str
    resident: int
    perms: str = ""
    path: str = ""
    private: int | None = None  # of ``resident``, what no other process maps; None: not read
    pss: int | None = None      # its share of the process's PSS


@dataclass
class CowSplit:
    """A forked process's private pages in the ranges it inherited from its parent, by who has them
    (memgap.explain.cow measures it; ``Snapshot.copied_from_parent``)."""

    parent: int                      # the parent's PID
    copied: int = 0                  # bytes: private here, and the parent has its own page there
    own: int = 0                     # bytes: private here, the parent has none there
    inherited: int = 0               # bytes of address space inherited (both map it)
    by_group: dict[str, int] = field(default_factory=dict)  # copied bytes by OWNER_GROUPS


@dataclass
class Snapshot:
    """One process at one instant, split into layers that add up to its RSS."""

    SIGNED = frozenset({"unexplained", "pss_unexplained"})  # the layers may add up to more than RSS

    pid: int
    time: float
    rss: int
    layers: dict[str, Layer]
    unexplained: int
    allocator: AllocatorInfo
    phase: str | None = None
    route: str = "in-process"          # or "outside": read from /proc only
    status: dict[str, int] = field(default_factory=dict)   # VmPeak, VmHWM, RssAnon, ...
    pymalloc: PymallocStats | None = None  # pymalloc's own statistics (in-process)
    python_heap: PythonHeap | None = None  # tracemalloc's totals or the gc walk's buffers (in-process)
    regions: list[Region] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    collect_seconds: float = 0.0
    cmd: list[str] = field(default_factory=list)
    trim: TrimRecord | None = None  # set on the snapshot taken right after a measured trim
    quiet_since: float | None = None    # a snapshot at a quiet spell: when the spell began (memgap.record.idle)
    rested_since: float | None = None   # ...and when the rest began (a trim in it restarts the spell, not the rest)
    cgroup: CgroupMemory | None = None  # the memory cgroup it runs in (memgap.sources.cgroup), where readable
    copied_from_parent: CowSplit | None = None  # a forked process in a tree (memgap.explain.cow)
    pss_unexplained: int | None = None  # PSS (smaps_rollup) minus the layers' pss; None where they have none
    pss_note: str = ""                  # how the layers' pss was derived, or why there is none
    start_time: int | None = None       # /proc/PID/stat's starttime (clock ticks after boot): with the PID, one process
    gpu: GpuMemory | None = None        # device memory beside RSS, never in it (where a GPU context is: sources.nvml)

    @property
    def not_python(self) -> bool:
        """Whether memgap found no Python interpreter in the process (its Python layers say so)."""
        layer = self.layers.get("python_objects")
        return layer is not None and layer.resident is None and layer.note == NOT_PYTHON

    @property
    def pss(self) -> int | None:
        """The process's PSS (smaps_rollup), where it was read."""
        return self.status.get("Pss")

    @property
    def uss(self) -> int | None:
        """Its private bytes (USS): what its exit would free."""
        return self.status.get("Uss")

    def __repr__(self) -> str:
        """One line: the process, its RSS and its layers in MiB (print() and a notebook's text fallback
        wrote 21 KB of fields before); ``to_dict()`` has everything."""
        layers = ", ".join(f"{name} {layer.resident / MIB:.1f}" for name, layer in self.layers.items()
                           if layer.resident is not None)
        findings = f"; findings: {', '.join(f.code for f in self.findings)}" if self.findings else ""
        return (f"<memgap.Snapshot PID {self.pid}{f' at {self.phase}' if self.phase else ''}: RSS "
                f"{self.rss / MIB:.1f} MiB ({self.route}, {self.allocator.name}): {layers}, unexplained "
                f"{self.unexplained / MIB:.1f} MiB{findings}>")

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the breakdown as self-contained HTML (no script, no network), by the
        renderer memgap registers (``memgap.documents.display``)."""
        return as_html("snapshot", self)

    def to_dict(self, regions: bool = True) -> JsonObject:
        out: JsonObject = {"schema": SCHEMA}
        # without its regions, none converted: a tree's thousands of them were most of its JSON's cost
        out.update(asdict(self if regions else replace(self, regions=[])))
        out["allocator"] = self.allocator.to_dict()  # its optional keys left out where not read, as always
        if not regions:
            out.pop("regions")
        if self.trim is not None:  # its JSON is its own (the route's details after its fields)
            out["trim"] = self.trim.to_dict()
        if self.cgroup is not None:  # ...as is the cgroup's (its figures, then what they give)
            out["cgroup"] = self.cgroup.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Any, what: str = "snapshot") -> Snapshot:
        """A snapshot from its JSON, every field checked against its type (docs/schemas/); what is
        missing or wrong is MalformedInput naming the field. A snapshot inside a run may omit its schema."""
        check_schema({"schema": of_type(data, dict, what).get("schema", SCHEMA)}, "memgap.snapshot", SCHEMA, what)
        return cls(**dataclass_fields(cls, data, what))


def by_pss(snaps: list[Snapshot]) -> bool:
    """Whether every process's layers carry their pss (outside snapshots do), so a tree can be
    summed by PSS; else only its RSS sum can be given."""
    return bool(snaps) and all(s.pss_unexplained is not None for s in snaps)


def layer_figure(layer: Layer, pss: bool) -> int | None:
    """A layer's PSS bytes where ``pss``, else its resident bytes; None where not measured."""
    return layer.pss if pss else layer.resident


@dataclass
class TreeTotals:
    """A process tree summed (``tree_totals``): its PSS (each shared page split among its sharers:
    what the tree costs), its USS, the RSS sum (which counts a shared page once per process that maps
    it), and each layer summed by PSS where every process has it, else by resident bytes."""

    SIGNED = frozenset({"unexplained"})  # the layers may add up to more than the sum

    processes: int
    pss: int | None                  # None where a process's PSS was not read
    uss: int | None
    rss_sum: int
    layers_by: str                   # "pss" or "resident"
    layers: dict[str, int | None]    # None: no process measured it
    unexplained: int
    copied_from_parent: int = 0      # forked processes: their private pages the parent has its own copy of


def tree_layer_names(snaps: list[Snapshot]) -> list[str]:
    """The layers any process of a tree holds, the first process's first: a layer only some hold (a GPU's, a
    runtime's) is the tree's too."""
    return list(dict.fromkeys(name for s in snaps for name in s.layers))


def tree_totals(snaps: list[Snapshot]) -> TreeTotals:
    """A process tree's snapshots summed (TreeTotals)."""
    pss = by_pss(snaps)
    layers: dict[str, int | None] = {}
    for name in tree_layer_names(snaps):
        values = [layer_figure(s.layers[name], pss) for s in snaps if name in s.layers]
        known = [v for v in values if v is not None]
        layers[name] = sum(known) if known else None
    return TreeTotals(
        processes=len(snaps),
        pss=sum(s.pss or 0 for s in snaps) if all(s.pss is not None for s in snaps) else None,
        uss=sum(s.uss or 0 for s in snaps) if all(s.uss is not None for s in snaps) else None,
        rss_sum=sum(s.rss for s in snaps),
        layers_by="pss" if pss else "resident",
        layers=layers,
        unexplained=sum((s.pss_unexplained if pss else s.unexplained) or 0 for s in snaps),
        copied_from_parent=sum(s.copied_from_parent.copied for s in snaps if s.copied_from_parent),
    )


@dataclass
class TreeSnapshot:
    """A process and its descendants read at one moment (memgap.explain.tree.snapshot_tree): the
    root's snapshot first, then each descendant's, and the tree summed."""

    pid: int
    processes: list[Snapshot]

    @property
    def totals(self) -> TreeTotals:
        return tree_totals(self.processes)
