"""Findings on jemalloc's and tcmalloc's free memory, from their own figures read through gdb.

Each fires on a ratio AND a byte floor, as diagnose's glibc finding does, and prints the
figures it read. They read the allocator_free layer ``inspect --deep`` built (gdb_layers):
its detail holds the allocator's figures, directly where it serves malloc, under "beside"
where a prefixed jemalloc sits beside glibc's. It imports none of the gdb readers: memgap
diagnoses inside the process it measures too, where each module loaded is memory it adds.
"""
from __future__ import annotations

from typing import Any

from memgap.diagnose.floors import FLOOR, RETAINED_FLOOR, SHARE, ratio_base
from memgap.documents.routes import MALLCTL, TCMALLOC
from memgap.documents.snapshot import Finding, Snapshot
from memgap.report.units import mib

MALLCTL_ROUTE, TCMALLOC_ROUTE = MALLCTL, TCMALLOC
PURGE_ALL = "arena.4096.purge"  # 4096: MALLCTL_ARENAS_ALL, every arena (jemalloc 5)


def _figures(snap: Snapshot, route: str, key: str) -> dict[str, Any] | None:
    """The allocator's figures (``JemallocDeep`` or ``TcmallocDeep.to_dict()``) the layers were built from."""
    layer = snap.layers.get("allocator_free")
    if layer is None:
        return None
    for detail in (layer.detail, layer.detail.get("beside") or {}):
        figures = detail.get(key)
        if detail.get("route") == route and isinstance(figures, dict):
            return figures
    return None


def _decay(ms: int | None) -> str:
    return "not read" if ms is None else "never (-1)" if ms < 0 else f"{ms} ms"


def jemalloc_findings(snap: Snapshot) -> list[Finding]:
    """jemalloc's dirty and muzzy pages a purge returns now; its retained address space."""
    j = _figures(snap, MALLCTL_ROUTE, "jemalloc")
    if j is None:
        return []
    return [*_jemalloc_dirty(snap, j), *_jemalloc_retained(snap, j)]


def _jemalloc_dirty(snap: Snapshot, j: dict[str, Any]) -> list[Finding]:
    purgeable = j["purgeable"]
    base = ratio_base(snap)  # counted in bytes: no private part to weigh
    if purgeable < FLOOR or not base.crossed(purgeable, SHARE):
        return []
    evidence = [f"RSS {mib(snap.rss)} MiB; jemalloc ({j['symbol']}, {MALLCTL_ROUTE}) holds {mib(j['dirty_bytes'])} "
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


def _jemalloc_retained(snap: Snapshot, j: dict[str, Any]) -> list[Finding]:
    retained = j["retained"]
    if retained < RETAINED_FLOOR or retained < max(j["resident"], 1):
        return []
    return [Finding(
        "jemalloc-retained", "info",
        f"jemalloc keeps {mib(retained)} MiB of address space retained: mapped, not resident (it is not in RSS)",
        [f"stats.retained {mib(retained)} MiB ({retained / max(j['resident'], 1):.1f}x stats.resident "
         f"{mib(j['resident'])} MiB; stats.mapped {mib(j['mapped'])} MiB) ({j['symbol']}, {MALLCTL_ROUTE})",
         "retained extents were purged (their pages given back) and stay mapped for reuse (opt.retain): they count in "
         "VmSize, not in VmRSS or in a cgroup's memory"],
        "nothing to do for RSS; where address space is limited (ulimit -v, alarms on VSZ), retain:false in the "
        "jemalloc's conf unmaps extents instead")]


def tcmalloc_findings(snap: Snapshot) -> list[Finding]:
    """tcmalloc's page heap free bytes, which ReleaseFreeMemory returns now."""
    t = _figures(snap, TCMALLOC_ROUTE, "tcmalloc")
    if t is None:
        return []
    free = t["pageheap_free"]
    base = ratio_base(snap)
    if free < FLOOR or not base.crossed(free, SHARE):
        return []
    return [Finding(
        "tcmalloc-page-heap-free", "warning",
        f"tcmalloc's page heap holds {mib(free)} MiB of free spans a release would return now "
        f"({base.words(free)})",
        [f"RSS {mib(snap.rss)} MiB; tcmalloc.pageheap_free_bytes {mib(free)} MiB, pageheap_unmapped_bytes "
         f"{mib(t['pageheap_unmapped'])} MiB (given back already), generic.current_allocated_bytes "
         f"{mib(t['allocated'])} MiB ({TCMALLOC_ROUTE})",
         f"free objects in the central, transfer and thread caches: {mib(t['caches'])} MiB (kept for reuse: a release "
         "leaves them)",
         "tcmalloc returns free spans a little at a time as others are freed (TCMALLOC_RELEASE_RATE; 0 never): "
         "a process that stops freeing keeps them"],
        "MallocExtension::instance()->ReleaseFreeMemory() after bursts (`memgap inspect --trim PID` calls it and "
        "measures it), or a higher TCMALLOC_RELEASE_RATE")]
