"""Which reading `inspect --deep` trusts for a Python process that runs tracemalloc.

Under tracemalloc every allocation the in-process snapshot makes (each read of the heap
returns a new object) is traced, and tracemalloc keeps each trace in memory it mallocs: glibc's
bins change under the walk that reads them, and pymalloc's own statistics are hidden behind
tracemalloc's hooks (``_PyObject_DebugMallocStats`` prints nothing). Measured on a process with
233 MiB of pymalloc arenas around few objects: inside, pymalloc_free read 0 (its arenas fell to
other_anon) and glibc's free 0.1 MiB, where a trim then released 116 MiB, the outside estimate.
So the C allocator's and pymalloc's layers are the outside reading's, taken from /proc without
allocating in the target, and only what tracemalloc alone knows (the traced total, which counts
Python's objects over 512 bytes that live in the C allocator) is taken from inside.
"""
from __future__ import annotations

from dataclasses import replace

from memgap.diagnose.findings import diagnose
from memgap.documents.snapshot import Layer, Snapshot

ROUTE_TRUSTED = "outside, with tracemalloc's total from inside"
WHY = ("tracemalloc traces this process: memgap's reading inside it allocates, every allocation is traced and its "
       "trace malloc'd, so glibc's bins change under the walk and pymalloc's statistics are hidden behind "
       "tracemalloc's hooks; the C allocator's and pymalloc's layers shown are the outside reading's (from /proc, "
       "nothing allocated in the process), and python_objects adds what tracemalloc traces beyond pymalloc's blocks")


def traced_total(inside: Snapshot) -> int | None:
    """tracemalloc's current total where the in-process snapshot read one (None: not tracing)."""
    return inside.python_heap.traced_current if inside.python_heap is not None else None


def _moved(layer: Layer, moved: int) -> Layer:
    """``layer`` less ``moved`` bytes, its private and PSS bytes in proportion."""
    resident = layer.resident or 0
    share = moved / resident if resident else 0.0
    return replace(layer, resident=resident - moved,
                   private=None if layer.private is None else round(layer.private * (1 - share)),
                   pss=None if layer.pss is None else round(layer.pss * (1 - share)),
                   shared=None if layer.shared is None else round(layer.shared * (1 - share)))


def trusted_inside(outside: Snapshot, inside: Snapshot) -> tuple[Snapshot, str]:
    """The snapshot `--deep` shows for the process, and why (empty: the in-process one, untouched)."""
    traced = traced_total(inside)
    if traced is None or "python_objects" not in outside.layers or "allocator_in_use" not in outside.layers:
        return inside, ""
    small_layer, in_use_layer = outside.layers["python_objects"], outside.layers["allocator_in_use"]
    small = small_layer.resident or 0
    moved = max(0, min(traced - small, in_use_layer.resident or 0))
    taken = _moved(in_use_layer, moved)
    python = Layer(
        "python_objects", small + moved, virtual=traced,
        derivation="small objects from pymalloc's pool headers (read from outside), plus what tracemalloc traces "
                   "beyond them (read inside: Python's objects over 512 bytes, held in the C allocator)",
        source="pymalloc pool headers, tracemalloc",
        detail={**small_layer.detail, "pymalloc_blocks": small, "in_c_allocator": moved,
                "tracemalloc_current": traced},
        private=None if small_layer.private is None or in_use_layer.private is None
        else small_layer.private + (in_use_layer.private - (taken.private or 0)),
        pss=None if small_layer.pss is None or in_use_layer.pss is None
        else small_layer.pss + (in_use_layer.pss - (taken.pss or 0)))
    if python.private is not None:
        python.shared = python.resident - python.private if python.resident is not None else None
    layers = {**outside.layers, "python_objects": python, "allocator_in_use": taken}
    snap = replace(outside, layers=layers, route=ROUTE_TRUSTED, python_heap=inside.python_heap, regions=[],
                   findings=[])
    snap.findings = diagnose(snap)
    return snap, WHY
