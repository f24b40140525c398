"""Python objects read from outside (issue 12, item 5): pymalloc's pool headers count the blocks
in use, and only the rest of the arenas is pymalloc_free.

The targets do not import memgap. Each writes pymalloc's own figures with
``sys._debugmallocstats()`` (stderr, sent to a file per process) once it holds what it will hold,
then sleeps: the witness is the interpreter's own count, parsed here, not memgap's code.
"""
import glob
import json
import os
import re
import signal
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from conftest import child_env
from helpers import MiB, memgap
from memgap.sources.pymalloc_pools import census, parse_pool_header

POOL = 16 << 10
PAGE = 4096

# The witness: pymalloc's statistics, written by the process itself (fd 2 into a file per pid).
WITNESS = r'''
import os, sys, time

def witness():
    fd = os.open(os.path.join(sys.argv[1], f"{os.getpid()}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(2)
    os.dup2(fd, 2)
    sys._debugmallocstats()
    os.dup2(saved, 2)
    os.close(fd)
    os.close(saved)
    os.write(1, f"ready {os.getpid()}\n".encode())  # one write: three processes share the pipe
'''

# A preforked tree: 200k small objects built once, kept by a parent and two forked children.
TREE = WITNESS + r'''
keep = [(i, str(i), float(i)) for i in range(200_000)]
for _ in range(2):
    if os.fork() == 0:
        witness()
        time.sleep(30)
        os._exit(0)
witness()
time.sleep(30)
'''

# Fragmentation: 1M floats (32-byte blocks, 510 to a pool), then one in 400 kept.
FRAGMENTED = WITNESS + r'''
floats = [float(i) for i in range(1_000_000)]
keep = floats[::400]
del floats
witness()
time.sleep(30)
'''

_FIELD = r"^{}\s*=\s*([\d,]+)"


def witness_figures(path):
    """The interpreter's own pymalloc figures from its _debugmallocstats text."""
    with open(path) as fh:
        text = fh.read()

    def field(name):
        return int(re.search(_FIELD.format(re.escape(name)), text, re.M).group(1).replace(",", ""))

    unused = re.search(r"^([\d,]+) unused pools \* ([\d,]+) bytes", text, re.M)
    return {"allocated": field("# bytes in allocated blocks"), "available": field("# bytes in available blocks"),
            "headers": field("# bytes lost to pool headers"), "quantization": field("# bytes lost to quantization"),
            "unused_pools": int(unused.group(1).replace(",", "")) * int(unused.group(2).replace(",", ""))}


@pytest.fixture
def start(tmp_path):
    """Start ``python -c PROGRAM`` (any Python); once every process of it has written its
    witness, returns (the started pid, {pid: witness figures})."""
    roots, forked = [], []

    def _start(program, processes=1, python=sys.executable):
        proc = subprocess.Popen([python, "-c", program, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                                env=child_env())
        roots.append(proc)
        pids = []
        for _ in range(processes):
            line = proc.stdout.readline().split()
            assert line and line[0] == "ready", "the target exited early"
            pids.append(int(line[1]))
        forked.extend(pid for pid in pids if pid != proc.pid)
        return proc.pid, {pid: witness_figures(tmp_path / f"{pid}.txt") for pid in pids}

    yield _start
    for pid in forked:
        os.kill(pid, signal.SIGKILL)
    for proc in roots:
        proc.kill()
        proc.wait()


def outside(pid):
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

    return snapshot_pid(pid, SnapshotOptions(regions=False, agent=False))


def within(got, want, share, slack=0):
    return abs(got - want) <= share * want + slack


def test_forked_tree_python_objects_match_each_process_witness(start):
    root, witnesses = start(TREE, processes=3)
    child = next(pid for pid in witnesses if pid != root)
    snap = outside(child)
    py, free = snap.layers["python_objects"], snap.layers["pymalloc_free"]
    want = witnesses[child]["allocated"]
    assert want > 20 * MiB
    assert within(py.resident, want, 0.05) and within(py.virtual, want, 0.05), (py, want)
    # before the pool headers were read, every page of the arenas was called free (92 MiB of 200);
    # what is free here: pool headers and quantization (resident), free blocks (some never
    # carved, so not resident) and empty pools (resident or not)
    f = witnesses[child]
    low, high = f["headers"] + f["quantization"], f["available"] + f["headers"] + f["quantization"] + f["unused_pools"]
    assert 0.95 * low <= free.resident <= 1.05 * high, (free.resident, f)
    assert free.resident < 0.2 * py.resident, (free.resident, py.resident)
    assert "pool header" in py.derivation and "allocator_in_use" in py.derivation
    # objects alive in their pools: no fragmentation to report (the old reading would have had 92 MiB "free")
    assert not [f for f in snap.findings if f.code == "pymalloc-fragmentation"], snap.findings


def test_tree_views_read_the_pool_headers(start):
    parent, witnesses = start(TREE, processes=3)
    proc = memgap("inspect", str(parent), "--tree", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    procs = {p["pid"]: p["layers"] for p in json.loads(proc.stdout)["processes"]}
    assert set(witnesses) <= set(procs)
    for pid, figures in witnesses.items():
        got = procs[pid]["python_objects"]["resident"]
        assert within(got, figures["allocated"], 0.05), (pid, got, figures)
    top = memgap("top", str(parent), "--tree", "--iterations", "1")
    assert top.returncode == 0, top.stderr
    row = next(line for line in top.stdout.splitlines() if "Python objects" in line)
    # a tree's layers are summed by PSS: the objects, shared by three processes, count about once
    by_pss = sum(procs[pid]["python_objects"]["pss"] for pid in witnesses)
    total = sum(f["allocated"] for f in witnesses.values())
    got_mib = float(re.search(r"(\d+(?:\.\d+)?)", row.split("Python objects", 1)[1]).group(1))
    assert within(got_mib * MiB, by_pss, 0.05, 0.1 * MiB), (row, by_pss / MiB)
    assert got_mib * MiB < 0.5 * total, (row, total / MiB)


# The running interpreter always, and each other CPython pyenv has here (none on a stock Debian):
# the pool header layout read from outside, checked on every version found.
PYTHONS = [sys.executable] + sorted(p for v in ("3.10", "3.12", "3.13")
                                    for p in glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}*/bin/python{v}")))


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: os.path.basename(p))
def test_fragmented_arenas_are_mostly_pymalloc_free(start, python):
    _, witnesses = start(FRAGMENTED, python=python)
    (pid, figures), = witnesses.items()
    snap = outside(pid)
    py, free = snap.layers["python_objects"].resident, snap.layers["pymalloc_free"].resident
    assert within(py, figures["allocated"], 0.05, 64 << 10), (py, figures)
    # free blocks in used pools are resident (written once); empty pools may be or may not
    low = figures["available"] + figures["headers"] + figures["quantization"]
    assert low * 0.95 <= free <= (low + figures["unused_pools"]) * 1.05, (free, figures)
    assert free > 24 * MiB and py < 0.25 * free, (py, free)
    assert abs(snap.unexplained) <= 0.05 * snap.rss
    # the finding, read from outside: its live figure is the interpreter's own allocated bytes
    found = [f for f in snap.findings if f.code == "pymalloc-fragmentation"]
    assert found and "from outside" in found[0].summary, snap.findings
    live = float(re.search(r"around ([\d.]+) MiB", found[0].summary).group(1))
    assert within(live * MiB, figures["allocated"], 0.05, 0.06 * MiB), (found[0].summary, figures)


# --- garbage headers -----------------------------------------------------------------------------

def header(count, szidx, index=7, nextoffset=48 + 64, pool=POOL):
    size = (szidx + 1) * 16
    return struct.pack("<QQQQIIII", count, 0, 0, 0, index, szidx, nextoffset, pool - size)


class FakeMemory:
    """An arena's pools as bytes, and which pages are resident; a read of any other page fails the test."""

    def __init__(self, base, headers, resident_pools):
        self.base, self.headers, self.resident_pools = base, headers, resident_pools

    def read_memory(self, address, size):
        pool = (address - self.base) // POOL
        assert pool in self.resident_pools and address % POOL == 0, "read a page that is not resident"
        return self.headers.get(pool, bytes(48))[:size]

    def read_many(self, addresses, size):
        return [self.read_memory(a, size) for a in addresses]

    def resident_map(self, pools):
        from memgap.sources.glibc_heaps import ResidentMap

        bitmap = bytearray(pools * POOL // PAGE)
        for p in self.resident_pools:
            bitmap[p * POOL // PAGE] = 1
        res = ResidentMap(self)
        res.add(self.base, self.base + pools * POOL, bytes(bitmap))
        return res


def test_garbage_headers_do_not_count():
    base = 0x7F0000000000
    headers = {
        0: header(10, 1),                       # 10 x 32 bytes
        1: header(1 << 20, 1),                  # more blocks than a pool holds
        2: header(3, 70),                       # no such size class
        3: header(5, 3, index=8),               # another arena's index in this arena's place
        4: header(2 | 0xABCD << 32, 31),        # the union's high half is not the count: 2 x 512
        5: header(4, 0),                        # not resident: never read
    }
    mem = FakeMemory(base, headers, resident_pools={0, 1, 2, 3, 4, 6})
    got = census(mem, mem.resident_map(8), [(base, base + 8 * POOL)], POOL)
    assert got.in_use == 10 * 32 + 2 * 512
    assert (got.pools_read, got.pools_in_use, got.pools_rejected) == (6, 2, 4)  # pool 6: zeros


def test_a_header_never_claims_more_than_its_pool():
    for szidx in range(64):
        size = (szidx + 1) * 16
        for count in (0, 1, (POOL - 48) // size, (POOL - 48) // size + 1, 0xFFFFFFFF):
            h = parse_pool_header(header(count, szidx), POOL)
            assert h is None or h.count * h.block_size <= POOL - 48


U32 = st.integers(0, 0xFFFFFFFF)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 80) | U32, U32, st.booleans(), U32,
       st.sampled_from([4 << 10, 16 << 10]))
def test_any_header_claims_at_most_its_pool(count, szidx, nextoffset, consistent, maxnext, pool_size):
    # headers near the valid ones (maxnextoffset as pymalloc sets it, or not), any count
    if consistent:
        maxnext = (pool_size - (szidx + 1) * 16) & 0xFFFFFFFF
    data = struct.pack("<QQQQIIII", count, 0, 0, 0, 7, szidx, nextoffset % (2 * pool_size), maxnext)
    h = parse_pool_header(data, pool_size)
    assert h is None or (h.count * h.block_size <= pool_size - 48 and h.block_size <= 1024)



class FramedMemory(FakeMemory):
    """FakeMemory with pagemap entries as root reads them: ``frames`` maps a pool to the page frame
    of its header page (present), ``exclusive`` the pools whose page this process alone maps; reads
    are counted."""

    def __init__(self, base, headers, resident_pools, frames, exclusive=()):
        super().__init__(base, headers, resident_pools)
        self.frames, self.exclusive, self.reads = frames, set(exclusive), 0

    def read_memory(self, address, size):
        self.reads += 1
        return super().read_memory(address, size)

    def pagemap(self, start, end):
        out = bytearray()
        for page in range(start // PAGE, -(-end // PAGE)):
            pool, offset = divmod(page * PAGE - self.base, POOL)
            entry = 0
            if offset == 0 and pool in self.resident_pools:
                entry = (1 << 63) | self.frames.get(pool, 0) | ((1 << 56) if pool in self.exclusive else 0)
            out += entry.to_bytes(8, "little")
        return bytes(out)


def test_a_tree_reads_a_header_on_a_shared_frame_once():
    from memgap.sources.pymalloc_pools import TreeHeaders

    base = 0x7F0000000000
    headers = {p: header(p + 1, 1) for p in range(4)}
    # a master and a worker at the same addresses: pools 0-1 on frames both map (not exclusive);
    # pool 2 copied (each has its own frame, exclusive, the worker's with another count); pool 3
    # exclusive in both with equal frame numbers (a frame freed and reused: must not be taken)
    master = FramedMemory(base, headers, {0, 1, 2, 3}, {0: 100, 1: 101, 2: 102, 3: 103}, exclusive={2, 3})
    worker = FramedMemory(base, {**headers, 2: header(9, 1)}, {0, 1, 2, 3}, {0: 100, 1: 101, 2: 202, 3: 103},
                          exclusive={2, 3})
    tree = TreeHeaders()
    arena = [(base, base + 4 * POOL)]
    first = census(master, master.resident_map(4), arena, POOL, tree)
    second = census(worker, worker.resident_map(4), arena, POOL, tree)
    assert (master.reads, worker.reads, tree.reused, tree.frames) == (4, 2, 2, True)
    assert first.in_use == (1 + 2 + 3 + 4) * 32
    assert second.in_use == (1 + 2 + 9 + 4) * 32  # its own copy of pool 2, read from it
    assert second.pools_read == 4


def test_without_frame_numbers_a_tree_reads_every_header():
    """Not root: pagemap's frame numbers read as 0, so nothing tells a shared frame: all are read."""
    from memgap.sources.pymalloc_pools import TreeHeaders

    base = 0x7F0000000000
    headers = {p: header(p + 1, 1) for p in range(3)}
    procs = [FramedMemory(base, headers, {0, 1, 2}, {}) for _ in range(2)]
    tree = TreeHeaders()
    got = [census(p, p.resident_map(3), [(base, base + 3 * POOL)], POOL, tree).in_use for p in procs]
    assert got == [(1 + 2 + 3) * 32] * 2
    assert ([p.reads for p in procs], tree.frames, tree.reused) == ([3, 3], False, 0)
