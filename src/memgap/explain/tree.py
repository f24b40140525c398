"""A process tree read from outside at one moment: each process's snapshot, and what each
forked process copied from its parent. The snapshots share one ``TreeHeaders``: a worker's
pool headers on page frames it still shares with its master are read once (as root).
"""
from __future__ import annotations

from memgap.documents.snapshot import TreeSnapshot
from memgap.errors import NoSuchProcess
from memgap.explain.cow import add_copied_from_parent
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
from memgap.sources.processes import descendants
from memgap.sources.pymalloc_pools import TreeHeaders


def snapshot_tree(pid: int, proc_root: str = "/proc") -> TreeSnapshot:
    """``pid`` and each of its descendants that is still there when read, ``pid`` first, each
    with what it copied from its parent where that parent is in the tree (``copied_from_parent``).
    The descendants' regions tell where the copied pages lie, then go.
    Raises what ``snapshot_pid`` raises for ``pid`` itself."""
    headers = TreeHeaders()
    snaps = [snapshot_pid(pid, SnapshotOptions(regions=False), proc_root, headers)]
    for child in descendants(pid):
        try:
            snaps.append(snapshot_pid(child, SnapshotOptions(regions=True), proc_root, headers))
        except NoSuchProcess:
            continue  # exited while the tree was read
    add_copied_from_parent(snaps, proc_root)
    for snap in snaps:
        snap.regions = []
    return TreeSnapshot(pid, snaps)
