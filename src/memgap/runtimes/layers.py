"""The runtimes' own heaps as layers: ``runtime_heap`` and ``runtime_metadata``.

Each layer is the resident pages of the address ranges the runtimes own (pagemap), so the layers
still add up to VmRSS: what a runtime claims is taken out of other_anon, never added. The runtime's
own figures split them: of the heap's resident pages, what it counts in use, and the rest, free but
resident (retained); what it has released is not RSS and is said beside them.
"""
from __future__ import annotations

from collections.abc import Iterable

from memgap.documents.runtime_heap import HeapDetail
from memgap.documents.snapshot import Layer
from memgap.runtimes.base import OwnedRange, RuntimeHeap

FREE_OWNER = "runtime-free"   # ... in the ranges of its heap it holds free (OwnedRange.free)
HEAP_OWNER = "runtime-heap"   # the owner of a region in a runtime's heap ranges (memgap.explain.snapshot.label_regions;
#                               attribution names both owners too, so as not to load this package in-process)
META_OWNER = "runtime-meta"   # ... in the ranges it keeps its own structures in


def owner_ranges(heaps: list[RuntimeHeap]) -> list[tuple[int, int, str, str]]:
    """(start, end, owner, label) of every range the runtimes own, sorted and disjoint (a range that
    overlaps one before it loses the overlap), each labelled "[NAME] what" for --regions."""
    out: list[tuple[int, int, str, str]] = []
    for start, end, owner, label in sorted((r.start, r.end, _owner(r), f"[{h.info.name}] {r.label}")
                                           for h in heaps for r in h.ranges):
        start = max(start, out[-1][1]) if out else start
        if start < end:
            out.append((start, end, owner, label))
    return out


def _owner(r: OwnedRange) -> str:
    return (FREE_OWNER if r.free else HEAP_OWNER) if r.heap else META_OWNER


def _heap_detail(heap: RuntimeHeap, resident: int, free: int) -> HeapDetail:
    """One runtime's heap: where it marks the ranges it holds free, their resident pages are retained and
    the rest in use (its counts are not residency: a span's untouched pages are not RSS); else its own
    count of what is in use splits the resident pages, the rest retained."""
    if any(r.free for r in heap.ranges):
        in_use: int | None = resident - free
    else:
        in_use = None if heap.in_use is None else min(heap.in_use, resident)
    return {"runtime": heap.info.name, "version": heap.info.version, "route": heap.route,
            "resident": resident, "in_use": in_use, "in_use_told": heap.in_use,
            # free but resident: what of the heap's pages its own count does not hold in use
            "retained": None if in_use is None else resident - in_use,
            "retained_told": heap.retained, "released": heap.released, "committed": heap.committed,
            "limit": heap.limit, "settings": dict(heap.settings), "notes": list(heap.notes)}


def runtime_layers(heaps: list[RuntimeHeap], heap_resident: dict[str, int], free_resident: dict[str, int],
                   meta_resident: dict[str, int], virtual: int) -> tuple[Layer, Layer]:
    """The two layers from each runtime's figures and the resident bytes of its ranges (by runtime name:
    its heap's, of them its free ranges', its metadata's)."""
    heaps_detail = [_heap_detail(h, heap_resident.get(h.info.name, 0), free_resident.get(h.info.name, 0))
                    for h in heaps]
    names = ", ".join(f"{h.info.name} ({h.route})" for h in heaps)
    heap = Layer(
        "runtime_heap", sum(heap_resident.values()), virtual=virtual,
        derivation="resident pages (pagemap) of the address ranges the runtime's heap owns, as its own state says; "
                   "of them, what it counts in use, the rest free but resident (retained): " + names,
        source="runtime state, pagemap", detail={"runtimes": heaps_detail,
                                                 "in_use": _total(d["in_use"] for d in heaps_detail),
                                                 "retained": _total(d["retained"] for d in heaps_detail)})
    told = {f"{h.info.name} {name}": n for h in heaps for name, n in h.metadata.items()}
    meta = Layer(
        "runtime_metadata", sum(meta_resident.values()),
        derivation="resident pages (pagemap) of the ranges the runtime keeps its own structures in (code, "
                   "metaspace, GC data: as each runtime's reader tells them); its own counts beside them",
        source="runtime state, pagemap", detail={"by_runtime": dict(meta_resident), "told": told})
    return heap, meta


def _total(values: Iterable[int | None]) -> int | None:
    known = list(values)
    return None if any(v is None for v in known) else sum(v or 0 for v in known)
