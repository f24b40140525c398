"""Terminal output for what memgap read inside a process through gdb (--deep, --trim).

Every figure says its route in its column or title: ``outside`` (read from
/proc), ``gdb malloc_info`` (glibc's own report, written inside the process),
``gdb mallctl`` (jemalloc's counters, read by calling its mallctl) or ``gdb
in-process`` (memgap.snapshot() run inside it).
"""
from __future__ import annotations

from typing import Any, TextIO

from rich.console import RenderableType

from ..deep import ROUTE_MALLCTL, ROUTE_MALLOC_INFO, ROUTE_OUTSIDE, DeepResult
from ..model import Snapshot
from ..sources.jemalloc_gdb import JemallocDeep
from ..units import mib
from .fit import WRAP, Col, fit_table
from .terminal import _console, layers_table


def _gdb_timing(seconds: dict[str, float]) -> str:
    parts = []
    if "attach" in seconds:
        parts.append(f"attached in {seconds['attach']:.2f} s")
    if "held" in seconds:
        parts.append(f"held {seconds['held']:.2f} s")
    return ", ".join(parts)


# The comparison is the point: both routes' system and free bytes always shown; the rest may give way.
COMPARISON = (("system_gdb", Col(f"system\n{ROUTE_MALLOC_INFO}")), ("system_outside", Col(f"system\n{ROUTE_OUTSIDE}")),
              ("free_gdb", Col(f"free\n{ROUTE_MALLOC_INFO}")),
              ("free_resident_outside", Col(f"free resident\n{ROUTE_OUTSIDE}")),
              ("in_use_gdb", Col(f"in use\n{ROUTE_MALLOC_INFO}", optional=1)),
              ("trim_releasable_outside", Col(f"trim would release\n{ROUTE_OUTSIDE}", optional=2)))


def arenas_comparison_table(deep: DeepResult, limit: int = 12, width: int = 120) -> RenderableType:
    info = deep.malloc_info
    assert info is not None
    title = (f"glibc arenas, {ROUTE_MALLOC_INFO} ({len(info.arenas)}) beside the {ROUTE_OUTSIDE} walk "
             f"({sum(1 for r in deep.arenas if r['system_outside'] is not None)}), MiB")
    rows = sorted(deep.arenas, key=lambda r: -max(r["system_gdb"] or 0, r["system_outside"] or 0))

    def total(key: str, subset: list[dict[str, Any]]) -> str:
        values = [r[key] for r in subset if r[key] is not None]
        return mib(sum(values) if values else None)

    cells = [[f"{r['arena']}{' main' if r['main'] else ''}", *(mib(r[k]) for k, _ in COMPARISON)]
             for r in rows[:limit]]
    if len(rows) > limit:
        cells.append([f"{len(rows) - limit} more", *(total(k, rows[limit:]) for k, _ in COMPARISON)])
    cells.append(["total", *(total(k, rows) for k, _ in COMPARISON)])
    return fit_table(title, [Col("arena"), *(c for _, c in COMPARISON)], cells, width,
                     [None] * (len(cells) - 1) + ["bold"])


def _decay(ms: int | None) -> str:
    return "?" if ms is None else "never" if ms < 0 else f"{ms} ms"


def jemalloc_table(j: JemallocDeep, width: int = 120) -> RenderableType:
    """jemalloc's own figures, each with the mallctl name it came from and what it means here."""
    rows = [["allocated", mib(j.allocated), "stats.allocated", "handed out: allocator_in_use"],
            ["active", mib(j.active), "stats.active",
             f"pages holding them; the {mib(j.page_slack)} MiB slack in them is allocator_free"],
            ["dirty + muzzy", mib(j.purgeable), "stats.arenas.<i>.pdirty, pmuzzy",
             f"{mib(j.dirty_bytes)} + {mib(j.muzzy_bytes)} MiB of freed pages a purge returns: allocator_free"],
            ["metadata", mib(j.metadata), "stats.metadata",
             f"{mib(j.metadata_resident)} MiB resident (resident - active - dirty): allocator_free"],
            ["resident", mib(j.resident), "stats.resident", "active + dirty + metadata pages"],
            ["retained", mib(j.retained), "stats.retained", "given back, still mapped: virtual only"],
            ["mapped", mib(j.mapped), "stats.mapped", "mapped in active extents"]]
    # what each figure means here goes before the mallctl name it came from when columns run short
    return fit_table(f"jemalloc ({j.symbol}, {ROUTE_MALLCTL}), {len(j.arenas)} of {j.narenas} arenas in use, MiB",
                     [Col("figure"), Col("MiB"), Col("mallctl", optional=2), Col("meaning here", WRAP, optional=1)],
                     rows, width)


def _jemalloc_lines(j: JemallocDeep) -> list[str]:
    background = {None: "?", True: "on", False: "off"}
    lines = [f"decay: dirty pages purged over {_decay(j.dirty_decay_ms)}, muzzy over {_decay(j.muzzy_decay_ms)} "
             f"(opt.*); background thread {background[j.background_thread_on]} "
             f"(opt.background_thread {background[j.background_thread]})"]
    for a in sorted(j.arenas, key=lambda a: -(a.pdirty + a.pmuzzy))[:8]:
        if a.pdirty or a.pmuzzy:
            lines.append(f"  arena {a.index}: {mib((a.pdirty + a.pmuzzy) * j.page)} MiB dirty+muzzy "
                         f"({a.pdirty} + {a.pmuzzy} pages), decay {_decay(a.dirty_decay_ms)} / "
                         f"{_decay(a.muzzy_decay_ms)}")
    return lines


def render_deep(deep: DeepResult, stream: TextIO, width: int | None = None) -> None:
    console = _console(stream, width)
    timing = _gdb_timing(deep.timings)
    console.print(f"Inside PID {deep.pid} through gdb" + (f" ({timing})" if timing else "") + ":")
    if deep.malloc_info is not None:
        console.print(arenas_comparison_table(deep, width=console.width))
        gdb, out = deep.mmapped.get("gdb", {}), deep.mmapped.get("outside", {})
        console.print(f"mmapped chunks: {gdb.get('count')} holding {mib(gdb.get('bytes'))} MiB ({ROUTE_MALLOC_INFO}); "
                      f"{out.get('count')} found holding {mib(out.get('bytes'))} MiB, "
                      f"{mib(out.get('resident'))} resident ({ROUTE_OUTSIDE})")
        console.print("  free (malloc_info) counts every free byte, touched or not; free resident (outside) only "
                      "the whole resident pages inside free chunks")
    if deep.jemalloc is not None:
        console.print(jemalloc_table(deep.jemalloc, console.width))
        for line in _jemalloc_lines(deep.jemalloc):
            console.print(line)
    if deep.with_allocator is not None:
        console.print(layers_table(deep.with_allocator, console.width))
    if deep.in_process is not None:
        console.print(layers_table(deep.in_process, console.width))
    for note in deep.notes:
        console.print(f"note: {note}")


def render_trim(pid: int, trim: dict[str, Any], stream: TextIO, width: int | None = None) -> None:
    console = _console(stream, width)
    estimate = trim.get("estimate")
    timing = _gdb_timing(trim.get("gdb_seconds", {}))
    call = trim.get("call", "malloc_trim")
    returned = f" ({call} returned {trim['returned']})" if trim.get("returned") is not None else ""
    how = "memgap's agent in the process" if trim.get("route") == "agent" else "gdb"
    console.print(f"a trim in PID {pid} through {how}" + (f" ({timing})" if timing else "") + ": "
                  f"VmRSS {mib(trim['rss_before'])} -> {mib(trim['rss_after'])} MiB, "
                  f"released {mib(trim['released'])} MiB in {trim['seconds'] * 1000:.0f} ms{returned}")
    if estimate is not None:
        complete = "" if trim.get("estimate_complete", True) else ", some arenas not walked"
        console.print(f"memgap's estimate beforehand ({trim.get('estimate_route', ROUTE_OUTSIDE)}): "
                      f"{mib(estimate)} MiB{complete}; "
                      f"actual: {mib(trim['released'])} MiB")
    for note in trim.get("notes", []):
        console.print(f"note: {note}")


def render_after_trim(after: Snapshot, stream: TextIO, width: int | None = None) -> None:
    console = _console(stream, width)
    console.print(layers_table(after, console.width))

