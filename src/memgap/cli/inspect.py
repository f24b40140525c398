"""Explain a running process from outside, without stopping or changing it.

Reads /proc/PID/{status,maps,pagemap,mem}: files, stacks, glibc heaps (found by
their headers, free chunks walked), mmapped chunks and pymalloc arenas. Python
object counts need the process's own statistics: run it under `memgap run`.

Only when asked, memgap goes inside through gdb (it pauses the process for a
fraction of a second, with a timeout, and always detaches):
  --deep  glibc's malloc_info beside the outside walk; where malloc is
          jemalloc, tcmalloc or mimalloc, its own figures (mallctl,
          MallocExtension properties, mi_process_info) and the allocator
          layers built from them; for a Python process memgap.snapshot()
          run inside it
  --trim  malloc_trim(0) (glibc), arena.<ALL>.purge (jemalloc),
          MallocExtension_ReleaseFreeMemory() (tcmalloc) or mi_collect(true)
          (mimalloc) in the process: VmRSS before and after, beside memgap's
          estimate of what a trim releases
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memgap.cli import _common
from memgap.cli._common import write_json
from memgap.documents.json_value import shaped
from memgap.documents.snapshot import Snapshot
from memgap.errors import Unsupported, UsageError
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
from memgap.report.terminal import render_snapshot, render_tree
from memgap.sources.gdb_target import DEFAULT_TIMEOUT  # not gdb_attach: loaded only for --deep
from memgap.sources.processes import ProcessIdentity

if TYPE_CHECKING:  # memgap.inside.gdb is loaded only for --deep and --trim
    from memgap.documents.runtime_heap import DeepRead
    from memgap.sources.gdb_options import GdbOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=_common.pid, help="process ID")
    p.add_argument("--tree", action="store_true", help="the process and all its descendants, one row each")
    p.add_argument("--json", metavar="FILE", type=_common.output_file, help="write JSON ('-' for stdout)")
    p.add_argument("--regions", action="store_true", help="also print the labelled memory map")
    p.add_argument("--proc-root", type=_common.folder, default="/proc", metavar="DIR",
                   help="where procfs is mounted (a host's /proc seen from a container, or test files)")
    p.add_argument("--deep", action="store_true",
                   help="also ask the process itself through gdb: glibc's malloc_info, jemalloc's mallctl, "
                        "tcmalloc's properties or mimalloc's mi_process_info, "
                        "and for Python an in-process snapshot (pauses it briefly)")
    p.add_argument("--trim", action="store_true",
                   help="call malloc_trim(0) (glibc), purge every arena (jemalloc), ReleaseFreeMemory (tcmalloc) or "
                        "mi_collect (mimalloc) in the process through gdb "
                        "and measure what it released")
    p.add_argument("--gdb-timeout", type=_common.seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"limit for everything gdb does, attach to last call ({DEFAULT_TIMEOUT:g})")
    p.add_argument("--gdb", default="gdb", metavar="PATH", help="the gdb to run (gdb)")


def snapshot_checked(pid: int, options: SnapshotOptions, proc_root: str) -> tuple[Snapshot, ProcessIdentity]:
    """An outside snapshot, and the process it is of (its start time checked on both sides)."""
    identity = ProcessIdentity.asked_for(pid, proc_root)
    snap = snapshot_pid(pid, options, proc_root)
    identity.check(proc_root=proc_root)
    return snap, identity


@dataclass(frozen=True)
class InspectRequest:
    """``memgap inspect``'s options, checked: --deep and --trim are of one process, not a tree."""

    pid: int
    tree: bool = False
    json: str | None = None
    regions: bool = False
    proc_root: str = "/proc"
    deep: bool = False
    trim: bool = False
    gdb_timeout: float = DEFAULT_TIMEOUT
    gdb: str = "gdb"

    def __post_init__(self) -> None:
        if self.tree and (self.deep or self.trim):
            raise UsageError("--deep and --trim look inside one process: leave out --tree")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> InspectRequest:
        return cls(pid=args.pid, tree=args.tree, json=args.json, regions=args.regions, proc_root=args.proc_root,
                   deep=args.deep, trim=args.trim, gdb_timeout=args.gdb_timeout, gdb=args.gdb)

    def gdb_options(self) -> GdbOptions:
        from memgap.sources.gdb_options import GdbOptions  # loaded only for --deep and --trim

        return GdbOptions(timeout=self.gdb_timeout, gdb=self.gdb, proc_root=self.proc_root)


def main(args: argparse.Namespace) -> int:
    return execute(InspectRequest.from_args(args))


def execute(request: InspectRequest) -> int:
    ProcessIdentity.asked_for(request.pid, request.proc_root)  # none, or a kernel thread: said plainly
    if request.tree:
        return _tree(request)
    if not (request.deep or request.trim):
        snap = snapshot_pid(request.pid, SnapshotOptions(regions=request.regions), request.proc_root)
        if request.json:
            write_json(snap.to_dict(regions=request.regions), request.json)
        if request.json != "-":
            render_snapshot(snap, sys.stdout)
            _print_regions(snap, request.regions)
        return 0
    return _inside(request)


def _inside(request: InspectRequest) -> int:
    """--deep and --trim: the outside snapshot first, then gdb, each figure with its route."""
    from memgap.inside.gdb import deep, trim
    from memgap.report.attach import render_after_trim, render_deep, render_runtimes_deep, render_trim

    options = request.gdb_options()
    pid, proc_root = request.pid, request.proc_root
    # regions: the outside count of mmapped chunks, compared with malloc_info's
    snap, identity = snapshot_checked(pid, SnapshotOptions(regions=request.regions or request.deep), proc_root)
    started = identity.start_time
    runtimes = _runtimes_deep(snap, pid, proc_root) if request.deep else []
    found = None
    if request.deep:
        try:
            found = deep(pid, snap, started, options)
        except Unsupported:
            if not runtimes:  # nothing gdb can read, and no runtime's own route either
                raise
    trimmed = after = None
    if request.trim:
        trimmed = trim(pid, snap, started, options)
        after = snapshot_pid(pid, SnapshotOptions(regions=False), proc_root)
        after.phase, after.trim = "after-trim", trimmed
    if request.json:
        doc = snap.to_dict(regions=request.regions)
        if found is not None or runtimes:
            doc["deep"] = {**(found.to_dict() if found is not None else {}), "runtimes": shaped(runtimes)}
        if after is not None:
            doc["after_trim"] = after.to_dict(regions=False)
        write_json(doc, request.json)
    if request.json != "-":
        render_snapshot(snap, sys.stdout)
        _print_regions(snap, request.regions)
        if found is not None:
            render_deep(found, sys.stdout)
        render_runtimes_deep(runtimes, sys.stdout)
        if trimmed is not None and after is not None:
            render_trim(pid, trimmed, sys.stdout)
            render_after_trim(after, sys.stdout)
    return 0


def _runtimes_deep(snap: Snapshot, pid: int, proc_root: str) -> list[DeepRead]:
    """Each runtime's own deep route (the JVM's jcmd, Node's inspector), where the snapshot read a runtime."""
    if "runtime_heap" not in snap.layers:
        return []
    from memgap.runtimes import read_deep

    return read_deep(pid, proc_root)


def _tree(request: InspectRequest) -> int:
    """The tree read, summed and diagnosed once (``tree_document``); its JSON and its table both show that."""
    from memgap.explain.tree import snapshot_tree, tree_document  # with the run's documents: only for --tree

    tree = tree_document(snapshot_tree(request.pid, request.proc_root))
    if request.json:
        write_json(tree.to_dict(), request.json)
    if request.json != "-":
        render_tree(tree, sys.stdout)
    return 0


def _print_regions(snap: Snapshot, regions: bool) -> None:
    if not regions:
        return
    for r in sorted(snap.regions, key=lambda r: r.start):
        if r.resident:
            print(f"{r.start:#014x}-{r.end:#014x} {r.perms} {r.resident >> 10:>9} KiB  {r.owner:<15} {r.path}")
