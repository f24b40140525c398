"""The Go runtime's reader (memgap.runtimes.go) on what it read of a real program (``fixtures/go/``,
captured by ``scripts/capture_go_fixture.py`` from ``programs/go_heap/main.go`` built by Go 1.26 and by
Go 1.19) and on garbage: its build info and DWARF, the capture replayed against the figures the program
printed then, fuzzed parsers, the shape rule on captured and older layouts. A real Go program read from
outside against its own figures: tests/live/test_runtime_go.py."""
import itertools
import json
import os
import random
import struct

import pytest
from hypothesis import given, settings, strategies as st

from conftest import HERE
from helpers import joined_heap_ranges
from memgap.errors import MalformedInput
from memgap.runtimes import go, go_state
from memgap.runtimes.base import RuntimeHeap, RuntimeInfo
from memgap.runtimes.go_binary import GoBinary, decompress, parse_buildinfo
from memgap.runtimes.go_dwarf import parse_dwarf
from memgap.runtimes.go_state import figures, resolve_layout
from memgap.sources.procfs import ProcReader, parse_maps

CAPTURES = ["go1.26.8-linux-amd64", "go1.19.8-linux-amd64"]   # Go 1.19: DWARF 4, its own names (go.py)
CAPTURE = CAPTURES[0]
MiB = 1 << 20


def _near(ours, theirs, share=0.05, floor=0):
    return abs(ours - theirs) <= max(share * theirs, floor)


def _capture(name=CAPTURE):
    folder = os.path.join(HERE, "fixtures", "go", name)
    with open(os.path.join(folder, "capture.json")) as fh:
        capture = json.load(fh)

    def section(file):
        with open(os.path.join(folder, file), "rb") as fh:
            return fh.read()
    return capture, section


class Image(ProcReader):
    """The reads a real Go reader made of a real process (fixtures/go), answered again."""

    def __init__(self, reads):
        super().__init__(0)
        self.reads = {int(a, 16): bytes.fromhex(d) for a, d in reads.items()}

    def read_memory(self, address, size):
        for start, data in self.reads.items():  # any recorded read that holds these bytes
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        return None

    def read_many(self, addresses, size):
        return [self.read_memory(a, size) for a in addresses]


@pytest.mark.parametrize("name", CAPTURES)
def test_buildinfo_and_dwarf_of_a_real_program(name):
    capture, section = _capture(name)
    build = parse_buildinfo(section("buildinfo.bin"))
    assert build is not None and build.version == capture["version"] == name.split("-")[0]
    assert build.settings["GOARCH"] == "amd64" and build.settings["GOOS"] == "linux"
    dwarf = parse_dwarf(decompress(".debug_info", section("debug_info.bin")),
                        decompress(".debug_abbrev", section("debug_abbrev.bin")))
    layout = resolve_layout(dwarf, 0, "amd64")
    assert layout.arena_bytes == 64 * MiB and layout.arena_base == 0xFFFF800000000000  # malloc.go's constants
    assert layout.summary_levels == dwarf.constant("runtime.summaryLevels") == 5
    assert layout.gen.size == 4 and layout.gc["gcPercent"].size == 4 and layout.gc["heapInUse"].size == 8
    if build.version == "go1.26.8":
        assert layout.gc_prog_bits is None and layout.substitutes == ()
    else:  # Go 1.19: inPtrScalarBits after inWorkBufs (its mstats.go), allArenas, class_to_size
        assert layout.gc_prog_bits == layout.delta["inWorkBufs"] + 8 and layout.objects.sizes.size == 2
        assert [n.split()[0] for n in layout.substitutes] == ["mheap_.allArenas", "heapStatsDelta.inPtrScalarBits",
                                                             "runtime.class_to_size"]


@pytest.mark.parametrize("name", CAPTURES)
def test_the_capture_replayed_gives_what_the_program_said(name):
    """The reads the reader made of the program at rest, parsed again, give its ReadMemStats figures
    read just after (to the byte for HeapInuse and HeapReleased: nothing ran in between)."""
    capture, _section = _capture(name)
    layout = _layout_of_capture(name)
    image = Image(capture["reads"])
    found, attempts = go.read_consistent(image, layout)
    own = {k: int(v) for k, v in capture["own"].items()}
    assert found is not None and found.drift == 0 and attempts == 1
    assert found.heap_inuse == own["HeapInuse"] == capture["memgap"][0]["in_use"]
    assert found.heap_released == own["HeapReleased"]
    assert _near(found.heap_free, own["HeapIdle"] - own["HeapReleased"])
    assert _near(found.stack_inuse, own["StackInuse"], floor=128 << 10)
    assert found.gc_percent == own["/gc/gogc:percent"] == 100
    assert found.memory_limit == own["/gc/gomemlimit:bytes"]
    assert _near(found.objects, own["/memory/classes/heap/objects:bytes"])
    maps = parse_maps(capture["maps"])
    ranges = go.owned_ranges(image, layout)
    free = sum(r.end - r.start for r in ranges if r.label == "go heap free")
    assert free == found.heap_free  # the page allocator's bitmaps, as its counter, at rest
    assert sum(r.end - r.start for r in ranges if r.heap) >= own["HeapSys"]
    for r in ranges:  # every range inside the process's mappings
        assert any(m.start <= r.start < m.end for m in maps) and any(m.start < r.end <= m.end for m in maps), r


def test_garbage_is_refused_in_one_error():
    _capture_json, section = _capture()
    info, abbrev = decompress(".debug_info", section("debug_info.bin")), decompress(".debug_abbrev",
                                                                                    section("debug_abbrev.bin"))
    rng = random.Random(24)
    for _ in range(60):
        damaged = bytearray(info[:20000])
        for _ in range(rng.randint(1, 40)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            parse_dwarf(bytes(damaged), abbrev)
        except MalformedInput:
            pass
    with pytest.raises(MalformedInput):
        decompress(".debug_info", struct.pack("<IIQQ", 1, 0, 100, 1) + b"not zlib")
    assert parse_buildinfo(b"\0" * 64) is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_fuzzed_parsers_raise_only_malformed_input(data):
    for parse in (lambda: parse_dwarf(data, data), lambda: parse_buildinfo(b"\xff Go buildinf:" + data),
                  lambda: decompress(".zdebug_info", b"ZLIB" + data)):
        try:
            parse()
        except MalformedInput:
            pass


def _layout_of_capture(name=CAPTURE):
    _capture_json, section = _capture(name)
    dwarf = parse_dwarf(decompress(".debug_info", section("debug_info.bin")),
                        decompress(".debug_abbrev", section("debug_abbrev.bin")))
    return resolve_layout(dwarf, 0, "amd64")


@pytest.fixture(scope="module")
def layout():
    return _layout_of_capture()


def test_figures_of_garbage_are_told_or_refused(layout):
    """Random words where the figures live: each read is refused (torn, or implausible) or plausible,
    never an exception; the same addresses as the capture's, so every read finds bytes."""
    capture, _section = _capture()
    rng = random.Random(7)
    for _ in range(5):
        noise = {a: bytes(rng.randrange(256) for _ in range(len(d) // 2)).hex() for a, d in capture["reads"].items()}
        found, _attempts = go.read_consistent(Image(noise), layout)
        assert found is None or found.plausible()
    for _ in range(200):
        stats = bytes(rng.randrange(256) for _ in range(3 * layout.delta_size))
        scalars = {name: rng.randrange(1 << 64) for name in [*layout.sys, *layout.gc, "span_inuse", "cache_inuse"]}
        assert isinstance(figures(stats, scalars, layout).plausible(), bool)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, (1 << 512) - 1), st.integers(0, 512), st.integers(0, 512))
def test_bit_runs_cover_the_range_with_the_bits(value, a, b):
    lo, hi = min(a, b), max(a, b)
    runs = go_state.bit_runs(value, lo, hi)
    assert all(x[1] == y[0] for x, y in itertools.pairwise(runs))  # contiguous
    assert (runs[0][0], runs[-1][1]) == (lo, hi) if runs else lo == hi
    for start, end, bit in runs:
        assert all((value >> i) & 1 == bit for i in range(start, end))
    assert all(x[2] != y[2] for x, y in itertools.pairwise(runs))  # maximal


def test_shape_rule_on_captured_and_older_layouts():
    """The capture's maps (a Go 1.26 random heap base) give its arenas; a layout of Go before 1.26
    (arenas at the amd64 hint 0xc000000000) is found there only; glibc-like 64 MiB arenas elsewhere
    are taken only under the random base (the reader then wants no libc mapped)."""
    capture, _section = _capture()
    image = Image(capture["reads"])
    named = joined_heap_ranges(go.owned_ranges(image, _layout_of_capture()))
    assert go.shape_ranges(parse_maps(capture["maps"]), "amd64", randomized=True) == named
    older = parse_maps("c000000000-c008000000 rw-p 00000000 00:00 0\n"
                       "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\n"
                       "7f0000400000-7f0004000000 ---p 00000000 00:00 0\n")
    assert go.shape_ranges(older, "amd64", randomized=False) == [(0xC000000000, 0xC008000000)]
    assert len(go.shape_ranges(older, "amd64", randomized=True)) == 2


def test_shape_rule_on_a_captured_go_119_heap():
    """Go 1.19's real maps: its arenas at the arena hint, found by the rule for a heap base not
    randomized (what the reader uses for its version, from the build info), as its runtime lists them."""
    capture, section = _capture(CAPTURES[1])
    build = parse_buildinfo(section("buildinfo.bin"))
    assert not go._randomized(GoBinary("", build, {}, True, False, ""))
    named = joined_heap_ranges(go.owned_ranges(Image(capture["reads"]), _layout_of_capture(CAPTURES[1])))
    assert named and named[0][0] == 0xC000000000
    assert go.shape_ranges(parse_maps(capture["maps"]), "amd64", randomized=False) == named


def test_go_119_gc_program_bitmaps_are_counted_not_drift():
    """Go 1.19's heapStatsDelta.inPtrScalarBits (bitmaps the GC unrolls from a type's GC program while
    it scans a frame, taken from the heap's pages): its ReadMemStats counts them in GCSys and takes them
    out of committed before it checks committed against the gcController. The capture with 3 such pages
    added to slot 0's committed and inPtrScalarBits reads at once (no drift) with GCSys 3 pages more."""
    capture, _section = _capture(CAPTURES[1])
    layout = _layout_of_capture(CAPTURES[1])
    bits = 3 * 8192
    reads = {int(a, 16): bytearray.fromhex(d) for a, d in capture["reads"].items()}
    end = layout.stats + 3 * layout.delta_size
    start = next(a for a, d in reads.items() if a <= layout.stats and end <= a + len(d))
    for offset in (layout.delta["committed"], layout.gc_prog_bits):
        at = layout.stats - start + offset
        reads[start][at:at + 8] = (int.from_bytes(reads[start][at:at + 8], "little") + bits).to_bytes(8, "little")
    plain, _ = go.read_consistent(Image(capture["reads"]), layout)
    found, attempts = go.read_consistent(Image({f"{a:#x}": d.hex() for a, d in reads.items()}), layout)
    assert plain is not None and found is not None and found.drift == 0 and attempts == 1
    assert found.gc_prog_bits == bits and plain.gc_prog_bits == 0
    heap, heap_plain = RuntimeHeap(RuntimeInfo("go", "go1.19.8", ""), ""), RuntimeHeap(RuntimeInfo("go", "", ""), "")
    go._fill(heap, found, attempts)
    go._fill(heap_plain, plain, 1)
    assert heap.metadata["gc metadata"] - heap_plain.metadata["gc metadata"] == bits
    assert heap.in_use == heap_plain.in_use and heap.retained == heap_plain.retained
