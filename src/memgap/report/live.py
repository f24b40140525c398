"""The live view of `memgap top`: each layer over the refreshes, the largest arenas, the
findings; for a tree, each process's private memory and what it copied from its parent.
Renderables built from snapshots; the command prints them."""
from __future__ import annotations

from collections import deque

from rich.console import Group, RenderableType

from memgap.documents.snapshot import Snapshot, by_pss, layer_figure, tree_totals
from memgap.report.fit import CUT, WRAP, Col, fit_table
from memgap.report.run import sparkline, squeeze
from memgap.report.terminal import LAYER_TITLES, arenas_table, layers_table, tree_findings, tree_title
from memgap.report.units import mib, pct


def _private_table(history: deque[list[Snapshot]], snaps: list[Snapshot], width: int) -> RenderableType:
    """A tree's processes: private memory (USS) now and over the refreshes, and how much of it
    is pages copied from the parent (a worker's collections writing into shared objects grow
    this; a leak grows its own)."""
    cols = [Col("PID"), Col("private MiB"), Col("copied from parent"), Col("its own"),
            Col("private, trend", CUT, optional=1, shorten=squeeze)]
    rows = []
    for s in snaps:
        split = s.copied_from_parent
        values = [next((p.uss or 0 for p in frame if p.pid == s.pid), 0) for frame in history]
        rows.append([str(s.pid), mib(s.uss), mib(split.copied if split else None), mib(split.own if split else None),
                     sparkline(values, 40)])
    return fit_table(f"each process's private memory, last {len(history)} refreshes", cols, rows, width)


def _trend_table(history: deque[list[Snapshot]], snaps: list[Snapshot], width: int) -> RenderableType:
    """Each layer now and over the refreshes; a tree's summed by PSS, a shared page split among its sharers."""
    tree = len(snaps) > 1
    pss = tree and all(by_pss(frame) for frame in history)
    totals = tree_totals(snaps)
    total = totals.pss if pss and totals.pss is not None else totals.rss_sum
    whole = tree_title(totals) if tree else f"1 process: RSS {mib(total)} MiB"
    title = f"{whole}, last {len(history)} refreshes" + ("; layers by PSS" if pss else "")
    cols = [Col("layer", WRAP), Col("MiB"), Col("of PSS" if pss else "of RSS"),
            Col("trend", CUT, optional=1, shorten=squeeze)]
    rows = []
    for name in snaps[0].layers:
        values = [sum(layer_figure(s.layers[name], pss) or 0 for s in frame) for frame in history]
        now = values[-1]
        measured = any(s.layers[name].resident is not None for s in snaps)
        rows.append([LAYER_TITLES.get(name, name), mib(now) if measured else "-",
                     pct(now, total) if measured else "-", sparkline(values, 40) if measured else "not measured"])
    return fit_table(title, cols, rows, width)


def frame(history: deque[list[Snapshot]], snaps: list[Snapshot], width: int = 120) -> Group:
    parts = [_trend_table(history, snaps, width)]
    main = snaps[0]
    if len(snaps) == 1:
        parts.append(layers_table(main, width))
    else:
        parts.append(_private_table(history, snaps, width))
    arenas = arenas_table(main, limit=5, width=width)
    if arenas is not None:
        parts.append(arenas)
    for f in tree_findings(snaps) if len(snaps) > 1 else main.findings:
        parts.append(f"{'!' if f.severity == 'warning' else '-'} {f.summary}")
    return Group(*parts)
