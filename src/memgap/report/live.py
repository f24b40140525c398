"""The live view of `memgap top`: each layer over the refreshes, the largest arenas, the
findings; for a tree, each process's private memory and what it copied from its parent.
Renderables built from what the command computed at each refresh (a ``Refresh``); the
command prints them."""
from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType

from memgap.documents.records import TreeDocument
from memgap.report.fit import CUT, WRAP, Col, fit_table
from memgap.report.gpu import gpu_lines, tree_gpu_lines
from memgap.report.run import sparkline, squeeze
from memgap.report.terminal import LAYER_TITLES, arenas_table, layers_table, tree_findings, tree_title
from memgap.report.units import mib, pct


@dataclass(frozen=True)
class Glance:
    """A refresh's own reading: the process's RSS (a tree's summed, with its PSS) when it was read."""

    time: float
    rss: int
    pss: int | None = None


def glance_line(glances: list[Glance], look: tuple[float, float] | None, reading_since: float) -> str:
    """The refresh's line: RSS now and over the refreshes; how old the breakdown below is and how
    long its look took (``look``: when it began, how long it took), or how long the first has been
    under way (``reading_since``)."""
    now = glances[-1]
    pss = f", PSS {mib(now.pss)} MiB" if now.pss is not None else ""
    trend = f" {sparkline([g.rss for g in glances], 40)}" if len(glances) > 1 else ""
    if look is None:
        said = f"breakdown: the first look under way for {now.time - reading_since:.1f} s"
    else:
        began, seconds = look
        said = f"breakdown below: read {now.time - began - seconds:.1f} s ago, in {seconds:.1f} s"
    return f"RSS {mib(now.rss)} MiB now{pss} (read at each refresh){trend}; {said}"


@dataclass(frozen=True)
class Refresh:
    """One refresh of `top`, as the command computed it: the tree read now (summed and diagnosed:
    a tree of one process is the process), and over the refreshes kept, each layer's figure summed
    over the tree and each process's private memory."""

    now: TreeDocument
    refreshes: int                   # how many looks the series span (each a breakdown, beside the refreshes)
    by_pss: bool                     # the layers summed by PSS at every refresh (a tree's); else resident bytes
    layers: dict[str, list[int]]     # each layer of ``now``'s first process: its figure at each refresh
    private: dict[int, list[int]]    # each process of ``now`` by PID: its USS at each refresh (0 where absent)


def _looks(count: int) -> str:
    return f"{count} look{'s' if count != 1 else ''}"


def _private_table(refresh: Refresh, width: int) -> RenderableType:
    """A tree's processes: private memory (USS) now and over the refreshes, and how much of it
    is pages copied from the parent (a worker's collections writing into shared objects grow
    this; a leak grows its own)."""
    cols = [Col("PID"), Col("private MiB"), Col("copied from parent"), Col("its own"),
            Col("private, trend", CUT, optional=1, shorten=squeeze)]
    rows = []
    for s in refresh.now.processes:
        split = s.copied_from_parent
        rows.append([str(s.pid), mib(s.uss), mib(split.copied if split else None), mib(split.own if split else None),
                     sparkline(refresh.private[s.pid], 40)])
    return fit_table(f"each process's private memory, last {_looks(refresh.refreshes)}", cols, rows, width)


def _trend_table(refresh: Refresh, width: int) -> RenderableType:
    """Each layer now and over the refreshes; a tree's summed by PSS, a shared page split among its sharers."""
    snaps, totals = refresh.now.processes, refresh.now.totals
    pss = refresh.by_pss
    total = totals.pss if pss and totals.pss is not None else totals.rss_sum
    whole = tree_title(totals) if len(snaps) > 1 else f"1 process: RSS {mib(total)} MiB"
    title = f"{whole}, last {_looks(refresh.refreshes)}" + ("; layers by PSS" if pss else "")
    cols = [Col("layer", WRAP), Col("MiB"), Col("of PSS" if pss else "of RSS"),
            Col("trend", CUT, optional=1, shorten=squeeze)]
    rows = []
    for name, values in refresh.layers.items():
        now = values[-1]
        measured = any(name in s.layers and s.layers[name].resident is not None for s in snaps)
        rows.append([LAYER_TITLES.get(name, name), mib(now) if measured else "-",
                     pct(now, total) if measured else "-", sparkline(values, 40) if measured else "not measured"])
    return fit_table(title, cols, rows, width)


def frame(refresh: Refresh, width: int = 120) -> Group:
    parts = [_trend_table(refresh, width)]
    snaps = refresh.now.processes
    main = snaps[0]
    if len(snaps) == 1:
        parts.append(layers_table(main, width))
        parts.extend(gpu_lines(main))
    else:
        parts.append(_private_table(refresh, width))
        parts.extend(tree_gpu_lines(snaps))
    arenas = arenas_table(main, limit=5, width=width)
    if arenas is not None:
        parts.append(arenas)
    for f in tree_findings(refresh.now) if len(snaps) > 1 else main.findings:
        parts.append(f"{'!' if f.severity == 'warning' else '-'} {f.summary}")
    return Group(*parts)
