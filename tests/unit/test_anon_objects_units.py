"""The search for glibc mmapped chunks and pymalloc arenas in anonymous memory (memgap.sources.anon_objects),
on memory laid out by hand as glibc and CPython lay it out: a block read with its candidates checked must find
what a check of every resident page finds, and count the same pages unclaimed."""
import random
import struct

from memgap.sources.anon_objects import find_anon_objects
from memgap.sources.procfs import PAGE_SIZE
from memgap.sources.resident_map import ResidentMap

KiB, MiB = 1024, 1024 * 1024
BASE = 0x7F00_0000_0000
POOL, ARENA = 16 * KiB, 1 * MiB
_HEADER = struct.Struct("<QQQQIIII")


class Memory:
    """Another process's memory as /proc/PID/mem gives it: bytes where mapped, None elsewhere."""

    def __init__(self, size, block_reads=True):
        self.data = bytearray(size)
        self.block_reads = block_reads  # False: a read of more than a page fails (unmapped since pagemap)

    def read_memory(self, address, size):
        offset = address - BASE
        if offset < 0 or offset + size > len(self.data) or (size > PAGE_SIZE and not self.block_reads):
            return None
        return bytes(self.data[offset:offset + size])

    def pagemap(self, start, end):
        raise AssertionError("the resident map is given")


class MemoryInto(Memory):
    def read_memory_into(self, address, buffer):
        data = self.read_memory(address, len(buffer))
        if data is None:
            return False
        buffer[:] = data
        return True


def _lay_out(memory):
    """A 64 KiB mmapped chunk, garbage, a page that looks like a chunk's header but overruns the region, a
    32 KiB chunk, a pymalloc arena of 64 pools (size class 3: 64-byte blocks), garbage; returns what is there."""
    rng = random.Random(7)
    data = memory.data
    for page in range(len(data) // PAGE_SIZE):  # garbage: no page starts with a zero word
        data[page * PAGE_SIZE:page * PAGE_SIZE + 64] = bytes(rng.randrange(1, 256) for _ in range(64))
    struct.pack_into("<QQ", data, 0, 0, 64 * KiB | 0x2)
    struct.pack_into("<QQ", data, 100 * PAGE_SIZE, 0, len(data) | 0x2)  # larger than what is left
    struct.pack_into("<QQ", data, 300 * PAGE_SIZE, 0, 32 * KiB | 0x2)  # inside a block read whole
    arena = 2 * MiB
    for pool in range(ARENA // POOL):
        _HEADER.pack_into(data, arena + pool * POOL, 5, 0, 0, 0, 9, 3, 48 + 64, POOL - 64)
    return [(BASE, BASE + 64 * KiB, "mmapped-chunk"), (BASE + 300 * PAGE_SIZE, BASE + 300 * PAGE_SIZE + 32 * KiB,
                                                       "mmapped-chunk"),
            (BASE + arena, BASE + arena + ARENA, "pymalloc-arena")]


def _resident(memory, holes):
    pages = len(memory.data) // PAGE_SIZE
    bitmap = bytes(0 if any(lo <= p < hi for lo, hi in holes) else 1 for p in range(pages))
    res = ResidentMap(memory)
    res.add(BASE, BASE + len(memory.data), bitmap)
    return res, bitmap


def test_a_block_read_finds_what_a_check_of_every_page_finds():
    holes = [(20, 40), (700, 760)]  # pages not resident: never read, never counted
    for memory in (Memory(4 * MiB), MemoryInto(4 * MiB), Memory(4 * MiB, block_reads=False)):
        expected = _lay_out(memory)
        res, bitmap = _resident(memory, holes)
        found, unclaimed = find_anon_objects(memory, [(BASE, BASE + 4 * MiB)], res, ARENA, POOL)
        assert [(o.start, o.end, o.kind) for o in found] == expected, type(memory)
        assert [o.resident for o in found] == [64 * KiB, 32 * KiB, ARENA - 60 * PAGE_SIZE]  # the arena holds a hole
        assert unclaimed == bitmap.count(1) * PAGE_SIZE - sum(o.resident for o in found)


def test_without_pymalloc_an_arena_is_not_looked_for_and_a_region_may_start_mid_run():
    memory = MemoryInto(4 * MiB)
    _lay_out(memory)
    res, _ = _resident(memory, [])
    start = BASE + 16 * PAGE_SIZE  # past the chunk: the search starts where the region does
    found, unclaimed = find_anon_objects(memory, [(start, BASE + 4 * MiB)], res, None, None)
    assert [(o.start, o.kind) for o in found] == [(BASE + 300 * PAGE_SIZE, "mmapped-chunk")]
    assert unclaimed == 4 * MiB - 16 * PAGE_SIZE - 32 * KiB
