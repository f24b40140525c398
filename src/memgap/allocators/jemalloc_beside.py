"""A jemalloc beside glibc's malloc, read and purged through gdb with ``inspect --deep`` and ``--trim``.

A program that links jemalloc in under a prefix (Redis's ``je_``, tikv-jemallocator's
``_rjem_``) calls it by those names while glibc's malloc still serves the C library and any
plain ``malloc``: two allocators, both holding memory. A stripped one keeps the prefixed API
in its dynamic symbol table when it exports it (Redis links with -rdynamic): gdb calls
``je_mallctl`` from there as from a symbol table. This module picks that mallctl
(``beside_jemalloc``) and runs the trim of both (glibc's ``malloc_trim(0)``, then jemalloc's
``arena.<ALL>.purge``), VmRSS read around each call; ``deep`` reads the figures and
``gdb_layers`` adds them to glibc's layers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from memgap.allocators.base import GdbPlan
from memgap.allocators.detect import signs
from memgap.documents.snapshot import Snapshot
from memgap.documents.trim import TrimDetails, TrimPart, TrimRecord, TrimRoute
from memgap.errors import Unsupported
from memgap.sources import jemalloc_gdb
from memgap.sources.allocator import allocator_label, process_root
from memgap.sources.procfs import ProcReader, status_int

if TYPE_CHECKING:
    from memgap.sources.gdb_options import GdbOptions


def beside_jemalloc(pid: int, outside: Snapshot, proc_root: str = "/proc") -> tuple[str, str, str]:
    """(mallctl symbol, label, note) of the first jemalloc beside glibc's malloc whose mallctl gdb can
    call; ("", "", why not) where there is one but none can be called; ("", "", "") where there is none."""
    serving = outside.allocator.serving
    beside = [f for f in outside.allocator.beside if f.name == "jemalloc"]
    if serving is None or serving.name != "glibc" or not beside:
        return "", "", ""
    root = process_root(f"{proc_root}/{pid}")
    reasons = []
    for entry in beside:
        try:
            return jemalloc_gdb.mallctl_symbol(entry.to_dict(), signs().query, root), allocator_label(entry), ""
        except Unsupported as exc:
            reasons.append(str(exc))
    return "", "", ("jemalloc beside glibc's malloc not read (its memory stays under other_anon): "
                    + "; ".join(reasons))


def beside_plan(pid: int, outside: Snapshot, proc_root: str = "/proc") -> tuple[GdbPlan | None, str, str]:
    """What --deep reads of a jemalloc beside glibc's malloc (its mallctl), its label, and why not: as
    ``beside_jemalloc``, the symbol as the plan the jemalloc reader's ``read_deep`` takes."""
    symbol, label, why_not = beside_jemalloc(pid, outside, proc_root)
    return (GdbPlan("jemalloc", symbol) if symbol else None), label, why_not


def trim_glibc_and_jemalloc(pid: int, before: Snapshot, start_time: int | None, options: GdbOptions,
                            symbol: str) -> TrimRecord:
    """glibc's ``malloc_trim(0)``, then the jemalloc beside it purged through ``symbol``: VmRSS read
    before, between and after, so each call's release is measured; the estimates beside them
    (glibc's from the outside walk, jemalloc's dirty and muzzy pages read just before the purge)."""
    detail = before.layers["allocator_free"].detail if "allocator_free" in before.layers else {}
    reader = ProcReader(pid, options.proc_root)
    session = options.session(pid, start_time)
    with session:
        rss_before = status_int(reader.status(), "VmRSS")
        returned = session.call_int("(int) malloc_trim(0)", "malloc_trim")
        rss_between = status_int(reader.status(), "VmRSS")
        try:
            figures: jemalloc_gdb.JemallocDeep | None = jemalloc_gdb.read_jemalloc(session, symbol)
        except Unsupported as exc:  # no statistics (tikv-jemallocator's default build): the purge works all the same
            figures, notes = None, [f"jemalloc's estimate: {exc}"]
        else:
            notes = []
        rss_read = status_int(reader.status(), "VmRSS")  # the read mallocs a block or two: not the purge's
        purged = jemalloc_gdb.purge(session, symbol)
        rss_after = status_int(reader.status(), "VmRSS")
    glibc_estimate = detail.get("trim_releasable")
    parts = {
        "glibc": TrimPart(call="malloc_trim(0)", returned=returned, released=max(0, rss_before - rss_between),
                          estimate=glibc_estimate, estimate_route="outside"),
        "jemalloc": TrimPart(call=f'{symbol}("arena.{jemalloc_gdb.MALLCTL_ARENAS_ALL}.purge")', returned=purged,
                             released=max(0, rss_read - rss_after), estimate=figures.purgeable if figures else None,
                             estimate_route=jemalloc_gdb.ROUTE, dirty=figures.dirty_bytes if figures else None,
                             muzzy=figures.muzzy_bytes if figures else None),
    }
    seconds = session.timings.get("malloc_trim", 0.0) + session.timings.get("mallctl purge", 0.0)
    return TrimRecord(rss_before, rss_after, TrimRoute.GDB, seconds=seconds, details=TrimDetails(
        call=f"{parts['glibc']['call']}, then {parts['jemalloc']['call']}", returned=None,
        estimate=(glibc_estimate or 0) + (figures.purgeable if figures else 0),
        estimate_complete=bool(detail.get("trim_estimate_complete")) and glibc_estimate is not None
        and figures is not None,
        estimate_route=f"outside (glibc) + {jemalloc_gdb.ROUTE} (jemalloc)", estimate_rss=before.rss,
        parts=parts,
        gdb_seconds={k: round(v, 4) for k, v in session.timings.items() if k in ("attach", "held")},
        notes=notes + list(session.notes)))
