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
from memgap.documents.runtime_heap import DeepRead
from memgap.documents.snapshot import Snapshot
from memgap.documents.trim import TrimRecord, TrimRoute
from memgap.report.fit import WRAP, Col, fit_table
from memgap.report.terminal import console_on, layers_table, print_findings
from memgap.report.units import mib

# What the tables read of --deep's result, said as shapes (``memgap.inside.gdb.DeepResult`` and the
# allocators' figures of ``memgap.sources.*_gdb`` have them; mypy checks it where the command passes
# them): the renderer takes the figures as they are, without importing the code that reads them.



class MallocInfoFigures(Protocol):
    @property
    def arenas(self) -> Sized: ...


class JemallocArenaFigures(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def pdirty(self) -> int: ...
    @property
    def pmuzzy(self) -> int: ...
    @property
    def dirty_decay_ms(self) -> int | None: ...
    @property
    def muzzy_decay_ms(self) -> int | None: ...


class JemallocFigures(Protocol):
    @property
    def symbol(self) -> str: ...
    @property
    def allocated(self) -> int: ...
    @property
    def active(self) -> int: ...
    @property
    def resident(self) -> int: ...
    @property
    def retained(self) -> int: ...
    @property
    def mapped(self) -> int: ...
    @property
    def metadata(self) -> int: ...
    @property
    def page(self) -> int: ...
    @property
    def narenas(self) -> int: ...
    @property
    def arenas(self) -> Sequence[JemallocArenaFigures]: ...
    @property
    def dirty_decay_ms(self) -> int | None: ...
    @property
    def muzzy_decay_ms(self) -> int | None: ...
    @property
    def background_thread(self) -> bool | None: ...
    @property
    def background_thread_on(self) -> bool | None: ...
    @property
    def dirty_bytes(self) -> int: ...
    @property
    def muzzy_bytes(self) -> int: ...
    @property
    def purgeable(self) -> int: ...
    @property
    def page_slack(self) -> int: ...
    @property
    def metadata_resident(self) -> int: ...


class TcmallocFigures(Protocol):
    @property
    def allocated(self) -> int: ...
    @property
    def heap_size(self) -> int: ...
    @property
    def pageheap_free(self) -> int: ...
    @property
    def pageheap_unmapped(self) -> int: ...
    @property
    def central_cache_free(self) -> int: ...
    @property
    def transfer_cache_free(self) -> int: ...
    @property
    def thread_cache_free(self) -> int: ...
    @property
    def caches(self) -> int: ...
    @property
    def metadata(self) -> int: ...


class MimallocFigures(Protocol):
    @property
    def current_rss(self) -> int: ...
    @property
    def peak_rss(self) -> int: ...
    @property
    def current_commit(self) -> int: ...
    @property
    def peak_commit(self) -> int: ...
    @property
    def rss_is_commit(self) -> bool: ...


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
    def jemalloc(self) -> JemallocFigures | None: ...
    @property
    def tcmalloc(self) -> TcmallocFigures | None: ...
    @property
    def mimalloc(self) -> MimallocFigures | None: ...
    @property
    def with_allocator(self) -> Snapshot | None: ...
    @property
    def jemalloc_beside(self) -> str: ...
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


def _decay(ms: int | None) -> str:
    return "?" if ms is None else "never" if ms < 0 else f"{ms} ms"


def jemalloc_table(j: JemallocFigures, width: int = 120) -> RenderableType:
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
    return fit_table(f"jemalloc ({j.symbol}, {routes.MALLCTL}), {len(j.arenas)} of {j.narenas} arenas in use, MiB",
                     [Col("figure"), Col("MiB"), Col("mallctl", optional=2), Col("meaning here", WRAP, optional=1)],
                     rows, width)


def tcmalloc_table(t: TcmallocFigures, width: int = 120) -> RenderableType:
    """tcmalloc's own figures, each with the property it came from and what it means here."""
    rows = [["allocated", mib(t.allocated), "generic.current_allocated_bytes", "handed out: allocator_in_use"],
            ["page heap free", mib(t.pageheap_free), "tcmalloc.pageheap_free_bytes",
             "free spans ReleaseFreeMemory returns now: allocator_free"],
            ["caches", mib(t.caches), "tcmalloc.{central,transfer,thread}_cache_free_bytes",
             f"free objects kept for reuse ({mib(t.central_cache_free)} central, {mib(t.transfer_cache_free)} "
             f"transfer, {mib(t.thread_cache_free)} thread): allocator_free"],
            ["metadata", mib(t.metadata), "generic.total_physical_bytes - mapped",
             "tcmalloc's bookkeeping: allocator_free"],
            ["unmapped", mib(t.pageheap_unmapped), "tcmalloc.pageheap_unmapped_bytes",
             "given back, still mapped: virtual only"],
            ["heap size", mib(t.heap_size), "generic.heap_size", "all of the above but metadata"]]
    return fit_table(f"tcmalloc ({routes.TCMALLOC}), MiB",
                     [Col("figure"), Col("MiB"), Col("property", optional=2), Col("meaning here", WRAP, optional=1)],
                     rows, width)


def mimalloc_table(m: MimallocFigures, rss: int, width: int = 120) -> RenderableType:
    """mimalloc's own figures beside VmRSS: what mi_process_info can say (committed, not allocated)."""
    rss_meaning = "the committed bytes again (mimalloc 2.0's estimate on Linux)" if m.rss_is_commit \
        else "mimalloc's own reading of the resident set"
    rows = [["committed", mib(m.current_commit), "current_commit",
             "memory mimalloc holds: in use and free together (allocator_held)"],
            ["peak committed", mib(m.peak_commit), "peak_commit", "the most it held"],
            ["rss", mib(m.current_rss), "current_rss", rss_meaning],
            ["peak rss", mib(m.peak_rss), "peak_rss", "the process's peak resident set (getrusage)"],
            ["VmRSS", mib(rss), routes.OUTSIDE, "the process's resident set now"]]
    return fit_table(f"mimalloc ({routes.MIMALLOC}), MiB; it counts no allocated bytes",
                     [Col("figure"), Col("MiB"), Col("from", optional=2), Col("meaning here", WRAP, optional=1)],
                     rows, width)


def _jemalloc_lines(j: JemallocFigures) -> list[str]:
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
    if deep.jemalloc is not None:
        if deep.jemalloc_beside:
            console.print(f"{deep.jemalloc_beside}, beside glibc's malloc: both allocators hold memory; the "
                          "allocator layers below add jemalloc's counters to glibc's heaps walked from outside")
        console.print(jemalloc_table(deep.jemalloc, console.width))
        for line in _jemalloc_lines(deep.jemalloc):
            console.print(line)
    if deep.tcmalloc is not None:
        console.print(tcmalloc_table(deep.tcmalloc, console.width))
    if deep.mimalloc is not None:
        rss = deep.with_allocator.rss if deep.with_allocator is not None else 0
        console.print(mimalloc_table(deep.mimalloc, rss, console.width))
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
