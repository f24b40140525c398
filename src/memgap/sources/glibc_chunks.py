"""glibc's heaps walked chunk by chunk, in big reads, in time linear in the chunks.

Every chunk header from a heap's first chunk to its top chunk (or to the fenceposts that end a
thread arena's older heap) is read out of windows of a few MiB, each filled by one read of
/proc/PID/mem per run of resident pages. A page that is not resident is never read (reading it
through /proc/PID/mem would map it into the target, where pagemap then shows it present), and a
chunk's interior is skipped by its size: a large chunk costs one header, not its bytes.

A chunk is free in a bin (unsorted, small or large) when the next chunk's PREV_INUSE bit is clear;
a chunk in a fastbin or a thread's tcache keeps that bit set (in use, as mallinfo2 counts it: the
fastbins are followed from malloc_state apart). Nothing here locks the arena, so the walk holds
itself to glibc's invariants and stops at the first break: every size at least MINSIZE (but the
fenceposts), every free chunk's size repeated in the next chunk's ``prev_size``, and the chunks
ending exactly at the top chunk or at the fenceposts glibc writes 16 bytes before a heap's end.

Layout facts (glibc 2.26 onwards, 64-bit): a chunk is ``{prev_size, size, ...}`` with three flag
bits in ``size`` (PREV_INUSE is bit 0); a thread arena's first heap holds ``heap_info`` then the
arena's ``malloc_state`` (2200 bytes), its first chunk at the next address whose user pointer is
16-aligned; a later heap's first chunk follows its ``heap_info`` (32 bytes, 48 from glibc 2.35).
"""
from __future__ import annotations

import ctypes
import functools
import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from memgap.sources.procfs import PAGE_SIZE
from memgap.sources.resident_map import MemoryReader, ResidentMap

WINDOW = 4 << 20      # bytes read at a time: memgap holds one window, whatever the heap's size
MIN_CHUNK = 32        # MINSIZE on 64-bit
FENCE = 16            # CHUNK_HDR_SZ: the size of the first fencepost at an older heap's end
MALLOC_STATE_SIZE = 2200
HEAP_INFO_SIZES = (32, 48)  # sizeof(heap_info) before and from glibc 2.35 (its pagesize field)


class WindowReader(Protocol):
    def read_memory_into(self, address: int, buffer: bytearray | memoryview) -> bool: ...


class ChunkWalkFailed(Exception):
    """The chunks did not hold together (the process changed them while read, or a heap memgap does
    not know: memory from a foreign sbrk, a main arena that is not contiguous)."""


@dataclass(frozen=True)
class HeapSpan:
    """Where the chunks of one heap lie: from ``first`` to ``stop``, the top chunk's address where
    the heap holds it (``ends_at_top``), else the heap's end (fenceposts end the chunks there)."""

    first: int
    stop: int
    ends_at_top: bool


@dataclass
class ChunkSums:
    """What a walk found: every chunk counted, the free ones under a page summed (they hold no whole
    page), and the free ones of a page or more listed, for their whole pages and their shares."""

    chunks: int = 0
    small_count: int = 0
    small_bytes: int = 0
    small_on_resident: int = 0  # of small_bytes, those on resident pages
    big: list[tuple[int, int]] = field(default_factory=list)  # (address, size)


@functools.cache
def native_walker() -> Callable[[int, Any], int] | None:
    """memgap_walk_chunks from native/chunks.c (built at install, or now with the system compiler, once
    per version in memgap's private folder); None where it cannot be built: the Python loop walks then."""
    from memgap.errors import MemgapError
    from memgap.native.installed import library

    try:
        walk = ctypes.CDLL(library("chunks")).memgap_walk_chunks
    except (MemgapError, OSError):
        return None
    walk.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    walk.restype = ctypes.c_int
    return cast(Callable[[int, Any], int], walk)


class HeapWindow:
    """One buffer, reused over every heap of a look, no larger than WINDOW nor than the largest heap:
    the heap's bytes from a page-aligned address, resident pages read, the others zero (a header there
    reads as size 0, which the walk refuses)."""

    def __init__(self, reader: WindowReader, resident: ResidentMap, size: int, use_native: bool = True) -> None:
        self.reader, self.resident = reader, resident
        size = max(PAGE_SIZE, min(WINDOW, -(-size // PAGE_SIZE) * PAGE_SIZE))
        # mapped, not malloc'd: in this process a buffer from malloc could come from the heap walked
        # (after a large free glibc serves blocks of up to 32 MiB from its heap) and count as in use
        buffer = mmap.mmap(-1, size)
        self.view = memoryview(buffer)
        self.zeros = memoryview(mmap.mmap(-1, size, prot=mmap.PROT_READ))  # never written: no page resident
        self.native = native_walker() if use_native else None
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(buffer)) if self.native is not None else 0
        self.state = (ctypes.c_uint64 * 8)()

    def fill(self, address: int, stop: int) -> tuple[int, memoryview, memoryview, bool]:
        """(its start, its 8-byte words, the same from its second word on, whether every page of it is
        resident) of a window from ``address``'s page towards ``stop``; ChunkWalkFailed where no mapping
        holds ``address`` or a resident page is unreadable. A header at word i has its size at the
        second view's i."""
        start = address - address % PAGE_SIZE
        size = min(len(self.view), -(-(stop + 2 * FENCE - start) // PAGE_SIZE) * PAGE_SIZE)
        runs = self.resident.runs(start, start + size)
        if not runs:
            raise ChunkWalkFailed(f"a chunk at {address:#x} outside the heap's mappings")
        for lo, hi, on in runs:
            part = self.view[lo - start:hi - start]
            if not on:
                part[:] = self.zeros[:hi - lo]
            elif not self.reader.read_memory_into(lo, part):
                raise ChunkWalkFailed(f"heap memory at {lo:#x} unreadable")
        end = runs[-1][1]
        whole = len(runs) == 1 and runs[0][2]
        return start, self.view[:end - start].cast("Q"), self.view[8:end - start].cast("Q"), whole


def walk_chunks(window: HeapWindow, spans: list[HeapSpan]) -> ChunkSums:
    """Walk every chunk of the given heaps; ChunkWalkFailed at the first one that breaks an invariant."""
    sums = ChunkSums()
    for span in spans:
        _walk_span(window, span, sums)
    return sums


@dataclass
class _Run:
    """A span's walk as it goes: the size word of the chunk before the next header, the chunks met,
    the free ones under a page (count, bytes, and of the bytes those not on resident pages)."""

    prev_raw: int = 0
    chunks: int = 0
    small_count: int = 0
    small_bytes: int = 0
    missing: int = 0


def _walk_span(window: HeapWindow, span: HeapSpan, sums: ChunkSums) -> None:
    """One heap's chunks, a window at a time: each window's headers stepped through (in C where memgap's
    native walker is built, else in Python), the ends of heaps and windows handled here."""
    p, stop = span.first, span.stop
    run = _Run()
    last = -1
    while True:
        if p == last:
            raise ChunkWalkFailed(f"no chunk header read at {p:#x}")
        last = p
        w_start, words, sizes, whole = window.fill(p, stop)
        end = min(len(sizes), ((stop - w_start) >> 3) + 1)
        step = _native_window if window.native is not None else _python_window
        i, raw = step(window, w_start, words, (p - w_start) >> 3, end, whole, run, sums.big)
        p = w_start + (i << 3)
        if raw < MIN_CHUNK:  # a fencepost ends an older heap; anything else under MINSIZE is a break
            if not _fencepost(span, p, raw & -8):
                raise ChunkWalkFailed(f"a chunk of {raw & -8} bytes at {p:#x}")
            if raw < FENCE:
                break
            p, run.prev_raw = p + FENCE, raw
        elif p > stop:  # past the top chunk's header: the walk is done if that was the top chunk's
            if not span.ends_at_top or p - (run.prev_raw & -8) != stop:
                raise ChunkWalkFailed(f"the chunks pass {stop:#x} at {p - (run.prev_raw & -8):#x}")
            run.chunks -= 1  # the top chunk, counted apart
            break
    sums.chunks += run.chunks
    sums.small_count += run.small_count
    sums.small_bytes += run.small_bytes
    sums.small_on_resident += run.small_bytes - run.missing


def _python_window(window: HeapWindow, w_start: int, words: memoryview, i: int, end: int, whole: bool,
                   run: _Run, big: list[tuple[int, int]]) -> tuple[int, int]:
    """The headers of one window from word ``i`` while ``i < end``: (where it stopped, the size word
    there, under MINSIZE where that stopped it). The loop does the least per chunk (most are in use):
    one word read, one bit tested, a compare and three adds (``raw >> 3`` drops the flag bits)."""
    sizes = words[1:]
    prev_raw, chunks, small_count, small_bytes = run.prev_raw, run.chunks, run.small_count, run.small_bytes
    raw = MIN_CHUNK
    while i < end:
        raw = sizes[i]
        if not raw & 1:  # PREV_INUSE clear: the chunk before this one is free, in a bin
            prev_size = prev_raw & -8
            if words[i] != prev_size or not prev_size:
                raise _footer(w_start, i)
            if prev_size < PAGE_SIZE and whole and (i << 3) >= prev_size:
                small_count += 1
                small_bytes += prev_size
            else:
                run.small_count, run.small_bytes = small_count, small_bytes
                _free_chunk(window, w_start, i, prev_size, run, big)
                small_count, small_bytes = run.small_count, run.small_bytes
        if raw < 32:  # MIN_CHUNK, spelled out in the loop
            break
        prev_raw = raw
        chunks += 1
        i += raw >> 3
    run.prev_raw, run.chunks, run.small_count, run.small_bytes = prev_raw, chunks, small_count, small_bytes
    return i, raw


def _native_window(window: HeapWindow, w_start: int, words: memoryview, i: int, end: int, whole: bool,
                   run: _Run, big: list[tuple[int, int]]) -> tuple[int, int]:
    """_python_window's work done by memgap_walk_chunks (native/chunks.c), which hands back each free
    chunk it leaves to Python."""
    assert window.native is not None
    st = window.state
    st[:] = [i, end, run.prev_raw, run.chunks, run.small_count, run.small_bytes, int(whole), 0]
    while (why := window.native(window.address, st)) == 2:
        run.small_count, run.small_bytes = st[4], st[5]
        _free_chunk(window, w_start, st[0], st[2] & -8, run, big)
        st[4], st[5], st[7] = run.small_count, run.small_bytes, 1
    i = st[0]
    run.prev_raw, run.chunks, run.small_count, run.small_bytes = st[2], st[3], st[4], st[5]
    if why == 3:
        raise _footer(w_start, i)
    return i, (words[i + 1] if why == 1 else MIN_CHUNK)


def _free_chunk(window: HeapWindow, w_start: int, i: int, size: int, run: _Run, big: list[tuple[int, int]]) -> None:
    """A free chunk ending at word ``i`` that the loop leaves aside: one of a page or more (listed, for
    its whole pages), or one under a page on pages some of which may not be resident."""
    start = w_start + (i << 3) - size
    if size >= PAGE_SIZE:
        big.append((start, size))
        return
    run.small_count += 1
    run.small_bytes += size
    run.missing += size - window.resident.resident_bytes(start, start + size)


def _footer(w_start: int, i: int) -> ChunkWalkFailed:
    return ChunkWalkFailed(f"a free chunk before {w_start + (i << 3):#x} whose size the next chunk does not repeat")


def _fencepost(span: HeapSpan, p: int, size: int) -> bool:
    """Whether a chunk under MINSIZE at ``p`` is one of the fenceposts glibc leaves at an older
    heap's end (sysmalloc): one of 16 bytes 32 bytes before the end, then one of 0 at 16 before."""
    if span.ends_at_top:
        return False
    return (size == 0 and p == span.stop - FENCE) or (size == FENCE and p == span.stop - 2 * FENCE)


def thread_spans(heaps: list[tuple[int, int]], arena: int, top: int) -> list[HeapSpan] | None:
    """The spans of a thread arena's heaps, (start, size) each: its first heap (the one that holds the
    arena) begins after the arena's malloc_state, at the next address whose user pointer is 16-aligned
    (as _int_new_arena places it), the others right after their heap_info. None where the first heap
    is not among them, heap_info's size is not one memgap knows, or the top chunk is in no heap."""
    info_size = next((arena - start for start, _ in heaps if start < arena < start + PAGE_SIZE), None)
    if info_size not in HEAP_INFO_SIZES:
        return None
    spans = []
    for start, size in heaps:
        begin = start + info_size
        if begin == arena:
            begin += MALLOC_STATE_SIZE
            begin += -(begin + 16) % 16
        if start <= top < start + size:
            spans.append(HeapSpan(begin, top, True))
        else:
            spans.append(HeapSpan(begin, start + size, False))
    return spans if sum(s.ends_at_top for s in spans) == 1 else None


class HeapReader(WindowReader, MemoryReader, Protocol):
    """What reads a heap: a few bytes at an address, or a buffer's worth."""


class PageCache:
    """Chunk headers for the list walks (the fastbins, and the bins where the chunk walk failed): a
    resident page read once into one of a fixed set of slots (allocated once: an in-process walk
    must not move the heap it follows), a header on a page not resident, or across two, read alone."""

    SLOTS = 256  # 1 MiB

    def __init__(self, reader: HeapReader, resident: ResidentMap) -> None:
        self.reader, self.resident = reader, resident
        self.view = memoryview(bytearray(0))  # its slots, allocated at the first page read
        self.tags = [-1] * self.SLOTS

    def clear(self) -> None:
        """Forget every page (a retry reads the process anew)."""
        self.tags[:] = [-1] * self.SLOTS

    def page(self, address: int) -> memoryview | None:
        """The 8-byte words of the resident page that holds ``address`` (read once), or None."""
        page = address // PAGE_SIZE
        slot = page % self.SLOTS
        at = slot * PAGE_SIZE
        if self.tags[slot] != page:
            if not self.view:  # mapped, not malloc'd: see HeapWindow
                self.view = memoryview(mmap.mmap(-1, self.SLOTS * PAGE_SIZE))
            if not (self.resident.page_resident(address)
                    and self.reader.read_memory_into(page * PAGE_SIZE, self.view[at:at + PAGE_SIZE])):
                return None
            self.tags[slot] = page
        return self.view[at:at + PAGE_SIZE].cast("Q")

    def read_memory(self, address: int, size: int) -> bytes | None:
        offset = address % PAGE_SIZE
        words = self.page(address) if offset + size <= PAGE_SIZE else None
        if words is None:
            return self.reader.read_memory(address, size)
        return bytes(words.cast("B")[offset:offset + size])

    def pagemap(self, start: int, end: int) -> bytes:
        return self.reader.pagemap(start, end)
