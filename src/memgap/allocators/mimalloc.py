"""mimalloc: where it serves malloc, nothing from outside or from the agent (it counts no allocated bytes in
a release build); through gdb, mi_process_info's committed bytes read and mi_collect called
(memgap.sources.mimalloc_gdb), its committed memory one layer of its own (allocator_held). A mimalloc 3 that
a library bundles under a prefix (pyarrow's ``arrow_mi_*``): its arenas found from outside by their own
records (memgap.sources.mimalloc_arenas), the library_allocators layer.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from memgap.allocators.base import AllocatorReader, AllocatorSigns, DeepFigures, GdbPlan, unread_note

if TYPE_CHECKING:
    from memgap.documents.allocator import FoundAllocator
    from memgap.documents.own_figures import OwnFiguresTable
    from memgap.documents.snapshot import Layer, Snapshot
    from memgap.documents.trim import TrimRecord
    from memgap.sources.allocator import AllocatorDetection
    from memgap.sources.gdb_attach import GdbSession
    from memgap.sources.gdb_options import GdbOptions
    from memgap.sources.mimalloc_arenas import MemoryReader
    from memgap.sources.procfs import Mapping

ROUTE = "gdb mi_process_info"  # sources.mimalloc_gdb.ROUTE, not imported: a process that snapshots itself needs no gdb


class Mimalloc(AllocatorReader):
    name = "mimalloc"
    deep_key = ROUTE
    calls = ("reads mimalloc's figures by calling mi_process_info",
             "collects mimalloc's free memory by calling mi_collect")
    signs = AllocatorSigns(api=("mi_malloc", "mi_free", "mi_realloc", "mi_stats_print", "mi_collect", "mi_heap_new",
                                "mi_malloc_aligned", "mi_zalloc_aligned", "mi_realloc_aligned", "mi_version"),
                           gdb_calls=("mi_process_info", "mi_collect"),  # sources.mimalloc_gdb: INFO, COLLECT
                           markers=(b"mimalloc: ",), libraries=("libmimalloc",))
    by_memory = True  # its arenas' records point into the library that bundles it

    def library_arenas(self, reader: MemoryReader, maps: list[Mapping], found: FoundAllocator) -> list[tuple[int, int]]:
        from memgap.sources.mimalloc_arenas import find_arenas

        if found.serves_malloc or found.prefix == "?":  # malloc's own (its layers are those), or symbols stripped
            return []
        return [(a.start, a.end) for a in find_arenas(reader, maps, found.library)]

    def library_release(self, found: FoundAllocator, root: str) -> str | None:
        from memgap.allocators.detect import signs
        from memgap.errors import MalformedInput
        from memgap.sources.elf import read_elf
        from memgap.sources.mimalloc_gdb import COLLECT

        if found.serves_malloc or found.prefix == "?":
            return None
        try:  # the symbols detection read (its query asks about every name ending in mi_collect): not read again
            defined = read_elf(root + found.library, signs().query).defined
        except (OSError, MalformedInput):
            return None
        # mi_collect(true): what arrow's MemoryPool::ReleaseUnused calls (pool.release_unused() in pyarrow)
        return f"(void) {found.prefix}{COLLECT}(1)" if found.prefix + COLLECT in defined else None

    def outside_note(self, detection: AllocatorDetection) -> str:
        return unread_note(detection, "mi_process_info", False)

    def deep_plan(self, serving: FoundAllocator, root: str) -> GdbPlan | None:
        from memgap.allocators.detect import signs
        from memgap.sources import mimalloc_gdb

        mimalloc_gdb.check_callable(serving.to_dict(), signs().query, root)
        return GdbPlan(self.name)

    def read_deep(self, session: GdbSession, plan: GdbPlan) -> DeepFigures:
        from memgap.sources import mimalloc_gdb

        return mimalloc_gdb.read_figures(session)

    def deep_layers(self, layers: dict[str, Layer], rss: int, figures: DeepFigures,
                    beside: str = "") -> tuple[dict[str, Layer], int]:
        from memgap.allocators.gdb_layers import mimalloc_gdb_layers
        from memgap.sources.mimalloc_gdb import MimallocDeep

        assert isinstance(figures, MimallocDeep)  # what read_deep gave
        return mimalloc_gdb_layers(layers, rss, figures)

    def deep_table(self, figures: DeepFigures, rss: int, beside: str = "") -> OwnFiguresTable:
        from memgap.allocators.gdb_tables import mimalloc_table
        from memgap.sources.mimalloc_gdb import MimallocDeep

        assert isinstance(figures, MimallocDeep)  # what read_deep gave
        return mimalloc_table(figures, rss)

    def release(self, pid: int, before: Snapshot, start_time: int | None, options: GdbOptions,
                plan: GdbPlan | None) -> TrimRecord:
        from memgap.allocators.gdb_routes import release_own
        from memgap.sources import mimalloc_gdb

        return release_own(self.name, mimalloc_gdb, pid, before, start_time, options)


READER = Mimalloc()
