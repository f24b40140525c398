"""tcmalloc (gperftools'): its MallocExtension properties (from the agent) placed in [heap], where it takes
its page heap with sbrk; through gdb, its properties read and ReleaseFreeMemory called
(memgap.sources.tcmalloc_gdb); its finding on the page heap's free spans.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from memgap.allocators.base import (
    AllocatorReader,
    OwnFigures,
    Share,
    Split,
    counted_share,
    unread_note,
    within_mappings,
)
from memgap.explain.measured import Measurements, Owners

if TYPE_CHECKING:
    from memgap.sources.allocator import AllocatorDetection
    from memgap.sources.procfs import Mapping, ProcReader

OWNER = "tcmalloc"


class Tcmalloc(AllocatorReader):
    name = "tcmalloc"
    owner = OWNER

    def mappings(self, reader: ProcReader, maps: list[Mapping]) -> list[tuple[int, int]] | None:
        # tcmalloc takes its page heap and metadata from sbrk first (mmap only once brk
        # cannot grow), and with glibc's malloc replaced nothing else moves the break
        return [(m.start, m.end) for m in maps if m.path == "[heap]"]

    def counts(self, figures: OwnFigures) -> bool:
        return bool(figures.tcmalloc)

    def outside_note(self, detection: AllocatorDetection) -> str:
        return unread_note(detection, "MallocExtension_GetNumericProperty", True)

    def share(self, m: Measurements, owned: Owners) -> Share | None:
        return counted_share(_tcmalloc_split(m.tcmalloc, owned), owned) if m.tcmalloc else None


def _tcmalloc_split(t: dict[str, int], owned: Owners) -> Split:
    allocated = t.get("generic.current_allocated_bytes", 0)
    held = t.get("generic.heap_size", 0) - t.get("tcmalloc.pageheap_unmapped_bytes", 0)
    physical = t.get("generic.total_physical_bytes", held)  # held plus metadata
    virtual = owned.virtual.get(OWNER, 0)
    # [heap] must hold the whole page heap and the metadata: else some came from mmap, not found
    found = owned.count.get(OWNER, 0) > 0 and virtual >= t.get("generic.heap_size", 0) + physical - held
    in_use, free, unclaimed = within_mappings(OWNER, owned, allocated, max(0, physical - allocated), found)
    where = "resident pages of [heap], where tcmalloc takes its page heap and metadata with sbrk (pagemap)"
    detail = {**t, "heap_virtual": virtual, "heap_resident": owned(OWNER),
              "counted_not_resident": max(0, physical - owned(OWNER)) if found else None}
    return Split(
        OWNER, in_use, free, unclaimed,
        in_use_how=f"tcmalloc generic.current_allocated_bytes, within the {where}" if found
        else "tcmalloc generic.current_allocated_bytes, within unclaimed anonymous pages",
        free_how=f"{where} minus the in-use bytes, at most generic.total_physical_bytes minus the allocated "
                 "bytes (tcmalloc's own count: page heap free, central, transfer and thread caches, metadata)",
        source="tcmalloc MallocExtension, pagemap", detail={"tcmalloc": detail},
        note="" if found else f"tcmalloc's heap not found in [heap] ({virtual} bytes for a page heap of "
                              f"{t.get('generic.heap_size', 0)} plus metadata: some came from mmap): its free "
                              "pages are not measured and stay in other_anon")


READER = Tcmalloc()
