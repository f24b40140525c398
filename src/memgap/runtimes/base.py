"""What every runtime reader takes and gives: a view of the process, and the runtime's figures.

Typed here once so that the layers (memgap.explain.attribution), the findings, the lab's variants and the
JSON read every runtime the same way, and a contract test can run every reader against the same checks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from memgap.sources.procfs import Mapping, ProcReader


@dataclass
class ProcessView:
    """What a reader may look at: the process's /proc reader (``read_memory`` reads its memory without
    stopping it), its maps, and the path of its program as /proc shows it (inside its own root)."""

    pid: int
    reader: ProcReader
    maps: list[Mapping]
    exe: str | None = None
    environ: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeInfo:
    """A runtime found in a process: which, its version where told, and how it was told."""

    name: str          # "go", "jvm", "v8"
    version: str       # "go1.26.8", "17.0.15+6", "11.3.244.8-node.30"; "" where not told
    how: str           # "build info in the program's .go.buildinfo", "libjvm.so in its maps", ...
    stripped: bool = False   # no symbols to read its state by: named, not read


@dataclass(frozen=True)
class OwnedRange:
    """An address range the runtime owns, with what it holds ("heap", "code cache", "metaspace", ...)."""

    start: int
    end: int
    label: str
    heap: bool = True  # its pages are the runtime's heap (else its metadata)
    free: bool = False  # heap pages the runtime holds free: where resident, retained (its own count splits the rest)


@dataclass
class RuntimeHeap:
    """The runtime's own figures, in bytes (None: not read, ``notes`` says why).

    ``in_use``: bytes of live objects (or of heap spans in use); ``retained``: heap memory free but
    still resident (the runtime keeps it: Go's HeapIdle - HeapReleased, a JVM's committed - used);
    ``released``: heap memory given back to the OS (not RSS: said for context); ``metadata``: the
    runtime's own structures by name (GC data, code cache, metaspace, stacks), resident bytes;
    ``ranges``: the address ranges it owns, so that their pages leave other_anon.
    """

    info: RuntimeInfo
    route: str                          # how it was read: "outside: /proc/PID/mem at runtime.mheap_", ...
    in_use: int | None = None
    retained: int | None = None
    released: int | None = None
    committed: int | None = None        # heap memory the runtime has mapped for use (in use + retained)
    limit: int | None = None            # its heap's ceiling where it has one (-Xmx, GOMEMLIMIT, --max-old-space-size)
    metadata: dict[str, int] = field(default_factory=dict)
    ranges: list[OwnedRange] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)  # what governs its retention (GOGC, the GC chosen...)
    notes: list[str] = field(default_factory=list)


class _Heap(TypedDict):
    route: str
    in_use: int | None
    retained: int | None
    released: int | None
    committed: int | None
    limit: int | None
    settings: dict[str, str]
    notes: list[str]


class HeapDetail(_Heap):
    """One runtime's heap in the runtime_heap layer's detail (``{"runtimes": [...]}``, memgap.runtimes.layers):
    its figures, the resident bytes of its ranges, and what of them it holds in use and retained."""

    runtime: str
    version: str
    resident: int
    in_use_told: int | None     # its own count (``in_use`` is the resident pages it covers)
    retained_told: int | None


class DeepRead(TypedDict, total=False):
    """What a runtime's own deep route told (``inspect --deep``: memgap.runtimes.read_deep): its figures,
    or a note saying why there are none."""

    runtime: str
    note: str
    version: str
    route: str
    in_use: int | None
    retained: int | None
    released: int | None
    committed: int | None
    limit: int | None
    metadata: dict[str, int]
    settings: dict[str, str]
    notes: list[str]


class RuntimeReader(Protocol):
    """One runtime's reader: ``detect`` then ``read``."""

    def detect(self, process: ProcessView) -> RuntimeInfo | None: ...

    def read(self, process: ProcessView, info: RuntimeInfo) -> RuntimeHeap: ...
