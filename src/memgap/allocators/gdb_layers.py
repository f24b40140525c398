"""Layers from an allocator's own figures read through gdb (``inspect --deep``): an outside
snapshot's layers, with the allocator's memory moved out of the anonymous pages the outside
walk left unclaimed (other_anon) into allocator_in_use and allocator_free (or allocator_held).

Pure. Where the allocator serves malloc, its figures make the allocator layers; where it sits
beside glibc's (a prefixed jemalloc: Redis, Rust services), glibc's layers, walked from outside,
stay and the jemalloc's figures are added to them, each allocator's share kept in the layers'
``detail["by_allocator"]``. Counted in bytes, not page by page, so the layers they touch carry no
private or PSS split.
"""
from __future__ import annotations

from dataclasses import dataclass

from memgap.documents.snapshot import Layer
from memgap.sources.jemalloc_gdb import ROUTE as MALLCTL_ROUTE, JemallocDeep
from memgap.sources.mimalloc_gdb import ROUTE as MIMALLOC_ROUTE, MimallocDeep
from memgap.sources.tcmalloc_gdb import ROUTE as TCMALLOC_ROUTE, TcmallocDeep


def jemalloc_gdb_layers(layers: dict[str, Layer], rss: int, j: JemallocDeep,
                        beside: str = "") -> tuple[dict[str, Layer], int]:
    """An outside snapshot's layers, with its allocator layers from jemalloc's own counters
    read through gdb (``inspect --deep``); and the new unexplained remainder.

    From outside, jemalloc's pages are unclaimed anonymous memory (other_anon). Its
    counters move them, in this order, each within what is left: the allocated bytes to
    allocator_in_use; then, to allocator_free, the slack within active pages (active -
    allocated), the dirty and muzzy pages a purge returns now, and the metadata's pages
    (resident - active - dirty: jemalloc's bookkeeping is memory it holds and the program
    cannot use, so it goes with the free bytes). Retained address space is given back
    already: virtual only. ``beside`` names the allocator serving malloc where jemalloc
    sits beside it (a prefixed one): that allocator's layers stay and jemalloc's bytes are
    added to them.
    """
    parts, out = _moved(layers, _Counts(
        "jemalloc", MALLCTL_ROUTE, {"allocated": j.allocated, "page_slack": j.page_slack, "purgeable": j.purgeable,
                                    "metadata": j.metadata_resident},
        "pages it counts but never touched, or freed since the outside read",
        in_use_derivation=f"jemalloc stats.allocated ({MALLCTL_ROUTE}, {j.symbol} after an epoch refresh), within "
                          "the anonymous pages the outside walk left unclaimed",
        free_derivation=f"jemalloc's counters ({MALLCTL_ROUTE}): slack within active pages (stats.active - "
                        "stats.allocated), plus dirty and muzzy pages ((pdirty + pmuzzy) x arenas.page, summed over "
                        "the arenas: what arena.<ALL>.purge returns now), plus metadata pages (stats.resident - "
                        "stats.active - dirty pages, at most stats.metadata); virtual adds stats.retained (address "
                        "space kept, not resident)",
        virtual=(j.allocated, j.retained)))
    out["allocator_free"].detail = {
        "route": MALLCTL_ROUTE, "page_slack": parts["page_slack"], "purgeable": parts["purgeable"],
        "dirty": j.dirty_bytes, "muzzy": j.muzzy_bytes, "metadata": parts["metadata"], "retained_virtual": j.retained,
        "trim_releasable": j.purgeable, "trim_estimate_complete": True, "jemalloc": j.to_dict()}
    if beside:
        for name in ("allocator_in_use", "allocator_free"):
            out[name] = _added(layers[name], out[name], beside, f"jemalloc ({j.symbol})")
    return out, rss - sum(layer.resident or 0 for layer in out.values())


@dataclass(frozen=True)
class _Counts:
    """An allocator's own counts, moved out of the unclaimed anonymous pages: the first to
    allocator_in_use, the rest to allocator_free, in order, each within what is left."""

    allocator: str
    route: str
    wanted: dict[str, int]
    clamp_why: str                 # why the counts may exceed the pages, in words
    in_use_derivation: str
    free_derivation: str
    virtual: tuple[int, int]       # allocator_in_use's virtual bytes; what allocator_free's adds to its own


def _moved(layers: dict[str, Layer], c: _Counts) -> tuple[dict[str, int], dict[str, Layer]]:
    """The parts moved (by name), and the layers with them moved (allocator_free's detail left to the caller)."""
    pool = _unclaimed(layers)
    parts, clamped = _take_in_order(pool, c.wanted)
    note = (f"{c.allocator} counts more than the unclaimed anonymous pages hold ({c.clamp_why}): not moved: "
            + clamped) if clamped else ""
    first, *rest = c.wanted
    free = sum(parts[name] for name in rest)
    out = dict(layers)
    out["allocator_in_use"] = Layer("allocator_in_use", parts[first], virtual=c.virtual[0], source=c.route,
                                    note=note, derivation=c.in_use_derivation)
    out["allocator_free"] = Layer("allocator_free", free, virtual=free + c.virtual[1], source=c.route, note=note,
                                  derivation=c.free_derivation)
    out["other_anon"] = _less_other_anon(layers["other_anon"], pool, parts[first] + free, c.allocator, c.route)
    return parts, out


def _added(first: Layer, second: Layer, first_name: str, second_name: str) -> Layer:
    """Two allocators' shares of one layer (in use, or free) as one: the sum, each derivation, each
    share in ``detail["by_allocator"]``; the first's detail kept as it was (glibc's arenas, its trim
    estimate), the second's under ``detail["beside"]``. No private or PSS split: the second's bytes
    are counted, not found page by page."""
    by = {first_name: first.resident, second_name: second.resident}
    return Layer(
        first.name, (first.resident or 0) + (second.resident or 0),
        virtual=None if first.virtual is None else first.virtual + (second.virtual or 0),
        derivation=f"{first_name}: {first.derivation or first.note or 'not measured'}; "
                   f"plus {second_name}: {second.derivation}",
        note="; ".join(filter(None, [first.note, second.note])), source=f"{first.source}; {second.source}",
        detail={**first.detail, "by_allocator": by, "beside": second.detail})


def _unclaimed(layers: dict[str, Layer]) -> int:
    """The anonymous pages the outside walk left unclaimed: where an allocator read through gdb keeps its memory."""
    other = layers["other_anon"]
    return int(other.detail.get("unclaimed_anonymous", other.resident or 0))


def _take_in_order(pool: int, wanted: dict[str, int]) -> tuple[dict[str, int], str]:
    """Each wanted count within what is left of ``pool``, in order; and, in words, what did not fit."""
    parts, left = {}, pool
    for name, want in wanted.items():
        parts[name] = max(0, min(want, left))
        left -= parts[name]
    return parts, ", ".join(f"{name} {wanted[name] - parts[name]} bytes" for name in wanted
                            if parts[name] < wanted[name])


def _less_other_anon(other: Layer, pool: int, moved: int, allocator: str, route: str) -> Layer:
    """other_anon less the bytes an allocator's counters (read through ``route``) moved to its layers."""
    return Layer(
        "other_anon", (other.resident or 0) - moved, derivation=other.derivation + f"; less the {allocator} memory "
        f"its counters ({route}) account for", source=other.source + f", less {route}", note=other.note,
        detail={**other.detail, "unclaimed_anonymous": pool - moved, "moved_to_allocator_layers": moved})


def tcmalloc_gdb_layers(layers: dict[str, Layer], rss: int, t: TcmallocDeep) -> tuple[dict[str, Layer], int]:
    """An outside snapshot's layers, with its allocator layers from tcmalloc's own properties
    read through gdb (``inspect --deep``); and the new unexplained remainder.

    From outside, tcmalloc's pages are unclaimed anonymous memory. Its properties move them,
    in this order, each within what is left: the allocated bytes to allocator_in_use; then,
    to allocator_free, the page heap's free spans (what ReleaseFreeMemory returns now), the
    free objects in the central, transfer and thread caches (kept for reuse: a release
    leaves them), and the metadata. Unmapped spans are given back already: virtual only.
    Counted in bytes, so the moved layers carry no private or PSS split.
    """
    parts, out = _moved(layers, _Counts(
        "tcmalloc", TCMALLOC_ROUTE, {"allocated": t.allocated, "pageheap_free": t.pageheap_free,
                                     "caches": t.caches, "metadata": t.metadata},
        "free spans never touched, or memory freed since the outside read",
        in_use_derivation=f"tcmalloc generic.current_allocated_bytes ({TCMALLOC_ROUTE}), within the anonymous "
                          "pages the outside walk left unclaimed",
        free_derivation=f"tcmalloc's properties ({TCMALLOC_ROUTE}): the page heap's free spans "
                        "(tcmalloc.pageheap_free_bytes: what ReleaseFreeMemory returns now), plus free objects in "
                        "the central, transfer and thread caches (tcmalloc.*_cache_free_bytes: kept for reuse), plus "
                        "metadata (generic.total_physical_bytes - (generic.heap_size - unmapped)); virtual adds "
                        "tcmalloc.pageheap_unmapped_bytes (given back, still mapped)",
        virtual=(t.allocated, t.pageheap_unmapped)))
    out["allocator_free"].detail = {
        "route": TCMALLOC_ROUTE, "releasable": parts["pageheap_free"], "caches": parts["caches"],
        "metadata": parts["metadata"], "unmapped_virtual": t.pageheap_unmapped, "trim_releasable": t.releasable,
        "trim_estimate_complete": True, "tcmalloc": t.to_dict()}
    return out, rss - sum(layer.resident or 0 for layer in out.values())


HELD_LAYER = "allocator_held"  # an allocator's memory, in use and free together, where it counts no split


def mimalloc_gdb_layers(layers: dict[str, Layer], rss: int, mi: MimallocDeep) -> tuple[dict[str, Layer], int]:
    """An outside snapshot's layers with mimalloc's committed memory, read through gdb
    (``inspect --deep``), moved out of other_anon; and the new unexplained remainder.

    mimalloc 2.0 counts no allocated bytes in a release build, so in use and free cannot be
    told apart: allocator_in_use and allocator_free say so, and the committed bytes (within
    the anonymous pages the outside walk left unclaimed) go to one layer of their own,
    allocator_held, shown after them. Committed pages never touched are not resident: where
    the unclaimed pages also hold other memory, allocator_held may take some of it.
    """
    pool = _unclaimed(layers)
    parts, clamped = _take_in_order(pool, {"committed": mi.current_commit})
    why = ("mimalloc 2.0 counts no allocated bytes (its malloc statistics are compiled out of release builds; "
           f"{MIMALLOC_ROUTE} gives committed memory only): in use and free are not told apart; what mimalloc "
           f"holds is under {HELD_LAYER}")
    held = Layer(
        HELD_LAYER, parts["committed"], virtual=mi.current_commit, source=MIMALLOC_ROUTE,
        note=f"mimalloc commits more than the unclaimed anonymous pages hold: not moved: {clamped}" if clamped else "",
        derivation=f"mimalloc's committed bytes (current_commit, {MIMALLOC_ROUTE}), within the anonymous pages the "
                   "outside walk left unclaimed: the program's blocks and mimalloc's free ones together",
        detail={"route": MIMALLOC_ROUTE, "mimalloc": mi.to_dict()})
    out: dict[str, Layer] = {}
    for name, layer in layers.items():
        if name == "allocator_in_use":
            layer = Layer("allocator_in_use", None, source=MIMALLOC_ROUTE, note=why)
        elif name == "allocator_free":
            layer = Layer("allocator_free", None, source=MIMALLOC_ROUTE, note=why,
                          detail={"trim_releasable": None, "trim_estimate_complete": False})
        out[name] = layer
        if name == "allocator_free":
            out[HELD_LAYER] = held
    out["other_anon"] = _less_other_anon(layers["other_anon"], pool, parts["committed"], "mimalloc", MIMALLOC_ROUTE)
    total = sum(layer.resident or 0 for layer in out.values())
    return out, rss - total
