"""Watch a process (or a tree) from outside, live.

Layers over time, the largest arenas and the findings, refreshed in place; for a
tree, each process's private memory over time and what it copied from its parent,
so that copy-on-write growth in forked workers is seen as it happens.

  memgap top PID [--interval S] [--tree] [--iterations N]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import deque

from rich.console import Group, RenderableType

from ..collect import Options, snapshot_pid
from ..cow import add_copied_from_parent
from ..diagnose import diagnose_tree
from ..errors import NoSuchProcess, PidReused
from ..model import Snapshot, by_pss, layer_figure, tree_totals
from ..report.fit import CUT, WRAP, Col, fit_table
from ..report.runs import sparkline, squeeze
from ..report.terminal import LAYER_TITLES, _console, arenas_table, layers_table, tree_title
from ..units import mib, pct
from . import _args
from .inspect import descendants, start_time

HISTORY = 60


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=_args.pid, help="process ID")
    p.add_argument("--interval", type=_args.seconds, default=1.0, metavar="S", help="seconds between refreshes (1)")
    p.add_argument("--tree", action="store_true", help="the process and its descendants, summed")
    p.add_argument("--iterations", type=_args.count_or_zero, default=0, metavar="N",
                   help="stop after N refreshes (0: until Ctrl-C)")


def _snapshots(pid: int, tree: bool, started: int | None) -> tuple[list[Snapshot], int]:
    """One refresh, and the start time of the process it shows: a PID that now names
    another process than the one the first refresh showed is PidReused, not a new view."""
    before = start_time(pid)
    if started is not None and before != started:
        raise PidReused(pid, "another process has it since the last refresh")
    snaps = [snapshot_pid(pid, Options(regions=False))]
    if start_time(pid) != before:
        raise PidReused(pid, "its start time changed while memgap read it")
    for child in descendants(pid) if tree else []:
        try:  # with regions: what a child copied is told apart by where it falls, then they go
            snaps.append(snapshot_pid(child, Options(regions=True)))
        except NoSuchProcess:
            continue
    if tree:
        add_copied_from_parent(snaps)
        for s in snaps:
            s.regions = []
    return snaps, before


def _private_table(history: deque, snaps: list[Snapshot], width: int) -> RenderableType:  # type: ignore[type-arg]
    """A tree's processes: private memory (USS) now and over the refreshes, and how much of it
    is pages copied from the parent (a worker's collections writing into shared objects grow
    this; a leak grows its own)."""
    cols = [Col("PID"), Col("private MiB"), Col("copied from parent"), Col("its own"),
            Col("private, trend", CUT, optional=1, shorten=squeeze)]
    rows = []
    for s in snaps:
        split = s.copied_from_parent or {}
        values = [next((p.uss or 0 for p in frame if p.pid == s.pid), 0) for frame in history]
        rows.append([str(s.pid), mib(s.uss), mib(split.get("copied")), mib(split.get("own")),
                     sparkline(values, 40)])
    return fit_table(f"each process's private memory, last {len(history)} refreshes", cols, rows, width)


def _trend_table(history: deque, snaps: list[Snapshot], width: int) -> RenderableType:  # type: ignore[type-arg]
    """Each layer now and over the refreshes; a tree's summed by PSS, a shared page split among its sharers."""
    tree = len(snaps) > 1
    pss = tree and all(by_pss(frame) for frame in history)
    totals = tree_totals(snaps)
    total = totals["pss"] if pss else totals["rss_sum"]
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


def frame(history: deque, snaps: list[Snapshot], width: int = 120) -> Group:  # type: ignore[type-arg]
    parts = [_trend_table(history, snaps, width)]
    main = snaps[0]
    if len(snaps) == 1:
        parts.append(layers_table(main, width))
    else:
        parts.append(_private_table(history, snaps, width))
    arenas = arenas_table(main, limit=5, width=width)
    if arenas is not None:
        parts.append(arenas)
    for f in [*(f for s in snaps for f in s.findings), *(diagnose_tree(snaps) if len(snaps) > 1 else [])]:
        parts.append(f"{'!' if f.severity == 'warning' else '-'} {f.summary}")
    return Group(*parts)


def main(args: argparse.Namespace) -> int:
    console = _console(sys.stdout)
    history: deque = deque(maxlen=HISTORY)  # type: ignore[type-arg]
    live = None
    if sys.stdout.isatty():
        from rich.live import Live

        live = Live(console=console, auto_refresh=False, screen=False)
        live.start()
    count = 0
    started: int | None = None
    try:
        while True:
            try:
                snaps, started = _snapshots(args.pid, args.tree, started)
            except PidReused:
                raise
            except NoSuchProcess:
                if count:
                    console.print(f"PID {args.pid} exited")
                    return 0
                raise
            history.append(snaps)
            view = frame(history, snaps, console.width)  # read each time: the terminal may be resized
            if live is not None:
                live.update(view, refresh=True)
            else:
                console.print(f"--- {time.strftime('%H:%M:%S')}")
                console.print(view)
            count += 1
            if args.iterations and count >= args.iterations:
                return 0
            time.sleep(args.interval)
    finally:
        if live is not None:
            live.stop()
