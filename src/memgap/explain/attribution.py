"""The join: labelled regions and allocator statistics become layers that add up to RSS.

Pure: takes what the collectors measured, returns layers. Every layer says how
it was derived; a figure that could not be measured is ``None`` with the
reason, never a guess presented as a measurement.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from memgap.documents.snapshot import Layer, Region

if TYPE_CHECKING:  # the runtimes' readers load only where a runtime was read: not in a Python process's own snapshot
    from memgap.runtimes.base import RuntimeHeap
from memgap.sources.glibc import Mallinfo2, MallocInfo
from memgap.sources.glibc_heaps import GlibcLayout
from memgap.sources.jemalloc import JemallocStats
from memgap.sources.procfs import shared_memory_kind
from memgap.sources.pyheap import PythonHeap
from memgap.sources.pymalloc import PymallocStats
from memgap.sources.pymalloc_pools import PoolCensus

MiB = 1 << 20


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
class _Sizes:
    """Resident bytes with what of them no other process maps and their share of PSS
    (both None where pagemap's exclusive bits were not read)."""

    resident: int = 0
    private: int | None = 0
    pss: float | None = 0.0

    def __add__(self, other: _Sizes) -> _Sizes:
        if self.private is None or other.private is None or self.pss is None or other.pss is None:
            return _Sizes(self.resident + other.resident, None, None)
        return _Sizes(self.resident + other.resident, self.private + other.private, self.pss + other.pss)

    def __sub__(self, other: _Sizes) -> _Sizes:
        return self + _Sizes(-other.resident, None if other.private is None else -other.private,
                            None if other.pss is None else -other.pss)

    def take(self, resident: int) -> _Sizes:
        """``resident`` bytes of this part, private and shared in its own proportions: a layer
        counted in bytes (blocks, the allocator's counters) says nothing of which pages hold them."""
        if self.private is None or self.pss is None:
            return _Sizes(resident, None, None)
        ratio = resident / self.resident if self.resident else 0.0
        return _Sizes(resident, round(self.private * ratio), self.pss * ratio)


class _Owners:
    """Resident, private and PSS bytes, virtual bytes and region counts per owner, summed once;
    shared memory's resident bytes by kind (SysV, POSIX, memfd, anonymous)."""

    def __init__(self, regions: list[Region]) -> None:
        self.resident: dict[str, int] = {}
        self.virtual: dict[str, int] = {}
        self.count: dict[str, int] = {}
        self.shmem_kinds: dict[str, int] = {}
        self._parts: dict[str, _Sizes] = {}
        # an owner with no region holds nothing: 0 private bytes, unless no page was told private (in-process)
        self._none = _Sizes() if all(r.private is not None for r in regions) else _Sizes(0, None, None)
        for r in regions:
            self.resident[r.owner] = self.resident.get(r.owner, 0) + r.resident
            self.virtual[r.owner] = self.virtual.get(r.owner, 0) + r.end - r.start
            self.count[r.owner] = self.count.get(r.owner, 0) + 1
            self._parts[r.owner] = self._parts.get(r.owner, _Sizes()) + _Sizes(r.resident, r.private, r.pss)
            if r.owner == "shmem":
                kind = shared_memory_kind(r.path) or "anonymous"
                self.shmem_kinds[kind] = self.shmem_kinds.get(kind, 0) + r.resident

    def __call__(self, owner: str) -> int:
        return self.resident.get(owner, 0)

    def part(self, *owners: str) -> _Sizes:
        """The owners' resident bytes with their private and PSS bytes."""
        total = _Sizes()
        for owner in owners:
            total += self._parts.get(owner, self._none)
        return total


def _arena_detail(m: Measurements) -> list[dict[str, Any]]:
    if m.glibc is None:
        return []
    by_system: dict[int, list[int]] = {}
    for a in (m.malloc_info.arenas if m.malloc_info else []):
        by_system.setdefault(a.system, []).append(a.nr)
    rows = []
    for i, arena in enumerate(m.glibc.arenas):
        nrs = by_system.get(arena.system_mem, [])
        nr = 0 if arena.is_main else (nrs.pop(0) if nrs else None)
        info = next((a for a in (m.malloc_info.arenas if m.malloc_info else []) if a.nr == nr), None)
        rows.append({
            "arena": nr if nr is not None else f"#{i}",
            "main": arena.is_main,
            "address": arena.address,
            "heaps": len(arena.heaps),
            "system": arena.system_mem,
            "in_use": info.in_use if info else None,
            "free": info.free if info else None,
            "resident": arena.resident,
            "free_resident": arena.free_resident,  # whole free pages
            # every free byte on a resident page, and of it those on pages that also hold a live chunk
            "free_bytes_resident": arena.free_bytes_resident,
            "fragmented": arena.fragmented,
            "in_use_resident": arena.in_use_resident,
            "free_walked": arena.free_walked,  # compare with malloc_info's "free"
            "top_resident": arena.top_resident,
            "bins_free_resident": arena.bins_free_resident,
            "trim_releasable": arena.trim_releasable() if arena.walk_complete or arena.is_main else None,
            # free chunks a trim's fastbin consolidation merges into a thread heap's top chunk (they stay)
            "joins_top_resident": None if arena.is_main or arena.fastbin_chunks is None
            else arena.joins_top_resident(),
            "walk_complete": arena.walk_complete,
            "small_walk_complete": arena.small_walk_complete,
            "problem": "; ".join(filter(None, [arena.walk_problem, arena.small_walk_problem])),
        })
    return rows


@dataclass
class _Split:
    """A non-glibc allocator's share of the anonymous pages, and how it was found."""

    in_use: int
    free: int | None       # None: not measured
    unclaimed: int         # of the allocator's mappings' pages, what goes back to other_anon
    in_use_how: str
    free_how: str
    source: str
    detail: dict[str, Any]
    note: str = ""


def _within_mappings(owner: str, owned: _Owners, allocated: int, free_bound: int,
                     found: bool) -> tuple[int, int | None, int]:
    """(in use, free, unclaimed) from the resident pages of the allocator's own mappings.

    In use comes first (allocated bytes have been written); free takes the rest, up to
    the allocator's own count of what it holds, which only bounds it: the counters
    include pages handed out but never touched. Pages beyond the bound are someone
    else's. Without the mappings (``found`` false) free is not measured, and in use
    is the counter within every unclaimed anonymous page, as before.
    """
    resident = owned(owner)
    if not found:
        in_use = min(allocated, resident + owned("anon"))
        return in_use, None, resident - in_use
    in_use = min(allocated, resident)
    free = min(free_bound, resident - in_use)
    return in_use, free, resident - in_use - free


def _jemalloc_split(j: JemallocStats, owned: _Owners) -> _Split:
    # every byte jemalloc maps (stats.mapped) must fit in the mappings found
    virtual = owned.virtual.get("jemalloc", 0)
    found = owned.count.get("jemalloc", 0) > 0 and virtual >= j.mapped
    in_use, free, unclaimed = _within_mappings("jemalloc", owned, j.allocated, j.free_bound, found)
    where = "resident pages of jemalloc's own mappings (private anonymous MAP_NORESERVE ones: smaps " \
            "VmFlags 'nr'; pages from pagemap)"
    detail = {"allocated": j.allocated, "active": j.active, "resident": j.resident, "muzzy": j.muzzy,
              "retained": j.retained, "mapped": j.mapped, "metadata": j.metadata, "narenas": j.narenas,
              "mappings": owned.count.get("jemalloc", 0), "mappings_virtual": virtual,
              "mappings_resident": owned("jemalloc"),
              # what stats.resident (plus muzzy pages) claims beyond the resident pages found
              "counted_not_resident": max(0, j.resident + j.muzzy - owned("jemalloc")) if found else None}
    return _Split(
        in_use, free, unclaimed,
        in_use_how=f"jemalloc stats.allocated, within the {where}" if found
        else "jemalloc stats.allocated, within unclaimed anonymous pages",
        free_how=f"{where} minus the in-use bytes, at most stats.resident + muzzy pages - stats.allocated "
                 "(jemalloc's own upper bound: dirty pages, page slack, metadata)",
        source="jemalloc stats, smaps, pagemap", detail={"jemalloc": detail},
        note="" if found else f"jemalloc's mappings not found (MAP_NORESERVE mappings: {virtual} bytes for "
                              f"stats.mapped {j.mapped}; vm.overcommit_memory 2?): its free pages are not "
                              "measured and stay in other_anon")


def _tcmalloc_split(t: dict[str, int], owned: _Owners) -> _Split:
    allocated = t.get("generic.current_allocated_bytes", 0)
    held = t.get("generic.heap_size", 0) - t.get("tcmalloc.pageheap_unmapped_bytes", 0)
    physical = t.get("generic.total_physical_bytes", held)  # held plus metadata
    virtual = owned.virtual.get("tcmalloc", 0)
    # [heap] must hold the whole page heap and the metadata: else some came from mmap, not found
    found = owned.count.get("tcmalloc", 0) > 0 and virtual >= t.get("generic.heap_size", 0) + physical - held
    in_use, free, unclaimed = _within_mappings("tcmalloc", owned, allocated, max(0, physical - allocated), found)
    where = "resident pages of [heap], where tcmalloc takes its page heap and metadata with sbrk (pagemap)"
    detail = {**t, "heap_virtual": virtual, "heap_resident": owned("tcmalloc"),
              "counted_not_resident": max(0, physical - owned("tcmalloc")) if found else None}
    return _Split(
        in_use, free, unclaimed,
        in_use_how=f"tcmalloc generic.current_allocated_bytes, within the {where}" if found
        else "tcmalloc generic.current_allocated_bytes, within unclaimed anonymous pages",
        free_how=f"{where} minus the in-use bytes, at most generic.total_physical_bytes minus the allocated "
                 "bytes (tcmalloc's own count: page heap free, central, transfer and thread caches, metadata)",
        source="tcmalloc MallocExtension, pagemap", detail={"tcmalloc": detail},
        note="" if found else f"tcmalloc's heap not found in [heap] ({virtual} bytes for a page heap of "
                              f"{t.get('generic.heap_size', 0)} plus metadata: some came from mmap): its free "
                              "pages are not measured and stay in other_anon")


def _python_from_pools(m: Measurements, owned: _Owners) -> tuple[Layer, Layer]:
    """python_objects and pymalloc_free from outside, where only the pool headers say what is in use."""
    arenas = owned("pymalloc-arena")
    if m.pools is None or not m.pools.arenas:
        note = m.notes.get("python_objects", "not a Python process, or not readable from outside")
        return Layer("python_objects", None, note=note), Layer(
            "pymalloc_free", arenas or None, derivation="resident pages of pymalloc arenas found by their pool headers",
            note="" if arenas else note)
    # the headers count blocks, the pagemap pages: more blocks than resident pages (some
    # swapped out) would count a page twice, so the arenas' resident pages bound both
    small = min(m.pools.in_use, arenas)
    clamped = f"; at most the arenas' resident pages ({m.pools.in_use - small} bytes of blocks over them: " \
              "pages swapped out?), so pymalloc_free is clamped at 0" if small < m.pools.in_use else ""
    python = Layer(
        "python_objects", small, virtual=m.pools.in_use,
        derivation="small objects (512 bytes or less) in pymalloc pools, read from outside: blocks in use x "
                   "block size from each resident pool header; larger objects live in the C allocator and are "
                   "counted under allocator_in_use from outside" + clamped,
        source="pymalloc pool headers", detail={"pymalloc_blocks": small, **asdict(m.pools)})
    free = Layer(
        "pymalloc_free", arenas - small, virtual=max(0, owned.virtual.get("pymalloc-arena", 0) - m.pools.in_use),
        derivation="resident pages of pymalloc arenas (found by their pool headers) minus the bytes in blocks "
                   "in use their pool headers count: free blocks, empty pools, pool headers" + clamped,
        source="pool headers, pagemap", detail={"arenas_found": owned.count.get("pymalloc-arena", 0)})
    return python, free


@dataclass
class _Allocator:
    """What the reader of the process's C allocator says: its in-use and free resident bytes
    (None: not measured), their private and PSS parts, the anonymous pages it leaves to
    other_anon, and how it knows."""

    in_use: int | None
    free: int | None
    in_use_part: _Sizes
    free_part: _Sizes
    other_anon: int
    other_part: _Sizes
    in_use_how: list[str] = field(default_factory=list)
    free_how: list[str] = field(default_factory=list)
    source: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def _c_allocator(m: Measurements, owned: _Owners) -> _Allocator:
    """glibc's heaps walked, another allocator's own counters, or (neither) nothing measured."""
    if m.glibc is not None:
        return _glibc_allocator(m, owned)
    if m.jemalloc is not None or m.tcmalloc:
        return _counted_allocator(m, owned)
    # No statistics for this allocator: its memory stays under other_anon, and the two
    # allocator layers say "not measured" rather than print a zero nobody measured.
    return _Allocator(None, None, _Sizes(), _Sizes(), owned("anon") + owned("glibc-heap") + owned("mmapped-chunk"),
                      owned.part("anon") + owned.part("glibc-heap", "mmapped-chunk"))


def _glibc_allocator(m: Measurements, owned: _Owners) -> _Allocator:
    glibc = m.glibc
    assert glibc is not None
    heap_part = owned.part("glibc-heap", "mmapped-chunk")
    pages = sum(a.free_resident for a in glibc.arenas)
    heap_free = sum(a.free_bytes_resident for a in glibc.arenas)
    # whole free pages: their private and PSS bytes exact; free bytes beside live chunks: pro rata
    pages_part = _Sizes(pages, None, None)
    if heap_part.private is not None:
        pages_part = _Sizes(pages, sum(a.free_private for a in glibc.arenas), sum(a.free_pss for a in glibc.arenas))
    free_part = pages_part + (heap_part - pages_part).take(heap_free - pages)
    arenas = _arena_detail(m)
    detail = {
        "arenas": arenas,
        "arena_count": len(arenas),
        "thread_arenas": sum(1 for a in arenas if not a["main"]),
        "trim_releasable": sum(r["trim_releasable"] or 0 for r in arenas),
        "trim_estimate_complete": all(a.walk_complete for a in glibc.arenas),
        "held_in_thread_tops": sum(a.top_resident for a in glibc.arenas if not a.is_main),
        "free_pages_resident": pages,
        "fragmented": heap_free - pages,
        "fragmentation_complete": all(a.small_walk_complete and a.fastbin_chunks is not None
                                      for a in glibc.arenas if a.address),
        "mmapped_chunks": owned.count.get("mmapped-chunk", 0),
        # mallinfo2's count, to compare with the chunks found (memalign'ed ones are not found)
        "mmapped_chunks_reported": m.mallinfo.hblks if m.mallinfo else None,
        "problems": list(glibc.problems),
    }
    return _Allocator(
        owned("glibc-heap") - heap_free + owned("mmapped-chunk"), heap_free, heap_part - free_part, free_part,
        owned("anon"), owned.part("anon"),
        in_use_how=["glibc heaps' resident bytes minus every free chunk's bytes on resident pages",
                    "plus resident pages of glibc mmapped chunks"],
        free_how=["bytes on resident pages of every free chunk: each arena's top chunk, its bins (unsorted, "
                  "small, large) and fastbins, walked from malloc_state (chunks in a thread's tcache count in use, "
                  "as mallinfo2 counts them); of them, whole free pages (what a trim can release) and free bytes "
                  "on pages that also hold a live chunk (fragmentation: no trim releases them); pages from pagemap"],
        source="glibc arenas walked, pagemap", detail=detail)


def _counted_allocator(m: Measurements, owned: _Owners) -> _Allocator:
    """jemalloc or tcmalloc, by their own counters placed in the mappings found."""
    if m.jemalloc is not None:
        split = _jemalloc_split(m.jemalloc, owned)
    else:
        assert m.tcmalloc is not None  # the caller's condition: one of the two counted
        split = _tcmalloc_split(m.tcmalloc, owned)
    # in use may reach into unclaimed anonymous pages (the allocator's mappings not found)
    pool = owned.part("jemalloc" if m.jemalloc is not None else "tcmalloc") + owned.part("anon")
    in_use_part, free_part = pool.take(split.in_use), pool.take(split.free or 0)
    return _Allocator(
        split.in_use, split.free, in_use_part, free_part,
        # heaps and chunks found in a process whose malloc is not glibc's belong to no allocator read here
        owned("anon") + owned("glibc-heap") + owned("mmapped-chunk") + split.unclaimed,
        owned.part("glibc-heap", "mmapped-chunk") + pool - in_use_part - free_part,
        in_use_how=[split.in_use_how], free_how=[split.free_how], source=split.source, detail=split.detail,
        note=split.note)


def attribute(m: Measurements) -> tuple[dict[str, Layer], int]:
    """Layers (by name) and the unexplained remainder ``rss - sum(layers)``: the arithmetic, with
    the C allocator's figures from its reader (``_c_allocator``) and each layer's text below."""
    owned = _Owners(m.regions)
    c = _c_allocator(m, owned)
    in_use, in_use_part = c.in_use, c.in_use_part
    small, large, py_how = _python_sizes(m, owned("pymalloc-arena"))
    # Python's large objects move from the C allocator's in use to python_objects; a walk may count more
    # free than the heap holds (in_use < 0): nothing to move then, and never below what pymalloc shows
    moved = max(0, min(large, in_use)) if in_use is not None else 0
    if in_use is not None:
        in_use -= moved
    moved_part = in_use_part.take(moved)
    in_use_part -= moved_part
    arenas_part = owned.part("pymalloc-arena")
    if m.pymalloc is not None or m.python_heap is not None:
        python, pymalloc_free = _python_layers(m, owned, small, large, moved, py_how)
    else:
        python, pymalloc_free = _python_from_pools(m, owned)
    files, shared_memory, stacks = _mapped_layers(owned)
    allocator_in_use, allocator_free = _allocator_layers(m, c, in_use, moved)
    layers = {"files": files, "shared_memory": shared_memory, "python_objects": python,
              "pymalloc_free": pymalloc_free, **_runtime_layers(m, owned), "allocator_in_use": allocator_in_use,
              "allocator_free": allocator_free, "stacks": stacks, "other_anon": _other_anon_layer(m, c, owned)}
    small_part = arenas_part.take((python.resident or 0) - moved)
    _set_shares(layers, {"files": owned.part("file"), "shared_memory": owned.part("shmem"),
                         "stacks": owned.part("stack"),
                         "python_objects": small_part + moved_part, "pymalloc_free": arenas_part - small_part,
                         "runtime_heap": owned.part("runtime-heap", "runtime-free"),
                         "runtime_metadata": owned.part("runtime-meta"),
                         "allocator_in_use": in_use_part, "allocator_free": c.free_part,
                         "other_anon": c.other_part + owned.part("file-cow")})
    total = sum(layer.resident or 0 for layer in layers.values())
    return layers, m.rss - total


def _runtime_layers(m: Measurements, owned: _Owners) -> dict[str, Layer]:
    """runtime_heap and runtime_metadata where a runtime's heap was read (none otherwise: a process
    without one shows no such layer)."""
    if not m.runtimes:
        return {}
    from memgap.runtimes.layers import FREE_OWNER, HEAP_OWNER, META_OWNER, runtime_layers

    def resident(owner: str, name: str) -> int:  # a runtime's regions are labelled "[NAME] what"
        return sum(r.resident for r in m.regions if r.owner == owner and r.path.startswith(f"[{name}]"))

    free = {h.info.name: resident(FREE_OWNER, h.info.name) for h in m.runtimes}
    heap_resident = {h.info.name: resident(HEAP_OWNER, h.info.name) + free[h.info.name] for h in m.runtimes}
    meta_resident = {h.info.name: resident(META_OWNER, h.info.name) for h in m.runtimes}
    virtual = owned.virtual.get(HEAP_OWNER, 0) + owned.virtual.get(FREE_OWNER, 0)
    heap, meta = runtime_layers(m.runtimes, heap_resident, free, meta_resident, virtual)
    return {"runtime_heap": heap, "runtime_metadata": meta}


def _python_sizes(m: Measurements, arenas_resident: int) -> tuple[int, int, list[str]]:
    """Python's small objects (pymalloc's blocks, at most its arenas' resident bytes) and large ones
    (held in the C allocator), as its own statistics give them, and how each was read."""
    small = large = 0
    how = []
    if m.pymalloc is not None:
        small = min(m.pymalloc.allocated_blocks_bytes, arenas_resident)
        how.append("pymalloc bytes in allocated blocks (_PyObject_DebugMallocStats)")
    heap = m.python_heap
    if heap is not None and heap.traced_current is not None:
        large = max(0, heap.traced_current - small)
        how.append("plus what tracemalloc traces beyond them (held in the C allocator)")
    elif heap is not None:
        large = heap.large_buffers_bytes
        how.append("plus buffers over 512 B found by a gc walk (held in the C allocator)")
    return small, large, how


def _python_layers(m: Measurements, owned: _Owners, small: int, large: int, moved: int,
                   how: list[str]) -> tuple[Layer, Layer]:
    """python_objects and pymalloc_free from the process's own statistics (read inside it)."""
    heap = m.python_heap
    python = Layer(
        "python_objects", small + moved,
        virtual=(m.pymalloc.allocated_blocks_bytes if m.pymalloc else 0) + large,
        derivation=", ".join(how),
        source="pymalloc stats" + (", tracemalloc" if heap and heap.traced_current is not None
                                   else ", gc walk" if heap else ""),
        detail={"pymalloc_blocks": small, "in_c_allocator": moved,
                "tracemalloc_current": heap.traced_current if heap else None,
                "large_buffers": heap.largest if heap else [],
                "instance_counts": heap.instance_counts if heap else {}},
    )
    free = Layer(
        "pymalloc_free", owned("pymalloc-arena") - small,
        virtual=m.pymalloc.free_bytes if m.pymalloc else None,
        derivation="resident pages of pymalloc arenas (found by their pool headers) minus allocated blocks",
        source="pool headers, pagemap",
        detail=({"arenas": m.pymalloc.arenas_current,
                 "arenas_found": owned.count.get("pymalloc-arena", 0),
                 "unused_pools": m.pymalloc.unused_pools,
                 "available_blocks": m.pymalloc.available_blocks_bytes} if m.pymalloc else {}),
    )
    return python, free


def _mapped_layers(owned: _Owners) -> tuple[Layer, Layer, Layer]:
    """files, shared_memory and stacks: read from the memory map and pagemap alone."""
    files = Layer(
        "files", owned("file"), virtual=None,
        derivation="pagemap: present pages of file-backed mappings (bit 61), shared memory apart (its own "
                   "layer, shared_memory: detail shmem)",
        source="pagemap",
        detail={"file": owned("file"), "shmem": owned("shmem")},
    )
    shared_memory = Layer(
        "shared_memory", owned("shmem"), virtual=owned.virtual.get("shmem", 0),
        derivation="pagemap: present pages of shared memory mappings (bit 61), told by their paths in maps: SysV "
                   "segments (/SYSV*), POSIX shared memory (/dev/shm/*), memfds (/memfd:*), anonymous MAP_SHARED "
                   "memory (/dev/zero (deleted)); each process that maps a page counts it in its RSS, its PSS "
                   "splits it among them",
        source="maps, pagemap",
        detail={**{kind: owned.shmem_kinds.get(kind, 0) for kind in ("sysv", "posix", "memfd", "anonymous")},
                "mappings": owned.count.get("shmem", 0)},
    )
    stacks = Layer(
        "stacks", owned("stack"), virtual=owned.virtual.get("stack", 0),
        derivation="pagemap: resident pages of [stack], of each glibc thread stack (found by the struct pthread "
                   "at its top) and of the mapping under each blocked thread's stack pointer",
        source="struct pthread, stack pointers, pagemap",
        detail={"count": owned.count.get("stack", 0)},
    )
    return files, shared_memory, stacks


def _allocator_layers(m: Measurements, c: _Allocator, in_use: int | None, moved: int) -> tuple[Layer, Layer]:
    """allocator_in_use (less Python's large objects, ``moved``) and allocator_free, from its reader."""
    in_use_layer = Layer(
        "allocator_in_use", max(0, in_use) if in_use is not None else None,
        virtual=m.mallinfo.in_use if m.mallinfo else (m.jemalloc.allocated if m.jemalloc else None),
        derivation="; ".join(c.in_use_how) + ("; minus Python's large objects (shown under python_objects)"
                                               if moved else ""),
        source=c.source, note=m.notes.get("allocator_in_use", ""),
    )
    free_layer = Layer(
        "allocator_free", c.free,
        virtual=(sum(a.free for a in m.malloc_info.arenas) if m.malloc_info else None),
        derivation="; ".join(c.free_how), note=m.notes.get("allocator_free", "") or c.note, detail=c.detail,
        source=c.source,
    )
    return in_use_layer, free_layer


def _other_anon_layer(m: Measurements, c: _Allocator, owned: _Owners) -> Layer:
    return Layer(
        "other_anon", c.other_anon + owned("file-cow"),
        derivation="anonymous resident pages no allocator above claims, plus private copies of file pages "
                   "(libraries' data and relocations)",
        source="pagemap, unclaimed",
        detail={"unclaimed_anonymous": c.other_anon, "file_private_copies": owned("file-cow")},
        note=m.notes.get("other_anon", ""),  # e.g. a second allocator's memory, not read
    )


PSS_DERIVATION = ("private: resident pages no other process maps (pagemap bit 56), exact; pss: those plus each "
                  "shared page at its mapping's average (smaps Pss minus the mapping's private bytes, spread "
                  "evenly over its shared pages), so exact for private pages and pro rata within a mapping for "
                  "shared ones")
PRO_RATA = "; a layer counted in bytes within pages it shares with another (blocks in pymalloc arenas, an " \
           "allocator's counters) takes those pages' private and shared parts in proportion"


def _set_shares(layers: dict[str, Layer], parts: dict[str, _Sizes]) -> None:
    """Each measured layer's private, shared and PSS bytes, from the part of the pages it holds."""
    for name, layer in layers.items():
        part = parts[name]
        if layer.resident is None or part.private is None or part.pss is None:
            continue
        layer.private = min(layer.resident, max(0, part.private))
        layer.shared = layer.resident - layer.private
        layer.pss = max(0, round(part.pss))
        pro_rata = PRO_RATA if name in ("python_objects", "pymalloc_free", "allocator_in_use") else ""
        layer.derivation = "; ".join(filter(None, [layer.derivation, PSS_DERIVATION + pro_rata]))

