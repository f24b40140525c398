"""One byte a page of a large address range, kept in memory of memgap's own mapping: the bitmaps of reads
of the process memgap runs in (``memgap.snapshot()``, ``memgap.phase()`` under ``memgap run``).

glibc serves a request above its mmap threshold with a mapping of its own and, when such a chunk is freed,
raises the threshold to its size (up to 32 MiB): blocks up to that size then come from the arenas, whose free
memory stays resident. A bitmap made whole as bytes (256 KiB for a 1 GiB mapping; its pagemap 2 MiB) is such a
chunk: freed after a snapshot, it moved the program's own threshold (tests/programs/own_threshold.py).
``PageBits`` keeps the bytes in an anonymous mapping of its own, which glibc never sees, and offers what the
readers do with a bitmap: index, count between bounds, find, short slices. Every temporary it makes is at most
``PIECE`` bytes, under glibc's smallest threshold (128 KiB): it comes from the heap and goes back to it, moving
nothing. A smaller bitmap is plain bytes (``new_bits``, ``done``). ``mincore_bits`` reads a private
anonymous range's residency so (pagemap's pieces are read by memgap.sources.procfs).
"""
from __future__ import annotations

import functools
import mmap
from typing import Any, overload

PIECE = 1 << 15   # bytes: the largest temporary (a count's piece, a read's), far under 128 KiB
_MINCORE_TABLE = bytes(b & 1 for b in range(256))  # mincore(2)'s byte: bit 0 resident, the others reserved


class PageBits:
    """``pages`` bytes, 0 until set (``bits[a:b] = data``), read as a bytes bitmap is."""

    def __init__(self, pages: int) -> None:
        self._pages = pages
        self._memory = mmap.mmap(-1, max(pages, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

    def __len__(self) -> int:
        return self._pages

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> bytes: ...

    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, slice):  # the readers' slices are an arena's pools: short
            start, stop, step = key.indices(self._pages)
            return self._memory[start:stop:step]
        index = key + self._pages if key < 0 else key
        if not 0 <= index < self._pages:
            raise IndexError("page index out of range")
        return self._memory[index]

    def __setitem__(self, key: slice, data: bytes) -> None:
        start, stop, _step = key.indices(self._pages)
        if stop - start != len(data):
            raise ValueError("a PageBits slice is set to as many bytes as it holds")
        self._memory[start:stop] = data

    def count(self, value: int, start: int = 0, end: int | None = None) -> int:
        """How many of the bytes in [start, end) equal ``value`` (as ``bytes.count(value, start, end)``)."""
        end = self._pages if end is None else min(end, self._pages)
        needle = bytes((value,))
        return sum(self._memory[at:min(at + PIECE, end)].count(needle) for at in range(max(start, 0), end, PIECE))

    def find(self, value: int, start: int = 0, end: int | None = None) -> int:
        """The first index in [start, end) whose byte equals ``value``, else -1 (as ``bytes.find``)."""
        end = self._pages if end is None else min(end, self._pages)
        return self._memory.find(bytes((value,)), max(start, 0), end) if start < end else -1


Bits = bytes | PageBits  # what a bitmap of a range is: plain bytes, or kept apart from malloc


def new_bits(pages: int) -> bytearray | PageBits:
    """A bitmap to fill a piece at a time: in the heap while it is small, else in a mapping of its own."""
    return bytearray(pages) if pages < PIECE else PageBits(pages)


def done(bits: bytearray | PageBits) -> Bits:
    """The filled bitmap as the readers take it (a small one as bytes: a copy under ``PIECE`` bytes)."""
    return bytes(bits) if isinstance(bits, bytearray) else bits


class _Mincore:
    """mincore(2) on this process's own memory: the residency bytes pagemap would give for private anonymous
    mappings, at a tenth of the cost; a piece at a time, into one buffer of ``PIECE`` bytes made once."""

    def __init__(self) -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        self._mincore = libc.mincore
        self._mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        self._mincore.restype = ctypes.c_int
        self._ctypes: Any = ctypes
        self._buffer = ctypes.create_string_buffer(PIECE)

    def bitmap(self, start: int, end: int) -> Bits | None:
        pages = (end - start + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        bits = new_bits(pages)
        for at in range(0, pages, PIECE):
            n = min(PIECE, pages - at)
            first = start + at * mmap.PAGESIZE
            if self._mincore(first, min(n * mmap.PAGESIZE, end - first), self._buffer) != 0:
                return None  # unmapped since maps was read, or not page aligned
            bits[at:at + n] = self._ctypes.string_at(self._buffer, n).translate(_MINCORE_TABLE)
        return done(bits)


@functools.cache
def _mincore() -> _Mincore:
    return _Mincore()


def mincore_bits(start: int, end: int) -> Bits | None:
    """One byte a page of [start, end) of this process's own memory, 1 where resident (mincore(2)); None
    where the range is not mapped as it was when its maps were read."""
    return _mincore().bitmap(start, end)
