"""CPython's small-object allocator (pymalloc): its statistics and its arenas.

``sys._debugmallocstats()`` writes to the C stderr; we call the function behind
it, ``_PyObject_DebugMallocStats(FILE*)``, with an in-memory stream instead, so
nothing the process writes to stderr is touched. The text is parsed here; the
arena and pool sizes are read from the text, not assumed per version.
"""
from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

from memgap.documents.parts import PymallocStats
from memgap.errors import MalformedInput

_NUM = r"([\d,]+)"
_PATTERNS = {
    "arenas_allocated_total": rf"# arenas allocated total\s*=\s*{_NUM}",
    "arenas_reclaimed": rf"# arenas reclaimed\s*=\s*{_NUM}",
    "arenas_highwater": rf"# arenas highwater mark\s*=\s*{_NUM}",
    "arenas_current": rf"# arenas allocated current\s*=\s*{_NUM}",
    "allocated_blocks_bytes": rf"# bytes in allocated blocks\s*=\s*{_NUM}",
    "available_blocks_bytes": rf"# bytes in available blocks\s*=\s*{_NUM}",
    "pool_headers_bytes": rf"# bytes lost to pool headers\s*=\s*{_NUM}",
    "quantization_bytes": rf"# bytes lost to quantization\s*=\s*{_NUM}",
    "arena_alignment_bytes": rf"# bytes lost to arena alignment\s*=\s*{_NUM}",
}
_ARENA_LINE = re.compile(rf"{_NUM} arenas \* {_NUM} bytes/arena\s*=\s*{_NUM}")
_UNUSED_POOLS = re.compile(rf"{_NUM} unused pools \* {_NUM} bytes\s*=\s*{_NUM}")
_CLASS_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def _n(text: str) -> int:
    return int(text.replace(",", ""))


def parse_debugmallocstats(text: str) -> PymallocStats | None:
    """Parse the text of ``sys._debugmallocstats()``.

    Returns None when pymalloc is not in use (PYTHONMALLOC=malloc prints no
    arena section); raises MalformedInput when the section is there but broken.
    """
    if "arenas allocated current" not in text:
        return None
    values = {}
    for key, pattern in _PATTERNS.items():
        m = re.search(pattern, text)
        if m is None:
            raise MalformedInput("debugmallocstats", f"no line for {key.replace('_', ' ')}")
        values[key] = _n(m.group(1))
    arena = _ARENA_LINE.search(text)
    pools = _UNUSED_POOLS.search(text)
    if arena is None or pools is None:
        raise MalformedInput("debugmallocstats", "no arena-size or unused-pools line")
    used_pools = 0
    for line in text.splitlines():
        row = _CLASS_ROW.match(line)
        if row:
            used_pools += int(row.group(3))
    return PymallocStats(
        arenas_current=values["arenas_current"],
        arenas_highwater=values["arenas_highwater"],
        arena_size=_n(arena.group(2)),
        pool_size=_n(pools.group(2)),
        allocated_blocks_bytes=values["allocated_blocks_bytes"],
        available_blocks_bytes=values["available_blocks_bytes"],
        unused_pools=_n(pools.group(1)),
        pool_headers_bytes=values["pool_headers_bytes"],
        quantization_bytes=values["quantization_bytes"],
        arena_alignment_bytes=values["arena_alignment_bytes"],
        used_pools=used_pools,
    )


def capture_debugmallocstats() -> str:
    """The text of ``sys._debugmallocstats()`` for this process, without touching stderr."""
    from memgap.sources.glibc import glibc_malloc

    func = getattr(ctypes.pythonapi, "_PyObject_DebugMallocStats", None)
    if func is None:
        return ""
    func.argtypes = [ctypes.c_void_p]
    func.restype = ctypes.c_int
    return glibc_malloc().capture_to_memory(func)


@dataclass(frozen=True)
class PymallocTotals:
    """The three figures a per-test reading needs (``pymalloc_totals``), in bytes."""

    allocated_blocks_bytes: int  # live small objects
    arenas_current: int
    arena_size: int

    @property
    def free_bytes(self) -> int:
        """Arena bytes not holding a live block."""
        return self.arenas_current * self.arena_size - self.allocated_blocks_bytes


_TOTALS = re.compile(rf"{_NUM} arenas \* {_NUM} bytes/arena\s*=\s*{_NUM}\s*"
                     rf"# bytes in allocated blocks\s*=\s*{_NUM}")


def pymalloc_totals(text: str) -> PymallocTotals | None:
    """Live block bytes and arenas from ``sys._debugmallocstats()``'s text, by one search of its
    totals (parse_debugmallocstats reads every size class: 10 times slower, and the pytest plugin
    reads twice a test). None where the text has no arena section (pymalloc off, or behind
    tracemalloc's hooks); MalformedInput where it has one without these lines."""
    at = text.find("# arenas allocated current")
    if at < 0:
        return None
    found = _TOTALS.search(text, at)
    if found is None:
        raise MalformedInput("debugmallocstats", "no arena-size or allocated-blocks line")
    return PymallocTotals(_n(found.group(4)), _n(found.group(1)), _n(found.group(2)))
