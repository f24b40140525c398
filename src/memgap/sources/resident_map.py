"""Which pages of a set of address ranges are resident, read once from pagemap, and what reads a
process's memory: the two things every reader of another process's heaps (glibc's arenas, pymalloc's
pools, mmapped chunks) asks."""
from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Protocol

from memgap.sources.page_bits import Bits
from memgap.sources.procfs import PAGE_SIZE, MappingPss


class MemoryReader(Protocol):
    def read_memory(self, address: int, size: int) -> bytes | None: ...
    def pagemap(self, start: int, end: int) -> bytes: ...


class ResidentMap:
    """Present bits of a set of non-overlapping address ranges, read once from pagemap;
    where pagemap gave them, exclusive bits too (pages mapped by this process alone), and
    after ``set_shares`` what a shared page of each range counts in the process's PSS."""

    def __init__(self, reader: MemoryReader) -> None:
        self.reader = reader
        self.ranges: list[tuple[int, int, Bits]] = []  # start, end, one byte per page; sorted by start
        self._starts: list[int] = []
        self._exclusive: list[Bits | None] = []  # beside each range: 1 per exclusive page
        self._share: list[float] = []  # beside each range: PSS bytes per shared resident byte
        self.knows_private = True  # every range came with its exclusive bits

    def add(self, start: int, end: int, bitmap: Bits, exclusive: Bits | None = None) -> None:
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

    def sizes_resident(self, sized: Iterable[tuple[int, int]]) -> int:
        """The sum of the sizes of the (address, size) pairs whose address is on a resident page: what
        page_resident tells, with no search while the addresses stay in one range."""
        total, r_start, r_end = 0, 0, 0
        bitmap: Bits = b""
        for address, size in sized:
            if not r_start <= address < r_end:
                found = self.range_at(address)
                if found is None:
                    continue
                r_start, r_end, bitmap = found
            if bitmap[(address - r_start) // PAGE_SIZE] == 1:
                total += size
        return total

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

    def _count(self, start: int, end: int, bitmaps: list[Bits | None] | None) -> int:
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

    def range_at(self, address: int) -> tuple[int, int, Bits] | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and self.ranges[i][0] <= address < self.ranges[i][1]:
            return self.ranges[i]
        return None

    def runs(self, start: int, end: int) -> list[tuple[int, int, bool]]:
        """[start, end) cut at page boundaries into (start, end, resident) runs, within the range that
        holds ``start`` (ending with that range): found by bytes.find over the bitmap, at C speed.
        Empty where no range holds ``start``."""
        found = self.range_at(start)
        if found is None:
            return []
        r_start, r_end, bitmap = found
        lo, hi = (start - r_start) // PAGE_SIZE, (min(end, r_end) - r_start + PAGE_SIZE - 1) // PAGE_SIZE
        out = []
        k = lo
        while k < hi:
            on = bitmap[k] == 1
            nxt = bitmap.find(0 if on else 1, k, hi)
            nxt = hi if nxt < 0 else nxt
            out.append((max(start, r_start + k * PAGE_SIZE), min(end, r_end, r_start + nxt * PAGE_SIZE), on))
            k = nxt
        return out
