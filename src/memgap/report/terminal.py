"""Terminal tables for snapshots, trees and runs (rich)."""
from __future__ import annotations

import io
import os
from typing import Sequence, TextIO

from rich.console import Console
from rich.table import Table

from ..model import Finding, Snapshot
from ..units import mib, pct

LAYER_TITLES = {
    "files": "files (code, libraries, mapped files)",
    "python_objects": "Python objects",
    "pymalloc_free": "pymalloc free",
    "allocator_in_use": "C allocator in use",
    "allocator_free": "C allocator free (retained)",
    "stacks": "thread stacks",
    "other_anon": "other anonymous",
}


# Short column names for tables with one column per layer.
LAYER_SHORT = {
    "files": "files", "python_objects": "py objs", "pymalloc_free": "pymalloc free",
    "allocator_in_use": "alloc used", "allocator_free": "alloc free", "stacks": "stacks",
    "other_anon": "other anon",
}


def _console(stream: TextIO, width: int | None = None) -> Console:
    """A console on ``stream``: the terminal's width on a terminal, 120 columns elsewhere."""
    if width is None and not (hasattr(stream, "isatty") and stream.isatty()):
        width = 120
    return Console(file=stream, width=width, highlight=False, soft_wrap=False, markup=False)


def layers_table(snap: Snapshot) -> Table:
    where = f"PID {snap.pid}" + (f" at {snap.phase}" if snap.phase else "")
    table = Table(title=f"{where}: RSS {mib(snap.rss)} MiB ({snap.route}, allocator {snap.allocator.get('name')})",
                  title_justify="left")
    table.add_column("layer")
    table.add_column("resident MiB", justify="right")
    table.add_column("of RSS", justify="right")
    table.add_column("virtual MiB", justify="right")
    table.add_column("measured from", overflow="fold", max_width=40)
    for name, layer in snap.layers.items():
        if layer.resident is None:
            table.add_row(LAYER_TITLES.get(name, name), "-", "-", "-", f"not measured: {layer.note}",
                          style="dim")
            continue
        table.add_row(LAYER_TITLES.get(name, name), mib(layer.resident), pct(layer.resident, snap.rss),
                      mib(layer.virtual), layer.source or layer.derivation)
    table.add_row("unexplained", mib(snap.unexplained), pct(snap.unexplained, snap.rss), "",
                  "VmRSS minus the layers", style="italic")
    table.add_row("RSS (VmRSS)", mib(snap.rss), "100%", "", "/proc/PID/status", style="bold")
    return table


def arenas_table(snap: Snapshot, limit: int = 10) -> Table | None:
    layer = snap.layers.get("allocator_free")
    arenas = layer.detail.get("arenas") if layer else None
    if not arenas:
        return None
    rows = sorted(arenas, key=lambda a: -(a["resident"] or 0))
    table = Table(title=f"glibc arenas ({len(arenas)}), largest first", title_justify="left")
    # With glibc's own malloc_info (in-process, or the agent's), its free bytes beside the walk's
    told = any(a.get("free") is not None for a in arenas)
    columns = ["arena", "heaps", "system MiB", "in use MiB", "resident MiB", "free resident MiB",
               "of it top chunk", "trim would release"]
    if told:
        columns.insert(4, "free MiB: glibc / walked")
    for col in columns:
        table.add_column(col, justify="right")

    def cells(values: list[str], told_value: str) -> list[str]:
        return values[:4] + [told_value] + values[4:] if told else values

    for a in rows[:limit]:
        told_free = f"{mib(a.get('free'))} / {mib(a.get('free_walked'))}" if told else ""
        table.add_row(*cells([f"{a['arena']}{' main' if a['main'] else ''}", str(a["heaps"]), mib(a["system"]),
                              mib(a["in_use"]), mib(a["resident"]), mib(a["free_resident"]),
                              mib(a["top_resident"]), mib(a["trim_releasable"])], told_free))
    if len(rows) > limit:
        rest = rows[limit:]
        table.add_row(*cells([f"{len(rest)} more", "", mib(sum(a["system"] for a in rest)), "",
                              mib(sum(a["resident"] for a in rest)), mib(sum(a["free_resident"] for a in rest)),
                              mib(sum(a["top_resident"] for a in rest)),
                              mib(sum(a["trim_releasable"] or 0 for a in rest))], ""))
    table.add_row(*cells(["total", "", "", "", "", mib(layer.resident), "", mib(layer.detail.get("trim_releasable"))],
                         ""), style="bold")
    return table


def print_findings(console: Console, findings: Sequence[Finding]) -> None:
    for f in findings:
        mark = "!" if f.severity == "warning" else "-"
        console.print(f"{mark} {f.summary}")
        for line in f.evidence:
            console.print(f"    {line}")
        if f.remedy:
            console.print(f"    remedy: {f.remedy}")


def render_snapshot(snap: Snapshot, stream: TextIO, width: int | None = None) -> None:
    console = _console(stream, width)
    console.print(layers_table(snap))
    arenas = arenas_table(snap)
    if arenas is not None:
        console.print(arenas)
    if snap.findings:
        console.print("Findings:")
        print_findings(console, snap.findings)


def render_text(snap: Snapshot, width: int | None = None) -> str:
    buf = io.StringIO()
    render_snapshot(snap, buf, width)
    return buf.getvalue()


def render_tree(snaps: Sequence[Snapshot], stream: TextIO, width: int | None = None) -> None:
    """One row per process and a total (RSS summed, which counts shared pages once per process)."""
    console = _console(stream, width)
    names = list(snaps[0].layers) if snaps else []
    table = Table(title="process tree (MiB); PSS splits shared pages among their sharers", title_justify="left")
    for col in ("PID", "command", "RSS", "PSS", *(LAYER_SHORT.get(n, n) for n in names), "unexpl."):
        table.add_column(col, justify="left" if col == "command" else "right", no_wrap=True)
    for s in snaps:
        cmd = " ".join([os.path.basename(s.cmd[0]), *s.cmd[1:]]) if s.cmd else ""
        table.add_row(str(s.pid), cmd[:24], mib(s.rss), mib(s.status.get("Pss")),
                      *(mib(s.layers[n].resident) for n in names), mib(s.unexplained))
    table.add_row("total", f"{len(snaps)} processes", mib(sum(s.rss for s in snaps)),
                  mib(sum(s.status.get("Pss", 0) for s in snaps)),
                  *(mib(sum(s.layers[n].resident or 0 for s in snaps)) for n in names),
                  mib(sum(s.unexplained for s in snaps)), style="bold")
    console.print(table)
