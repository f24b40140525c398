"""Find glibc mmapped chunks and pymalloc arenas inside anonymous mappings.

Each such object is its own mmap(), but the kernel merges adjacent anonymous
mappings, so one line of /proc/PID/maps can hold many of them. We walk each
unowned anonymous mapping from its start, page by page, and recognise:
- a glibc mmapped chunk: ``prev_size == 0`` and a size with exactly the
  IS_MMAPPED flag set, a whole number of pages that fits the mapping;
- a pymalloc arena: a valid pool header at the first pool boundary
  (``maxnextoffset == pool_size - block_size`` and bounded counters; the
  header's format and checks live in pymalloc_pools).
Only resident pages are read (a header is always written, hence resident), so
reading never faults a page into the target.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from memgap.sources.procfs import PAGE_SIZE
from memgap.sources.pymalloc_pools import read_pool_header
from memgap.sources.resident_map import MemoryReader, ResidentMap

IS_MMAPPED = 0x2
_CHUNK = struct.Struct("<QQ")


@dataclass(slots=True)  # created by the hundred per snapshot: no frozen overhead
class AnonObject:
    start: int
    end: int
    kind: str        # "mmapped-chunk" or "pymalloc-arena"
    resident: int


def _chunk_at(reader: MemoryReader, address: int, limit: int) -> int:
    """Size of a glibc mmapped chunk starting at ``address``, or 0."""
    data = reader.read_memory(address, 16)
    if data is None:
        return 0
    prev_size, raw = _CHUNK.unpack(data)
    size: int = raw & ~0x7
    if prev_size or raw & 0x7 != IS_MMAPPED or size % PAGE_SIZE or not 0 < size <= limit - address:
        return 0
    return size


def _pool_index(reader: MemoryReader, address: int, pool_size: int) -> int | None:
    """The arena index in a valid pool header at ``address``, else None."""
    header = read_pool_header(reader, address, pool_size)
    return None if header is None else header.arena_index


def _arena_from(reader: MemoryReader, resident: ResidentMap, pool: int, limit: int,
                arena_size: int, pool_size: int) -> int:
    """Bytes of the pymalloc arena whose first used pool is at ``pool``, or 0.

    The arena's start is unknown: pages before its first pool are alignment
    slack, never touched. It has arena_size / pool_size pools when it started
    pool-aligned and one fewer otherwise; the last pool tells which, by
    carrying the same arena index.
    """
    index = _pool_index(reader, pool, pool_size)
    if index is None:
        return 0
    pools = arena_size // pool_size
    last = pool + (pools - 1) * pool_size
    if last + pool_size > limit or not resident.resident(last, last + PAGE_SIZE) \
            or _pool_index(reader, last, pool_size) != index:
        pools -= 1
    return min(limit - pool, pools * pool_size)


def find_anon_objects(reader: MemoryReader, regions: list[tuple[int, int]], resident: ResidentMap,
                      arena_size: int | None, pool_size: int | None) -> tuple[list[AnonObject], int]:
    """Objects found in ``regions`` (start, end), and the resident bytes left unclaimed."""
    found: list[AnonObject] = []
    unclaimed = 0
    for start, end in regions:
        pos = start
        while pos < end:
            if resident.resident(pos, pos + PAGE_SIZE) == 0:
                pos = _next_resident(resident, pos, end)
                continue
            size, kind = _chunk_at(reader, pos, end), "mmapped-chunk"
            if not size and arena_size and pool_size and pos % pool_size == 0:
                size, kind = _arena_from(reader, resident, pos, end, arena_size, pool_size), "pymalloc-arena"
            if size:
                found.append(AnonObject(pos, pos + size, kind, resident.resident(pos, pos + size)))
                pos += size
            else:
                unclaimed += PAGE_SIZE
                pos += PAGE_SIZE
    return found, unclaimed


def _next_resident(resident: ResidentMap, pos: int, end: int) -> int:
    """The next resident page at or after ``pos`` (or ``end``)."""
    found = resident.range_at(pos)
    if found is None:
        return end
    r_start, r_end, bitmap = found
    idx = bitmap.find(1, (pos - r_start) // PAGE_SIZE)
    return min(end, r_end) if idx < 0 else min(end, r_start + idx * PAGE_SIZE)
