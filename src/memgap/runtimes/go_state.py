"""The Go runtime's memory state as bytes: where each figure lives (from the program's DWARF), and
what the bytes read from /proc/PID/mem say (pure: tested on captured bytes and on garbage).

Where the figures live (Go 1.26, ``src/runtime/mstats.go``, ``mgcpacer.go``, ``mheap.go``):

- ``gcController.heapInUse``/``heapFree``/``heapReleased`` (atomic uint64s): what ReadMemStats gives as
  HeapInuse, HeapIdle - HeapReleased, HeapReleased; ``gcPercent`` and ``memoryLimit``: GOGC and
  GOMEMLIMIT as the runtime holds them now (``debug.SetGCPercent`` and ``SetMemoryLimit`` included).
- ``memstats.heapStats`` (``consistentHeapStats``): three ``heapStatsDelta`` slots summed (the runtime's
  own ``unsafeRead``), of which ``inStacks`` (StackInuse) and ``inWorkBufs`` (part of GCSys); and
  ``committed``/``inHeap``/``released``, which at a quiet moment equal the gcController's figures
  (the runtime's own ``doubleCheckReadMemStats``): the check that the read was neither torn nor
  read at wrong offsets.
  Go 1.19's delta also has ``inPtrScalarBits`` (GC program bitmaps): read where the DWARF has it, added to
  GCSys and subtracted from ``committed`` in the check, as that release's ReadMemStats does.
- ``memstats.stacks_sys``, ``mspan_sys``, ``mcache_sys``, ``buckhash_sys``, ``gcMiscSys``, ``other_sys``;
  ``mheap_.spanalloc.inuse``, ``mheap_.cachealloc.inuse`` (MSpanInuse, MCacheInuse).
- ``mheap_.heapArenas`` (the arenas' indexes: each 64 MiB at ``index * heapArenaBytes +
  arenaBaseOffset``), ``mheap_.arenas`` (the index to each arena's ``heapArena`` metadata),
  ``mheap_.pages.summary`` (the page allocator's summary levels, each a reservation of its own).

The consistent read from outside (the runtime's ``consistentHeapStats.read`` does it inside): the
generation ``gen`` names the slot writers add to; a reader inside swaps it, merges the slot before
into the current one and zeroes it. So at a quiet moment the slot after ``gen`` is all zero; memgap
reads ``gen``, that slot (zero: no merge under way) and every P's ``statsSeq`` (even: no update
under way), then the figures, then ``gen`` and the ``statsSeq``s again (unchanged: nothing began in
between); else it reads again.
"""
from __future__ import annotations

import dataclasses
import itertools
import struct
from dataclasses import dataclass

from memgap.runtimes.go_dwarf import TAG_POINTER, DwarfTypes

DELTA_FIELDS = ("committed", "released", "inHeap", "inStacks", "inWorkBufs")
SYS_FIELDS = ("stacks_sys", "mspan_sys", "mcache_sys", "buckhash_sys", "gcMiscSys", "other_sys")
GC_FIELDS = ("heapInUse", "heapFree", "heapReleased", "gcPercent", "memoryLimit")
ARENA_BASE_OFFSET = {"amd64": 0xFFFF800000000000}   # malloc.go: arenaBaseOffset, 0 elsewhere on Linux
MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Objects:
    """Where the bytes of live objects are counted (optional: a release that moves them reads without)."""

    large_alloc: int                   # heapStatsDelta offsets
    large_free: int
    small_alloc: int                   # [classes]uint64
    small_free: int
    classes: int
    sizes: Field                       # internal/runtime/gc.SizeClassToSize: the first entry, its width


@dataclass(frozen=True)
class Pages:
    """The page allocator's bitmaps (optional: without them the arenas are one "go heap" range each)."""

    chunks: int                        # mheap_.pages.chunks: [1 << L1]*[1 << L2]pallocData
    in_use: int                        # mheap_.pages.inUse.ranges: a slice of [base, limit) pairs
    l2_bits: int
    chunk_bytes: int                   # 4 MiB: 512 pages of 8 KiB
    page_size: int
    data_size: int                     # sizeof(pallocData): pallocBits, then scavenged
    scavenged: int


class LayoutMissing(Exception):
    """A field the reader needs is not in the program's DWARF (another Go release names it otherwise)."""


@dataclass(frozen=True)
class Field:
    """A scalar at ``address`` of ``size`` bytes (1, 2, 4 or 8; little-endian)."""

    address: int
    size: int


@dataclass(frozen=True)
class Layout:
    """Where each figure of one Go build lives in its process (addresses with the load bias added)."""

    memstats: int                      # runtime.memstats
    stats: int                         # memstats.heapStats.stats: 3 heapStatsDelta
    delta_size: int
    delta: dict[str, int]              # heapStatsDelta field -> offset (int64 each)
    gen: Field
    no_p_lock: Field
    sys: dict[str, Field]              # memstats.*_sys
    gc: dict[str, Field]               # gcController.*
    span_inuse: Field
    cache_inuse: Field
    heap_arenas: int                   # mheap_.heapArenas: a slice header
    arenas_l1: int                     # mheap_.arenas[0]: the pointer to the L2 index
    l2_bytes: int                      # its size
    heap_arena_size: int               # sizeof(runtime.heapArena)
    summary: int                       # mheap_.pages.summary: summaryLevels slice headers
    summary_levels: int
    allp: int                          # runtime.allp: a slice header
    stats_seq: int                     # p.statsSeq's offset
    arena_bytes: int
    arena_base: int
    objects: Objects | None = None
    pages: Pages | None = None
    gc_prog_bits: int | None = None    # heapStatsDelta.inPtrScalarBits (Go 1.19 has it, 1.26 not): its offset
    substitutes: tuple[str, ...] = ()  # what this release has in place of a 1.26 name, said in the notes


def _field(d: DwarfTypes, base: tuple[int, int], path: str, missing: list[str], var: str) -> Field:
    found = d.field(base[1], path)
    size = d.size_of(found[1]) if found else None
    if found is None or size not in (1, 2, 4, 8):
        missing.append(f"{var}.{path}")
        return Field(0, 8)
    return Field(base[0] + found[0], size)


def _offset(d: DwarfTypes, ref: int | None, path: str, missing: list[str], what: str) -> int:
    found = d.field(ref, path)
    if found is None:
        missing.append(f"{what}.{path}")
        return 0
    return found[0]


def _variables(d: DwarfTypes, bias: int, missing: list[str]) -> dict[str, tuple[int, int]]:
    out = {}
    for name in ("memstats", "gcController", "mheap_", "allp"):
        var = d.variable(f"runtime.{name}")
        if var is None:
            missing.append(f"runtime.{name}")
            var = (0, -1)
        out[name] = ((var[0] + bias) & MASK64, var[1])
    return out


def _pointee_size(d: DwarfTypes, ref: int | None) -> int:
    """The size of what a pointer type points at (mheap_.arenas[0]: *[1 << arenaL2Bits]*heapArena)."""
    die = d.resolve(ref)
    if die is not None and die.tag != TAG_POINTER and die.type is not None:  # an array: its element
        die = d.resolve(die.type)
    return (d.size_of(die.type) or 0) if die is not None and die.tag == TAG_POINTER else 0


def resolve_layout(d: DwarfTypes, bias: int, goarch: str) -> Layout:
    """Every address the reader needs, from the program's DWARF; LayoutMissing names what is not there."""
    missing: list[str] = []
    v = _variables(d, bias, missing)
    ms, gc, mh = v["memstats"], v["gcController"], v["mheap_"]
    stats = d.field(ms[1], "heapStats.stats")
    stats_die = d.resolve(stats[1]) if stats else None
    delta_size = (d.size_of(stats[1]) or 0) // 3 if stats and stats_die and stats_die.count == 3 else 0
    if not delta_size:
        missing.append("memstats.heapStats.stats")
    delta_type = stats_die.type if stats_die else None
    delta = {name: _offset(d, delta_type, name, missing, "heapStatsDelta") for name in DELTA_FIELDS}
    arenas = d.field(mh[1], "heapArenas")
    substitutes = []
    if arenas is None and (arenas := d.field(mh[1], "allArenas")) is not None:  # before Go 1.20: all heap arenas
        substitutes.append("mheap_.allArenas for mheap_.heapArenas (no user arenas before Go 1.20)")
    if arenas is None:
        missing.append("mheap_.heapArenas")
    l1 = d.field(mh[1], "arenas")
    summary = d.field(mh[1], "pages.summary")
    summary_die = d.resolve(summary[1]) if summary else None
    p_type = d.names.get("runtime.p")
    heap_arena = d.size_of(d.names.get("runtime.heapArena"))
    layout = Layout(
        ms[0], ms[0] + (stats[0] if stats else 0), delta_size, delta,
        _field(d, ms, "heapStats.gen", missing, "memstats"),
        _field(d, ms, "heapStats.noPLock.key", missing, "memstats"),
        {name: _field(d, ms, name, missing, "memstats") for name in SYS_FIELDS},
        {name: _field(d, gc, name, missing, "gcController") for name in GC_FIELDS},
        _field(d, mh, "spanalloc.inuse", missing, "mheap_"), _field(d, mh, "cachealloc.inuse", missing, "mheap_"),
        mh[0] + (arenas[0] if arenas else 0), mh[0] + (l1[0] if l1 else 0), _pointee_size(d, l1[1] if l1 else None),
        heap_arena or 0, mh[0] + (summary[0] if summary else 0),
        (summary_die.count or 0) if summary_die else 0,
        v["allp"][0], _offset(d, p_type, "statsSeq", missing, "p"),
        d.constant("runtime.heapArenaBytes") or 0,
        (d.constant("runtime.arenaBaseOffsetUintptr") or ARENA_BASE_OFFSET.get(goarch, 0)) & MASK64)
    if not layout.arena_bytes:
        missing.append("runtime.heapArenaBytes")
    if missing:
        raise LayoutMissing(", ".join(missing))
    prog_bits = d.field(delta_type, "inPtrScalarBits")
    if prog_bits is not None:
        substitutes.append("heapStatsDelta.inPtrScalarBits (unrolled GC program bitmaps; not in Go 1.26) "
                           "counted in gc metadata and in the consistency check, as this release's ReadMemStats does")
    objects = _objects(d, delta_type, bias)
    if objects is not None and d.variable("internal/runtime/gc.SizeClassToSize") is None:
        substitutes.append("runtime.class_to_size for internal/runtime/gc.SizeClassToSize")
    return dataclasses.replace(layout, objects=objects, pages=_pages(d, mh),
                               gc_prog_bits=prog_bits[0] if prog_bits else None, substitutes=tuple(substitutes))


def _pages(d: DwarfTypes, mh: tuple[int, int]) -> Pages | None:
    """Where the page allocator keeps which pages are in use and which given back."""
    chunks, ranges = d.field(mh[1], "pages.chunks"), d.field(mh[1], "pages.inUse.ranges")
    data = d.names.get("runtime.pallocData")
    scavenged = d.field(data, "scavenged")
    constants = [d.constant(f"runtime.{n}") for n in ("pallocChunksL2Bits", "pallocChunkBytes", "pageSize")]
    size = d.size_of(data)
    if chunks is None or ranges is None or scavenged is None or not size or any(c is None for c in constants):
        return None
    l2_bits, chunk_bytes, page_size = (c or 0 for c in constants)
    if not page_size or chunk_bytes % page_size or chunk_bytes // page_size > 8 * scavenged[0]:
        return None
    return Pages(mh[0] + chunks[0], mh[0] + ranges[0], l2_bits, chunk_bytes, page_size, size, scavenged[0])


def _objects(d: DwarfTypes, delta_type: int | None, bias: int) -> Objects | None:
    """Where live objects are counted: the delta's alloc and free counts and the size class table."""
    sizes = d.variable("internal/runtime/gc.SizeClassToSize") or d.variable("runtime.class_to_size")
    table = d.resolve(sizes[1]) if sizes else None
    fields = [d.field(delta_type, name) for name in ("largeAlloc", "largeFree", "smallAllocCount", "smallFreeCount")]
    if sizes is None or table is None or not table.count or any(f is None for f in fields):
        return None
    width = (d.size_of(sizes[1]) or 0) // table.count
    small = d.resolve(fields[2][1] if fields[2] else None)
    if width not in (1, 2, 4, 8) or small is None or small.count != table.count:
        return None
    large_alloc, large_free, small_alloc, small_free = (f[0] for f in fields if f is not None)
    return Objects(large_alloc, large_free, small_alloc, small_free, table.count,
                   Field((sizes[0] + bias) & MASK64, width))


def live_objects(stats: bytes, layout: Layout, sizes: bytes | None) -> int | None:
    """Bytes of live objects as runtime/metrics' /memory/classes/heap/objects counts them (the slots
    summed: large bytes allocated less freed, and each size class's count times its size)."""
    o = layout.objects
    if o is None or sizes is None or len(sizes) < o.classes * o.sizes.size:
        return None
    total = 0
    for slot in range(3):
        at = slot * layout.delta_size
        total += scalar(stats, at + o.large_alloc, 8) - scalar(stats, at + o.large_free, 8)
        for i in range(o.classes):
            size = scalar(sizes, i * o.sizes.size, o.sizes.size)
            count = scalar(stats, at + o.small_alloc + 8 * i, 8) - scalar(stats, at + o.small_free + 8 * i, 8)
            total += count * size
    return total & MASK64


def scalar(data: bytes, offset: int, size: int, signed: bool = False) -> int:
    """A little-endian integer of ``size`` bytes at ``offset`` of ``data``."""
    return int.from_bytes(data[offset:offset + size], "little", signed=signed)


def sum_deltas(block: bytes, layout: Layout) -> dict[str, int]:
    """The three heapStatsDelta slots of ``block`` (the bytes from memstats.heapStats.stats on), summed;
    ``inPtrScalarBits`` too where the release has it."""
    offsets = dict(layout.delta)
    if layout.gc_prog_bits is not None:
        offsets["inPtrScalarBits"] = layout.gc_prog_bits
    out = dict.fromkeys(offsets, 0)
    for slot in range(3):
        for name, offset in offsets.items():
            out[name] += scalar(block, slot * layout.delta_size + offset, 8, signed=True)
    return out


def slot_is_zero(block: bytes, layout: Layout, slot: int) -> bool:
    """Whether slot ``slot`` of the three is all zero (no merge under way in the runtime)."""
    return not any(block[slot * layout.delta_size:(slot + 1) * layout.delta_size])


@dataclass(frozen=True)
class GoFigures:
    """One read of the runtime's figures, in bytes (as ReadMemStats names them)."""

    heap_inuse: int
    heap_free: int
    heap_released: int
    stack_inuse: int
    work_bufs: int
    sys: dict[str, int]
    mspan_inuse: int
    mcache_inuse: int
    gc_percent: int
    memory_limit: int
    consistent: dict[str, int]         # the summed heapStatsDelta
    objects: int | None = None         # bytes of live objects (None: not counted in this release)

    @property
    def gc_prog_bits(self) -> int:
        """Bytes of unrolled GC program bitmaps (inPtrScalarBits: part of GCSys where the release has
        it, as Go 1.19 does; 0 where it has not, as Go 1.26)."""
        return self.consistent.get("inPtrScalarBits", 0)

    @property
    def drift(self) -> int:
        """How far the gcController's figures are from the consistent stats (0 at a quiet moment)."""
        c = self.consistent
        besides = c["inStacks"] + c["inWorkBufs"] + self.gc_prog_bits
        return (abs(self.heap_inuse - c["inHeap"]) + abs(self.heap_released - c["released"])
                + abs(self.heap_inuse + self.heap_free - (c["committed"] - besides)))

    def plausible(self) -> bool:
        """No figure negative, none beyond what a 64-bit address space holds (wrong offsets, garbage)."""
        values = [self.heap_inuse, self.heap_free, self.heap_released, self.stack_inuse, self.work_bufs,
                  self.mspan_inuse, self.mcache_inuse, *self.sys.values(), *self.consistent.values()]
        objects_fit = self.objects is None or self.objects <= self.heap_inuse
        return all(0 <= v < 1 << 48 for v in values) and self.mspan_inuse <= self.sys["mspan_sys"] and objects_fit


def figures(stats: bytes, scalars: dict[str, int], layout: Layout, sizes: bytes | None = None) -> GoFigures:
    """The figures from the heapStats slots' bytes and the scalars read (by field name); live objects
    where the size class table's bytes are given."""
    c = sum_deltas(stats, layout)
    percent = struct.unpack("<i", (scalars["gcPercent"] & 0xFFFFFFFF).to_bytes(4, "little"))[0]
    limit = struct.unpack("<q", (scalars["memoryLimit"] & MASK64).to_bytes(8, "little"))[0]
    return GoFigures(scalars["heapInUse"], scalars["heapFree"], scalars["heapReleased"], c["inStacks"],
                     c["inWorkBufs"], {name: scalars[name] for name in SYS_FIELDS}, scalars["span_inuse"],
                     scalars["cache_inuse"], percent, limit, c, live_objects(stats, layout, sizes))


def arena_ranges(indexes: list[int], layout: Layout) -> list[tuple[int, int]]:
    """The heap arenas' address ranges, adjacent ones joined, in address order."""
    starts = sorted((i * layout.arena_bytes + layout.arena_base) & MASK64 for i in indexes)
    out: list[tuple[int, int]] = []
    for start in starts:
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], start + layout.arena_bytes)
        else:
            out.append((start, start + layout.arena_bytes))
    return out


PAGE_LABELS = {"1": "go heap", "0": "go heap free", "2": "go heap released", "-": "go heap unused"}


def bit_runs(value: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(start, end, bit) of each run of equal bits of ``value`` in bit positions [lo, hi)."""
    full = (1 << hi) - 1
    runs, pos = [], lo
    while pos < hi:
        bit = (value >> pos) & 1
        rest = ((value if not bit else ~value & full) >> pos) & full   # the next bit that differs
        end = min(hi, pos + (rest & -rest).bit_length() - 1) if rest else hi
        runs.append((pos, end, bit))
        pos = end
    return runs


def page_runs(chunk: int, data: bytes, pages: Pages, in_use: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """One chunk's pages in runs: in spans ("go heap": objects, stacks, GC buffers), free ("go heap
    free": HeapIdle - HeapReleased), given back ("go heap released") or outside the page allocator's
    ranges ("go heap unused": reserved, never handed out)."""
    count, size = pages.chunk_bytes // pages.page_size, pages.page_size
    used, scav = scalar(data, 0, count // 8), scalar(data, pages.scavenged, count // 8)
    states: list[tuple[int, int, str]] = []
    for lo, hi, bit in bit_runs(used, 0, count):
        states += [(lo, hi, "1")] if bit else [(a, b, "2" if g else "0") for a, b, g in bit_runs(scav, lo, hi)]
    runs = [(chunk + lo * size, chunk + hi * size, PAGE_LABELS[state]) for lo, hi, state in states]
    if any(lo <= chunk and chunk + pages.chunk_bytes <= hi for lo, hi in in_use):
        return runs
    out = []  # a chunk the page allocator only partly manages: the rest is reserved, unused
    for lo, hi, label in runs:
        cuts = sorted({lo, hi, *(x for r in in_use for x in r if lo < x < hi)})
        for a, b in itertools.pairwise(cuts):
            inside = any(r_lo <= a < r_hi for r_lo, r_hi in in_use)
            out.append((a, b, label if inside else PAGE_LABELS["-"]))
    return join_runs(out)


def join_runs(runs: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Adjacent runs of one label joined (a chunk's last run and the next chunk's first)."""
    out: list[tuple[int, int, str]] = []
    for lo, hi, label in runs:
        if out and out[-1][1] == lo and out[-1][2] == label:
            out[-1] = (out[-1][0], hi, label)
        else:
            out.append((lo, hi, label))
    return out
