"""pymalloc, CPython's small-object allocator on top of the C one: its arenas found from outside by
their pool headers (memgap.sources.anon_objects, memgap.sources.pymalloc_pools), its own statistics in
the process (memgap.sources.pymalloc); its layers, python_objects and pymalloc_free (``python_sizes`` and
``python_layers``, which memgap.explain.attribution asks); its finding
(pymalloc-fragmentation: free blocks and empty pools its arenas keep resident) from its own statistics,
or from outside from the pool headers, with the thresholds memgap.diagnose hands it.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from memgap.allocators.base import AllocatorReader, Rules
from memgap.allocators.measured import Measurements, Owners
from memgap.documents.snapshot import Finding, Layer
from memgap.report.units import mib

if TYPE_CHECKING:
    from memgap.documents.snapshot import Snapshot

OWNER = "pymalloc-arena"
NOT_BACK = "an arena returns to the OS only when every object in it is gone"


class Pymalloc(AllocatorReader):
    name = "pymalloc"
    owner = OWNER

    def python_sizes(self, m: Measurements, arenas_resident: int) -> tuple[int, int, list[str]]:
        """Python's small objects (its blocks, at most its arenas' resident bytes) and large ones (held in the
        C allocator), from its own statistics where read in the process (0, 0 otherwise), and how each was read."""
        return _sizes(m, arenas_resident)

    def python_layers(self, m: Measurements, owned: Owners, small: int, large: int, moved: int,
                      how: list[str]) -> tuple[Layer, Layer]:
        """python_objects and pymalloc_free: from its own statistics where read in the process (``moved``: the
        large objects taken out of the C allocator's in use), else from outside by the pool headers."""
        if m.pymalloc is not None or m.python_heap is not None:
            return _from_statistics(m, owned, small, large, moved, how)
        return _from_pools(m, owned)

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


# --- its layers ---------------------------------------------------------------------------------

def _sizes(m: Measurements, arenas_resident: int) -> tuple[int, int, list[str]]:
    """Python's small objects (pymalloc's blocks, at most its arenas' resident bytes) and large ones
    (held in the C allocator), as its own statistics give them, and how each was read."""
    small = large = 0
    how = []
    if m.pymalloc is not None:
        small = min(m.pymalloc.allocated_blocks_bytes, arenas_resident)
        how.append("pymalloc bytes in allocated blocks (_PyObject_DebugMallocStats)")
    heap = m.python_heap
    if heap is not None and heap.traced_current is not None:
        large = max(0, heap.traced_current - small)
        how.append("plus what tracemalloc traces beyond them (held in the C allocator)")
    elif heap is not None:
        large = heap.large_buffers_bytes
        how.append("plus buffers over 512 B found by a gc walk (held in the C allocator)")
    return small, large, how


def _from_statistics(m: Measurements, owned: Owners, small: int, large: int, moved: int,
                   how: list[str]) -> tuple[Layer, Layer]:
    """python_objects and pymalloc_free from the process's own statistics (read inside it)."""
    heap = m.python_heap
    python = Layer(
        "python_objects", small + moved,
        virtual=(m.pymalloc.allocated_blocks_bytes if m.pymalloc else 0) + large,
        derivation=", ".join(how),
        source="pymalloc stats" + (", tracemalloc" if heap and heap.traced_current is not None
                                   else ", gc walk" if heap else ""),
        detail={"pymalloc_blocks": small, "in_c_allocator": moved,
                "tracemalloc_current": heap.traced_current if heap else None,
                "large_buffers": heap.largest if heap else [],
                "instance_counts": heap.instance_counts if heap else {}},
    )
    free = Layer(
        "pymalloc_free", owned(OWNER) - small,
        virtual=m.pymalloc.free_bytes if m.pymalloc else None,
        derivation="resident pages of pymalloc arenas (found by their pool headers) minus allocated blocks",
        source="pool headers, pagemap",
        detail=({"arenas": m.pymalloc.arenas_current,
                 "arenas_found": owned.count.get(OWNER, 0),
                 "unused_pools": m.pymalloc.unused_pools,
                 "available_blocks": m.pymalloc.available_blocks_bytes} if m.pymalloc else {}),
    )
    return python, free


def _from_pools(m: Measurements, owned: Owners) -> tuple[Layer, Layer]:
    """python_objects and pymalloc_free from outside, where only the pool headers say what is in use."""
    arenas = owned(OWNER)
    if m.pools is None or not m.pools.arenas:
        note = m.notes.get("python_objects", "not a Python process, or not readable from outside")
        return Layer("python_objects", None, note=note), Layer(
            "pymalloc_free", arenas or None, derivation="resident pages of pymalloc arenas found by their pool headers",
            note="" if arenas else note)
    # the headers count blocks, the pagemap pages: more blocks than resident pages (some
    # swapped out) would count a page twice, so the arenas' resident pages bound both
    small = min(m.pools.in_use, arenas)
    clamped = f"; at most the arenas' resident pages ({m.pools.in_use - small} bytes of blocks over them: " \
              "pages swapped out?), so pymalloc_free is clamped at 0" if small < m.pools.in_use else ""
    python = Layer(
        "python_objects", small, virtual=m.pools.in_use,
        derivation="small objects (512 bytes or less) in pymalloc pools, read from outside: blocks in use x "
                   "block size from each resident pool header; larger objects live in the C allocator and are "
                   "counted under allocator_in_use from outside" + clamped,
        source="pymalloc pool headers", detail={"pymalloc_blocks": small, **asdict(m.pools)})
    free = Layer(
        "pymalloc_free", arenas - small, virtual=max(0, owned.virtual.get(OWNER, 0) - m.pools.in_use),
        derivation="resident pages of pymalloc arenas (found by their pool headers) minus the bytes in blocks "
                   "in use their pool headers count: free blocks, empty pools, pool headers" + clamped,
        source="pool headers, pagemap", detail={"arenas_found": owned.count.get(OWNER, 0)})
    return python, free


READER = Pymalloc()
