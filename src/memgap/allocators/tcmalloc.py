"""tcmalloc (gperftools'): its MallocExtension properties (from the agent) placed in [heap], where it takes
its page heap with sbrk; through gdb, its properties read and ReleaseFreeMemory called
(memgap.sources.tcmalloc_gdb); its finding on the page heap's free spans.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memgap.allocators.base import (
    AllocatorReader,
    AllocatorSigns,
    DeepFigures,
    GdbPlan,
    OwnFigures,
    Rules,
    Share,
    Split,
    counted_share,
    deep_figures,
    unread_note,
    within_mappings,
)
from memgap.allocators.measured import Measurements, Owners
from memgap.documents.snapshot import Finding
from memgap.report.units import mib

if TYPE_CHECKING:
    from memgap.documents.allocator import FoundAllocator
    from memgap.documents.own_figures import OwnFiguresTable
    from memgap.documents.snapshot import Layer, Snapshot
    from memgap.documents.trim import TrimRecord
    from memgap.sources.allocator import AllocatorDetection
    from memgap.sources.gdb_attach import GdbSession
    from memgap.sources.gdb_options import GdbOptions
    from memgap.sources.procfs import Mapping, ProcReader

OWNER = "tcmalloc"
ROUTE = "gdb MallocExtension"  # sources.tcmalloc_gdb.ROUTE, not imported: a process that snapshots itself needs no gdb


class Tcmalloc(AllocatorReader):
    name = "tcmalloc"
    own_variants = ("tcmalloc:release_rate=10",)  # its release rate: 10 is its most eager
    deep_key = ROUTE
    calls = ("reads tcmalloc's properties by calling MallocExtension_GetNumericProperty",
             "releases tcmalloc's free pages by calling MallocExtension_ReleaseFreeMemory")
    owner = OWNER
    signs = AllocatorSigns(api=("tc_malloc", "tc_free", "tc_realloc", "tc_memalign", "tc_malloc_size", "tc_version"),
                           api_starts=("MallocExtension_",),  # gperftools' C API
                           # sources.tcmalloc_gdb's GET and RELEASE
                           gdb_calls=("MallocExtension_GetNumericProperty", "MallocExtension_ReleaseFreeMemory"),
                           markers=(b"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", b"tcmalloc/tcmalloc.cc"),
                           libraries=("libtcmalloc",))

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

    def deep_plan(self, serving: FoundAllocator, root: str) -> GdbPlan | None:
        from memgap.allocators.detect import signs
        from memgap.sources import tcmalloc_gdb

        tcmalloc_gdb.check_callable(serving.to_dict(), signs().query, root)
        return GdbPlan(self.name)

    def read_deep(self, session: GdbSession, plan: GdbPlan) -> DeepFigures:
        from memgap.sources import tcmalloc_gdb

        return tcmalloc_gdb.read_figures(session)

    def deep_layers(self, layers: dict[str, Layer], rss: int, figures: DeepFigures,
                    beside: str = "") -> tuple[dict[str, Layer], int]:
        from memgap.allocators.gdb_layers import tcmalloc_gdb_layers
        from memgap.sources.tcmalloc_gdb import TcmallocDeep

        assert isinstance(figures, TcmallocDeep)  # what read_deep gave
        return tcmalloc_gdb_layers(layers, rss, figures)

    def deep_table(self, figures: DeepFigures, rss: int, beside: str = "") -> OwnFiguresTable:
        from memgap.allocators.gdb_tables import tcmalloc_table
        from memgap.sources.tcmalloc_gdb import TcmallocDeep

        assert isinstance(figures, TcmallocDeep)  # what read_deep gave
        return tcmalloc_table(figures)

    def release(self, pid: int, before: Snapshot, start_time: int | None, options: GdbOptions,
                plan: GdbPlan | None) -> TrimRecord:
        from memgap.allocators.gdb_routes import release_own
        from memgap.sources import tcmalloc_gdb

        return release_own(self.name, tcmalloc_gdb, pid, before, start_time, options)

    def findings(self, snap: Snapshot, rules: Rules) -> list[Finding]:
        t = deep_figures(snap, ROUTE, self.name)
        return _page_heap_free(snap, t, rules) if t is not None else []


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


def _page_heap_free(snap: Snapshot, t: dict[str, Any], rules: Rules) -> list[Finding]:
    """tcmalloc's page heap free bytes, which ReleaseFreeMemory returns now."""
    free = t["pageheap_free"]
    base = rules.base
    if free < rules.floor or not base.crossed(free, rules.share):
        return []
    return [Finding(
        "tcmalloc-page-heap-free", "warning",
        f"tcmalloc's page heap holds {mib(free)} MiB of free spans a release would return now "
        f"({base.words(free)})",
        [f"RSS {mib(snap.rss)} MiB; tcmalloc.pageheap_free_bytes {mib(free)} MiB, pageheap_unmapped_bytes "
         f"{mib(t['pageheap_unmapped'])} MiB (given back already), generic.current_allocated_bytes "
         f"{mib(t['allocated'])} MiB ({ROUTE})",
         f"free objects in the central, transfer and thread caches: {mib(t['caches'])} MiB (kept for reuse: a release "
         "leaves them)",
         "tcmalloc returns free spans a little at a time as others are freed (TCMALLOC_RELEASE_RATE; 0 never): "
         "a process that stops freeing keeps them"],
        "MallocExtension::instance()->ReleaseFreeMemory() after bursts (`memgap inspect --trim PID` calls it and "
        "measures it), or a higher TCMALLOC_RELEASE_RATE")]


READER = Tcmalloc()
