"""Find glibc's arenas in a process's memory and measure what each holds resident.

Works on any process memgap may read (this one included) through
``/proc/PID/mem`` and ``/proc/PID/pagemap``: a bad pointer read there returns
nothing instead of crashing the target. Nothing here locks an arena, so every
structure read is validated and walks are bounded; a walk that fails validation
is reported as such, never guessed.

Layout facts used (glibc 2.26 onwards, 64-bit; checked against malloc_info at
run time before they are trusted):
- a thread arena's heaps are HEAP_MAX (64 MiB) aligned and begin with
  ``heap_info {ar_ptr, prev, size, mprotect_size}``;
- ``malloc_state``: ``fastbinsY[10]`` at offset 16, ``top`` at 96, ``bins`` at
  112, ``next`` at 2160, ``system_mem`` at 2184;
- a chunk is ``{prev_size, size, fd, bk}``; the low three bits of size are flags;
  a fastbin chunk's ``fd`` is mangled (safe-linking, glibc 2.32+) as
  ``(address of fd >> 12) ^ next``.
"""
from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from memgap.sources.procfs import PAGE_SIZE, Mapping, MappingPss

HEAP_MAX = 64 << 20
OFF_FASTBINS = 16
NFASTBINS = 10
OFF_TOP = 96
OFF_BINS = 112
OFF_NEXT = 2160
OFF_SYSTEM_MEM = 2184
MALLOC_STATE_SIZE = 2200
NBINS = 128
CHUNK_HEADER = 48  # sizeof(struct malloc_chunk): what malloc_trim keeps at a chunk's start
MIN_CHUNK = 32
SIZE_BITS = 0x7
MAX_WALK = 200_000  # a bound on chunks visited per arena
MAX_SMALL_WALK = 1_000_000  # the small bins' bound: sub-page chunks, for their bytes only
# how far past the heap's end as the maps read it the main arena's top may lie, the heap grown since:
# more than any growth between two reads; the mmap area, which libc's own pointers lead to, is far above
HEAP_MOVED = 256 << 20


class MemoryReader(Protocol):
    def read_memory(self, address: int, size: int) -> bytes | None: ...
    def pagemap(self, start: int, end: int) -> bytes: ...


class ResidentMap:
    """Present bits of a set of non-overlapping address ranges, read once from pagemap;
    where pagemap gave them, exclusive bits too (pages mapped by this process alone), and
    after ``set_shares`` what a shared page of each range counts in the process's PSS."""

    def __init__(self, reader: MemoryReader) -> None:
        self.reader = reader
        self.ranges: list[tuple[int, int, bytes]] = []  # start, end, one byte per page; sorted by start
        self._starts: list[int] = []
        self._exclusive: list[bytes | None] = []  # beside each range: 1 per exclusive page
        self._share: list[float] = []  # beside each range: PSS bytes per shared resident byte
        self.knows_private = True  # every range came with its exclusive bits

    def add(self, start: int, end: int, bitmap: bytes, exclusive: bytes | None = None) -> None:
        at = bisect.bisect(self._starts, start)
        self._starts.insert(at, start)
        self.ranges.insert(at, (start, end, bitmap))
        self._exclusive.insert(at, exclusive)
        self._share.insert(at, 0.0)
        self.knows_private = self.knows_private and exclusive is not None

    def resident(self, start: int, end: int) -> int:
        """Resident bytes of whole pages in [start, end) (partial pages excluded)."""
        return self._count(start, end, None)

    def resident_bytes(self, start: int, end: int) -> int:
        """Bytes of [start, end) on resident pages, the partial pages at its ends included (a free
        chunk's bytes on a page it shares with a live chunk are free, and held: fragmentation)."""
        if end <= start:
            return 0
        first, last = -(-start // PAGE_SIZE) * PAGE_SIZE, end // PAGE_SIZE * PAGE_SIZE
        if last < first:  # within one page
            return end - start if self.page_resident(start) else 0
        total = self._count(start, end, None)
        if start < first and self.page_resident(start):
            total += first - start
        if last < end and self.page_resident(last):
            total += end - last
        return total

    def page_resident(self, address: int) -> bool:
        """Whether the page holding ``address`` is resident (False outside the ranges)."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            return False
        r_start, r_end, bitmap = self.ranges[i]
        return address < r_end and bitmap[(address - r_start) // PAGE_SIZE] == 1

    def private(self, start: int, end: int) -> int:
        """Resident bytes of whole pages in [start, end) that no other process maps
        (0 where the exclusive bits were not read: see ``knows_private``)."""
        return self._count(start, end, self._exclusive)

    def pss(self, start: int, end: int) -> float:
        """[start, end)'s share of the process's PSS: its private bytes, plus each shared
        page at its range's share (set_shares). Exact for private pages; a shared page
        counts what its mapping's shared pages count on average."""
        total = 0.0
        i, first, last = self._first(start, end)
        while i < len(self.ranges) and self._starts[i] < last:
            r_start, r_end, bitmap = self.ranges[i]
            exclusive = self._exclusive[i]
            lo, hi = (max(first, r_start) - r_start) // PAGE_SIZE, (min(last, r_end) - r_start) // PAGE_SIZE
            if lo < hi and exclusive is not None:
                private = exclusive.count(1, lo, hi)
                total += (private + (bitmap.count(1, lo, hi) - private) * self._share[i]) * PAGE_SIZE
            i += 1
        return total

    def set_shares(self, mappings: list[MappingPss]) -> None:
        """Each range's PSS bytes per shared resident byte, from the smaps mapping that holds
        its start (smaps read apart from pagemap may show a mapping grown or split since)."""
        starts = [m.start for m in mappings]
        for i, r_start in enumerate(self._starts):
            at = bisect.bisect_right(starts, r_start) - 1
            found = mappings[at] if at >= 0 and r_start < mappings[at].end else None
            self._share[i] = found.shared_share if found is not None else 0.0

    def share_at(self, address: int) -> float:
        """PSS bytes per shared resident byte of the range holding ``address`` (0 outside them)."""
        i = bisect.bisect_right(self._starts, address) - 1
        return self._share[i] if i >= 0 and address < self.ranges[i][1] else 0.0

    def _first(self, start: int, end: int) -> tuple[int, int, int]:
        """The index of the first range that may hold [start, end)'s whole pages, and their bounds."""
        first = -(-start // PAGE_SIZE) * PAGE_SIZE
        last = end // PAGE_SIZE * PAGE_SIZE
        return max(0, bisect.bisect_right(self._starts, first) - 1), first, last

    def _count(self, start: int, end: int, bitmaps: list[bytes | None] | None) -> int:
        """Pages set in the ranges' bitmaps (or in ``bitmaps``, beside them) over [start, end), in bytes."""
        i, first, last = self._first(start, end)
        if last <= first:
            return 0
        total = 0
        while i < len(self.ranges):
            r_start, r_end, bitmap = self.ranges[i]
            if r_start >= last:
                break
            lo, hi = max(first, r_start), min(last, r_end)
            counted = bitmap if bitmaps is None else bitmaps[i]
            if lo < hi and counted is not None:
                # count() with bounds: no slice, so no allocation inside the arenas being read
                total += counted.count(1, (lo - r_start) // PAGE_SIZE, (hi - r_start) // PAGE_SIZE)
            i += 1
        return total * PAGE_SIZE

    def range_at(self, address: int) -> tuple[int, int, bytes] | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and self.ranges[i][0] <= address < self.ranges[i][1]:
            return self.ranges[i]
        return None


_U64 = struct.Struct("<Q")


def _u64s(data: bytes) -> tuple[int, ...]:
    return struct.unpack(f"<{len(data) // 8}Q", data)


@dataclass
class Heap:
    """One contiguous piece of an arena: the brk heap or a 64 MiB-aligned thread heap."""

    start: int
    size: int            # heap_info.size (or the brk extent for the main arena)
    mprotect_size: int   # read-write extent; pages past ``size`` may still be resident
    resident: int = 0


@dataclass
class ArenaLayout:
    """An arena found in memory, with resident bytes by what holds them."""

    address: int
    is_main: bool
    heaps: list[Heap] = field(default_factory=list)
    system_mem: int = 0
    top: int = 0
    top_size: int = 0
    resident: int = 0
    top_resident: int = 0        # resident whole pages inside the top chunk
    bins_free_resident: int = 0  # resident whole pages inside free chunks in bins (mtrim takes these)
    bins_free_bytes: int = 0
    bins_free_count: int = 0
    # of the free pages above, those no other process maps, and their share of PSS
    # (outside only, where pagemap's exclusive bits were read: see ResidentMap.knows_private)
    free_private: int = 0
    free_pss: float = 0.0
    walk_complete: bool = False
    walk_problem: str = ""
    # free chunks in the bins with resident whole pages: (address, size, resident)
    bin_chunks: list[tuple[int, int, int]] = field(default_factory=list)
    fastbin_chunks: dict[int, int] | None = None  # address -> size; None when the fastbins were not walked
    # Free bytes on resident pages, partial pages included (what mallinfo2 counts free, where resident):
    # the top chunk's, the unsorted and large bins', the small bins' and the fastbins'
    top_on_resident: int = 0
    bins_free_on_resident: int = 0
    small_free_on_resident: int = 0
    small_free_count: int = 0
    small_free_bytes: int = 0
    small_walk_complete: bool = False
    small_walk_problem: str = ""
    fastbin_on_resident: int = 0

    @property
    def free_resident(self) -> int:
        """Resident whole pages inside free chunks: what could be released page by page."""
        return self.top_resident + self.bins_free_resident

    @property
    def free_bytes_resident(self) -> int:
        """Every free byte on a resident page (tcache's chunks count in use, as mallinfo2 counts them)."""
        return self.top_on_resident + self.bins_free_on_resident + self.small_free_on_resident + \
            self.fastbin_on_resident

    @property
    def free_walked(self) -> int:
        """Bytes of every free chunk walked, resident or not: malloc_info's "free" for the arena."""
        fast = sum(self.fastbin_chunks.values()) if self.fastbin_chunks else 0
        return self.top_size + self.bins_free_bytes + self.small_free_bytes + fast

    @property
    def fragmented(self) -> int:
        """Free bytes on resident pages that also hold a live chunk (or a free chunk's header, which a
        trim keeps): no trim releases them; they come back only when their neighbours are freed."""
        return max(0, self.free_bytes_resident - self.free_resident)

    @property
    def in_use_resident(self) -> int:
        """Resident bytes of the arena's heaps not in a free chunk: in-use chunks (and the arena's headers)."""
        return max(0, self.resident - self.free_bytes_resident)

    def trim_releasable(self) -> int:
        """What ``malloc_trim(0)`` would give back from this arena, resident bytes.

        mtrim first consolidates the fastbins, then madvises the page-aligned
        interior of every free chunk in the unsorted and large bins; only the
        main arena's top chunk is also cut (systrim). A thread heap's top chunk
        stays, and so does a free chunk that the consolidation merges into it:
        one followed by nothing but fastbin chunks up to the top chunk.
        """
        if self.is_main:
            return self.bins_free_resident + self.top_resident
        return self.bins_free_resident - self.joins_top_resident()

    def joins_top_resident(self) -> int:
        """Resident pages of bin chunks that mtrim's consolidation merges into the top chunk."""
        if not self.fastbin_chunks:
            return 0
        joining = 0
        for address, size, resident in self.bin_chunks:
            end, hops = address + size, 0
            while end in self.fastbin_chunks and hops < MAX_WALK:
                end += self.fastbin_chunks[end]
                hops += 1
            if hops and end == self.top:
                joining += resident
        return joining

    def contains(self, address: int) -> bool:
        return any(h.start <= address < h.start + max(h.size, h.mprotect_size) for h in self.heaps)


def _read_heap_info(reader: MemoryReader, address: int) -> tuple[int, int, int, int] | None:
    data = reader.read_memory(address, 32)
    if data is None:
        return None
    ar_ptr, prev, size, mprotect = _u64s(data)
    if not (0 < size <= HEAP_MAX and size % PAGE_SIZE == 0 and size <= mprotect <= HEAP_MAX):
        return None
    if prev and prev % HEAP_MAX:
        return None
    if not ar_ptr or ar_ptr % 8:
        return None
    return ar_ptr, prev, size, mprotect


def find_thread_heaps(reader: MemoryReader, mappings: list[Mapping]) -> dict[int, list[Heap]]:
    """Thread-arena heaps by arena address, found by their heap_info headers."""
    arenas: dict[int, list[Heap]] = {}
    for m in mappings:
        if m.perms[:2] != "rw" or m.is_file or m.path not in ("",):
            continue
        address = -(-m.start // HEAP_MAX) * HEAP_MAX
        while address + PAGE_SIZE <= m.end:
            info = _read_heap_info(reader, address)
            if info is not None:
                ar_ptr, prev, size, mprotect = info
                first = prev == 0
                # A first heap holds its arena right after heap_info; later ones point back.
                if not first or address < ar_ptr < address + PAGE_SIZE:
                    arenas.setdefault(ar_ptr, []).append(Heap(address, size, mprotect))
            address += HEAP_MAX
    return arenas


def _chunk_size(raw: int) -> int:
    return raw & ~SIZE_BITS


def _add_shares(arena: ArenaLayout, resident: ResidentMap, start: int, end: int) -> None:
    """Add the private bytes and the PSS share of a free range's whole pages to the arena's."""
    arena.free_private += resident.private(start, end)
    arena.free_pss += resident.pss(start, end)


PSINDEX = 99  # bin_index(4096) on 64-bit: smaller bins hold no whole free page
TRIM_BINS = (1, *range(PSINDEX, NBINS))  # the unsorted bin and the bins mtrim visits
SMALL_BINS = tuple(range(2, PSINDEX))     # chunks under a page: free bytes beside live ones only


def _bin_chunks(reader: MemoryReader, arena: ArenaLayout, bins: bytes, indices: tuple[int, ...],
                budget: int) -> Iterator[tuple[int, int]]:
    """(address, size) of every chunk in the given bins, each list followed from its last chunk
    by ``bk`` and checked against the ``fd`` that points back; raises _WalkFailed where a list
    does not hold together or the walk passes ``budget`` chunks."""
    visited = 0
    for i in indices:
        bin_addr = arena.address + OFF_BINS + (i - 1) * 16 - 16  # bin_at(): fd lines up with bins[]
        (p,) = _U64.unpack_from(bins, (i - 1) * 16 + 8)  # the bin's bk: its last chunk
        prev_seen = bin_addr
        while p != bin_addr:
            visited += 1
            if visited > budget or not arena.contains(p):
                raise _WalkFailed(f"bin {i} left the arena's heaps (changed while read?)" if visited <= budget
                                  else f"more than {budget} free chunks")
            data = reader.read_memory(p, 32)
            if data is None:
                raise _WalkFailed(f"bin {i} chunk unreadable")
            _, size_raw, fd, bk = _u64s(data)
            size = _chunk_size(size_raw)
            if size < MIN_CHUNK or fd != prev_seen:
                raise _WalkFailed(f"bin {i} holds an inconsistent chunk (changed while read?)")
            yield p, size
            prev_seen, p = p, bk


class _WalkFailed(Exception):
    """A bin list that did not hold together (its owner changed it while read), or too long."""


def _walk_bins(reader: MemoryReader, arena: ArenaLayout, resident: ResidentMap, bins: bytes) -> None:
    """Sum the free chunks in the unsorted and large bins (what mtrim visits): their resident whole
    pages (what a trim releases) and their bytes on resident pages."""
    # No allocation between the read of the bins and the walk: an in-process caller
    # that mallocs here would move chunks between bins while we follow them.
    try:
        for p, size in _bin_chunks(reader, arena, bins, TRIM_BINS, MAX_WALK):
            arena.bins_free_bytes += size
            arena.bins_free_count += 1
            arena.bins_free_on_resident += resident.resident_bytes(p, p + size)
            pages = resident.resident(p + CHUNK_HEADER, p + size)
            arena.bins_free_resident += pages
            if pages:
                arena.bin_chunks.append((p, size, pages))
                if resident.knows_private:
                    _add_shares(arena, resident, p + CHUNK_HEADER, p + size)
    except _WalkFailed as exc:
        arena.walk_problem = str(exc)
        return
    arena.walk_complete = True


def _walk_small_bins(reader: MemoryReader, arena: ArenaLayout, resident: ResidentMap) -> None:
    """The bytes on resident pages of the free chunks in the small bins (under a page each: never
    released, free beside live chunks), bounded by MAX_SMALL_WALK chunks; retried like the others."""
    for _attempt in range(3):
        arena.small_free_on_resident = arena.small_free_count = arena.small_free_bytes = 0
        bins = reader.read_memory(arena.address + OFF_BINS, (NBINS - 1) * 16)
        if bins is None:
            arena.small_walk_problem = "arena bins unreadable"
            continue
        try:
            for p, size in _bin_chunks(reader, arena, bins, SMALL_BINS, MAX_SMALL_WALK):
                arena.small_free_on_resident += resident.resident_bytes(p, p + size)
                arena.small_free_bytes += size
                arena.small_free_count += 1
        except _WalkFailed as exc:
            arena.small_walk_problem = f"small {exc}"
            continue
        arena.small_walk_problem = ""
        arena.small_walk_complete = True
        return


def _walk_fastbins(reader: MemoryReader, arena: ArenaLayout, state: bytes) -> None:
    """The chunks in the arena's fastbins (free, though marked in use), or None when a
    list does not hold together. Their ``fd`` is read both mangled and plain: the form
    under which the list holds together is the machine's."""
    heads = struct.unpack_from(f"<{NFASTBINS}Q", state, OFF_FASTBINS)
    for mangled in (True, False):
        found: dict[int, int] = {}
        ok = True
        steps = 0  # over all ten lists: one bound per arena
        for index, p in enumerate(heads):
            size_wanted = (index + 2) * 16  # fastbin_index(size) == (size >> 4) - 2 on 64-bit
            while p and ok:
                steps += 1
                data = reader.read_memory(p, 24)
                if steps > MAX_WALK or p % 16 or not arena.contains(p) or data is None or p in found:
                    ok = False
                    break
                _, size_raw, fd = _u64s(data)
                if _chunk_size(size_raw) != size_wanted:
                    ok = False
                    break
                found[p] = size_wanted
                p = ((p + 16) >> 12) ^ fd if mangled else fd
        if ok:
            arena.fastbin_chunks = found
            return
    arena.fastbin_chunks = None


def _measure_top(reader: MemoryReader, arena: ArenaLayout, resident: ResidentMap) -> None:
    """The top chunk's size, its resident whole pages and its bytes on resident pages."""
    if not arena.contains(arena.top):
        return
    head = reader.read_memory(arena.top + 8, 8)
    if head is None:
        return
    arena.top_size = _chunk_size(_u64s(head)[0])
    arena.top_resident = resident.resident(arena.top + CHUNK_HEADER, arena.top + arena.top_size)
    arena.top_on_resident = resident.resident_bytes(arena.top, arena.top + arena.top_size)


def _measure_arena(reader: MemoryReader, arena: ArenaLayout, resident: ResidentMap) -> None:
    state = reader.read_memory(arena.address, MALLOC_STATE_SIZE)
    if state is None:
        arena.walk_problem = "malloc_state unreadable"
        return
    (arena.top,) = _U64.unpack_from(state, OFF_TOP)
    (arena.system_mem,) = _U64.unpack_from(state, OFF_SYSTEM_MEM)
    _measure_top(reader, arena, resident)
    top_shares = (0, 0.0)
    if arena.top_resident and resident.knows_private:
        _add_shares(arena, resident, arena.top + CHUNK_HEADER, arena.top + arena.top_size)
        top_shares = (arena.free_private, arena.free_pss)
    for heap in arena.heaps:
        heap.resident = resident.resident(heap.start, heap.start + max(heap.size, heap.mprotect_size))
    arena.resident = sum(h.resident for h in arena.heaps)
    for _attempt in range(3):  # the owner may change its bins while we read: retry
        arena.bins_free_bytes = arena.bins_free_count = arena.bins_free_resident = arena.bins_free_on_resident = 0
        arena.bin_chunks = []
        arena.free_private, arena.free_pss = top_shares
        arena.walk_problem = ""
        bins = reader.read_memory(arena.address + OFF_BINS, (NBINS - 1) * 16)
        if bins is None:
            arena.walk_problem = "arena bins unreadable"
            continue
        _walk_bins(reader, arena, resident, bins)
        if arena.walk_complete:
            break
    _walk_small_bins(reader, arena, resident)
    _walk_fastbins(reader, arena, state)
    if arena.fastbin_chunks is not None:
        arena.fastbin_on_resident = sum(size for p, size in arena.fastbin_chunks.items() if resident.page_resident(p))


def _find_main_arena(reader: MemoryReader, thread_arenas: list[int], libc_data: list[Mapping],
                     brk: Mapping | None) -> int | None:
    """&main_arena: from a thread arena's ``next`` ring, else by scanning libc's data.

    The scan looks for a malloc_state whose ``top`` points into [heap] at a
    chunk that ends where the heap ends, and whose ``system_mem`` fits the heap;
    or, where the heap moved since ``brk`` was read, whose top chunk ends
    ``system_mem`` past the heap's start (see ``_is_main_top``).
    """
    for address in thread_arenas:
        seen: set[int] = set()
        while address and address not in seen and len(seen) < 4096:
            seen.add(address)
            raw = reader.read_memory(address + OFF_NEXT, 8)
            if raw is None:
                break
            address = _u64s(raw)[0]
            if address not in thread_arenas and address:
                return address
    if brk is None:
        return None
    for m in libc_data:
        data = reader.read_memory(m.start, m.size)
        if data is None:
            continue
        words = _u64s(data[: len(data) // 8 * 8])
        for k, top in enumerate(words):
            if not brk.start <= top < brk.end + HEAP_MOVED or k * 8 < OFF_TOP:
                continue
            base = m.start + k * 8 - OFF_TOP
            # top read again, just before its chunk's head: in memgap's own process the copies above
            # (8 KiB, malloc's) were carved from the top chunk after ``data`` was read, and the top it
            # held then pointed at the copy (the main arena went unfound in 22 of 25 snapshots so)
            now = reader.read_memory(base + OFF_TOP, 8)
            if now is None:
                continue
            top = _u64s(now)[0]
            head = reader.read_memory(top + 8, 8)
            sysmem = reader.read_memory(base + OFF_SYSTEM_MEM, 8)
            if head is None or sysmem is None:
                continue
            if _is_main_top(brk, top, _chunk_size(_u64s(head)[0]), _u64s(sysmem)[0]):
                return base
    return None


def _is_main_top(brk: Mapping, top: int, size: int, system: int) -> bool:
    """Whether a top chunk at ``top`` of ``size`` bytes, in an arena of ``system`` bytes, is the main
    arena's, with ``brk`` the heap as the maps read it. Either its chunk ends where that heap ends, or
    the heap grew or shrank since the maps were read (memgap's own in-process snapshot grew it by up to
    160 KB there in 15 of 80 snapshots of a witness): then the contiguous heap's top chunk still ends
    ``system_mem`` bytes past the heap's start."""
    if brk.start <= top < brk.end and brk.end - PAGE_SIZE < top + size <= brk.end and 0 < system <= brk.size:
        return True
    return top < top + size == brk.start + system


def _libc_data_mappings(mappings: list[Mapping]) -> list[Mapping]:
    """libc's writable data and the anonymous bss right after it."""
    out = []
    for i, m in enumerate(mappings):
        name = m.path.rsplit("/", 1)[-1]
        if m.writable and name.startswith(("libc.so", "libc-")):
            out.append(m)
            if i + 1 < len(mappings) and not mappings[i + 1].path and mappings[i + 1].writable:
                out.append(mappings[i + 1])
    return out


def brk_heap(mappings: list[Mapping]) -> Mapping | None:
    """The brk heap as one range: the kernel may show it as several adjacent [heap] lines (a
    process forked after its heap grew extends it in a mapping of its own, which does not merge
    with the pages it shares with its parent: 15 MiB went unclaimed before)."""
    pieces = [m for m in mappings if m.path == "[heap]"]
    if not pieces:
        return None
    end = pieces[0].end
    for m in pieces[1:]:
        if m.start != end:
            break
        end = m.end
    first = pieces[0]
    return Mapping(first.start, end, first.perms, first.offset, first.dev, first.inode, first.path)


@dataclass
class GlibcLayout:
    arenas: list[ArenaLayout]
    main_found: bool
    problems: list[str] = field(default_factory=list)

    def regions(self) -> list[tuple[int, int, str]]:
        """(start, end, owner) of every heap, for labelling the memory map."""
        out = []
        for n, arena in enumerate(self.arenas):
            for h in arena.heaps:
                label = "glibc main arena [heap]" if arena.is_main else f"glibc arena {n}"
                out.append((h.start, h.start + max(h.size, h.mprotect_size), label))
        return out


def find_glibc_layout(reader: MemoryReader, mappings: list[Mapping], resident: ResidentMap) -> GlibcLayout:
    """Find every arena, its heaps, and what of them is resident, free and releasable."""
    problems: list[str] = []
    thread = find_thread_heaps(reader, mappings)
    arenas: list[ArenaLayout] = []
    brk = brk_heap(mappings)
    main_address = _find_main_arena(reader, list(thread), _libc_data_mappings(mappings), brk)
    if main_address is not None and brk is not None:
        main = ArenaLayout(main_address, True, [Heap(brk.start, brk.size, brk.size)])
        arenas.append(main)
    elif brk is not None:
        problems.append("main arena not found in libc's data: its free chunks are not walked")
        main = ArenaLayout(0, True, [Heap(brk.start, brk.size, brk.size)])
        main.resident = resident.resident(brk.start, brk.end)
        main.heaps[0].resident = main.resident
        main.walk_problem = "main arena not located"
        arenas.append(main)
    for address, heaps in thread.items():
        arenas.append(ArenaLayout(address, False, sorted(heaps, key=lambda h: h.start)))
    for arena in arenas:
        if arena.address:
            _measure_arena(reader, arena, resident)
            if arena.walk_problem:
                problems.append(f"arena at {arena.address:#x}: {arena.walk_problem}")
    return GlibcLayout(arenas, main_address is not None, problems)
