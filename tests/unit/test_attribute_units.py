"""attribute() on hand-built Measurements, one allocator branch at a time, clamps included.

Every expected figure is worked out by hand in the comment above it from the inputs of
the test, never from memgap's own helpers: a change that moves bytes between layers
changes one of these numbers.
"""
import pytest

from memgap.allocators.measured import Measurements
from memgap.documents.allocator import AllocatorInfo
from memgap.documents.parts import PymallocStats, PythonHeap
from memgap.documents.snapshot import Region
from memgap.explain.attribution import attribute
from memgap.sources.glibc_heaps import ArenaLayout, GlibcLayout
from memgap.sources.jemalloc import JemallocStats
from memgap.sources.pymalloc_pools import PoolCensus

KiB, MiB = 1 << 10, 1 << 20


def regions(*owned):
    """Regions laid end to end: (owner, resident) or (owner, resident, virtual)."""
    out, address = [], 0x10000000
    for owner, resident, *virtual in owned:
        size = virtual[0] if virtual else resident
        out.append(Region(address, address + size, owner, resident))
        address += size + 4 * KiB
    return out


def pymalloc(allocated):
    return PymallocStats(arenas_current=5, arenas_highwater=5, arena_size=MiB, pool_size=16 * KiB,
                         allocated_blocks_bytes=allocated, available_blocks_bytes=0, unused_pools=0,
                         pool_headers_bytes=0, quantization_bytes=0, arena_alignment_bytes=0, used_pools=0)


def jemalloc(allocated, resident):
    return JemallocStats(allocated=allocated, active=allocated, resident=resident, retained=0, mapped=resident,
                         metadata=0, narenas=1)


def layers_of(m):
    layers, unexplained = attribute(m)
    return {name: layer.resident for name, layer in layers.items()}, unexplained


# --- glibc: a walked layout ------------------------------------------------------------------

def glibc_layout(fragmented=0):
    # main arena: 1 MiB top, 4 MiB in bins; one thread arena: 8 MiB top, 2 MiB in bins; the free
    # chunks' bytes on resident pages are their whole pages, plus ``fragmented`` bytes of small
    # bins' chunks beside live ones in the main arena
    main = ArenaLayout(0x7000, True, top_resident=1 * MiB, bins_free_resident=4 * MiB, walk_complete=True,
                       top_on_resident=1 * MiB, bins_free_on_resident=4 * MiB, small_free_on_resident=fragmented,
                       small_walk_complete=True, fastbin_chunks={})
    thread = ArenaLayout(0x8000, False, top_resident=8 * MiB, bins_free_resident=2 * MiB, walk_complete=True,
                         top_on_resident=8 * MiB, bins_free_on_resident=2 * MiB, small_walk_complete=True,
                         fastbin_chunks={})
    return GlibcLayout([main, thread], main_found=True)


GLIBC_REGIONS = regions(("file", 10 * MiB, 20 * MiB), ("shmem", 1 * MiB), ("file-cow", 256 * KiB),
                        ("stack", 128 * KiB, 8 * MiB), ("stack", 64 * KiB, 1 * MiB), ("glibc-heap", 40 * MiB),
                        ("mmapped-chunk", 6 * MiB), ("anon", 3 * MiB), ("pymalloc-arena", 5 * MiB))


def test_glibc_with_python_objects_found_by_a_gc_walk():
    m = Measurements(rss=66 * MiB, regions=GLIBC_REGIONS, allocator="glibc", glibc=glibc_layout(),
                     pymalloc=pymalloc(4 * MiB), python_heap=PythonHeap("gc-walk", large_buffers_bytes=7 * MiB))
    layers, unexplained = attribute(m)
    assert {k: v.resident for k, v in layers.items()} == {
        "files": 10 * MiB,               # file pages only
        "shared_memory": 1 * MiB,        # shmem, its own layer
        "python_objects": 11 * MiB,      # pymalloc blocks 4 + large buffers 7 (taken from glibc's in-use)
        "pymalloc_free": 1 * MiB,        # arenas 5 - blocks 4
        "allocator_in_use": 24 * MiB,    # heaps 40 - free 15 + mmapped chunks 6 - large buffers 7
        "allocator_free": 15 * MiB,      # tops 1 + 8, bins 4 + 2
        "stacks": 192 * KiB,             # 128 + 64
        "static_data": 0,                # no object's static data among the regions
        "other_anon": 3 * MiB + 256 * KiB,  # unclaimed anon 3 + private copies of file pages
    }
    # 66 MiB - (10 + 1 + 11 + 1 + 24 + 15 + 3) MiB - (192 + 256) KiB
    assert unexplained == 1 * MiB - 448 * KiB
    assert layers["stacks"].virtual == 9 * MiB
    detail = layers["allocator_free"].detail
    # main: bins 4 + top 1; thread: bins 2 (its top stays, no fastbin chunk joins it)
    assert detail["trim_releasable"] == 7 * MiB and detail["held_in_thread_tops"] == 8 * MiB
    assert detail["arena_count"] == 2 and detail["thread_arenas"] == 1


def test_glibc_free_bytes_beside_live_chunks_leave_in_use():
    # 3 MiB of small free chunks on pages that also hold live ones: free, not in use, and no trim's
    m = Measurements(rss=66 * MiB, regions=GLIBC_REGIONS, allocator="glibc", glibc=glibc_layout(3 * MiB),
                     pymalloc=pymalloc(4 * MiB), python_heap=PythonHeap("gc-walk", large_buffers_bytes=7 * MiB))
    layers, unexplained = attribute(m)
    assert layers["allocator_free"].resident == 18 * MiB   # whole pages 15 + beside live chunks 3
    assert layers["allocator_in_use"].resident == 21 * MiB  # heaps 40 - free 18 + chunks 6 - large buffers 7
    assert unexplained == 1 * MiB - 448 * KiB               # as without them: 3 MiB moved, none lost
    detail = layers["allocator_free"].detail
    assert (detail["free_pages_resident"], detail["fragmented"]) == (15 * MiB, 3 * MiB)
    assert detail["trim_releasable"] == 7 * MiB and detail["fragmentation_complete"]
    main = detail["arenas"][0]
    assert (main["free_bytes_resident"], main["fragmented"], main["free_resident"]) == (8 * MiB, 3 * MiB, 5 * MiB)


def test_glibc_fragmentation_shares_are_its_pages_pro_rata():
    # the whole free pages' shares are exact; bytes beside live chunks take the heap's other pages' proportions
    shared = [Region(r.start, r.end, r.owner, r.resident, private=r.resident // 2,
                     pss=r.resident // 2 + r.resident // 6) for r in GLIBC_REGIONS]
    layout = glibc_layout(3 * MiB)
    layout.arenas[0].free_private, layout.arenas[0].free_pss = 4 * MiB, 5 * MiB
    layout.arenas[1].free_private, layout.arenas[1].free_pss = 8 * MiB, 8 * MiB
    layers, _ = attribute(Measurements(60 * MiB, shared, "glibc", layout, pools=PoolCensus(in_use=3 * MiB, arenas=5)))
    free = layers["allocator_free"]
    # heap + chunks 46 MiB, 23 private; less the pages' 15 (12 private): 31 MiB, 11 private; 3 MiB of it
    assert free.resident == 18 * MiB and free.private == 12 * MiB + round(3 * MiB * 11 / 31)


def test_glibc_with_tracemalloc():
    heap = PythonHeap("tracemalloc", traced_current=20 * MiB)
    m = Measurements(rss=66 * MiB, regions=GLIBC_REGIONS, allocator="glibc", glibc=glibc_layout(),
                     pymalloc=pymalloc(4 * MiB), python_heap=heap)
    got, unexplained = layers_of(m)
    assert got["python_objects"] == 20 * MiB      # all that tracemalloc traces: 4 in pymalloc, 16 in glibc
    assert got["allocator_in_use"] == 15 * MiB    # 40 - 15 + 6 - 16
    assert got["allocator_free"] == 15 * MiB and got["pymalloc_free"] == 1 * MiB
    assert unexplained == 1 * MiB - 448 * KiB      # the same total as above: 9 MiB moved, none lost


def test_glibc_clamps_python_to_what_it_can_hold():
    # pymalloc says 6 MiB of blocks in 5 MiB of resident arenas: at most 5 (no negative free);
    # the gc walk says 40 MiB of large buffers, glibc holds 31 MiB in use: at most 31 move
    m = Measurements(rss=66 * MiB, regions=GLIBC_REGIONS, allocator="glibc", glibc=glibc_layout(),
                     pymalloc=pymalloc(6 * MiB), python_heap=PythonHeap("gc-walk", large_buffers_bytes=40 * MiB))
    got, _ = layers_of(m)
    assert got["pymalloc_free"] == 0
    assert got["python_objects"] == 5 * MiB + 31 * MiB
    assert got["allocator_in_use"] == 0 and got["allocator_free"] == 15 * MiB


SMALL_HEAP = regions(("glibc-heap", 10 * MiB), ("anon", 1 * MiB))


def test_glibc_free_beyond_the_heap_clamps_in_use_to_zero():
    # a walk that counted 15 MiB free in 10 MiB of heap: in use would be -5, shown as 0,
    # and the layers then exceed RSS by the 5 MiB, in unexplained (shown, not hidden)
    m = Measurements(rss=11 * MiB, regions=SMALL_HEAP, allocator="glibc", glibc=glibc_layout())
    got, unexplained = layers_of(m)
    assert got["allocator_in_use"] == 0 and got["allocator_free"] == 15 * MiB
    assert got["other_anon"] == 1 * MiB
    assert unexplained == 11 * MiB - 16 * MiB


def test_glibc_negative_in_use_takes_nothing_from_python_objects():
    m = Measurements(rss=11 * MiB, regions=SMALL_HEAP, allocator="glibc", glibc=glibc_layout(),
                     pymalloc=pymalloc(0), python_heap=PythonHeap("gc-walk", large_buffers_bytes=3 * MiB))
    got, _ = layers_of(m)
    assert got["python_objects"] == 0 and got["allocator_in_use"] == 0


# --- jemalloc: its statistics, within the resident pages of its own mappings -------------------

# jemalloc's mappings (found by memgap as MAP_NORESERVE ones): 26 MiB resident of 64 MiB; 4 MiB
# of anonymous memory outside them
JE_REGIONS = regions(("file", 10 * MiB), ("stack", 128 * KiB), ("jemalloc", 26 * MiB, 64 * MiB), ("anon", 4 * MiB),
                     ("file-cow", 256 * KiB), ("pymalloc-arena", 2 * MiB))
# 43 MiB - (files 10 + arenas 2 + anonymous 30) MiB - (stack 128 + private copies 256) KiB, however
# the 30 anonymous MiB are split
JE_UNEXPLAINED = 43 * MiB - 42 * MiB - 384 * KiB


def test_jemalloc():
    # stats.resident says 30 MiB, its mappings hold 26: free is what the pages show, not the counter
    m = Measurements(rss=43 * MiB, regions=JE_REGIONS, allocator="jemalloc", jemalloc=jemalloc(20 * MiB, 30 * MiB))
    layers, unexplained = attribute(m)
    assert {k: v.resident for k, v in layers.items()} == {
        "files": 10 * MiB,
        "shared_memory": 0,
        "python_objects": None,          # no Python statistics: not measured
        "pymalloc_free": 2 * MiB,        # the arenas found, all of them
        "allocator_in_use": 20 * MiB,    # stats.allocated, within the 26 resident
        "allocator_free": 6 * MiB,       # mappings' resident 26 - in use 20 (below the counter's 30 - 20)
        "stacks": 128 * KiB,
        "static_data": 0,
        "other_anon": 4 * MiB + 256 * KiB,  # anonymous outside jemalloc's mappings, plus private copies
    }
    assert unexplained == JE_UNEXPLAINED
    detail = layers["allocator_free"].detail["jemalloc"]
    assert detail["counted_not_resident"] == 4 * MiB  # stats.resident 30 - resident pages 26
    assert "MAP_NORESERVE" in layers["allocator_free"].derivation and not layers["allocator_free"].note


def test_jemalloc_with_python_large_buffers():
    m = Measurements(rss=43 * MiB, regions=JE_REGIONS, allocator="jemalloc", jemalloc=jemalloc(20 * MiB, 30 * MiB),
                     pymalloc=pymalloc(1 * MiB), python_heap=PythonHeap("gc-walk", large_buffers_bytes=3 * MiB))
    got, _ = layers_of(m)
    assert got["python_objects"] == 4 * MiB and got["pymalloc_free"] == 1 * MiB
    assert got["allocator_in_use"] == 17 * MiB and got["allocator_free"] == 6 * MiB  # 20 - 3 large
    assert got["other_anon"] == 4 * MiB + 256 * KiB


@pytest.mark.parametrize("allocated, resident, in_use, free, unclaimed", [
    (35 * MiB, 40 * MiB, 26 * MiB, 0, 4 * MiB),          # allocated beyond the 26 resident: 26, no free
    (20 * MiB, 24 * MiB, 20 * MiB, 4 * MiB, 6 * MiB),    # the counter bounds free: 24 - 20 of the 6 pages left;
                                                         # the other 2 are someone else's (26 - 24), with the 4
])
def test_jemalloc_clamps_to_its_resident_pages(allocated, resident, in_use, free, unclaimed):
    m = Measurements(rss=43 * MiB, regions=JE_REGIONS, allocator="jemalloc", jemalloc=jemalloc(allocated, resident))
    got, unexplained = layers_of(m)
    assert (got["allocator_in_use"], got["allocator_free"]) == (in_use, free)
    assert got["other_anon"] == unclaimed + 256 * KiB
    assert unexplained == JE_UNEXPLAINED


@pytest.mark.parametrize("regions_", [
    # no MAP_NORESERVE mapping at all (vm.overcommit_memory 2): the 30 MiB all unclaimed
    regions(("file", 10 * MiB), ("stack", 128 * KiB), ("anon", 30 * MiB), ("file-cow", 256 * KiB),
            ("pymalloc-arena", 2 * MiB)),
    # mappings too small for what jemalloc says it maps (stats.mapped 100 MiB in 64): not all of them
    JE_REGIONS,
])
def test_jemalloc_without_its_mappings_measures_no_free(regions_):
    stats = JemallocStats(allocated=20 * MiB, active=20 * MiB, resident=26 * MiB, retained=0, mapped=100 * MiB,
                          metadata=0, narenas=1)
    m = Measurements(rss=43 * MiB, regions=regions_, allocator="jemalloc", jemalloc=stats)
    layers, unexplained = attribute(m)
    got = {k: v.resident for k, v in layers.items()}
    # in use is the counter within the 30 unclaimed anonymous MiB; free is not measured and its
    # pages stay in other_anon: 30 - 20, plus private copies
    assert (got["allocator_in_use"], got["allocator_free"]) == (20 * MiB, None)
    assert got["other_anon"] == 10 * MiB + 256 * KiB
    assert "not found" in layers["allocator_free"].note
    assert unexplained == JE_UNEXPLAINED


# --- tcmalloc: MallocExtension's properties from the agent, within the resident pages of [heap] ---

# [heap] (tcmalloc's sbrk memory): 26 MiB resident of 64 MiB; 4 MiB of anonymous memory elsewhere
TC_REGIONS = regions(("file", 10 * MiB), ("stack", 128 * KiB), ("tcmalloc", 26 * MiB, 64 * MiB), ("anon", 4 * MiB),
                     ("file-cow", 256 * KiB), ("pymalloc-arena", 2 * MiB))


def tcmalloc(allocated, heap_size, unmapped, physical=None):
    stats = {"generic.current_allocated_bytes": allocated, "generic.heap_size": heap_size,
             "tcmalloc.pageheap_unmapped_bytes": unmapped}
    if physical is not None:  # page heap less unmapped, plus metadata
        stats["generic.total_physical_bytes"] = physical
    return stats


@pytest.mark.parametrize("stats, in_use, free, unclaimed", [
    # page heap 20, 3 unmapped, metadata 2: tcmalloc counts 19 physical, 12 allocated, so 7 free;
    # [heap] shows 26 - 12 = 14 beyond in use: 7, and 7 pages are no one's; plus the 4 outside
    (tcmalloc(12 * MiB, 20 * MiB, 3 * MiB, 19 * MiB), 12 * MiB, 7 * MiB, 11 * MiB),
    # tcmalloc counts 42 physical, 30 beyond allocated; [heap] holds only 14 beyond: 14
    (tcmalloc(12 * MiB, 40 * MiB, 0, 42 * MiB), 12 * MiB, 14 * MiB, 4 * MiB),
    # held 10 below allocated 12: no free, not a negative one; 14 unclaimed + 4
    (tcmalloc(12 * MiB, 10 * MiB, 0, 10 * MiB), 12 * MiB, 0, 18 * MiB),
    # allocated 35 beyond the 26 resident: 26
    (tcmalloc(35 * MiB, 40 * MiB, 0, 40 * MiB), 26 * MiB, 0, 4 * MiB),
    # an agent without total_physical_bytes: physical = 20 - 3, free 5, 26 - 17 = 9 unclaimed + 4
    (tcmalloc(12 * MiB, 20 * MiB, 3 * MiB), 12 * MiB, 5 * MiB, 13 * MiB),
    # a page heap of 80 does not fit in a 64 MiB [heap]: some came from mmap, free not measured;
    # in use 12 of the 30 anonymous MiB, the other 18 unclaimed
    (tcmalloc(12 * MiB, 80 * MiB, 0, 80 * MiB), 12 * MiB, None, 18 * MiB),
])
def test_tcmalloc(stats, in_use, free, unclaimed):
    m = Measurements(rss=43 * MiB, regions=TC_REGIONS, allocator="tcmalloc", tcmalloc=stats)
    got, unexplained = layers_of(m)
    assert (got["allocator_in_use"], got["allocator_free"]) == (in_use, free)
    assert got["other_anon"] == unclaimed + 256 * KiB
    assert got["files"] == 10 * MiB and got["stacks"] == 128 * KiB and got["pymalloc_free"] == 2 * MiB
    # the anonymous 30 MiB split between the three, whatever the clamps did
    assert unexplained == JE_UNEXPLAINED


# --- no statistics: a mimalloc process, or glibc's heaps read with no walk ------------------------

def test_unknown_allocator_leaves_its_memory_in_other_anon():
    m = Measurements(rss=20 * MiB, allocator="mimalloc",
                     regions=regions(("file", 5 * MiB), ("glibc-heap", 4 * MiB), ("mmapped-chunk", 2 * MiB),
                                     ("anon", 7 * MiB), ("stack", 64 * KiB)),
                     notes={"allocator_in_use": "allocator mimalloc: not read"})
    layers, unexplained = attribute(m)
    got = {k: v.resident for k, v in layers.items()}
    assert got == {
        "files": 5 * MiB, "shared_memory": 0,
        "python_objects": None, "pymalloc_free": None,   # not a Python process: not measured
        "allocator_in_use": None, "allocator_free": None,
        "stacks": 64 * KiB,
        "static_data": 0,
        "other_anon": 13 * MiB,                           # anon 7 + heap 4 + mmapped chunks 2
    }
    assert unexplained == 20 * MiB - 18 * MiB - 64 * KiB
    assert layers["allocator_in_use"].note == "allocator mimalloc: not read"
    assert layers["python_objects"].note  # says why, never a silent zero


# --- Python from outside: blocks counted from pymalloc's pool headers ----------------------------

def test_outside_python_objects_are_the_blocks_the_pool_headers_count():
    # glibc's layout as above; 3 MiB of blocks in use counted in the 5 resident MiB of arenas
    m = Measurements(rss=60 * MiB, regions=GLIBC_REGIONS, allocator="glibc", glibc=glibc_layout(),
                     pools=PoolCensus(in_use=3 * MiB, arenas=5, pools_read=320, pools_in_use=300))
    layers, _ = attribute(m)
    got = {k: v.resident for k, v in layers.items()}
    assert got["python_objects"] == 3 * MiB and got["pymalloc_free"] == 2 * MiB   # arenas 5 - blocks 3
    assert got["allocator_in_use"] == 40 * MiB - 15 * MiB + 6 * MiB   # untouched: large objects stay here
    assert "512 bytes" in layers["python_objects"].derivation and "clamped" not in layers["pymalloc_free"].derivation


def test_outside_blocks_beyond_the_resident_arena_pages_are_clamped_and_said():
    # 7 MiB of blocks counted in 5 resident MiB (pages swapped out): both layers stay within the 5
    m = Measurements(rss=60 * MiB, regions=GLIBC_REGIONS, pools=PoolCensus(in_use=7 * MiB, arenas=5))
    layers, _ = attribute(m)
    assert (layers["python_objects"].resident, layers["pymalloc_free"].resident) == (5 * MiB, 0)
    assert layers["python_objects"].virtual == 7 * MiB
    assert "clamped at 0" in layers["pymalloc_free"].derivation


def test_outside_with_no_arena_found_is_not_measured():
    m = Measurements(rss=60 * MiB, regions=GLIBC_REGIONS[:-1], pools=PoolCensus(),
                     notes={"python_objects": "no pymalloc arena found from outside"})
    layers, _ = attribute(m)
    assert layers["python_objects"].resident is None and layers["pymalloc_free"].resident is None
    assert layers["python_objects"].note == "no pymalloc arena found from outside"


# --- shared and private pages (issue 15) -----------------------------------------------------

def test_shares_follow_their_pages():
    # every region's pages half private; each shared page counts a third (three sharers)
    shared = [Region(r.start, r.end, r.owner, r.resident, private=r.resident // 2,
                     pss=r.resident // 2 + r.resident // 6) for r in GLIBC_REGIONS]
    layout = glibc_layout()
    # of the 15 MiB the walk found free: 12 MiB private, 3 MiB shared (1 MiB of PSS)
    layout.arenas[0].free_private, layout.arenas[0].free_pss = 4 * MiB, 5 * MiB
    layout.arenas[1].free_private, layout.arenas[1].free_pss = 8 * MiB, 8 * MiB
    pools = PoolCensus(in_use=3 * MiB, arenas=5)
    layers, _ = attribute(Measurements(60 * MiB, shared, "glibc", layout, pools=pools))
    free, in_use = layers["allocator_free"], layers["allocator_in_use"]
    assert (free.private, free.shared, free.pss) == (12 * MiB, 3 * MiB, 13 * MiB)
    # in use: heap 40 + chunks 6 = 46 MiB (23 private, PSS 23 + 23/3) less the free 15 (12 private, PSS 13)
    assert (in_use.resident, in_use.private) == (31 * MiB, 11 * MiB)
    assert in_use.pss == pytest.approx(23 * MiB + 23 * MiB / 3 - 13 * MiB, abs=2)  # floors above
    # Python objects: 3 of the arenas' 5 MiB, in the arenas' proportions (half private, PSS 2/3)
    objects, free_blocks = layers["python_objects"], layers["pymalloc_free"]
    assert (objects.private, objects.pss) == (round(1.5 * MiB), round(2 * MiB))
    assert (free_blocks.private, free_blocks.pss) == (MiB, round(4 * MiB / 3))
    # other anonymous: the unclaimed 3 MiB plus the 256 KiB of copied file pages, exact
    assert layers["other_anon"].private == (3 * MiB + 256 * KiB) // 2
    assert sum(layer.pss for layer in layers.values()) == pytest.approx(sum(r.pss for r in shared), abs=8)


def test_shares_unknown_stay_unmeasured():
    layers, _ = attribute(Measurements(60 * MiB, GLIBC_REGIONS, "glibc", glibc_layout()))
    assert all(layer.private is None and layer.pss is None for layer in layers.values())
    # a layer with no region at all says "not read" too, not 0 (in-process: no page told private)
    none = [r for r in GLIBC_REGIONS if r.owner != "shmem"]
    layers, _ = attribute(Measurements(60 * MiB, none, "glibc", glibc_layout()))
    assert layers["shared_memory"].resident == 0 and layers["shared_memory"].pss is None


# --- shared memory (issue 22) -------------------------------------------------------------------

def test_shared_memory_is_its_own_layer_by_kind():
    # as label_regions names them: 64 MiB of anonymous MAP_SHARED memory shared by 4 processes
    # (PSS a quarter), an 8 MiB SysV segment and a 4 MiB POSIX object this process alone maps,
    # a 2 MiB memfd half of whose pages another maps; beside 10 MiB of files, all shared by 2
    shm = [("/dev/zero (deleted)", 64 * MiB, 0, 16 * MiB), ("/SYSV0000162e (deleted)", 8 * MiB, 8 * MiB, 8 * MiB),
           ("/dev/shm/PostgreSQL.1", 4 * MiB, 4 * MiB, 4 * MiB),
           ("/memfd:buffers (deleted)", 2 * MiB, MiB, MiB + MiB // 2)]
    rs = [Region(0x1000, 0x1000 + 10 * MiB, "file", 10 * MiB, "r-xp", "/usr/lib/libc.so.6", 0, 5 * MiB)]
    address = 1 << 32
    for path, resident, private, pss in shm:
        rs.append(Region(address, address + 2 * resident, "shmem", resident, "rw-s", path, private, pss))
        address += 4 * resident
    layers, unexplained = attribute(Measurements(88 * MiB, rs))
    layer, files = layers["shared_memory"], layers["files"]
    assert list(layers)[:2] == ["files", "shared_memory"]
    assert layer.resident == 78 * MiB and files.resident == 10 * MiB and unexplained == 0  # 64 + 8 + 4 + 2
    assert layer.virtual == 2 * 78 * MiB  # each mapping twice its resident size
    assert {k: layer.detail[k] for k in ("anonymous", "sysv", "posix", "memfd", "mappings")} == \
        {"anonymous": 64 * MiB, "sysv": 8 * MiB, "posix": 4 * MiB, "memfd": 2 * MiB, "mappings": 4}
    # private 0 + 8 + 4 + 1; PSS 16 + 8 + 4 + 1.5
    assert (layer.private, layer.shared, layer.pss) == (13 * MiB, 65 * MiB, 29 * MiB + MiB // 2)
    assert (files.private, files.pss) == (0, 5 * MiB) and files.detail["shmem"] == 78 * MiB


# --- libraries' static data (issue 31) ---------------------------------------------------------

def test_static_data_is_its_own_layer_per_object():
    # as label_regions names them: libbig.so's .bss read from its program headers, 6 MiB resident in two
    # pieces (its range in a mapping the kernel merged with a neighbour, and a second segment's); libc's
    # 64 KiB; a container's libhidden.so whose file was not read: 1 MiB likely, from the maps; beside
    # 3 MiB unclaimed anonymous and a glibc heap of 8 MiB with 2 MiB free in its top chunk
    rs = [Region(0x10000000, 0x10400000, "static-data", 4 * MiB, "rw-p", "/lib/libbig.so", 4 * MiB, 4 * MiB),
          Region(0x10400000, 0x10800000, "anon", 3 * MiB, "rw-p", "[anon]", 3 * MiB, 3 * MiB),
          Region(0x11000000, 0x11400000, "static-data", 2 * MiB, "rw-p", "/lib/libbig.so", 2 * MiB, 2 * MiB),
          Region(0x12000000, 0x12010000, "static-data", 64 * KiB, "rw-p", "/lib/libc.so.6", 0, 32 * KiB),
          Region(0x13000000, 0x13200000, "static-likely", 1 * MiB, "rw-p", "/lib/libhidden.so", MiB, MiB),
          Region(0x14000000, 0x14800000, "glibc-heap", 8 * MiB, "rw-p", "[heap]", 8 * MiB, 8 * MiB)]
    main = ArenaLayout(0x7000, True, top_resident=2 * MiB, bins_free_resident=0, walk_complete=True,
                       top_on_resident=2 * MiB, bins_free_on_resident=0, small_walk_complete=True, fastbin_chunks={})
    layers, unexplained = attribute(Measurements(18 * MiB + 64 * KiB, rs, "glibc", GlibcLayout([main], True)))
    static, other = layers["static_data"], layers["other_anon"]
    assert list(layers)[-2:] == ["static_data", "other_anon"]
    assert static.resident == 7 * MiB + 64 * KiB  # 4 + 2 + 64 KiB read, 1 likely
    assert static.virtual == 0x400000 + 0x400000 + 0x10000 + 0x200000
    assert other.resident == 3 * MiB and unexplained == 0  # only the unclaimed anonymous pages
    assert (static.private, static.pss) == (7 * MiB, 7 * MiB + 32 * KiB)
    assert static.detail == {"objects": 3, "likely": MiB, "largest": [
        {"path": "/lib/libbig.so", "bytes": 6 * MiB, "likely": 0},
        {"path": "/lib/libhidden.so", "bytes": MiB, "likely": MiB},
        {"path": "/lib/libc.so.6", "bytes": 64 * KiB, "likely": 0}]}
    assert "not read" in static.derivation and "maps" in static.source


# --- jemalloc's counters read through gdb (inspect --deep) ------------------------------------

def _jemalloc_deep(allocated, active, resident, pdirty, pmuzzy, metadata, retained=5 * MiB):
    from memgap.sources.jemalloc_gdb import ArenaPages, JemallocDeep

    # two arenas, the pages split between them
    arenas = (ArenaPages(0, pdirty - 10, pmuzzy, 10000, 0), ArenaPages(3, 10, 0, 10000, 0))
    return JemallocDeep("mallctl", allocated, active, resident, retained, mapped=active + 4 * MiB,
                        metadata=metadata, page=4 * KiB, narenas=8, arenas=arenas)


def _outside_jemalloc_snapshot():
    # an outside read of a jemalloc process: no allocator layers, its pages unclaimed anonymous
    m = Measurements(rss=60 * MiB, regions=regions(("file", 8 * MiB), ("stack", 1 * MiB), ("anon", 50 * MiB),
                                                     ("file-cow", 1 * MiB)), allocator="jemalloc")
    return attribute(m)[0]


def test_jemalloc_counters_read_through_gdb_move_pages_out_of_other_anon():
    from memgap.allocators.gdb_layers import jemalloc_gdb_layers

    outside = _outside_jemalloc_snapshot()
    assert outside["other_anon"].resident == 51 * MiB  # 50 unclaimed + 1 file-cow
    # 12 MiB allocated in 13 MiB of active pages; 6000 dirty + 400 muzzy pages (25 MiB); resident
    # 13 + 6000 pages (23.4375 MiB) + 3 MiB metadata pages = 39.4375 MiB; stats.metadata 5 MiB
    j = _jemalloc_deep(12 * MiB, 13 * MiB, 13 * MiB + 6000 * 4 * KiB + 3 * MiB, 6000, 400, 5 * MiB)
    layers, _ = jemalloc_gdb_layers(outside, 60 * MiB, j)
    assert layers["allocator_in_use"].resident == 12 * MiB
    # free: 1 MiB slack + 6400 pages (25 MiB) + 3 MiB metadata = 29 MiB
    assert layers["allocator_free"].resident == 29 * MiB
    assert layers["allocator_free"].virtual == 29 * MiB + 5 * MiB  # plus retained
    assert layers["allocator_free"].detail["purgeable"] == 25 * MiB
    # other_anon: 51 - 12 - 29 = 10 MiB, its unclaimed anonymous part 50 - 41 = 9 MiB
    assert layers["other_anon"].resident == 10 * MiB
    assert layers["other_anon"].detail["unclaimed_anonymous"] == 9 * MiB
    assert not layers["allocator_free"].note
    assert layers["files"] is outside["files"] and layers["stacks"] is outside["stacks"]


def test_jemalloc_counters_beyond_the_unclaimed_pages_are_clamped_and_said():
    from memgap.allocators.gdb_layers import jemalloc_gdb_layers

    outside = _outside_jemalloc_snapshot()
    # 40 MiB allocated, 2 MiB slack, 2000 pages (7.8125 MiB) dirty, 2 MiB of metadata pages: 51.8 MiB wanted
    # of 50 MiB unclaimed: in use 40, slack 2, dirty 7.8125, metadata what is left, 0.1875 MiB
    j = _jemalloc_deep(40 * MiB, 42 * MiB, 42 * MiB + 2000 * 4 * KiB + 2 * MiB, 2000, 0, 4 * MiB)
    layers, _ = jemalloc_gdb_layers(outside, 60 * MiB, j)
    assert layers["allocator_in_use"].resident == 40 * MiB
    assert layers["allocator_free"].resident == 2 * MiB + 2000 * 4 * KiB + 192 * KiB
    assert layers["allocator_free"].detail["metadata"] == 192 * KiB
    assert layers["other_anon"].resident == 1 * MiB  # the file-cow pages only
    assert "metadata 1900544 bytes" in layers["allocator_free"].note  # 2 MiB - 192 KiB not moved


# --- tcmalloc's properties and mimalloc's figures read through gdb (inspect --deep) ----------

def test_tcmalloc_properties_read_through_gdb_move_pages_out_of_other_anon():
    from memgap.allocators.gdb_layers import tcmalloc_gdb_layers
    from memgap.sources.tcmalloc_gdb import TcmallocDeep

    outside = _outside_jemalloc_snapshot()  # 50 MiB unclaimed anonymous, 1 MiB file-cow
    # 20 MiB allocated; 16 MiB free spans; caches 1 + 0.5 + 2 MiB; 8 MiB unmapped; heap_size the sum, 47.5 MiB;
    # total_physical = 47.5 - 8 + 1.5 MiB metadata = 41 MiB
    t = TcmallocDeep(20 * MiB, 47 * MiB + 512 * KiB, 16 * MiB, 8 * MiB, 1 * MiB, 512 * KiB, 2 * MiB,
                     total_physical=41 * MiB)
    assert t.metadata == 1 * MiB + 512 * KiB and t.caches == 3 * MiB + 512 * KiB
    layers, unexplained = tcmalloc_gdb_layers(outside, 60 * MiB, t)
    assert layers["allocator_in_use"].resident == 20 * MiB
    # free: 16 + 3.5 + 1.5 = 21 MiB; virtual adds the 8 MiB unmapped
    assert layers["allocator_free"].resident == 21 * MiB and layers["allocator_free"].virtual == 29 * MiB
    assert layers["allocator_free"].detail["releasable"] == 16 * MiB
    # other_anon: 51 - 20 - 21 = 10 MiB; nothing else moved, so unexplained is what it was (0)
    assert layers["other_anon"].resident == 10 * MiB and unexplained == 0
    assert not layers["allocator_free"].note


def test_tcmalloc_properties_beyond_the_unclaimed_pages_are_clamped_and_said():
    from memgap.allocators.gdb_layers import tcmalloc_gdb_layers
    from memgap.sources.tcmalloc_gdb import TcmallocDeep

    outside = _outside_jemalloc_snapshot()
    # 30 MiB allocated, 30 MiB free spans (some never touched): of 50 MiB unclaimed, free spans get 20, caches 0
    t = TcmallocDeep(30 * MiB, 61 * MiB, 30 * MiB, 0, 1 * MiB, 0, 0, total_physical=61 * MiB)
    layers, _ = tcmalloc_gdb_layers(outside, 60 * MiB, t)
    assert layers["allocator_in_use"].resident == 30 * MiB
    assert layers["allocator_free"].resident == 20 * MiB
    assert layers["other_anon"].resident == 1 * MiB
    assert "pageheap_free 10485760 bytes" in layers["allocator_free"].note and "caches 1048576" in \
        layers["allocator_free"].note


def test_mimalloc_committed_bytes_go_to_a_layer_of_their_own():
    from memgap.allocators.gdb_layers import mimalloc_gdb_layers
    from memgap.sources.mimalloc_gdb import MimallocDeep

    outside = _outside_jemalloc_snapshot()
    # 36 MiB committed, within the 50 MiB unclaimed
    mi = MimallocDeep(10, 1, 1, 36 * MiB, 40 * MiB, 36 * MiB, 64 * MiB, 0)
    layers, unexplained = mimalloc_gdb_layers(outside, 60 * MiB, mi)
    assert list(layers).index("allocator_held") == list(layers).index("allocator_free") + 1
    assert layers["allocator_held"].resident == 36 * MiB and layers["allocator_held"].virtual == 36 * MiB
    for name in ("allocator_in_use", "allocator_free"):
        assert layers[name].resident is None and "counts no allocated bytes" in layers[name].note
    assert layers["other_anon"].resident == 15 * MiB and unexplained == 0
    # 64 MiB committed (some never touched): held takes the 50 MiB unclaimed, and says what it left
    layers, _ = mimalloc_gdb_layers(outside, 60 * MiB, MimallocDeep(10, 1, 1, 64 * MiB, 0, 64 * MiB, 64 * MiB, 0))
    assert layers["allocator_held"].resident == 50 * MiB and "committed 14680064 bytes" in layers["allocator_held"].note


def test_tcmalloc_and_mimalloc_results_decode_from_the_bytes_the_process_wrote():
    from memgap.sources import mimalloc_gdb, tcmalloc_gdb

    names = [name for name, _ in tcmalloc_gdb.PROPERTIES]
    data, offsets = tcmalloc_gdb.encode_page(names)
    assert data[offsets[0]:].startswith(b"generic.current_allocated_bytes\0")
    assert tcmalloc_gdb.decode_slots(data[:16 * len(names)], names) == dict.fromkeys(names)  # never ran
    # the first call answered true with 4096, the second false (an unknown property)
    raw = (4096).to_bytes(8, "little") + (1).to_bytes(4, "little") + bytes(4) + bytes(16)
    assert tcmalloc_gdb.decode_slots(raw, names[:2]) == {names[0]: 4096, names[1]: None}
    expr = tcmalloc_gdb.batch_expression([0x2000], 0x1000)
    assert expr == "(*(int *) 4104 = (int) MallocExtension_GetNumericProperty((char *) 8192, (unsigned long *) 4096))"
    raw = b"".join(v.to_bytes(8, "little") for v in range(1, 9))
    assert mimalloc_gdb.decode_info(raw) == mimalloc_gdb.MimallocDeep(1, 2, 3, 4, 5, 6, 7, 8)
    assert mimalloc_gdb.info_expression(0).count("(unsigned long *)") == 8


# --- a runtime's own heap (issue 24) ----------------------------------------------------------

def _go_heap(in_use, retained, released=0):
    from memgap.runtimes.base import OwnedRange, RuntimeHeap, RuntimeInfo

    return RuntimeHeap(RuntimeInfo("go", "go1.26", "build info"), "outside: a test's figures", in_use=in_use,
                       retained=retained, released=released, ranges=[OwnedRange(0, 1, "heap")])


def test_a_runtime_heap_takes_its_pages_out_of_other_anon():
    # the heap's resident pages are runtime_heap; its own count splits them: 30 in use, the rest retained
    owned = [Region(0x10000000, 0x20000000, "runtime-heap", 100 * MiB, path="[go] heap"),
             Region(0x30000000, 0x30800000, "runtime-meta", 4 * MiB, path="[go] page summary"),
             Region(0x40000000, 0x40400000, "anon", 2 * MiB)]
    layers, unexplained = attribute(Measurements(106 * MiB, owned, "unknown", runtimes=[_go_heap(30 * MiB, 72 * MiB)]))
    heap, meta = layers["runtime_heap"], layers["runtime_metadata"]
    assert (heap.resident, meta.resident, layers["other_anon"].resident) == (100 * MiB, 4 * MiB, 2 * MiB)
    (go,) = heap.detail["runtimes"]
    # retained is the pages' rest, not the runtime's own figure (72 told: some of it not resident)
    assert (go["in_use"], go["retained"], go["retained_told"]) == (30 * MiB, 70 * MiB, 72 * MiB)
    assert unexplained == 0
    assert list(layers).index("runtime_heap") == list(layers).index("pymalloc_free") + 1


def test_no_runtime_no_runtime_layers():
    layers, _ = attribute(Measurements(10 * MiB, regions(("anon", 10 * MiB)), "glibc"))
    assert "runtime_heap" not in layers and "runtime_metadata" not in layers


def test_runtime_retention_finding_fires_above_its_floor_only():
    from memgap.diagnose.findings import diagnose
    from memgap.documents.snapshot import Snapshot

    def snap(in_use, retained):
        owned = [Region(0x10000000, 0x40000000, "runtime-heap", in_use + retained, path="[go] heap")]
        layers, unexplained = attribute(Measurements(in_use + retained, owned, "unknown",
                                                     runtimes=[_go_heap(in_use, retained)]))
        return Snapshot(1, 0.0, in_use + retained, layers, unexplained, AllocatorInfo("unknown"), route="outside")

    fired = [f for f in diagnose(snap(30 * MiB, 200 * MiB)) if f.code == "runtime-heap-retained"]
    assert fired and "200.0 MiB free but resident" in fired[0].summary
    assert not [f for f in diagnose(snap(300 * MiB, 10 * MiB)) if f.code == "runtime-heap-retained"]


def test_a_runtime_that_marks_its_free_pages_is_split_by_them():
    # Go marks the heap pages it holds free: their resident pages are retained, whatever its counts say
    from memgap.runtimes.base import OwnedRange

    heap = _go_heap(230 * MiB, 129 * MiB)
    heap.ranges = [OwnedRange(0, 1, "go heap"), OwnedRange(1, 2, "go heap free", free=True)]
    owned = [Region(0x10000000, 0x20000000, "runtime-heap", 158 * MiB, path="[go] go heap"),
             Region(0x20000000, 0x30000000, "runtime-free", 127 * MiB, path="[go] go heap free")]
    layers, _ = attribute(Measurements(285 * MiB, owned, "unknown", runtimes=[heap]))
    (go,) = layers["runtime_heap"].detail["runtimes"]
    assert layers["runtime_heap"].resident == 285 * MiB
    assert (go["in_use"], go["retained"], go["in_use_told"]) == (158 * MiB, 127 * MiB, 230 * MiB)


# --- a library's own allocator (issue 31 item 3) ---------------------------------------------------

def test_a_library_allocators_arenas_are_their_own_layer_per_allocator_and_library():
    # as label_regions names them: libarrow's mimalloc arena, 300 MiB resident of its 1 GiB, across two
    # mappings; beside it 5 MiB unclaimed anonymous and a glibc heap of 8 MiB with 2 MiB free in its top chunk
    arrow = "mimalloc in /venv/pyarrow/libarrow.so.2600"
    rs = [Region(0x40000000, 0x60000000, "library-pool", 200 * MiB, "rw-p", arrow, 200 * MiB, 200 * MiB),
          Region(0x60000000, 0x80000000, "library-pool", 100 * MiB, "rw-p", arrow, 100 * MiB, 100 * MiB),
          Region(0x90000000, 0x90800000, "anon", 5 * MiB, "rw-p", "[anon]", 5 * MiB, 5 * MiB),
          Region(0x14000000, 0x14800000, "glibc-heap", 8 * MiB, "rw-p", "[heap]", 8 * MiB, 8 * MiB)]
    main = ArenaLayout(0x7000, True, top_resident=2 * MiB, bins_free_resident=0, walk_complete=True,
                       top_on_resident=2 * MiB, bins_free_on_resident=0, small_walk_complete=True, fastbin_chunks={})
    layers, unexplained = attribute(Measurements(313 * MiB, rs, "glibc", GlibcLayout([main], True)))
    pools = layers["library_allocators"]
    assert list(layers).index("library_allocators") == list(layers).index("allocator_free") + 1
    assert (pools.resident, pools.virtual, pools.private, pools.pss) == (300 * MiB, 1 << 30, 300 * MiB, 300 * MiB)
    assert pools.detail == {"pools": [{"allocator": "mimalloc", "library": "/venv/pyarrow/libarrow.so.2600",
                                       "resident": 300 * MiB, "reserved": 1 << 30, "regions": 2}]}
    assert layers["other_anon"].resident == 5 * MiB and unexplained == 0  # the arenas left other_anon
    # a process without one has no such layer (its documents and tables as before)
    layers, _ = attribute(Measurements(13 * MiB, rs[2:], "glibc", GlibcLayout([main], True)))
    assert "library_allocators" not in layers
