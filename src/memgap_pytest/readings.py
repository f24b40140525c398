"""What the pytest plugin reads around a test: live bytes, free bytes and RSS, in this process.

A reading is instant (0.08 ms here): pymalloc's totals (its statistics written to memory,
one search of their totals), glibc's ``mallinfo2`` and ``malloc_info`` (per arena), and
VmRSS from /proc/self/statm. Nothing waits and nothing is collected here; the plugin decides
when a full collection or a settled RSS is worth its cost. Imported only once a test is
measured: it loads memgap's readers.
"""
from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass

from memgap.errors import MemgapError
from memgap.sources.glibc import GlibcMalloc, arena_totals, glibc_malloc
from memgap.sources.pymalloc import capture_debugmallocstats, pymalloc_totals

_PAGE = os.sysconf("SC_PAGE_SIZE")
SETTLE_STEP = 0.05     # s between RSS reads while waiting for it to hold still
SETTLE_LIMIT = 1.0     # s at most, then the last reading
STEADY = 256 << 10     # bytes RSS may move between two reads and count as still


@dataclass(frozen=True)
class Reading:
    """One instant, in bytes; None where the process's allocator does not say."""

    py_objects: int | None      # pymalloc's blocks in use: Python's small objects
    pymalloc_free: int | None   # pymalloc's arena bytes in no block
    pymalloc_arenas: int | None
    c_in_use: int | None        # glibc: uordblks + hblkhd (large Python objects and C data)
    c_free: int | None          # glibc: fordblks, free chunks (what a trim could give back, at most)
    mmapped: int | None         # glibc: hblkhd, chunks mmapped one by one
    arenas: tuple[tuple[int, int, int], ...]  # glibc's arenas: (nr, bytes in use, bytes free)
    rss: int

    @property
    def live(self) -> int:
        return (self.py_objects or 0) + (self.c_in_use or 0)


def _rss() -> int:
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[1]) * _PAGE


class Meter:
    """Reads this process; counts its own time, for the summary."""

    def __init__(self) -> None:
        self.glibc: GlibcMalloc | None = None
        self.note = ""
        self.seconds = 0.0
        self.readings = 0
        try:
            from memgap.allocators.detect import detect_in_process
            from memgap.allocators.registry import reader_for
            from memgap.sources.procfs import ProcReader

            with ProcReader("self") as reader:
                detection = detect_in_process(reader.maps())
            if reader_for(detection.name).libc_calls:
                self.glibc = glibc_malloc()
            else:
                self.note = f"malloc is {detection.name}'s, not glibc's: C allocations are not read"
        except MemgapError as exc:
            self.note = f"C allocations are not read ({exc})"
        if pymalloc_totals(capture_debugmallocstats()) is None:
            self.note += ("; " if self.note else "") + ("Python's small objects are not read (pymalloc is off, "
                                                         "or behind tracemalloc's hooks)")

    def read(self) -> Reading:
        started = time.perf_counter()
        arenas: tuple[tuple[int, int, int], ...] = ()
        c_in_use = c_free = mmapped = None
        if self.glibc is not None:
            # malloc_info first: its buffer is malloc'd and freed before mallinfo2 counts
            arenas = tuple(arena_totals(self.glibc.malloc_info_xml()))
            mi = self.glibc.mallinfo2()
            c_in_use, c_free, mmapped = mi.in_use, mi.fordblks, mi.hblkhd
        pm = pymalloc_totals(capture_debugmallocstats())
        reading = Reading(pm.allocated_blocks_bytes if pm else None, pm.free_bytes if pm else None,
                          pm.arenas_current if pm else None, c_in_use, c_free, mmapped, arenas, _rss())
        self.seconds += time.perf_counter() - started
        self.readings += 1
        return reading

    def settled(self) -> Reading:
        """A reading once RSS has held still (SETTLE_STEP apart, within STEADY), after a full
        collection; at most SETTLE_LIMIT seconds, then the last one."""
        gc.collect()
        deadline = time.monotonic() + SETTLE_LIMIT
        last = _rss()
        while time.monotonic() < deadline:
            time.sleep(SETTLE_STEP)
            now = _rss()
            if abs(now - last) <= STEADY:
                break
            last = now
        return self.read()


@dataclass(frozen=True)
class Growth:
    """What grew between two readings, in bytes (negative: shrank); None where not read."""

    py_objects: int | None
    c_in_use: int | None
    pymalloc_free: int | None
    c_free: int | None
    rss: int
    mmapped: int | None = None
    pymalloc_arenas: int | None = None
    arenas: tuple[tuple[int, int, int], ...] = ()  # (nr, in use, free) grown; nr absent before: all of it

    @property
    def live(self) -> int:
        return (self.py_objects or 0) + (self.c_in_use or 0)

    @property
    def kept_free(self) -> int:
        """What the allocators keep free that they did not before: glibc's free chunks, pymalloc's free blocks."""
        return (self.c_free or 0) + (self.pymalloc_free or 0)

    def to_dict(self) -> dict[str, object]:
        return {"py_objects": self.py_objects, "c_in_use": self.c_in_use, "pymalloc_free": self.pymalloc_free,
                "c_free": self.c_free, "rss": self.rss}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Growth:
        def num(key: str) -> int | None:
            value = d.get(key)
            return value if isinstance(value, int) else None
        return cls(num("py_objects"), num("c_in_use"), num("pymalloc_free"), num("c_free"), num("rss") or 0)


def _minus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def growth(before: Reading, after: Reading) -> Growth:
    old = {nr: (used, free) for nr, used, free in before.arenas}
    arenas = tuple((nr, used - old.get(nr, (0, 0))[0], free - old.get(nr, (0, 0))[1])
                   for nr, used, free in after.arenas)
    return Growth(_minus(after.py_objects, before.py_objects), _minus(after.c_in_use, before.c_in_use),
                  _minus(after.pymalloc_free, before.pymalloc_free), _minus(after.c_free, before.c_free),
                  after.rss - before.rss, _minus(after.mmapped, before.mmapped),
                  _minus(after.pymalloc_arenas, before.pymalloc_arenas), arenas)


Census = tuple[dict[str, int], dict[str, int]]  # objects by type name: (counts, bytes)


def census(skip: Census | None = None) -> Census:
    """Objects by type: every object the collector tracks and the untracked ones they hold (bytes,
    str, numbers: not tracked themselves), each once; ``skip``, an earlier census, left out.
    O(objects): taken only around a second run of a test that failed its limit."""
    counts: dict[str, int] = {}
    sizes: dict[str, int] = {}
    seen: set[int] = {id(counts), id(sizes)}
    seen.add(id(seen))
    if skip is not None:
        seen.update((id(skip), id(skip[0]), id(skip[1])))

    def add(obj: object) -> None:
        name = type(obj).__qualname__
        counts[name] = counts.get(name, 0) + 1
        sizes[name] = sizes.get(name, 0) + sys.getsizeof(obj, 0)

    objects = gc.get_objects()
    seen.add(id(objects))
    for obj in objects:
        if id(obj) in seen:
            continue
        add(obj)
        for held in gc.get_referents(obj):
            if not gc.is_tracked(held) and id(held) not in seen:
                seen.add(id(held))
                add(held)
    del objects
    return counts, sizes


def types_grown(before: Census, after: Census, top: int = 8, floor: int = 4096) -> list[tuple[str, int, int]]:
    """(type, objects grown, bytes grown), the most bytes first, only those that grew by ``floor`` or more."""
    grown = [(name, count - before[0].get(name, 0), after[1].get(name, 0) - before[1].get(name, 0))
             for name, count in after[0].items()]
    return sorted((g for g in grown if g[2] >= floor), key=lambda g: -g[2])[:top]
