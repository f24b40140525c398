"""The parts of a snapshot that its sources read, as the snapshot carries them: a memory cgroup's
figures (``memgap.sources.cgroup`` reads them), pymalloc's statistics (``memgap.sources.pymalloc``) and
the Python heap's walk (``memgap.sources.pyheap``). Here, below the sources, so that a document names
its parts without importing the readers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TypedDict

from memgap.documents.json_value import JsonObject


@dataclass(frozen=True)
class CgroupMemory:
    """One memory cgroup's figures, in bytes (None where this kernel does not report one)."""

    version: int
    path: str                 # in its hierarchy, e.g. /kubepods/pod.../container
    usage: int                # charged now: v2 memory.current, v1 memory.usage_in_bytes
    limit: int | None         # the lowest limit from it up to the root; None: none
    peak: int | None          # v2 memory.peak (Linux 5.19+), v1 memory.max_usage_in_bytes
    anon: int
    file: int                 # page cache, shmem included (both versions count it there)
    active_file: int
    inactive_file: int
    shmem: int
    kernel: int | None        # v2 memory.stat kernel (5.18+), v1 memory.kmem.usage_in_bytes
    sock: int | None          # v2 memory.stat sock, v1 memory.kmem.tcp.usage_in_bytes
    swap: int | None

    @property
    def working_set(self) -> int:
        """usage - inactive file: what Kubernetes (kubectl top, the VPA, eviction) counts."""
        return max(0, self.usage - self.inactive_file)

    @property
    def reclaimable(self) -> int:
        """Page cache the kernel can drop under pressure before it OOM-kills: file pages
        but shmem (tmpfs, shared memory), which needs swap to leave."""
        return max(0, self.file - self.shmem)

    @property
    def headroom(self) -> int | None:
        return None if self.limit is None else self.limit - self.usage

    def to_dict(self) -> JsonObject:
        return {**asdict(self), "working_set": self.working_set, "reclaimable": self.reclaimable,
                "headroom": self.headroom}


class LargeBuffer(TypedDict):
    """One of the largest buffers the gc walk found: its type's name and its size."""

    type: str
    bytes: int


@dataclass
class PythonHeap:
    source: str                         # "tracemalloc" or "gc-walk"
    traced_current: int | None = None   # tracemalloc's current total
    traced_peak: int | None = None
    large_buffers_bytes: int = 0        # buffers > 512 B found by the gc walk
    large_buffers_count: int = 0
    largest: list[LargeBuffer] = field(default_factory=list)  # the ten largest, largest first
    instance_counts: dict[str, int] = field(default_factory=dict)
    gc_objects: int = 0


@dataclass(frozen=True)
class PymallocStats:
    """What pymalloc reports about its arenas, in bytes unless named a count."""

    arenas_current: int
    arenas_highwater: int
    arena_size: int
    pool_size: int
    allocated_blocks_bytes: int   # live small objects
    available_blocks_bytes: int   # free blocks inside used pools
    unused_pools: int             # pools with no block in use
    pool_headers_bytes: int
    quantization_bytes: int
    arena_alignment_bytes: int
    used_pools: int

    @property
    def arenas_bytes(self) -> int:
        return self.arenas_current * self.arena_size

    @property
    def free_bytes(self) -> int:
        """Arena bytes not holding a live block."""
        return self.arenas_bytes - self.allocated_blocks_bytes
