"""Python's own view of its heap: tracemalloc when it traces, else a gc walk.

The gc walk finds large buffers (bytes, bytearray, str, array.array, numpy
arrays that own their data) referenced from gc-tracked containers: buffers
themselves are not gc-tracked, so they are found through their referrers. It
is O(objects): memgap takes it at phases, not in every sample.
"""
from __future__ import annotations

import _tracemalloc  # the C module: importing tracemalloc.py would add to the observed heap
import array
import gc
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict

SMALL_REQUEST_THRESHOLD = 512  # pymalloc serves requests up to this size; larger go to malloc
LARGE_BUFFER_REPORT = 1 << 20  # buffers listed one by one from this size up


class LargeBuffer(TypedDict):
    """One of the largest buffers the gc walk found: its type's name and its size."""

    type: str
    bytes: int


@dataclass
class PythonHeap:
    source: str                         # "tracemalloc" or "gc-walk"
    traced_current: int | None = None   # tracemalloc's current total
    traced_peak: int | None = None
    large_buffers_bytes: int = 0        # buffers > 512 B found by the gc walk
    large_buffers_count: int = 0
    largest: list[LargeBuffer] = field(default_factory=list)  # the ten largest, largest first
    instance_counts: dict[str, int] = field(default_factory=dict)
    gc_objects: int = 0


_CONTAINERS = (dict, list, tuple, set, frozenset)
_BUFFER_TYPES = (str, bytes, bytearray, array.array)
#: how many objects' referents one gc.get_referents call returns: a call per object cost more than
#: the walk's own work on a table of small rows (the totals do not depend on the order)
_BATCH = 1024


def _buffer_size(obj: object) -> int:
    """Bytes of a buffer object's data block, or 0 when it is not one we count."""
    t = type(obj)
    # Cheap length tests first: at most 100 characters (4 bytes each) or 256 bytes
    # cannot exceed pymalloc's 512-byte limit, and most strings are short.
    if t is str:
        return sys.getsizeof(obj) if len(obj) > 100 else 0  # type: ignore[arg-type]  # t is type(obj), kept for speed
    if t is bytes:
        return sys.getsizeof(obj) if len(obj) > 256 else 0  # type: ignore[arg-type]  # as above
    if t is bytearray or t is array.array:
        return sys.getsizeof(obj)
    if _is_ndarray(t):
        return int(obj.nbytes) if getattr(obj, "base", None) is None else 0  # type: ignore[attr-defined]  # an ndarray by type name
    return 0


def _is_ndarray(t: type) -> bool:
    return t.__name__ == "ndarray" and t.__module__ == "numpy"


def _never_a_buffer(t: type) -> bool:
    """Whether ``_buffer_size`` is 0 for every object of exact type ``t`` (an int, a float, a
    class's instance): the walk then skips its objects without a call."""
    return t not in _BUFFER_TYPES and not _is_ndarray(t)


def walk_gc(class_names: Iterable[str] = ()) -> PythonHeap:
    """Large buffers reachable from gc-tracked objects, and counts of named classes."""
    wanted = set(class_names)
    counts = dict.fromkeys(wanted, 0)
    seen: set[int] = set()
    total = count = 0
    largest: list[tuple[int, str]] = []
    # types _never_a_buffer holds for, found as the walk meets them; by id (a metaclass may make
    # its classes unhashable), each kept alive here so that its id stays its own
    skipped: dict[int, type] = {}

    def visit(refs: list[Any]) -> None:
        nonlocal total, count
        for ref in refs:
            t = type(ref)
            if id(t) in skipped:
                continue
            if t in _CONTAINERS:
                # Containers holding only atomic objects are untracked by the gc (a dict
                # of bytes, a tuple of ints): follow them from their tracked referrer.
                if not gc.is_tracked(ref) and id(ref) not in seen:
                    seen.add(id(ref))
                    visit(gc.get_referents(ref))
                continue
            if _never_a_buffer(t):
                skipped[id(t)] = t
                continue
            size = _buffer_size(ref)
            if size > SMALL_REQUEST_THRESHOLD and id(ref) not in seen:
                seen.add(id(ref))
                total += size
                count += 1
                if size >= LARGE_BUFFER_REPORT:
                    largest.append((size, t.__name__))

    objects = gc.get_objects()
    try:
        if wanted:
            for obj in objects:
                name = type(obj).__name__
                if name in wanted:
                    counts[name] += 1
        for start in range(0, len(objects), _BATCH):
            visit(gc.get_referents(*objects[start:start + _BATCH]))
        n_objects = len(objects)
    finally:
        del objects  # drop our references before anything else runs
    largest.sort(reverse=True)
    return PythonHeap(
        source="gc-walk",
        large_buffers_bytes=total,
        large_buffers_count=count,
        largest=[{"type": t, "bytes": s} for s, t in largest[:10]],
        instance_counts=counts,
        gc_objects=n_objects,
    )


def python_heap(walk: bool, class_names: Iterable[str] = ()) -> PythonHeap | None:
    """tracemalloc's totals when it traces (plus a walk if asked), else a walk if asked."""
    if _tracemalloc.is_tracing():
        current, peak = _tracemalloc.get_traced_memory()
        heap = walk_gc(class_names) if walk else PythonHeap(source="tracemalloc")
        heap.source = "tracemalloc"
        heap.traced_current, heap.traced_peak = current, peak
        return heap
    return walk_gc(class_names) if walk else None
