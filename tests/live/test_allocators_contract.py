"""The allocator readers' contract (issue 24, item 1): every reader the registry holds, run against the
same checks on a real program under its allocator (programs/witness.c, which imports nothing of memgap,
preloaded with the allocator and, where memgap reads that allocator's counters through it, the agent;
mimalloc: programs/own_stats.c linked with it). Each is detected by its name, its own mappings lie
inside the process's maps, the layers of its outside snapshot add up to VmRSS, and its in-use bytes are
within a tolerance of the allocator's own count read in the program (mallinfo2, jemalloc's
stats.allocated, tcmalloc's current_allocated_bytes) -- or, where memgap reads none of its figures from
outside (mimalloc), the allocator layers say "not measured" and why. The readers' own tests:
test_witness_layers.py (the layers against each allocator's counters), test_jemalloc_deep.py and
test_tcmi_deep.py (their gdb routes), test_findings_allocators.py (their findings). The registry and the
typed detection read back, where nothing is started: tests/unit/test_allocator_registry.py."""
import subprocess

import pytest
from test_witness_layers import ALLOCATOR_LIBS, HEAP_MIB, Witness, own_in_use

from helpers import MiB
from memgap.allocators.detect import detect_pid
from memgap.allocators.registry import C_ALLOCATORS, all_readers, reader_for
from memgap.documents.allocator import AllocatorInfo
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
from memgap.sources.procfs import ProcReader

KiB = 1 << 10


class OwnStats:
    """programs/own_stats.c under mimalloc: holds and frees known amounts and prints its own figures."""

    def __init__(self, exe):
        self.proc = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.figures = dict(w.split("=") for w in self.proc.stdout.readline().split())
        assert self.proc.stdout.readline().startswith("ready")

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def program(witness_exe, own_stats_exe, tmp_path):
    started = []

    def start(name):
        started.append(OwnStats(own_stats_exe(name)) if name == "mimalloc" else Witness(witness_exe, name, tmp_path))
        return started[-1]

    yield start
    for p in started:
        p.close()


@pytest.mark.parametrize("name", C_ALLOCATORS)
def test_every_reader_keeps_the_seams_promises(program, name):
    p = program(name)
    if name != "mimalloc":
        p.cmd(f"heap {HEAP_MIB}")
    pid = p.proc.pid
    with ProcReader(pid) as reader:
        maps = reader.maps()
        detection = detect_pid(reader, maps)
        assert detection.name == name, detection
        own = reader_for(detection.name)
        assert own is all_readers()[name]
        ranges = own.mappings(reader, maps)
    # its own mappings, where it tells them apart, lie inside the process's maps
    for lo, hi in ranges or []:
        assert any(m.start <= lo < hi <= m.end for m in maps), (hex(lo), hex(hi))
    snap = snapshot_pid(pid, SnapshotOptions(agent=name in ("jemalloc", "tcmalloc")))
    assert snap.allocator.name == name and isinstance(snap.allocator, AllocatorInfo)
    # its outside figures' layers add up to VmRSS, with little left unexplained
    assert sum(layer.resident or 0 for layer in snap.layers.values()) + snap.unexplained == snap.rss
    assert abs(snap.unexplained) <= 0.02 * snap.rss + MiB, snap.unexplained
    in_use = snap.layers["allocator_in_use"]
    if name == "mimalloc":  # nothing of its own read from outside: said, not a zero nobody measured
        assert in_use.resident is None and "mimalloc" in in_use.note, in_use
        return
    own_count = own_in_use(p.cmd("stats"))  # idle since memgap read it: the same memory
    # glibc: the free bytes on pages never touched differ (test_witness_layers measures 0 to 4 KiB);
    # jemalloc and tcmalloc: the same counter through the agent
    assert abs(in_use.resident - own_count) <= (16 if name == "glibc" else 128) * KiB, (in_use, own_count)
    with ProcReader(pid) as reader:  # the agent's answer may map memory: the maps as the snapshot saw them
        maps = reader.maps()
    regions = [r for r in snap.regions if r.owner == (own.owner or "glibc-heap")]
    assert regions and all(any(m.start <= r.start < r.end <= m.end for m in maps) for r in regions)


def test_pymalloc_reader_owns_the_arenas_found_from_outside(tmp_path):
    """pymalloc's reader: its owner label is the regions' that its arenas, found by their pool headers
    from outside, make in a plain Python process; they lie in its maps and python_objects is measured."""
    code = "x = [str(i) * 8 for i in range(200000)]\nprint('ready', flush=True)\nimport sys; sys.stdin.read()"
    proc = subprocess.Popen(["python3", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("ready")
        snap = snapshot_pid(proc.pid)
        with ProcReader(proc.pid) as reader:
            maps = reader.maps()
        arenas = [r for r in snap.regions if r.owner == reader_for("pymalloc").owner]
        assert len(arenas) >= 8 and all(any(m.start <= r.start < r.end <= m.end for m in maps) for r in arenas)
        python = snap.layers["python_objects"].resident
        assert python is not None and 8 * MiB <= python <= sum(r.resident for r in arenas)
    finally:
        proc.kill()
        proc.wait()


def test_every_allocator_has_a_library_to_preload_it_with():
    """The witness programs above run under each C allocator the registry holds but glibc's (which
    needs no preload) and mimalloc's (linked in): the lab's catalogue knows each one's library."""
    from memgap.allocators.catalog import CATALOGUE

    assert set(C_ALLOCATORS) <= set(CATALOGUE)
    assert set(ALLOCATOR_LIBS) <= set(C_ALLOCATORS)
