"""pymalloc, CPython's small-object allocator on top of the C one: its arenas found from outside by
their pool headers (memgap.sources.anon_objects, memgap.sources.pymalloc_pools), its own statistics in
the process (memgap.sources.pymalloc); its layers are python_objects and pymalloc_free; its finding
(pymalloc-fragmentation: free blocks and empty pools its arenas keep resident) from its own statistics,
or from outside from the pool headers, with the thresholds memgap.diagnose hands it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from memgap.allocators.base import AllocatorReader, Rules
from memgap.documents.snapshot import Finding
from memgap.report.units import mib

if TYPE_CHECKING:
    from memgap.documents.snapshot import Snapshot

OWNER = "pymalloc-arena"
NOT_BACK = "an arena returns to the OS only when every object in it is gone"


class Pymalloc(AllocatorReader):
    name = "pymalloc"
    owner = OWNER

    def findings(self, snap: Snapshot, rules: Rules) -> list[Finding]:
        """What its arenas hold free around live objects, where the floors are crossed."""
        return _fragmentation(snap, rules)


def _resident(snap: Snapshot, name: str) -> int:
    layer = snap.layers.get(name)
    return layer.resident or 0 if layer else 0


def _fragmentation(snap: Snapshot, rules: Rules) -> list[Finding]:
    free = _resident(snap, "pymalloc_free")
    pm = snap.pymalloc
    base = rules.base
    if free < rules.floor or not base.crossed(base.part(snap.layers.get("pymalloc_free"), free), rules.share):
        return []
    if not pm:
        return _fragmentation_outside(snap, free, rules)
    used = pm.allocated_blocks_bytes
    arenas = pm.arenas_current
    return [Finding(
        "pymalloc-fragmentation", "warning",
        f"pymalloc holds {mib(free)} MiB free in {arenas} arenas ({pm.unused_pools} unused pools) "
        f"around {mib(used)} MiB of live objects",
        [f"arenas {arenas} x {pm.arena_size >> 10} KiB; allocated blocks {mib(used)} MiB; free blocks in "
         f"used pools {mib(pm.available_blocks_bytes)} MiB; unused pools {pm.unused_pools} x "
         f"{pm.pool_size >> 10} KiB",
         NOT_BACK,
         *([rules.base_line] if rules.base_line else [])],
        "memgap.release_pymalloc() gives back the pages of the unused pools (up to "
        f"{mib(pm.unused_pools * pm.pool_size)} MiB, less what is not resident); the free blocks "
        "in used pools only come back when their objects go: free objects in allocation order, or "
        "rebuild the structure into a fresh container",
    )]


def _fragmentation_outside(snap: Snapshot, free: int, rules: Rules) -> list[Finding]:
    """The same finding read from outside, where pool headers are all there is to go by."""
    census = snap.layers["python_objects"].detail if "python_objects" in snap.layers else {}
    if "pools_read" not in census:
        return []
    used = _resident(snap, "python_objects")
    empty = census["pools_read"] - census["pools_in_use"] - census["pools_rejected"]
    return [Finding(
        "pymalloc-fragmentation", "warning",
        f"pymalloc holds {mib(free)} MiB free in {census['arenas']} arenas around {mib(used)} MiB of live "
        "small objects (read from outside)",
        [f"pool headers read from outside: {census['pools_read']} pools resident, {census['pools_in_use']} with "
         f"live blocks, {empty} empty; live blocks {mib(used)} MiB",
         NOT_BACK,
         *([rules.base_line] if rules.base_line else [])],
        "memgap.release_pymalloc() in the process gives back the pages of its empty pools; the free blocks in "
        "used pools only come back when their objects go: free objects in allocation order, or rebuild the "
        "structure into a fresh container",
    )]


READER = Pymalloc()
