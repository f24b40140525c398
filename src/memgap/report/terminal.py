"""Terminal tables for snapshots, trees and runs (rich)."""
from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, RenderableType

from memgap.documents.allocator import AllocatorInfo
from memgap.documents.snapshot import PYTHON_LAYERS, Finding, Snapshot, TreeTotals, layer_figure
from memgap.report.cgroup import cgroup_lines
from memgap.report.fit import CUT, WRAP, Col, fit_table
from memgap.report.gpu import gpu_lines, tree_gpu_lines
from memgap.report.units import mib, pct

if TYPE_CHECKING:  # a tree's document comes with the run's and the lab's: `inspect PID` needs none of them
    from memgap.documents.records import TreeDocument

LAYER_TITLES = {
    "files": "files (code, libraries, mapped files)",
    "shared_memory": "shared memory (SysV, POSIX, memfd, MAP_SHARED)",
    "gpu_driver": "GPU driver's mappings (/dev/nvidia*)",
    "pinned_host": "likely pinned host memory (CUDA)",
    "python_objects": "Python objects",
    "pymalloc_free": "pymalloc free",
    "runtime_heap": "runtime heap (Go, Java, V8)",
    "runtime_metadata": "runtime's own structures",
    "allocator_in_use": "C allocator in use",
    "allocator_free": "C allocator free (retained)",
    "allocator_held": "C allocator held (in use + free)",
    "stacks": "thread stacks",
    "static_data": "static data (.bss) of its objects",
    "other_anon": "other anonymous",
}


# Short column names for tables with one column per layer.
LAYER_SHORT = {
    "files": "files", "shared_memory": "shmem", "gpu_driver": "gpu drv",
    "pinned_host": "pinned?", "python_objects": "py objs", "pymalloc_free": "pymalloc free",
    "runtime_heap": "rt heap", "runtime_metadata": "rt meta",
    "allocator_in_use": "alloc used", "allocator_free": "alloc free", "allocator_held": "alloc held",
    "stacks": "stacks", "static_data": "static",
    "other_anon": "other anon",
}


# Where a terminal is too narrow for every layer's column, the order in which they give way
# (the last first): what the allocator holds free is what memgap is most often asked about.
LAYER_RANK = {"allocator_free": 1, "python_objects": 2, "runtime_heap": 2, "allocator_in_use": 3, "files": 4,
              "shared_memory": 5, "pinned_host": 5,
              "gpu_driver": 6, "pymalloc_free": 6, "runtime_metadata": 6, "other_anon": 7, "static_data": 7,
              "stacks": 8}
UNEXPLAINED_RANK = 9


def console_on(stream: TextIO, width: int | None = None) -> Console:
    """A console on ``stream``: the terminal's width on a terminal, 120 columns elsewhere.
    No emoji codes: a ``:name:`` inside a printed setting or path must stay as it is."""
    if width is None and not (hasattr(stream, "isatty") and stream.isatty()):
        width = 120
    return Console(file=stream, width=width, highlight=False, soft_wrap=False, markup=False, emoji=False)


def layer_columns(names: Sequence[str]) -> list[Col]:
    """One figure column per layer, then the unexplained rest, each free to give way."""
    return [*(Col(LAYER_SHORT.get(n, n), optional=LAYER_RANK.get(n, UNEXPLAINED_RANK)) for n in names),
            Col("unexpl.", optional=UNEXPLAINED_RANK)]


def layers_table(snap: Snapshot, width: int = 120) -> RenderableType:
    where = f"PID {snap.pid}" + (f" at {snap.phase}" if snap.phase else "")
    title = f"{where}: RSS {mib(snap.rss)} MiB ({snap.route}, allocator {snap.allocator.name})"
    shares = snap.pss_unexplained is not None  # outside: each layer's private pages and PSS
    cols = [Col("layer", WRAP), Col("resident MiB"), Col("of RSS"), Col("virtual MiB", optional=1),
            *([Col("private MiB", optional=3), Col("PSS MiB", optional=4)] if shares else []),
            Col("measured from", WRAP, optional=2, most=40)]

    def row(name: str, figures: list[str], private: list[str], source: str) -> list[str]:
        return [name, *figures, *(private if shares else []), source]

    rows: list[list[str]] = []
    styles: list[str | None] = []
    for name, layer in snap.layers.items():
        if snap.not_python and name in PYTHON_LAYERS:
            continue  # no Python in it: nothing to say about Python
        if layer.resident is None:
            rows.append(row(LAYER_TITLES.get(name, name), ["-", "-", "-"], ["-", "-"], f"not measured: {layer.note}"))
            styles.append("dim")
            continue
        rows.append(row(LAYER_TITLES.get(name, name), [mib(layer.resident), pct(layer.resident, snap.rss),
                                                       mib(layer.virtual)], [mib(layer.private), mib(layer.pss)],
                        layer.source or layer.derivation))
        styles.append(None)
    rows.append(row("unexplained", [mib(snap.unexplained), pct(snap.unexplained, snap.rss), ""],
                    ["", mib(snap.pss_unexplained)], "VmRSS (and PSS) minus the layers" if shares
                    else "VmRSS minus the layers"))
    rows.append(row("RSS (VmRSS)", [mib(snap.rss), "100%", ""], [mib(snap.uss), mib(snap.pss)],
                    "/proc/PID/status" + (", smaps_rollup (USS, PSS)" if shares else "")))
    return fit_table(title, cols, rows, width, [*styles, "italic", "bold"])


def _arena_free(a: dict[str, Any]) -> int:
    """An arena's free bytes on resident pages (whole free pages in a document from before the split)."""
    return a.get("free_bytes_resident", a["free_resident"]) or 0


def arenas_table(snap: Snapshot, limit: int = 10, width: int = 120) -> RenderableType | None:
    layer = snap.layers.get("allocator_free")
    arenas = layer.detail.get("arenas") if layer else None
    if not layer or not arenas:
        return None
    rows = sorted(arenas, key=lambda a: -(a["resident"] or 0))
    # With glibc's own malloc_info (in-process, or the agent's), its free bytes beside the walk's
    told = any(a.get("free") is not None for a in arenas)
    split = any("fragmented" in a for a in arenas)
    cols = [Col("arena"), Col("heaps", optional=5), Col("system MiB", optional=2), Col("in use MiB", optional=1),
            Col("resident MiB"), Col("free resident MiB"), Col("of it top chunk", optional=3),
            *([Col("of it beside live chunks", optional=2)] if split else []), Col("trim would release")]
    if told:
        cols.insert(4, Col("free MiB: glibc / walked", optional=4))

    def cells(values: list[str], told_value: str, fragmented: str) -> list[str]:
        values = values[:7] + [fragmented] + values[7:] if split else values
        return values[:4] + [told_value] + values[4:] if told else values

    def in_use(a: dict[str, Any]) -> int | None:
        return a["in_use"] if a["in_use"] is not None else a.get("in_use_resident")

    table_rows = []
    for a in rows[:limit]:
        told_free = f"{mib(a.get('free'))} / {mib(a.get('free_walked'))}" if told else ""
        walked = a.get("address") != 0  # an arena not located: none of its chunks were walked
        free = [mib(_arena_free(a)), mib(a["top_resident"]), mib(a["trim_releasable"])] if walked else \
            ["not walked", "", ""]  # its reason under the table, not a free figure of 0.0
        table_rows.append(cells([f"{a['arena']}{' main' if a['main'] else ''}", str(a["heaps"]), mib(a["system"]),
                                 mib(in_use(a)) if walked else "", mib(a["resident"]), *free], told_free,
                                mib(a.get("fragmented")) if walked else ""))
    if len(rows) > limit:
        rest = rows[limit:]
        table_rows.append(cells([f"{len(rest)} more", "", mib(sum(a["system"] for a in rest)), "",
                                 mib(sum(a["resident"] for a in rest)), mib(sum(_arena_free(a) for a in rest)),
                                 mib(sum(a["top_resident"] for a in rest)),
                                 mib(sum(a["trim_releasable"] or 0 for a in rest))], "",
                                mib(sum(a.get("fragmented") or 0 for a in rest))))
    table_rows.append(cells(["total", "", "", "", "", mib(layer.resident), "",
                             mib(layer.detail.get("trim_releasable"))], "", mib(layer.detail.get("fragmented"))))
    unwalked = "; ".join(f"arena {a['arena']}: {a['problem']}" for a in arenas if a.get("address") == 0)
    title = f"glibc arenas ({len(arenas)}), largest first" + (f"; not walked: {unwalked}" if unwalked else "")
    return fit_table(title, cols, table_rows, width, [None] * (len(table_rows) - 1) + ["bold"])


def allocator_lines(allocator: AllocatorInfo) -> list[tuple[str, str]]:
    """(which, how we know) for every allocator found: the one serving malloc, then those beside it."""
    lines = []
    for f in allocator.found or []:
        prefix = " (symbols stripped)" if f.prefix == "?" else f" (prefix {f.prefix})" if f.prefix else ""
        lines.append((f"{'malloc' if f.serves_malloc else 'beside'}: {f.name}{prefix} in {f.library}", f.how or ""))
    return lines


def print_findings(console: Console, findings: Sequence[Finding]) -> None:
    for f in findings:
        mark = "!" if f.severity == "warning" else "-"
        console.print(f"{mark} {f.summary}")
        for line in f.evidence:
            console.print(f"    {line}")
        if f.remedy:
            console.print(f"    remedy: {f.remedy}")


STATIC_SHOWN = 1 << 20  # the static data's objects are listed where the layer holds this much


def static_table(snap: Snapshot, width: int = 120) -> RenderableType | None:
    """The objects whose static data (.bss) is largest, where the layer holds a MiB or more."""
    layer = snap.layers.get("static_data")
    if layer is None or (layer.resident or 0) < STATIC_SHOWN:
        return None
    largest = layer.detail.get("largest") or []
    cols = [Col("object", WRAP), Col("resident MiB"), Col("of RSS", optional=1), Col("placed by", WRAP, optional=2)]
    rows = [[o["path"], mib(o["bytes"]), pct(o["bytes"], snap.rss),
             "maps (likely)" if o.get("likely") else "program headers"] for o in largest]
    more = layer.detail.get("objects", len(largest)) - len(largest)
    title = f"static data (.bss) by object, largest first{f' ({more} more)' if more > 0 else ''}"
    return fit_table(title, cols, rows, width)


def render_snapshot(snap: Snapshot, stream: TextIO, width: int | None = None) -> None:
    console = console_on(stream, width)
    console.print(layers_table(snap, console.width))
    for line in gpu_lines(snap):
        console.print(line)
    lines = allocator_lines(snap.allocator)
    if lines:
        console.print("Allocators:")
        for which, how in lines:
            console.print(f"- {which}")
            console.print(f"    {how}")
    problem = snap.allocator.agent_problem
    if problem:  # said once, the figures above were read without it; wrapped to the width (a socket's path is
        # long), its continuation indented so that the note reads as one
        import textwrap

        console.print(textwrap.fill(f"Note: read without memgap's agent: {problem}", width=max(20, console.width),
                                    subsequent_indent="    ", break_on_hyphens=False), markup=False, highlight=False,
                      soft_wrap=True)
    if snap.cgroup:
        for line in cgroup_lines(snap.cgroup, snap.rss, snap.status.get("Pss")):
            console.print(line, highlight=False, markup=False)
    arenas = arenas_table(snap, width=console.width)
    if arenas is not None:
        console.print(arenas)
    static = static_table(snap, width=console.width)
    if static is not None:
        console.print(static)
    if snap.findings:
        console.print("Findings:")
        print_findings(console, snap.findings)


def render_text(snap: Snapshot, width: int | None = None) -> str:
    buf = io.StringIO()
    render_snapshot(snap, buf, width)
    return buf.getvalue()


def tree_title(totals: TreeTotals) -> str:
    """A tree's heading: its PSS first (what it costs), the RSS sum labelled for what it is."""
    n = totals.processes
    head = f"{n} process{'es' if n != 1 else ''}"
    rss = f"RSS sum {mib(totals.rss_sum)} MiB"
    if totals.pss is None:
        return f"{head}: {rss} (counts shared pages once per process)"
    return f"{head}: PSS {mib(totals.pss)} MiB ({rss} counts shared pages once per process)"


def render_tree(tree: TreeDocument, stream: TextIO, width: int | None = None) -> None:
    """One row per process (RSS, PSS, USS, then its layers) and the tree's total, as the tree's
    document sums it: by PSS, each shared page split among its sharers; by resident bytes where a
    process's layers have no pss (an in-process snapshot)."""
    console = console_on(stream, width)
    snaps, totals = tree.processes, tree.totals
    names = list(totals.layers)  # every layer a process holds; a process without one shows "-" there
    pss = totals.layers_by == "pss"
    label = f"{len(snaps)} processes"
    copies = any(s.copied_from_parent for s in snaps)
    cols = [Col("PID"), Col("command", CUT, least=max(16, len(label)), most=40), Col("RSS"), Col("PSS"),
            Col("USS"), *([Col("copied from parent")] if copies else []), *layer_columns(names)]
    rows = []
    for s in snaps:
        cmd = " ".join([os.path.basename(s.cmd[0]), *s.cmd[1:]]) if s.cmd else ""
        copied = [mib(s.copied_from_parent.copied if s.copied_from_parent else None)] if copies else []
        rows.append([str(s.pid), cmd, mib(s.rss), mib(s.pss), mib(s.uss), *copied,
                     *(mib(layer_figure(s.layers[n], pss)) if n in s.layers else "-" for n in names),
                     mib(s.pss_unexplained if pss else s.unexplained)])
    rows.append(["total", label, mib(totals.rss_sum), mib(totals.pss), mib(totals.uss),
                 *([mib(totals.copied_from_parent)] if copies else []),
                 *(mib(totals.layers[n]) for n in names), mib(totals.unexplained)])
    layers_by = "layers by PSS (shared pages split among their sharers)" if pss else "layers by resident bytes"
    console.print(fit_table(f"{tree_title(totals)}. In MiB; USS: private pages; {layers_by}", cols, rows,
                            console.width, [None] * len(snaps) + ["bold"]))
    for line in tree_gpu_lines(snaps):
        console.print(line)
    findings = tree_findings(tree)
    if findings:
        console.print("Findings:")
        print_findings(console, findings)


def tree_findings(tree: TreeDocument) -> list[Finding]:
    """What a tree's table lists: the tree's findings (a tree of one process has its process's
    own say it), then each process's own, its PID in front; a process's finding the tree's sums up
    (shared memory) left to the tree's."""
    overall = tree.findings if len(tree.processes) > 1 else []
    said = {f.code for f in overall}
    return [*overall, *(replace(f, summary=f"PID {s.pid}: {f.summary}") for s in tree.processes for f in s.findings
                        if f.code not in said)]
