"""glibc's malloc: its heaps walked from outside (memgap.sources.glibc_heaps), mallinfo2 and malloc_info
in this process (memgap.sources.glibc), its layers from the walk.

glibc is the C library every process maps: its malloc is read only where it serves malloc, and its
heaps walked from outside only where it comes from libc.so (a program with glibc linked in statically
has no libc data to find the main arena in). ``--deep`` reads its malloc_info and ``--trim`` calls
malloc_trim(0): memgap.inside.gdb; its findings (retention, fragmentation): memgap.diagnose.findings.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memgap.allocators.base import AllocatorReader, AllocatorSigns, GdbPlan, OwnFigures, Share
from memgap.allocators.measured import Measurements, Owners, Sizes

if TYPE_CHECKING:
    from memgap.documents.snapshot import Snapshot
    from memgap.documents.trim import TrimRecord
    from memgap.sources.allocator import AllocatorDetection
    from memgap.sources.gdb_options import GdbOptions
    from memgap.sources.glibc_heaps import GlibcLayout
    from memgap.sources.memory_map import MemoryMap
    from memgap.sources.procfs import ProcReader

STATIC_NOTE = ("glibc's malloc is linked into the program statically: from outside memgap finds glibc's arenas "
               "through libc.so's data, so its memory stays under other anonymous")


class Glibc(AllocatorReader):
    name = "glibc"
    reads_malloc_info = True
    libc_calls = True
    # libc is mapped in every process: its malloc counts only where it serves malloc
    signs = AllocatorSigns(own_symbol="gnu_get_libc_version", markers=(b"malloc(): corrupted top size",),
                           libraries=("libc.so", "libc-2."), everywhere=True)

    def heaps(self, reader: ProcReader, memmap: MemoryMap, detection: AllocatorDetection) -> GlibcLayout | None:
        from memgap.sources.glibc_heaps import find_glibc_layout

        return find_glibc_layout(reader, memmap.plain_mappings, memmap.resident)

    def walks_heaps(self, detection: AllocatorDetection) -> bool:
        from memgap.allocators.detect import library_kind

        return library_kind(detection.library) == self.name

    def in_process(self, notes: dict[str, str]) -> OwnFigures:
        from memgap.sources.glibc import glibc_malloc

        glibc = glibc_malloc()
        return OwnFigures(glibc.mallinfo2(), glibc.malloc_info(bins=False))

    def outside_note(self, detection: AllocatorDetection) -> str:
        return "" if self.walks_heaps(detection) else STATIC_NOTE

    def share(self, m: Measurements, owned: Owners) -> Share | None:
        return _glibc_share(m, owned) if m.glibc is not None else None

    def release(self, pid: int, before: Snapshot, start_time: int | None, options: GdbOptions,
                plan: GdbPlan | None) -> TrimRecord:
        """malloc_trim(0) through gdb; where a jemalloc sits beside glibc's malloc, both trimmed."""
        from memgap.allocators.gdb_routes import malloc_trim
        from memgap.allocators.jemalloc_beside import beside_jemalloc, trim_glibc_and_jemalloc

        symbol = beside_jemalloc(pid, before, options.proc_root)[0]
        if symbol:
            return trim_glibc_and_jemalloc(pid, before, start_time, options, symbol)
        return malloc_trim(pid, before, start_time, options)


def _arena_detail(m: Measurements) -> list[dict[str, Any]]:
    if m.glibc is None:
        return []
    by_system: dict[int, list[int]] = {}
    for a in (m.malloc_info.arenas if m.malloc_info else []):
        by_system.setdefault(a.system, []).append(a.nr)
    rows = []
    for i, arena in enumerate(m.glibc.arenas):
        nrs = by_system.get(arena.system_mem, [])
        nr = 0 if arena.is_main else (nrs.pop(0) if nrs else None)
        info = next((a for a in (m.malloc_info.arenas if m.malloc_info else []) if a.nr == nr), None)
        rows.append({
            "arena": nr if nr is not None else f"#{i}",
            "main": arena.is_main,
            "address": arena.address,
            "heaps": len(arena.heaps),
            "system": arena.system_mem,
            "in_use": info.in_use if info else None,
            "free": info.free if info else None,
            "resident": arena.resident,
            "free_resident": arena.free_resident,  # whole free pages
            # every free byte on a resident page, and of it those on pages that also hold a live chunk
            "free_bytes_resident": arena.free_bytes_resident,
            "fragmented": arena.fragmented,
            "in_use_resident": arena.in_use_resident,
            "free_walked": arena.free_walked,  # compare with malloc_info's "free"
            "top_resident": arena.top_resident,
            "bins_free_resident": arena.bins_free_resident,
            "trim_releasable": arena.trim_releasable() if arena.walk_complete or arena.is_main else None,
            # free chunks a trim's fastbin consolidation merges into a thread heap's top chunk (they stay)
            "joins_top_resident": None if arena.is_main or arena.fastbin_chunks is None
            else arena.joins_top_resident(),
            "walk_complete": arena.walk_complete,
            "small_walk_complete": arena.small_walk_complete,
            "problem": "; ".join(filter(None, [arena.walk_problem, arena.small_walk_problem])),
        })
    return rows


def _glibc_share(m: Measurements, owned: Owners) -> Share:
    glibc = m.glibc
    assert glibc is not None
    heap_part = owned.part("glibc-heap", "mmapped-chunk")
    pages = sum(a.free_resident for a in glibc.arenas)
    heap_free = sum(a.free_bytes_resident for a in glibc.arenas)
    # whole free pages: their private and PSS bytes exact; free bytes beside live chunks: pro rata
    pages_part = Sizes(pages, None, None)
    if heap_part.private is not None:
        pages_part = Sizes(pages, sum(a.free_private for a in glibc.arenas), sum(a.free_pss for a in glibc.arenas))
    free_part = pages_part + (heap_part - pages_part).take(heap_free - pages)
    arenas = _arena_detail(m)
    detail = {
        "arenas": arenas,
        "arena_count": len(arenas),
        "thread_arenas": sum(1 for a in arenas if not a["main"]),
        "trim_releasable": sum(r["trim_releasable"] or 0 for r in arenas),
        "trim_estimate_complete": all(a.walk_complete for a in glibc.arenas),
        "held_in_thread_tops": sum(a.top_resident for a in glibc.arenas if not a.is_main),
        "free_pages_resident": pages,
        "fragmented": heap_free - pages,
        "fragmentation_complete": all(a.small_walk_complete and a.fastbin_chunks is not None
                                      for a in glibc.arenas if a.address),
        "mmapped_chunks": owned.count.get("mmapped-chunk", 0),
        # mallinfo2's count, to compare with the chunks found (memalign'ed ones are not found)
        "mmapped_chunks_reported": m.mallinfo.hblks if m.mallinfo else None,
        "problems": list(glibc.problems),
    }
    return Share(
        owned("glibc-heap") - heap_free + owned("mmapped-chunk"), heap_free, heap_part - free_part, free_part,
        owned("anon"), owned.part("anon"),
        in_use_how=["glibc heaps' resident bytes minus every free chunk's bytes on resident pages",
                    "plus resident pages of glibc mmapped chunks"],
        free_how=["bytes on resident pages of every free chunk: each arena's top chunk, its bins (unsorted, "
                  "small, large) and fastbins, walked from malloc_state (chunks in a thread's tcache count in use, "
                  "as mallinfo2 counts them); of them, whole free pages (what a trim can release) and free bytes "
                  "on pages that also hold a live chunk (fragmentation: no trim releases them); pages from pagemap"],
        source="glibc arenas walked, pagemap", detail=detail)


READER = Glibc()
