"""The allocators' own figures read through gdb (``inspect --deep``) laid out as rows, each with where it
came from and what it means here (memgap.documents.own_figures): what each reader's ``deep_table`` gives,
kept apart so that a process that snapshots itself loads none of it (as memgap.allocators.gdb_layers)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from memgap.documents.own_figures import FigureRow, OwnFiguresTable
from memgap.documents.routes import MALLCTL, MIMALLOC, OUTSIDE, TCMALLOC
from memgap.report.units import mib

if TYPE_CHECKING:
    from memgap.sources.jemalloc_gdb import JemallocDeep
    from memgap.sources.mimalloc_gdb import MimallocDeep
    from memgap.sources.tcmalloc_gdb import TcmallocDeep


def _decay_words(ms: int | None) -> str:
    return "?" if ms is None else "never" if ms < 0 else f"{ms} ms"


def jemalloc_table(j: JemallocDeep, beside: str) -> OwnFiguresTable:
    """jemalloc's own figures, each with the mallctl name it came from and what it means here; its decay and
    its arenas' dirty pages below."""
    rows = (FigureRow("allocated", j.allocated, "stats.allocated", "handed out: allocator_in_use"),
            FigureRow("active", j.active, "stats.active",
                      f"pages holding them; the {mib(j.page_slack)} MiB slack in them is allocator_free"),
            FigureRow("dirty + muzzy", j.purgeable, "stats.arenas.<i>.pdirty, pmuzzy",
                      f"{mib(j.dirty_bytes)} + {mib(j.muzzy_bytes)} MiB of freed pages a purge returns: "
                      "allocator_free"),
            FigureRow("metadata", j.metadata, "stats.metadata",
                      f"{mib(j.metadata_resident)} MiB resident (resident - active - dirty): allocator_free"),
            FigureRow("resident", j.resident, "stats.resident", "active + dirty + metadata pages"),
            FigureRow("retained", j.retained, "stats.retained", "given back, still mapped: virtual only"),
            FigureRow("mapped", j.mapped, "stats.mapped", "mapped in active extents"))
    background = {None: "?", True: "on", False: "off"}
    lines = [f"decay: dirty pages purged over {_decay_words(j.dirty_decay_ms)}, muzzy over "
             f"{_decay_words(j.muzzy_decay_ms)} (opt.*); background thread {background[j.background_thread_on]} "
             f"(opt.background_thread {background[j.background_thread]})"]
    for a in sorted(j.arenas, key=lambda a: -(a.pdirty + a.pmuzzy))[:8]:
        if a.pdirty or a.pmuzzy:
            lines.append(f"  arena {a.index}: {mib((a.pdirty + a.pmuzzy) * j.page)} MiB dirty+muzzy "
                         f"({a.pdirty} + {a.pmuzzy} pages), decay {_decay_words(a.dirty_decay_ms)} / "
                         f"{_decay_words(a.muzzy_decay_ms)}")
    said = (f"{beside}, beside glibc's malloc: both allocators hold memory; the allocator layers below add "
            "jemalloc's counters to glibc's heaps walked from outside",) if beside else ()
    return OwnFiguresTable(f"jemalloc ({j.symbol}, {MALLCTL}), {len(j.arenas)} of {j.narenas} arenas in use, MiB",
                           "mallctl", rows, said, tuple(lines))


def tcmalloc_table(t: TcmallocDeep) -> OwnFiguresTable:
    """tcmalloc's own figures, each with the property it came from and what it means here."""
    rows = (FigureRow("allocated", t.allocated, "generic.current_allocated_bytes", "handed out: allocator_in_use"),
            FigureRow("page heap free", t.pageheap_free, "tcmalloc.pageheap_free_bytes",
                      "free spans ReleaseFreeMemory returns now: allocator_free"),
            FigureRow("caches", t.caches, "tcmalloc.{central,transfer,thread}_cache_free_bytes",
                      f"free objects kept for reuse ({mib(t.central_cache_free)} central, "
                      f"{mib(t.transfer_cache_free)} transfer, {mib(t.thread_cache_free)} thread): allocator_free"),
            FigureRow("metadata", t.metadata, "generic.total_physical_bytes - mapped",
                      "tcmalloc's bookkeeping: allocator_free"),
            FigureRow("unmapped", t.pageheap_unmapped, "tcmalloc.pageheap_unmapped_bytes",
                      "given back, still mapped: virtual only"),
            FigureRow("heap size", t.heap_size, "generic.heap_size", "all of the above but metadata"))
    return OwnFiguresTable(f"tcmalloc ({TCMALLOC}), MiB", "property", rows)


def mimalloc_table(m: MimallocDeep, rss: int) -> OwnFiguresTable:
    """mimalloc's own figures beside VmRSS: what mi_process_info can say (committed, not allocated)."""
    rss_meaning = "the committed bytes again (mimalloc 2.0's estimate on Linux)" if m.rss_is_commit \
        else "mimalloc's own reading of the resident set"
    rows = (FigureRow("committed", m.current_commit, "current_commit",
                      "memory mimalloc holds: in use and free together (allocator_held)"),
            FigureRow("peak committed", m.peak_commit, "peak_commit", "the most it held"),
            FigureRow("rss", m.current_rss, "current_rss", rss_meaning),
            FigureRow("peak rss", m.peak_rss, "peak_rss", "the process's peak resident set (getrusage)"),
            FigureRow("VmRSS", rss, OUTSIDE, "the process's resident set now"))
    return OwnFiguresTable(f"mimalloc ({MIMALLOC}), MiB; it counts no allocated bytes", "from", rows)
