"""Explain a running process from outside, without stopping or changing it.

Reads /proc/PID/{status,maps,pagemap,mem}: files, stacks, glibc heaps (found by
their headers, free chunks walked), mmapped chunks and pymalloc arenas. Python
object counts need the process's own statistics: run it under `memgap run`.
"""
from __future__ import annotations

import argparse
import sys

import psutil

from ..collect import Options, snapshot_pid
from ..errors import NoSuchProcess
from ..report.terminal import render_snapshot, render_tree
from ._output import write_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=int, help="process ID")
    p.add_argument("--tree", action="store_true", help="the process and all its descendants, one row each")
    p.add_argument("--json", metavar="FILE", help="write JSON ('-' for stdout)")
    p.add_argument("--regions", action="store_true", help="also print the labelled memory map")
    p.add_argument("--proc-root", default="/proc", metavar="DIR",
                   help="where procfs is mounted (a host's /proc seen from a container, or test files)")


def descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        raise NoSuchProcess(pid) from None


def main(args: argparse.Namespace) -> int:
    if args.tree:
        snaps = [snapshot_pid(args.pid, Options(regions=False), args.proc_root)]
        for child in descendants(args.pid):
            try:
                snaps.append(snapshot_pid(child, Options(regions=False), args.proc_root))
            except NoSuchProcess:
                continue  # exited while we read the tree
        if args.json:
            write_json({"schema": "memgap.tree/1", "pid": args.pid,
                        "processes": [s.to_dict(regions=False) for s in snaps],
                        "total_rss": sum(s.rss for s in snaps)}, args.json)
        if args.json != "-":
            render_tree(snaps, sys.stdout)
        return 0
    snap = snapshot_pid(args.pid, Options(regions=args.regions), args.proc_root)
    if args.json:
        write_json(snap.to_dict(regions=args.regions), args.json)
    if args.json != "-":
        render_snapshot(snap, sys.stdout)
        if args.regions:
            for r in sorted(snap.regions, key=lambda r: r.start):
                if r.resident:
                    print(f"{r.start:#014x}-{r.end:#014x} {r.perms} {r.resident >> 10:>9} KiB  {r.owner:<15} {r.path}")
    return 0
