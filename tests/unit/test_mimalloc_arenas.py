"""A bundled mimalloc's arenas found by their own records (memgap.sources.mimalloc_arenas), on the maps and
the first bytes of the anonymous mappings captured from a resting pyarrow process (fixtures/arrow-pool/),
altered one check at a time, and fuzzed."""
import os
import struct

from hypothesis import given, settings, strategies as st

from conftest import HERE
from memgap.sources.mimalloc_arenas import HEADER, SLICE, find_arenas, library_spans, parse_arena_header
from memgap.sources.procfs import parse_maps

FOLDER = os.path.join(HERE, "fixtures", "arrow-pool")
ARENA, HEAP = "7fcd90000000-7fcdd0000000", "7fcde4600000-7fcde8600000"


def _maps():
    with open(os.path.join(FOLDER, "proc_maps.txt")) as fh:
        return parse_maps(fh.read())


def _header(name):
    with open(os.path.join(FOLDER, f"{name}.bin"), "rb") as fh:
        return fh.read()


def _libarrow(maps):
    return next(m.path for m in maps if os.path.basename(m.path).startswith("libarrow.so"))


class Captured:
    """The process's memory as captured: the first bytes of each candidate mapping, nothing else."""

    def __init__(self):
        self.asked = []

    def read_memory(self, address, size):
        self.asked.append((address, size))
        name = next((n for n in (ARENA, HEAP) if int(n.split("-")[0], 16) == address), None)
        return _header(name)[:size] if name else None


def test_the_arena_is_found_by_its_record_and_the_heap_is_not():
    maps = _maps()
    reader = Captured()
    arenas = find_arenas(reader, maps, _libarrow(maps))
    start, end = (int(x, 16) for x in ARENA.split("-"))
    assert [(a.start, a.end, a.slices) for a in arenas] == [(start, end, (end - start) // SLICE)]
    # its sub-process record lies in libarrow's static data (after its file's pages), as read from the maps
    (span,) = library_spans(maps, _libarrow(maps))
    assert span[0] <= arenas[0].subproc < span[1]
    # one read of HEADER bytes per candidate: the two private anonymous mappings of 32 MiB or more
    assert sorted(reader.asked) == sorted((int(n.split("-")[0], 16), HEADER) for n in (ARENA, HEAP))


def test_each_check_alone_refuses_the_record():
    maps = _maps()
    spans = library_spans(maps, _libarrow(maps))
    raw = _header(ARENA)
    start = int(ARENA.split("-")[0], 16)
    assert parse_arena_header(raw, start, spans) is not None
    words = list(struct.unpack("<8Q", raw))

    def altered(i, value):
        w = list(words)
        w[i] = value
        return struct.pack("<8Q", *w)

    assert parse_arena_header(raw, start + SLICE, spans) is None            # not at its own address
    assert parse_arena_header(altered(1, words[1] + 4096), start, spans) is None   # not whole slices
    slices = words.index(words[1] // SLICE)
    assert parse_arena_header(altered(slices, 0), start, spans) is None     # no slice count beside it
    assert parse_arena_header(raw, start, [(1 << 40, (1 << 40) + 4096)]) is None  # points into no library of ours
    assert parse_arena_header(raw[:HEADER - 1], start, spans) is None       # cut short
    assert parse_arena_header(_header(HEAP), int(HEAP.split("-")[0], 16), spans) is None


def test_another_library_finds_no_arena():
    maps = _maps()
    other = next(m.path for m in maps if m.path.endswith(".so") and "libarrow" not in m.path)
    assert find_arenas(Captured(), maps, other) == []
    assert find_arenas(Captured(), maps, "/not/mapped.so") == []


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=96), st.integers(0, 2**64 - 1))
def test_fuzzed_bytes_never_raise(raw, address):
    arena = parse_arena_header(raw, address, [(0, 2**64)])
    assert arena is None or (arena.start == address and arena.size % SLICE == 0)
