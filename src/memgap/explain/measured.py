"""What one snapshot measured (``Measurements``) and its labelled regions summed per owner (``Owners``,
in ``Sizes``): what attribution and each allocator's reader (memgap.allocators) take, below both.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memgap.documents.snapshot import Region
from memgap.sources.glibc import Mallinfo2, MallocInfo
from memgap.sources.glibc_heaps import GlibcLayout
from memgap.sources.jemalloc import JemallocStats
from memgap.sources.procfs import shared_memory_kind
from memgap.sources.pyheap import PythonHeap
from memgap.sources.pymalloc import PymallocStats
from memgap.sources.pymalloc_pools import PoolCensus

if TYPE_CHECKING:  # the runtimes' readers load only where a runtime was read: not in a Python process's own snapshot
    from memgap.runtimes.base import RuntimeHeap


@dataclass
class Measurements:
    """Everything one snapshot measured, as attribution needs it."""

    rss: int
    regions: list[Region]
    allocator: str = "unknown"
    glibc: GlibcLayout | None = None
    mallinfo: Mallinfo2 | None = None
    malloc_info: MallocInfo | None = None
    jemalloc: JemallocStats | None = None
    pymalloc: PymallocStats | None = None
    python_heap: PythonHeap | None = None
    notes: dict[str, str] = field(default_factory=dict)  # layer -> why it was not measured, or what it holds unread
    tcmalloc: dict[str, int] | None = None  # MallocExtension numeric properties (from the agent)
    pools: PoolCensus | None = None  # outside: blocks in use counted from pymalloc's pool headers
    runtimes: list[RuntimeHeap] = field(default_factory=list)  # Go's, a JVM's, V8's own heaps (memgap.runtimes)


@dataclass(frozen=True)
class Sizes:
    """Resident bytes with what of them no other process maps and their share of PSS
    (both None where pagemap's exclusive bits were not read)."""

    resident: int = 0
    private: int | None = 0
    pss: float | None = 0.0

    def __add__(self, other: Sizes) -> Sizes:
        if self.private is None or other.private is None or self.pss is None or other.pss is None:
            return Sizes(self.resident + other.resident, None, None)
        return Sizes(self.resident + other.resident, self.private + other.private, self.pss + other.pss)

    def __sub__(self, other: Sizes) -> Sizes:
        return self + Sizes(-other.resident, None if other.private is None else -other.private,
                            None if other.pss is None else -other.pss)

    def take(self, resident: int) -> Sizes:
        """``resident`` bytes of this part, private and shared in its own proportions: a layer
        counted in bytes (blocks, the allocator's counters) says nothing of which pages hold them."""
        if self.private is None or self.pss is None:
            return Sizes(resident, None, None)
        ratio = resident / self.resident if self.resident else 0.0
        return Sizes(resident, round(self.private * ratio), self.pss * ratio)


class Owners:
    """Resident, private and PSS bytes, virtual bytes and region counts per owner, summed once;
    shared memory's resident bytes by kind (SysV, POSIX, memfd, anonymous)."""

    def __init__(self, regions: list[Region]) -> None:
        self.resident: dict[str, int] = {}
        self.virtual: dict[str, int] = {}
        self.count: dict[str, int] = {}
        self.shmem_kinds: dict[str, int] = {}
        self._parts: dict[str, Sizes] = {}
        # an owner with no region holds nothing: 0 private bytes, unless no page was told private (in-process)
        self._none = Sizes() if all(r.private is not None for r in regions) else Sizes(0, None, None)
        for r in regions:
            self.resident[r.owner] = self.resident.get(r.owner, 0) + r.resident
            self.virtual[r.owner] = self.virtual.get(r.owner, 0) + r.end - r.start
            self.count[r.owner] = self.count.get(r.owner, 0) + 1
            self._parts[r.owner] = self._parts.get(r.owner, Sizes()) + Sizes(r.resident, r.private, r.pss)
            if r.owner == "shmem":
                kind = shared_memory_kind(r.path) or "anonymous"
                self.shmem_kinds[kind] = self.shmem_kinds.get(kind, 0) + r.resident

    def __call__(self, owner: str) -> int:
        return self.resident.get(owner, 0)

    def part(self, *owners: str) -> Sizes:
        """The owners' resident bytes with their private and PSS bytes."""
        total = Sizes()
        for owner in owners:
            total += self._parts.get(owner, self._none)
        return total
