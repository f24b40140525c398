"""pymalloc's pool headers read as memgap reads them from outside, on memory faked in the test: garbage
headers do not count, no header claims more than its pool (fuzzed), a tree reads a header on a
shared frame once. Python objects read from real processes against their own _debugmallocstats:
tests/live/test_pymalloc_outside.py."""
import struct

from hypothesis import given, settings, strategies as st

from memgap.sources.pymalloc_pools import census, parse_pool_header

POOL = 16 << 10
PAGE = 4096


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
        from memgap.sources.resident_map import ResidentMap

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
