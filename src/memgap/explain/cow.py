"""What a forked process copied from its parent, read from outside.

A forked worker starts sharing every page with its master; a page either of them
writes is copied (copy on write), and the worker's own version is then private to it.
In the ranges the worker inherited (its writable private mappings that its parent
maps at the same addresses), each of the worker's private pages is either

- **copied from the parent**: the parent has a page at that address too, so the
  tree now holds two (pagemap's exclusive bit, 56, on the worker's side; present on
  the parent's), or
- **its own**: the parent has none there (a page the worker touched first, e.g. in
  free space of an inherited heap or arena).

Limits, said beside the figures: the bit does not tell which side wrote first (a
master that writes after the fork makes the copy itself, and the worker's original
reads as private too); a parent that unmapped or released a range since the fork
makes its pages read as the worker's own; pages swapped out are not counted. No
privilege is needed (no page frame numbers are read).
"""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from memgap.documents.snapshot import CowSplit, Region, Snapshot
from memgap.errors import MemgapError
from memgap.sources.procfs import PAGE_SIZE, Mapping, ProcReader, exclusive_bitmap, present_bitmap

# region owners (memgap.explain.memory_map) grouped as the layers people read them by
OWNER_GROUPS = {"pymalloc-arena": "Python objects (pymalloc arenas)", "glibc-heap": "C allocator (glibc heaps)",
                "mmapped-chunk": "C allocator (glibc heaps)", "stack": "thread stacks"}
OTHER_GROUP = "other anonymous"


def inherited_ranges(child: list[Mapping], parent: list[Mapping]) -> list[tuple[int, int]]:
    """Address ranges both processes map privately and writably: where copy on write acts."""
    def writable_private(maps: list[Mapping]) -> list[Mapping]:
        return sorted((m for m in maps if m.perms[1] == "w" and m.perms[3] == "p"), key=lambda m: m.start)

    out: list[tuple[int, int]] = []
    theirs = writable_private(parent)
    j = 0
    for m in writable_private(child):
        while j < len(theirs) and theirs[j].end <= m.start:
            j += 1
        k = j
        while k < len(theirs) and theirs[k].start < m.end:
            lo, hi = max(m.start, theirs[k].start), min(m.end, theirs[k].end)
            if lo < hi:
                out.append((lo, hi))
            k += 1
    return out


def split_pages(child_pagemap: bytes, parent_pagemap: bytes) -> tuple[int, int, bytes]:
    """(copied pages, own pages, one byte per page: 1 where copied) for one range, from the
    two processes' raw pagemap entries over the same addresses."""
    mine = exclusive_bitmap(child_pagemap)
    theirs = present_bitmap(parent_pagemap)
    # bytes of 0/1 ANDed as one integer each: a page-by-page loop takes seconds on GiBs
    copied = (int.from_bytes(mine, "little") & int.from_bytes(theirs, "little")).to_bytes(len(mine), "little")
    n_copied = copied.count(1)
    return n_copied, mine.count(1) - n_copied, copied


def copied_from_parent(child: int, parent: int, regions: Sequence[Region] = (), proc_root: str = "/proc") -> CowSplit:
    """The split of ``child``'s private pages in what it inherited from ``parent``; with the
    child's labelled ``regions`` (a snapshot taken with regions), the copied bytes by group."""
    split = CowSplit(parent)
    by_start = sorted(regions, key=lambda r: r.start)
    with ProcReader(child, proc_root) as mine, ProcReader(parent, proc_root) as theirs:
        for lo, hi in inherited_ranges(mine.maps(), theirs.maps()):
            copied, own, bitmap = split_pages(mine.pagemap(lo, hi), theirs.pagemap(lo, hi))
            split.copied += copied * PAGE_SIZE
            split.own += own * PAGE_SIZE
            split.inherited += hi - lo
            if copied:
                _by_group(split.by_group, lo, bitmap, by_start)
    return split


def _by_group(out: dict[str, int], start: int, copied: bytes, regions: Sequence[Region]) -> None:
    """Add the copied pages of one range (``copied``: a byte per page from ``start``) to the
    group of the region each falls in (``regions`` sorted by start, not overlapping)."""
    end = start + len(copied) * PAGE_SIZE
    claimed = 0
    # the first region that may reach into the range: thousands of regions, hundreds of ranges
    i = max(bisect.bisect_right(regions, start, key=lambda r: r.start) - 1, 0)
    for r in itertools.islice(regions, i, None):
        if r.start >= end:
            break
        lo, hi = max(start, r.start), min(end, r.end)
        if lo >= hi:
            continue
        n = copied.count(1, (lo - start) // PAGE_SIZE, (hi - start + PAGE_SIZE - 1) // PAGE_SIZE)
        if n:
            group = OWNER_GROUPS.get(r.owner, OTHER_GROUP)
            out[group] = out.get(group, 0) + n * PAGE_SIZE
            claimed += n
    rest = copied.count(1) - claimed
    if rest > 0:
        out[OTHER_GROUP] = out.get(OTHER_GROUP, 0) + rest * PAGE_SIZE


def add_copied_from_parent(snaps: list[Snapshot], proc_root: str = "/proc") -> None:
    """For each process of a tree whose parent is in it too, what it copied from that parent
    (its regions, where the snapshot kept them, split the copied bytes by group)."""
    pids = {s.pid for s in snaps}
    for snap in snaps:
        try:
            with ProcReader(snap.pid, proc_root) as reader:
                parent = reader.stat().ppid
            if parent in pids:
                snap.copied_from_parent = copied_from_parent(snap.pid, parent, snap.regions, proc_root)
        except MemgapError:
            continue  # it, or its parent, exited meanwhile: no split, the rest stands
