"""glibc's malloc: its heaps walked from outside (memgap.sources.glibc_heaps), mallinfo2 and malloc_info
in this process (memgap.sources.glibc), its layers from the walk.

glibc is the C library every process maps: its malloc is read only where it serves malloc, and its
heaps walked from outside only where it comes from libc.so (a program with glibc linked in statically
has no libc data to find the main arena in). ``--deep`` reads its malloc_info and ``--trim`` calls
malloc_trim(0) (the reader's ``release``); its findings (retention: whole free pages a trim releases;
fragmentation: free bytes beside live chunks) from its heaps walked, with the thresholds memgap.diagnose
hands it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memgap.allocators.base import AllocatorReader, AllocatorSigns, GdbPlan, OwnFigures, RatioBase, Rules, Share
from memgap.allocators.measured import Measurements, Owners, Sizes
from memgap.documents.snapshot import Finding
from memgap.report.units import mib

if TYPE_CHECKING:
    from memgap.documents.snapshot import Layer, Snapshot
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
        """malloc_trim(0) through gdb; where a library's own allocator was found keeping memory (pyarrow's
        mimalloc), its release call first; else where a jemalloc sits beside glibc's malloc, both trimmed."""
        from memgap.allocators.gdb_routes import malloc_trim
        from memgap.allocators.jemalloc_beside import beside_jemalloc, trim_glibc_and_jemalloc
        from memgap.allocators.library_release import library_releases, trim_libraries_and_glibc

        calls = library_releases(pid, before, options.proc_root)
        if calls:
            return trim_libraries_and_glibc(pid, before, start_time, options, calls)
        symbol = beside_jemalloc(pid, before, options.proc_root)[0]
        if symbol:
            return trim_glibc_and_jemalloc(pid, before, start_time, options, symbol)
        return malloc_trim(pid, before, start_time, options)

    def findings(self, snap: Snapshot, rules: Rules) -> list[Finding]:
        """Whole free pages its heaps hold (a trim releases them), and free bytes beside live chunks."""
        return [*_glibc_retention(snap, rules), *_glibc_fragmentation(snap, rules)]


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
            # how the free chunks were found: "chunks" (every chunk walked), "bins" (the lists followed)
            "walk": arena.walk_method or None,
            "chunks_walked": arena.chunks_walked if arena.walk_method == "chunks" else None,
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


def _glibc_free(snap: Snapshot) -> tuple[int, int, int]:
    """glibc's free bytes on resident pages, of them the whole free pages, and those beside live
    chunks (fragmentation); a document from before the split counts whole pages only."""
    layer = snap.layers.get("allocator_free")
    if layer is None or "arenas" not in layer.detail:
        return 0, 0, 0
    free = layer.resident or 0
    if "by_allocator" in layer.detail:  # a jemalloc beside glibc's: its own share
        free = layer.detail["by_allocator"].get(READER.name) or 0
    fragmented = min(free, layer.detail.get("fragmented") or 0)
    return free, free - fragmented, fragmented


def _mine(base: RatioBase, layer: Layer | None, part: int) -> int:
    """Of ``part`` bytes of a layer, what weighs against ``base``: over private memory, its private
    pages in the layer's own proportion (a free chunk a forked worker shares with its parent is not its own)."""
    if base.private and layer is not None and layer.private is not None and layer.resident:
        return round(part * min(1.0, layer.private / layer.resident))
    return part


def _glibc_retention(snap: Snapshot, rules: Rules) -> list[Finding]:
    _, pages, fragmented = _glibc_free(snap)
    base = rules.base
    part = _mine(base, snap.layers.get("allocator_free"), pages)
    if pages < rules.floor or not base.crossed(part, rules.share):
        return []
    d = snap.layers["allocator_free"].detail
    releasable = d.get("trim_releasable", 0)
    held_tops = d.get("held_in_thread_tops", 0)
    evidence = [f"RSS {mib(snap.rss)} MiB; glibc heaps hold {mib(pages)} MiB resident in whole free pages "
                f"({base.words(part, pages)})"
                + (f", and {mib(fragmented)} MiB free beside live chunks (see glibc-fragmentation)"
                   if fragmented >= rules.floor // 4 else "")]
    if rules.base_line:
        evidence.append(rules.base_line)
    for a in sorted(d["arenas"], key=lambda a: -(a["free_resident"] or 0))[:5]:
        evidence.append(f"arena {a['arena']}{' (main)' if a['main'] else ''}: resident {mib(a['resident'])} MiB, "
                        f"free pages {mib(a['free_resident'])} MiB of which top chunk {mib(a['top_resident'])} MiB, "
                        f"trim would release {mib(a['trim_releasable'])} MiB"
                        + (f" ({mib(a['joins_top_resident'])} MiB of free chunks stay: the trim's consolidation "
                           "merges them into the top chunk)" if (a.get("joins_top_resident") or 0) >= rules.floor // 4
                           else ""))
    summary = (f"glibc holds {mib(pages)} MiB of free pages in {d['arena_count']} arenas ({d['thread_arenas']} "
               f"thread arenas); a trim would release ~{mib(releasable)} MiB")
    if not d.get("trim_estimate_complete", True):
        summary += " (at least: an arena changed while it was read, see problems)"
        evidence.extend(d.get("problems", []))
    # a program that is not Python calls malloc_trim itself (or runs under `memgap lab`'s trim=idle)
    remedy = "malloc_trim(0) after the burst" if snap.not_python else "memgap.trim() (malloc_trim(0)) after the burst"
    if held_tops > max(rules.floor, pages // 3):
        evidence.append(f"{mib(held_tops)} MiB sit in thread arenas' top chunks, which malloc_trim(0) leaves "
                        "alone (only the main arena's top is cut)")
        remedy = ("fewer arenas (MALLOC_ARENA_MAX=2) plus a trim after bursts, or a fixed "
                  "MALLOC_TRIM_THRESHOLD_: measure which with `memgap lab`")
    return [Finding("glibc-retention", "warning", summary, evidence, remedy)]


def _glibc_fragmentation(snap: Snapshot, rules: Rules) -> list[Finding]:
    """Free bytes that share their pages with live chunks: held until the neighbours go, whatever is trimmed."""
    free, _, fragmented = _glibc_free(snap)
    base = rules.base
    part = _mine(base, snap.layers.get("allocator_free"), fragmented)
    if fragmented < rules.floor or not base.crossed(part, rules.share):
        return []
    d = snap.layers["allocator_free"].detail
    in_use_layer = snap.layers.get("allocator_in_use")
    in_use = (in_use_layer.resident or 0) if in_use_layer else 0
    evidence = [f"RSS {mib(snap.rss)} MiB; glibc's free chunks hold {mib(free)} MiB on resident pages, "
                f"{mib(fragmented)} MiB of it ({base.words(part, fragmented)}) on pages that also hold a live "
                f"chunk; in use {mib(in_use)} MiB",
                "method: every free chunk (top, bins, fastbins) walked from each arena's malloc_state; its bytes on "
                "resident pages, less the whole pages inside it (a trim's share)"]
    if rules.base_line:
        evidence.append(rules.base_line)
    for a in sorted(d["arenas"], key=lambda a: -(a.get("fragmented") or 0))[:5]:
        if a.get("fragmented"):
            evidence.append(f"arena {a['arena']}{' (main)' if a['main'] else ''}: resident {mib(a['resident'])} MiB,"
                            f" in use {mib(a.get('in_use_resident'))} MiB, free beside live chunks "
                            f"{mib(a['fragmented'])} MiB")
    if not d.get("fragmentation_complete", True):
        evidence.append("at least: an arena's small bins or fastbins could not be walked, see problems")
        evidence.extend(d.get("problems", []))
    return [Finding(
        "glibc-fragmentation", "warning",
        f"glibc holds {mib(fragmented)} MiB free in pieces between live chunks (fragmentation): no trim releases "
        f"it; it comes back only when the blocks beside it are freed", evidence,
        "another allocator (jemalloc keeps blocks of one size class together), fewer arenas (MALLOC_ARENA_MAX=2), "
        "a lower mmap threshold (MALLOC_MMAP_THRESHOLD_=65536: large blocks in mappings of their own, returned on "
        "free), or restarting long-lived workers: measure which with `memgap lab`")]


READER = Glibc()
