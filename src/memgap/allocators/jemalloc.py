"""jemalloc: its own counters (mallctl's stats, in this process or by the agent: memgap.sources.jemalloc)
placed in its mappings (private anonymous MAP_NORESERVE ones, told by smaps' VmFlags); through gdb,
its mallctl read and its arenas purged (memgap.sources.jemalloc_gdb); its findings on dirty pages and
retained address space.
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
from memgap.errors import MemgapError, Unsupported
from memgap.report.units import mib

if TYPE_CHECKING:
    from memgap.documents.allocator import FoundAllocator
    from memgap.documents.own_figures import OwnFiguresTable
    from memgap.documents.snapshot import Layer, Snapshot
    from memgap.documents.trim import TrimRecord
    from memgap.sources.allocator import AllocatorDetection
    from memgap.sources.gdb_attach import GdbSession
    from memgap.sources.gdb_options import GdbOptions
    from memgap.sources.jemalloc import JemallocStats
    from memgap.sources.procfs import Mapping, ProcReader

OWNER = "jemalloc"
PURGE_ALL = "arena.4096.purge"  # 4096: MALLCTL_ARENAS_ALL, every arena (jemalloc 5)
ROUTE = "gdb mallctl"  # memgap.sources.jemalloc_gdb's, not imported: a process that snapshots itself needs no gdb
# pid -> MAP_NORESERVE flag of each private anonymous mapping, as last read from smaps
_NORESERVE: dict[int, dict[tuple[int, int], bool]] = {}


class Jemalloc(AllocatorReader):
    name = "jemalloc"
    # its decay times: muzzy pages (MADV_FREEd) stay in RSS until the kernel wants them, muzzy_decay_ms=0
    # skips that stage
    own_variants = ("jemalloc:dirty_decay_ms=1000,muzzy_decay_ms=0",
                    "jemalloc:background_thread=true,dirty_decay_ms=0,muzzy_decay_ms=0")
    owner = OWNER
    deep_key = ROUTE
    calls = ("reads jemalloc's statistics by calling its mallctl", "purges jemalloc's pages")
    deep_label = "mallctl"
    read_beside = True
    # its API under any prefix: je_ in Redis, _rjem_ from the tikv-jemallocator crate, je_arrow_ in Arrow
    signs = AllocatorSigns(api=("mallctl", "mallctlnametomib", "mallctlbymib", "malloc_stats_print", "mallocx",
                                "rallocx", "xallocx", "sallocx", "sdallocx", "nallocx"),
                           markers=(b"<jemalloc>: ",), libraries=("libjemalloc",))

    def mappings(self, reader: ProcReader, maps: list[Mapping]) -> list[tuple[int, int]] | None:
        try:  # see sources.jemalloc.jemalloc_mappings
            return _noreserve_mappings(reader, maps)
        except MemgapError:
            return None

    def in_process(self, notes: dict[str, str]) -> OwnFigures:
        from memgap.sources.jemalloc import read_jemalloc_stats

        try:
            return OwnFigures(jemalloc=read_jemalloc_stats())
        except Unsupported as exc:
            notes["allocator_in_use"] = notes["allocator_free"] = str(exc)
            return OwnFigures()

    def counts(self, figures: OwnFigures) -> bool:
        return figures.jemalloc is not None

    def outside_note(self, detection: AllocatorDetection) -> str:
        return unread_note(detection, "its mallctl", True)

    def share(self, m: Measurements, owned: Owners) -> Share | None:
        return counted_share(_jemalloc_split(m.jemalloc, owned), owned) if m.jemalloc is not None else None

    def deep_plan(self, serving: FoundAllocator, root: str) -> GdbPlan | None:
        from memgap.allocators.detect import signs
        from memgap.sources import jemalloc_gdb

        return GdbPlan(self.name, jemalloc_gdb.mallctl_symbol(serving.to_dict(), signs().query, root))

    def read_deep(self, session: GdbSession, plan: GdbPlan) -> DeepFigures:
        from memgap.sources import jemalloc_gdb

        return jemalloc_gdb.read_jemalloc(session, plan.symbol)

    def deep_layers(self, layers: dict[str, Layer], rss: int, figures: DeepFigures,
                    beside: str = "") -> tuple[dict[str, Layer], int]:
        from memgap.allocators.gdb_layers import jemalloc_gdb_layers
        from memgap.sources.jemalloc_gdb import JemallocDeep

        assert isinstance(figures, JemallocDeep)  # what read_deep gave
        return jemalloc_gdb_layers(layers, rss, figures, beside)

    def deep_table(self, figures: DeepFigures, rss: int, beside: str = "") -> OwnFiguresTable:
        from memgap.allocators.gdb_tables import jemalloc_table
        from memgap.sources.jemalloc_gdb import JemallocDeep

        assert isinstance(figures, JemallocDeep)  # what read_deep gave
        return jemalloc_table(figures, beside)

    def release(self, pid: int, before: Snapshot, start_time: int | None, options: GdbOptions,
                plan: GdbPlan | None) -> TrimRecord:
        """jemalloc's trim: ``arena.<ALL>.purge`` through its mallctl (the call memgap's native agent makes),
        VmRSS around it, beside the dirty and muzzy pages jemalloc counted just before (the estimate)."""
        from memgap.documents.trim import TrimDetails, TrimRecord, TrimRoute
        from memgap.sources import jemalloc_gdb
        from memgap.sources.gdb_attach import gdb_seconds
        from memgap.sources.procfs import ProcReader, status_int

        assert plan is not None  # gdb.trim's: deep_plan gave one
        symbol = plan.symbol
        reader = ProcReader(pid, options.proc_root)
        session = options.session(pid, start_time)
        with session:
            figures = jemalloc_gdb.read_jemalloc(session, symbol)
            rss_before = status_int(reader.status(), "VmRSS")
            returned = jemalloc_gdb.purge(session, symbol)
            rss_after = status_int(reader.status(), "VmRSS")
        return TrimRecord(rss_before, rss_after, TrimRoute.GDB, seconds=session.timings.get("mallctl purge", 0.0),
                          details=TrimDetails(
            call=f"{symbol}(\"arena.{jemalloc_gdb.MALLCTL_ARENAS_ALL}.purge\")", returned=returned,
            estimate=figures.purgeable, estimate_complete=True, estimate_route=ROUTE,
            estimate_rss=before.rss, estimate_parts={"dirty": figures.dirty_bytes, "muzzy": figures.muzzy_bytes},
            gdb_seconds=gdb_seconds(session), notes=list(session.notes)))

    def findings(self, snap: Snapshot, rules: Rules) -> list[Finding]:
        """jemalloc's dirty and muzzy pages a purge returns now; its retained address space."""
        j = deep_figures(snap, ROUTE, self.name)
        if j is None:
            return []
        return [*_jemalloc_dirty(snap, j, rules), *_jemalloc_retained(snap, j, rules)]


def _noreserve_mappings(reader: ProcReader, maps: list[Mapping]) -> list[tuple[int, int]]:
    """The private anonymous mappings with MAP_NORESERVE, sorted.

    smaps walks every page table (15 ms for a 200 MiB process here, maps under 1 ms), and
    a mapping keeps the flag its mmap() gave it for life, splits included: smaps is read
    again only when maps shows a private anonymous range it has not seen.
    """
    from memgap.sources.jemalloc import noreserve_flags

    anon = [(m.start, m.end) for m in maps if not m.is_file and not m.path and m.perms[3] == "p"]
    known = _NORESERVE.get(reader.numeric_pid)
    if known is None or any(r not in known for r in anon):
        known = noreserve_flags(reader.smaps())
        if len(_NORESERVE) >= 64:  # processes seen by a long recording: forget the oldest
            del _NORESERVE[next(iter(_NORESERVE))]
        _NORESERVE[reader.numeric_pid] = known
    return sorted(r for r in anon if known.get(r))


def _jemalloc_split(j: JemallocStats, owned: Owners) -> Split:
    # every byte jemalloc maps (stats.mapped) must fit in the mappings found
    virtual = owned.virtual.get(OWNER, 0)
    found = owned.count.get(OWNER, 0) > 0 and virtual >= j.mapped
    in_use, free, unclaimed = within_mappings(OWNER, owned, j.allocated, j.free_bound, found)
    where = "resident pages of jemalloc's own mappings (private anonymous MAP_NORESERVE ones: smaps " \
            "VmFlags 'nr'; pages from pagemap)"
    detail = {"allocated": j.allocated, "active": j.active, "resident": j.resident, "muzzy": j.muzzy,
              "retained": j.retained, "mapped": j.mapped, "metadata": j.metadata, "narenas": j.narenas,
              "mappings": owned.count.get(OWNER, 0), "mappings_virtual": virtual,
              "mappings_resident": owned(OWNER),
              # what stats.resident (plus muzzy pages) claims beyond the resident pages found
              "counted_not_resident": max(0, j.resident + j.muzzy - owned(OWNER)) if found else None}
    return Split(
        OWNER, in_use, free, unclaimed,
        in_use_how=f"jemalloc stats.allocated, within the {where}" if found
        else "jemalloc stats.allocated, within unclaimed anonymous pages",
        free_how=f"{where} minus the in-use bytes, at most stats.resident + muzzy pages - stats.allocated "
                 "(jemalloc's own upper bound: dirty pages, page slack, metadata)",
        source="jemalloc stats, smaps, pagemap", detail={"jemalloc": detail},
        note="" if found else f"jemalloc's mappings not found (MAP_NORESERVE mappings: {virtual} bytes for "
                              f"stats.mapped {j.mapped}; vm.overcommit_memory 2?): its free pages are not "
                              "measured and stay in other_anon")


def _decay(ms: int | None) -> str:
    return "not read" if ms is None else "never (-1)" if ms < 0 else f"{ms} ms"





def _jemalloc_dirty(snap: Snapshot, j: dict[str, Any], rules: Rules) -> list[Finding]:
    purgeable = j["purgeable"]
    base = rules.base  # counted in bytes: no private part to weigh
    if purgeable < rules.floor or not base.crossed(purgeable, rules.share):
        return []
    evidence = [f"RSS {mib(snap.rss)} MiB; jemalloc ({j['symbol']}, {ROUTE}) holds {mib(j['dirty_bytes'])} "
                f"MiB of dirty pages and {mib(j['muzzy_bytes'])} MiB of muzzy ones "
                f"({base.words(purgeable)}): "
                "freed by the program, still resident",
                f"stats.allocated {mib(j['allocated'])} MiB, stats.active {mib(j['active'])} MiB, "
                f"stats.resident {mib(j['resident'])} MiB"]
    for a in sorted(j["arenas"], key=lambda a: -(a["pdirty"] + a["pmuzzy"]))[:5]:
        if a["pdirty"] or a["pmuzzy"]:
            evidence.append(f"arena {a['index']}: {mib(a['pdirty'] * j['page'])} MiB dirty, "
                            f"{mib(a['pmuzzy'] * j['page'])} MiB muzzy; arena.{a['index']}.dirty_decay_ms "
                            f"{_decay(a['dirty_decay_ms'])}, muzzy_decay_ms {_decay(a['muzzy_decay_ms'])}")
    decay = j.get("dirty_decay_ms")
    keeps = ("opt.dirty_decay_ms is -1: jemalloc never purges them on its own" if decay is not None and decay < 0
             else f"opt.dirty_decay_ms {_decay(decay)}: jemalloc purges them over that time, and only as "
                  "allocations tick its clock" + ("" if j.get("background_thread_on") else
                                                  " (background_thread off): a process gone idle keeps them"))
    evidence.append(keeps)
    conf = f"its {j['symbol'][:-len('mallctl')]}malloc_conf symbol or its MALLOC_CONF variable"
    return [Finding(
        "jemalloc-dirty", "warning",
        f"jemalloc holds {mib(purgeable)} MiB of freed pages a purge would return now "
        f"({base.words(purgeable)})", evidence,
        f"purge after bursts: mallctl(\"{PURGE_ALL}\") in the program (`memgap inspect --trim "
        f"PID` does it and measures it); or a shorter decay (dirty_decay_ms:1000 in {conf}) "
        "with background_thread:true "
        "so that an idle process purges too")]


def _jemalloc_retained(snap: Snapshot, j: dict[str, Any], rules: Rules) -> list[Finding]:
    retained = j["retained"]
    if retained < rules.retained_floor or retained < max(j["resident"], 1):
        return []
    return [Finding(
        "jemalloc-retained", "info",
        f"jemalloc keeps {mib(retained)} MiB of address space retained: mapped, not resident (it is not in RSS)",
        [f"stats.retained {mib(retained)} MiB ({retained / max(j['resident'], 1):.1f}x stats.resident "
         f"{mib(j['resident'])} MiB; stats.mapped {mib(j['mapped'])} MiB) ({j['symbol']}, {ROUTE})",
         "retained extents were purged (their pages given back) and stay mapped for reuse (opt.retain): they count in "
         "VmSize, not in VmRSS or in a cgroup's memory"],
        "nothing to do for RSS; where address space is limited (ulimit -v, alarms on VSZ), retain:false in the "
        "jemalloc's conf unmaps extents instead")]


READER = Jemalloc()
