"""pymalloc's pool headers, read from outside the process: what each pool holds.

CPython's ``pool_header`` (Objects/obmalloc.c, 64-bit, 3.8+) is 48 bytes: a
``count`` of blocks in use (a uint in a pointer-sized union: the low half on
little-endian), ``freeblock``, ``nextpool``, ``prevpool``, then ``arenaindex``,
``szidx``, ``nextoffset``, ``maxnextoffset``. A pool's blocks are
``(szidx + 1) * 16`` bytes, so ``count x block size`` is the bytes of small
objects (512 bytes or less) the pool holds. Only headers on resident pages are
read: a pool in use has written its header, and reading never faults a page in.
"""
from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from memgap.sources.page_bits import Bits
from memgap.sources.procfs import PAGE_SIZE
from memgap.sources.resident_map import MemoryReader, ResidentMap

ALIGNMENT = 16
POOL_OVERHEAD = 48
_POOL = struct.Struct("<QQQQIIII")


class PoolHeader(NamedTuple):  # a tuple: made once per resident pool, 20k times for 300 MiB
    count: int  # type: ignore[assignment]  # blocks in use; shadows tuple.count, which nothing here calls
    arena_index: int
    block_size: int


def parse_pool_header(data: bytes, pool_size: int) -> PoolHeader | None:
    """The pool header in ``data`` (48 bytes), or None unless it satisfies pymalloc's invariants."""
    fields = _valid(_POOL.unpack(data), pool_size)
    return None if fields is None else PoolHeader(*fields)


def _valid(fields: tuple[int, ...], pool_size: int) -> tuple[int, int, int] | None:
    """(count, arena index, block size) of an unpacked header, or None unless it satisfies
    pymalloc's invariants. The bounds keep a garbage header from counting: a size class that
    exists, the last block offset that class gives, and no more blocks in use than the pool holds."""
    count, _free, _next, _prev, index, szidx, nextoffset, maxnext = fields
    size = (szidx + 1) * ALIGNMENT
    if szidx >= 64 or maxnext != pool_size - size:
        return None
    if not POOL_OVERHEAD <= nextoffset <= pool_size:
        return None
    count &= 0xFFFFFFFF
    if count > (pool_size - POOL_OVERHEAD) // size:
        return None
    return count, index, size


def read_pool_header(reader: MemoryReader, address: int, pool_size: int) -> PoolHeader | None:
    """The valid pool header at ``address``, else None (unreadable or not a header)."""
    data = reader.read_memory(address, _POOL.size)
    return None if data is None else parse_pool_header(data, pool_size)


class HeaderReader(MemoryReader, Protocol):
    def read_many(self, addresses: list[int], size: int) -> Sequence[bytes | None]: ...


# pagemap entry bits (the kernel's Documentation/admin-guide/mm/pagemap.rst)
_PRESENT, _EXCLUSIVE, _FRAME = 1 << 63, 1 << 56, (1 << 55) - 1


class TreeHeaders:
    """Pool headers on page frames a tree's processes share, read once for the tree.

    A preforked worker shares most of its arenas' pages with its master until either writes one
    (copy on write): the same frame holds the same header, write-protected while shared. The
    first process read records, per arena, each pool's header-page pagemap entry (where it is
    present, not exclusive, and shows its frame: as root) beside the header read there; a later
    process whose entry for that pool is equal (the same frame, still shared) takes the header
    instead of reading it. Compared an arena at a time, list against list: a look-up per pool
    cost as much as the 2.5 us pread it spared (benchmarks/README.md). Without frame numbers (not
    root: they read as 0) every header is read, as without this. One instance per tree read.
    """

    def __init__(self) -> None:
        self.arenas: dict[int, tuple[list[int], list[bytes | None]]] = {}  # start -> entries, headers per pool
        self.frames: bool | None = None  # whether pagemap shows frame numbers; None until a page shows
        self.reused = 0  # headers taken from an earlier process's read

    def read(self, reader: HeaderReader, pools: range, resident: bytes) -> list[bytes | None]:
        """The headers of ``pools`` (one whole number of pages each) whose ``resident`` byte is set, in order."""
        wanted = list(itertools.compress(range(len(pools)), resident))
        if self.frames is False or not wanted:
            return list(reader.read_many([pools[i] for i in wanted], _POOL.size))
        entries = memoryview(reader.pagemap(pools.start, pools[-1] + 1)).cast("Q")[::pools.step // PAGE_SIZE].tolist()
        known = self.arenas.get(pools.start)
        theirs, their_headers = known if known is not None and len(known[0]) == len(pools) else ([], [])
        take = [m != 0 and w == m for w, m in zip(entries, theirs, strict=True)] if theirs else []
        out = [their_headers[i] if take and take[i] else None for i in wanted]
        missing = [j for j, data in enumerate(out) if data is None]
        self.reused += len(wanted) - len(missing)
        for j, data in zip(missing, reader.read_many([pools[wanted[j]] for j in missing], _POOL.size), strict=True):
            out[j] = data
        if known is None:
            self._record(pools.start, entries, wanted, out)
        return out

    def _record(self, start: int, entries: list[int], wanted: list[int], headers: list[bytes | None]) -> None:
        shareable = [e if e & (_PRESENT | _EXCLUSIVE) == _PRESENT and e & _FRAME else 0 for e in entries]
        if self.frames is None and any(e & _PRESENT for e in entries):
            self.frames = any(shareable)  # a shared page with no frame: not root, no header will match
        by_pool: list[bytes | None] = [None] * len(entries)
        for i, data in zip(wanted, headers, strict=True):
            by_pool[i] = data
        self.arenas[start] = (shareable, by_pool)


@dataclass
class PoolCensus:
    """Blocks in use in the pymalloc arenas found, summed from their pool headers."""

    in_use: int = 0          # bytes in blocks in use
    arenas: int = 0
    pools_read: int = 0      # pools whose header page is resident, each read once
    pools_in_use: int = 0    # of them, valid headers with a block in use
    pools_rejected: int = 0  # of them, no valid header of the arena's (a pool memgap released, or garbage)


def census(reader: HeaderReader, resident: ResidentMap, arenas: Iterable[tuple[int, int]],
           pool_size: int, tree: TreeHeaders | None = None) -> PoolCensus:
    """Read the header of every pool on a resident page of ``arenas`` ((start, end), each
    starting at its first pool, as anon_objects finds them) and count the blocks in use.

    A header must carry its arena's index (the first pool's): a stale or garbage page
    that happens to pass the checks in another arena's place does not count.

    One pread of /proc/PID/mem per header (the floor: one pread spanning an arena's resident
    pages costs three times as much, measured on a 500 MiB process, for it copies every page
    through the kernel's buffer). Not process_vm_readv, which would take 1024 in
    one call: it pins the pages it reads, and since Linux 5.19 pinning a page that a forked
    process shares with its parent makes the kernel copy it first (measured: the copies of
    test_cow.py's workers grew when their headers were read that way). Reading must not
    change the target. With ``tree``, headers on page frames another process of the tree
    shares were read once, there.
    """
    out = PoolCensus()
    for start, end in arenas:
        found = resident.range_at(start)
        if found is None:
            continue
        r_start, r_end, bitmap = found  # an arena lies in one mapping: one bitmap, indexed directly (20k pools)
        first = (start - r_start) // PAGE_SIZE
        if not bitmap[first]:
            continue
        pools = range(start, min(end, r_end) - pool_size + 1, pool_size)
        # pools on pages never carved (or swapped out) are left: nothing to read without faulting them in
        on_pages = _header_pages(bitmap, first, pools, pool_size)
        if tree is not None and pool_size % PAGE_SIZE == 0:
            _count_arena(out, tree.read(reader, pools, on_pages), pool_size)
        else:
            _count_arena(out, reader.read_many(list(itertools.compress(pools, on_pages)), _POOL.size), pool_size)
    return out


def _header_pages(bitmap: Bits, first: int, pools: range, pool_size: int) -> bytes:
    """Whether each pool's header page is resident, one byte per pool of ``pools`` (its first on
    page ``first`` of ``bitmap``): a slice of the bitmap where pools are whole pages (every CPython
    on 4 KiB pages), else one look-up per pool."""
    if pool_size % PAGE_SIZE == 0:
        step = pool_size // PAGE_SIZE
        return bitmap[first:first + len(pools) * step:step]
    return bytes(bitmap[first + (pool - pools.start) // PAGE_SIZE] for pool in pools)


def _count_arena(out: PoolCensus, raw: Sequence[bytes | None], pool_size: int) -> None:
    """Add one arena's headers (its first pool's first; None: unreadable) to ``out``: none when
    the first is not a valid header."""
    head = _valid(_POOL.unpack(raw[0]), pool_size) if raw and raw[0] is not None else None
    if head is None:
        return
    out.arenas += 1
    out.pools_read += len(raw)
    unread = raw.count(None)
    out.pools_rejected += unread
    headers = b"".join([data for data in raw if data is not None])
    in_use, pools, rejected = _sum_headers(headers, head[1], pool_size)
    out.in_use += in_use
    out.pools_in_use += pools
    out.pools_rejected += rejected


def _sum_headers(headers: bytes, arena: int, pool_size: int) -> tuple[int, int, int]:
    """(bytes in use, pools with a block in use, headers rejected) of an arena's headers laid end
    to end: _valid's checks on their 32-bit words side by side (20k pools for 300 MiB of objects,
    no tuple made per pool: the census's hottest loop)."""
    words = memoryview(headers).cast("I")  # native order, as the process wrote them (little-endian x86/arm64)
    in_use = pools = rejected = 0
    for count, index, szidx, nextoffset, maxnext in zip(words[0::12], words[8::12], words[9::12], words[10::12],
                                                        words[11::12], strict=True):
        size = (szidx + 1) * ALIGNMENT
        if (index != arena or szidx >= 64 or maxnext != pool_size - size or not POOL_OVERHEAD <= nextoffset <= pool_size
                or count > (pool_size - POOL_OVERHEAD) // size):
            rejected += 1
        elif count:
            pools += 1
            in_use += count * size
    return in_use, pools, rejected
