"""Terminal output for what memgap read inside a process through gdb (--deep, --trim).

Every figure says its route in its column or title: ``outside`` (read from
/proc), ``gdb malloc_info`` (glibc's own report, written inside the process),
``gdb mallctl`` (jemalloc's counters, read by calling its mallctl), ``gdb
MallocExtension`` (tcmalloc's properties), ``gdb mi_process_info`` (mimalloc's
figures) or ``gdb in-process`` (memgap.snapshot() run inside it).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence, Sized
from typing import Any, Protocol, TextIO

from rich.console import RenderableType

import memgap.documents.routes as routes
from memgap.documents.own_figures import OwnFiguresTable
from memgap.documents.runtime_heap import DeepRead
from memgap.documents.snapshot import Snapshot
from memgap.documents.trim import TrimRecord, TrimRoute
from memgap.report.fit import WRAP, Col, fit_table
from memgap.report.terminal import console_on, layers_table, print_findings
from memgap.report.units import mib

# What the tables read of --deep's result, said as shapes (``memgap.inside.gdb.DeepResult`` has them;
# mypy checks it where the command passes it): the renderer takes the figures as they are, without
# importing the code that reads them. Each allocator's own figures come laid out by its reader
# (memgap.documents.own_figures): one table shape for all of them, named by none.



class MallocInfoFigures(Protocol):
    @property
    def arenas(self) -> Sized: ...


class DeepFigures(Protocol):
    """What --deep found inside the process, beside the outside snapshot it was compared with."""

    @property
    def pid(self) -> int: ...
    @property
    def malloc_info(self) -> MallocInfoFigures | None: ...
    @property
    def arenas(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def mmapped(self) -> Mapping[str, Any]: ...
    @property
    def in_process(self) -> Snapshot | None: ...
    @property
    def tables(self) -> Sequence[OwnFiguresTable]: ...
    @property
    def with_allocator(self) -> Snapshot | None: ...
    @property
    def notes(self) -> Sequence[str]: ...
    @property
    def timings(self) -> Mapping[str, float]: ...


def _gdb_timing(seconds: Mapping[str, float]) -> str:
    parts = []
    if "attach" in seconds:
        parts.append(f"attached in {seconds['attach']:.2f} s")
    if "held" in seconds:
        parts.append(f"held {seconds['held']:.2f} s")
    return ", ".join(parts)


# The comparison is the point: both routes' system and free bytes always shown; the rest may give way.
COMPARISON = (("system_gdb", Col(f"system\n{routes.MALLOC_INFO}")),
              ("system_outside", Col(f"system\n{routes.OUTSIDE}")),
              ("free_gdb", Col(f"free\n{routes.MALLOC_INFO}")),
              ("free_resident_outside", Col(f"free resident\n{routes.OUTSIDE}")),
              ("in_use_gdb", Col(f"in use\n{routes.MALLOC_INFO}", optional=1)),
              ("in_use_outside", Col(f"in use resident\n{routes.OUTSIDE}", optional=1)),
              ("trim_releasable_outside", Col(f"trim would release\n{routes.OUTSIDE}", optional=2)))


def arenas_comparison_table(deep: DeepFigures, limit: int = 12, width: int = 120) -> RenderableType:
    info = deep.malloc_info
    assert info is not None
    title = (f"glibc arenas, {routes.MALLOC_INFO} ({len(info.arenas)}) beside the {routes.OUTSIDE} walk "
             f"({sum(1 for r in deep.arenas if r['system_outside'] is not None)}), MiB")
    rows = sorted(deep.arenas, key=lambda r: -max(r["system_gdb"] or 0, r["system_outside"] or 0))

    def total(key: str, subset: Sequence[Mapping[str, Any]]) -> str:
        values = [r[key] for r in subset if r.get(key) is not None]
        return mib(sum(values) if values else None)

    cells = [[f"{r['arena']}{' main' if r['main'] else ''}", *(mib(r.get(k)) for k, _ in COMPARISON)]
             for r in rows[:limit]]
    if len(rows) > limit:
        cells.append([f"{len(rows) - limit} more", *(total(k, rows[limit:]) for k, _ in COMPARISON)])
    cells.append(["total", *(total(k, rows) for k, _ in COMPARISON)])
    return fit_table(title, [Col("arena"), *(c for _, c in COMPARISON)], cells, width,
                     [None] * (len(cells) - 1) + ["bold"])


def own_figures_table(t: OwnFiguresTable, width: int = 120) -> RenderableType:
    """An allocator's own figures as its reader laid them out: each with where it came from and what it means
    here (which goes before where it came from when columns run short)."""
    return fit_table(t.title, [Col("figure"), Col("MiB"), Col(t.source, optional=2), Col("meaning here", WRAP,
                                                                                         optional=1)],
                     [[r.figure, mib(r.bytes), r.source, r.meaning] for r in t.rows], width)


def render_deep(deep: DeepFigures, stream: TextIO, width: int | None = None) -> None:
    console = console_on(stream, width)
    timing = _gdb_timing(deep.timings)
    console.print(f"Inside PID {deep.pid} through gdb" + (f" ({timing})" if timing else "") + ":")
    if deep.malloc_info is not None:
        console.print(arenas_comparison_table(deep, width=console.width))
        gdb, out = deep.mmapped.get("gdb", {}), deep.mmapped.get("outside", {})
        console.print(f"mmapped chunks: {gdb.get('count')} holding {mib(gdb.get('bytes'))} MiB ({routes.MALLOC_INFO}); "
                      f"{out.get('count')} found holding {mib(out.get('bytes'))} MiB, "
                      f"{mib(out.get('resident'))} resident ({routes.OUTSIDE})")
        console.print("  free (malloc_info) counts every free byte, touched or not; free resident (outside) only "
                      "the whole resident pages inside free chunks")
    for table in deep.tables:
        for line in table.before:
            console.print(line)
        console.print(own_figures_table(table, console.width))
        for line in table.after:
            console.print(line)
    if deep.with_allocator is not None:
        console.print(layers_table(deep.with_allocator, console.width))
        if deep.with_allocator.findings:
            console.print("Findings from the allocators' own figures:")
            print_findings(console, deep.with_allocator.findings)
    if deep.in_process is not None:
        console.print(layers_table(deep.in_process, console.width))
    for note in deep.notes:
        console.print(f"note: {note}")


def render_trim(pid: int, trim: TrimRecord, stream: TextIO, width: int | None = None) -> None:
    console = console_on(stream, width)
    details = trim.details
    estimate = details.get("estimate")
    timing = _gdb_timing(details.get("gdb_seconds", {}))
    call = details.get("call", "malloc_trim")
    returned = f" ({call} returned {details['returned']})" if details.get("returned") is not None else ""
    how = "memgap's agent in the process" if trim.route is TrimRoute.AGENT else "gdb"
    console.print(f"a trim in PID {pid} through {how}" + (f" ({timing})" if timing else "") + ": "
                  f"VmRSS {mib(trim.rss_before)} -> {mib(trim.rss_after)} MiB, "
                  f"released {mib(trim.released)} MiB in {(trim.seconds or 0.0) * 1000:.0f} ms{returned}")
    if estimate is not None:
        complete = "" if details.get("estimate_complete", True) else ", some arenas not walked"
        console.print(f"memgap's estimate beforehand ({details.get('estimate_route', routes.OUTSIDE)}): "
                      f"{mib(estimate)} MiB{complete}; "
                      f"actual: {mib(trim.released)} MiB")
    elif details.get("own_before"):
        console.print(f"no estimate beforehand: the allocator counts no free bytes ({details.get('estimate_route')})")
    for name, part in (details.get("parts") or {}).items():
        estimate_part = "not estimated" if part.get("estimate") is None else \
            f"estimated {mib(part['estimate'])} MiB ({part['estimate_route']})"
        console.print(f"  {name}: {part['call']} released {mib(part['released'])} MiB (VmRSS around it); "
                      f"{estimate_part}")
    for line in _own_change(details.get("own_before"), details.get("own_after")):
        console.print(line)
    for note in details.get("notes", []):
        console.print(f"note: {note}")


def _own_change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    """What the allocator's own figures say the release did (tcmalloc's and mimalloc's)."""
    if not before or not after:
        return []
    route = before.get("route", "")
    if "pageheap_free" in before:
        return [f"tcmalloc's own figures ({route}): page heap free {mib(before['pageheap_free'])} -> "
                f"{mib(after['pageheap_free'])} MiB, unmapped {mib(before['pageheap_unmapped'])} -> "
                f"{mib(after['pageheap_unmapped'])} MiB; caches kept: {mib(after['caches'])} MiB"]
    return [f"mimalloc's own figures ({route}): committed {mib(before['current_commit'])} -> "
            f"{mib(after['current_commit'])} MiB"]


def render_after_trim(after: Snapshot, stream: TextIO, width: int | None = None) -> None:
    console = console_on(stream, width)
    console.print(layers_table(after, console.width))



def render_runtimes_deep(runtimes: list[DeepRead], stream: TextIO, width: int | None = None) -> None:
    """What each runtime's own deep route told (``memgap.runtimes.read_deep``), a line or two each."""
    console = console_on(stream, width)
    for rt in runtimes:
        if "note" in rt:
            console.print(f"{rt['runtime']}: {rt['note']}")
            continue
        figures = ", ".join(f"{name} {mib(rt[name])} MiB" for name in ("in_use", "committed", "limit")
                            if rt.get(name) is not None)
        console.print(f"{rt['runtime']} {rt.get('version', '')} by its own route ({rt['route']}): {figures}")
        for name, value in (rt.get("metadata") or {}).items():
            console.print(f"    {name}: {mib(value)} MiB")
        for note in rt.get("notes") or []:
            console.print(f"    note: {note}")
