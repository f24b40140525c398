"""Find glibc's arenas in a process's memory and measure what each holds resident.

Works on any process memgap may read (this one included) through
``/proc/PID/mem`` and ``/proc/PID/pagemap``: a bad pointer read there returns
nothing instead of crashing the target. Nothing here locks an arena, so every
structure read is validated and walks are bounded; a walk that fails validation
is reported as such, never guessed. Each arena's free chunks are found by walking
every chunk of its heaps in big reads (memgap.sources.glibc_chunks); where that
walk breaks, by following its bins' lists from malloc_state, as before.

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

import heapq
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from memgap.sources import glibc_chunks
from memgap.sources.procfs import PAGE_SIZE, Mapping
from memgap.sources.resident_map import MemoryReader, ResidentMap

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
    walk_method: str = ""  # "chunks": every chunk walked (glibc_chunks); "bins": the lists followed
    chunks_walked: int = 0  # by the chunk walk: every chunk, in use or free, but the top
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


def _add_bin_chunk(arena: ArenaLayout, resident: ResidentMap, p: int, size: int) -> None:
    """A free chunk of the unsorted or large bins (or of a page or more, found by the chunk walk): its
    bytes, those on resident pages, its resident whole pages (what a trim releases) and their shares."""
    arena.bins_free_bytes += size
    arena.bins_free_count += 1
    arena.bins_free_on_resident += resident.resident_bytes(p, p + size)
    pages = resident.resident(p + CHUNK_HEADER, p + size)
    arena.bins_free_resident += pages
    if pages:
        arena.bin_chunks.append((p, size, pages))
        if resident.knows_private:
            _add_shares(arena, resident, p + CHUNK_HEADER, p + size)


def _walk_bins(reader: MemoryReader, arena: ArenaLayout, resident: ResidentMap, bins: bytes) -> None:
    """Sum the free chunks in the unsorted and large bins (what mtrim visits), followed list by list."""
    # No allocation between the read of the bins and the walk: an in-process caller
    # that mallocs here would move chunks between bins while we follow them.
    try:
        for p, size in _bin_chunks(reader, arena, bins, TRIM_BINS, MAX_WALK):
            _add_bin_chunk(arena, resident, p, size)
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


def _walk_fastbins(reader: glibc_chunks.PageCache, arena: ArenaLayout, state: bytes) -> None:
    """The chunks in the arena's fastbins (free, though marked in use), or None when a
    list does not hold together. Their ``fd`` is read both mangled and plain: the form
    under which the list holds together is the machine's."""
    heads = struct.unpack_from(f"<{NFASTBINS}Q", state, OFF_FASTBINS)
    # one bound per arena, over all ten lists: as many chunks as its heaps can hold
    bound = max(MAX_WALK, sum(max(h.size, h.mprotect_size) for h in arena.heaps) // MIN_CHUNK)
    for mangled in (True, False):
        found = _fastbin_lists(reader, arena, heads, mangled, bound)
        if found is not None:
            arena.fastbin_chunks = found
            return
    arena.fastbin_chunks = None


def _fastbin_lists(cache: glibc_chunks.PageCache, arena: ArenaLayout, heads: tuple[int, ...], mangled: bool,
                   bound: int) -> dict[int, int] | None:
    """Every fastbin's chunks (address -> size), the ten lists followed together, the highest address
    first: chunks freed in address order lie in each list downwards, so the lists are read in one sweep
    down the heap, a page at a time (one list after the other read every page again)."""
    lo, hi = arena.heaps[0].start, arena.heaps[0].start + max(arena.heaps[0].size, arena.heaps[0].mprotect_size)
    found: dict[int, int] = {}
    # fastbin_index(size) == (size >> 4) - 2 on 64-bit
    cursors = [(-p, (index + 2) * 16) for index, p in enumerate(heads) if p]
    heapq.heapify(cursors)
    page, words = -1, None  # the page the sweep is on, and its words
    while cursors:
        p, size_wanted = -cursors[0][0], cursors[0][1]
        if len(found) >= bound or p % 16 or not (lo <= p < hi or arena.contains(p)) or p in found:
            return None
        if p // PAGE_SIZE != page:
            page, words = p // PAGE_SIZE, cache.page(p)
        k = p % PAGE_SIZE // 8
        if words is not None and k < PAGE_SIZE // 8 - 2:
            size_raw, fd = words[k + 1], words[k + 2]
        else:  # on a page not resident, or across two
            data = cache.read_memory(p, 24)
            if data is None:
                return None
            size_raw, fd = struct.unpack_from("<2Q", data, 8)
        if _chunk_size(size_raw) != size_wanted:
            return None
        found[p] = size_wanted
        p = ((p + 16) >> 12) ^ fd if mangled else fd
        if p:
            heapq.heapreplace(cursors, (-p, size_wanted))
        else:
            heapq.heappop(cursors)
    return found


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


def _read_state(reader: MemoryReader, arena: ArenaLayout, resident: ResidentMap) -> bytes | None:
    """malloc_state read, with the top chunk's figures and no bins' (each attempt starts here)."""
    state = reader.read_memory(arena.address, MALLOC_STATE_SIZE)
    if state is None:
        arena.walk_problem = "malloc_state unreadable"
        return None
    (arena.top,) = _U64.unpack_from(state, OFF_TOP)
    (arena.system_mem,) = _U64.unpack_from(state, OFF_SYSTEM_MEM)
    arena.free_private, arena.free_pss = 0, 0.0
    _measure_top(reader, arena, resident)
    if arena.top_resident and resident.knows_private:
        _add_shares(arena, resident, arena.top + CHUNK_HEADER, arena.top + arena.top_size)
    _reset_bins(arena, (arena.free_private, arena.free_pss))
    return state


def _reset_bins(arena: ArenaLayout, top_shares: tuple[int, float]) -> None:
    arena.bins_free_bytes = arena.bins_free_count = arena.bins_free_resident = arena.bins_free_on_resident = 0
    arena.small_free_on_resident = arena.small_free_count = arena.small_free_bytes = 0
    arena.bin_chunks = []
    arena.free_private, arena.free_pss = top_shares
    arena.walk_problem = arena.small_walk_problem = ""
    arena.walk_complete = arena.small_walk_complete = False


def _spans(arena: ArenaLayout) -> list[glibc_chunks.HeapSpan] | None:
    """Where the arena's chunks lie: the main arena's from [heap]'s start to its top chunk."""
    if arena.is_main:
        heap = arena.heaps[0]
        ok = heap.start <= arena.top < heap.start + heap.size
        return [glibc_chunks.HeapSpan(heap.start, arena.top, True)] if ok else None
    return glibc_chunks.thread_spans([(h.start, h.size) for h in arena.heaps], arena.address, arena.top)


def _walk_chunks(window: glibc_chunks.HeapWindow, arena: ArenaLayout, resident: ResidentMap) -> bool:
    """Every chunk walked in one pass (glibc_chunks): the bins' chunks found by the PREV_INUSE bit of
    the chunk after each; False, with the problem said, where the chunks do not hold together."""
    spans = _spans(arena)
    if spans is None:
        arena.walk_problem = "chunk walk: the top chunk or the first heap not found"
        return False
    try:
        sums = glibc_chunks.walk_chunks(window, spans)
    except glibc_chunks.ChunkWalkFailed as exc:
        arena.walk_problem = f"chunk walk: {exc}"
        return False
    for p, size in sums.big:
        _add_bin_chunk(arena, resident, p, size)
    arena.small_free_count, arena.small_free_bytes = sums.small_count, sums.small_bytes
    arena.small_free_on_resident = sums.small_on_resident
    arena.chunks_walked = sums.chunks
    arena.walk_complete = arena.small_walk_complete = True
    arena.walk_method = "chunks"
    return True


def _walk_lists(reader: MemoryReader, arena: ArenaLayout, resident: ResidentMap) -> None:
    """The bins followed list by list from malloc_state, where the chunk walk failed."""
    top_shares = (arena.free_private, arena.free_pss)
    for _attempt in range(3):  # the owner may change its bins while we read: retry
        _reset_bins(arena, top_shares)
        bins = reader.read_memory(arena.address + OFF_BINS, (NBINS - 1) * 16)
        if bins is None:
            arena.walk_problem = "arena bins unreadable"
            continue
        _walk_bins(reader, arena, resident, bins)
        if arena.walk_complete:
            break
    _walk_small_bins(reader, arena, resident)
    arena.walk_method = "bins"


def _measure_arena(reader: glibc_chunks.HeapReader, arena: ArenaLayout, resident: ResidentMap,
                   window: glibc_chunks.HeapWindow, cache: glibc_chunks.PageCache) -> None:
    for heap in arena.heaps:
        heap.resident = resident.resident(heap.start, heap.start + max(heap.size, heap.mprotect_size))
    arena.resident = sum(h.resident for h in arena.heaps)
    state = None
    for _attempt in range(2):  # the owner may change its heap while we read: retry, then follow the lists
        state = _read_state(reader, arena, resident)
        if state is None:
            return
        if _walk_chunks(window, arena, resident):
            break
    assert state is not None
    cache.clear()
    if not arena.walk_complete:
        _walk_lists(cache, arena, resident)
        cache.clear()
    _walk_fastbins(cache, arena, state)
    if arena.fastbin_chunks is not None:
        arena.fastbin_on_resident = resident.sizes_resident(arena.fastbin_chunks.items())


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


def find_glibc_layout(reader: glibc_chunks.HeapReader, mappings: list[Mapping], resident: ResidentMap,
                      native: bool = True) -> GlibcLayout:
    """Find every arena, its heaps, and what of them is resident, free and releasable (``native``: the
    chunk headers stepped through in C where memgap's walker is built; False: in Python, its reference)."""
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
    # one window and one page cache for every arena: memgap's memory stays what one heap's walk needs
    largest = max((max(h.size, h.mprotect_size) for a in arenas for h in a.heaps), default=0)
    window = glibc_chunks.HeapWindow(reader, resident, largest + PAGE_SIZE, native)
    cache = glibc_chunks.PageCache(reader, resident)
    for arena in arenas:
        if arena.address:
            _measure_arena(reader, arena, resident, window, cache)
            if arena.walk_problem:
                problems.append(f"arena at {arena.address:#x}: {arena.walk_problem}")
    return GlibcLayout(arenas, main_address is not None, problems)
