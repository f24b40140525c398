"""The JVM's reader (memgap.runtimes.jvm) on files captured from a real OpenJDK 17 JVM (``fixtures/jvm/``):
its perf data parsed (against the MemoryMXBean line the JVM printed then), in the other byte order, cut
short, damaged and fuzzed; its flags, its release file, jcmd's outputs, its reservations by shape in
captured maps. A real JVM read from outside: tests/live/test_runtime_jvm.py."""
import os
import re
import struct

import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIXTURES
from helpers import jvm_fixture, mxbean, within
from memgap.errors import MalformedInput
from memgap.runtimes.jvm_maps import code_cache, find_reservation, first_metaspace_node, heap_piece, writable_bytes
from memgap.runtimes.jvm_parse import (
    jvm_figures,
    parse_heap_info,
    parse_native_memory,
    parse_release,
    parse_size,
    vm_flags,
)
from memgap.sources.hsperfdata import ENTRY_HEADER_SIZE, PROLOGUE_SIZE, parse_perfdata
from memgap.sources.procfs import parse_maps

JVM = os.path.join(FIXTURES, "jvm")
MiB = 1 << 20


@pytest.mark.parametrize("state", ["live", "rest"])
def test_perfdata_of_a_real_jvm_gives_what_its_mxbean_said(state):
    perf = parse_perfdata(jvm_fixture(f"hsperfdata-{state}", "rb"))
    told = mxbean(jvm_fixture(f"mxbean-{state}.txt"))
    assert perf.byte_order == "little" and perf.version == (2, 0) and perf.accessible
    assert perf.text("java.property.java.vm.version") == "17.0.15+6-Debian-1deb12u1"
    assert perf.counters["sun.gc.generation.1.space.0.used"].units == "bytes"
    figures = jvm_figures(perf)
    # MemoryMXBean reads the same counters as the perf data: equal, not only close.
    assert figures.used == told["heap.used"]
    assert figures.committed == told["heap.committed"]
    assert figures.limit == told["heap.max"] == 1 << 30
    assert figures.policy == "GarbageFirst" and figures.collectors[0] == "G1 young collection pauses"
    assert figures.vm_args == "-Xmx1g -XX:+UseG1GC -XX:NativeMemoryTracking=summary"
    assert figures.java_command == "JvmHeap" and figures.attach_supported is True


def _big_endian(data):
    """The captured (little-endian) buffer rewritten in the other byte order, entry by entry."""
    out = bytearray(data)
    out[4] = 0
    used, overflow, stamp, first, count = struct.unpack_from("<iiqii", data, 8)
    struct.pack_into(">iiqii", out, 8, used, overflow, stamp, first, count)
    offset = first
    for _ in range(count):
        fields = struct.unpack_from("<iiibbbbi", data, offset)
        struct.pack_into(">iiibbbbi", out, offset, *fields)
        if fields[3] == ord("J") and fields[2] == 0:
            struct.pack_into(">q", out, offset + fields[7], struct.unpack_from("<q", data, offset + fields[7])[0])
        offset += fields[0]
    return bytes(out)


def test_perfdata_in_big_endian_order_reads_the_same():
    data = jvm_fixture("hsperfdata-rest", "rb")
    little, big = parse_perfdata(data), parse_perfdata(_big_endian(data))
    assert big.byte_order == "big" and big.counters == little.counters


def test_perfdata_refuses_what_is_not_one():
    data = jvm_fixture("hsperfdata-rest", "rb")
    for bad, said in ((b"", "shorter"), (b"\xc0\xc0\xfe\xca" + data[4:], "magic"),
                      (data[:4] + b"\x07" + data[5:], "byte order"), (data[:5] + b"\x01" + data[6:], "version")):
        with pytest.raises(MalformedInput, match=said):
            parse_perfdata(bad)


def test_perfdata_cut_short_anywhere_is_refused_or_shorter():
    data = jvm_fixture("hsperfdata-rest", "rb")
    whole = parse_perfdata(data).counters
    used = struct.unpack_from("<i", data, 8)[0]
    for cut in range(0, used, 37):
        try:
            counters = parse_perfdata(data[:cut]).counters
        except MalformedInput:
            continue
        assert cut >= PROLOGUE_SIZE and all(whole[k] == v for k, v in counters.items())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_perfdata_parser_on_garbage(blob):
    for data in (blob, b"\xca\xfe\xc0\xc0\x01\x02\x00\x01" + blob):
        try:
            parse_perfdata(data)
        except MalformedInput:
            pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12359), st.integers(0, 255)), min_size=1, max_size=8))
def test_perfdata_parser_on_damaged_copies(flips):
    data = bytearray(jvm_fixture("hsperfdata-live", "rb"))
    for where, value in flips:
        data[where] = value
    try:
        perf = parse_perfdata(bytes(data))
    except MalformedInput:
        return
    try:
        jvm_figures(perf)
    except MalformedInput:
        pass


def test_a_torn_entry_is_refused():
    """An entry whose length runs past the bytes used (a JVM adding one as memgap reads) is refused."""
    data = bytearray(jvm_fixture("hsperfdata-rest", "rb"))
    first = struct.unpack_from("<i", data, 24)[0]
    struct.pack_into("<i", data, first, 1 << 20)
    with pytest.raises(MalformedInput, match="length"):
        parse_perfdata(bytes(data))
    struct.pack_into("<i", data, first, ENTRY_HEADER_SIZE - 1)
    with pytest.raises(MalformedInput):
        parse_perfdata(bytes(data))


def test_flags_from_a_command_line():
    args = ["-cp", "/x", "-Xmx2g", "-Xms1g", "-XX:+UseG1GC", "-XX:-UseG1GC", "-XX:MaxHeapFreeRatio=30", "-Xrs",
            "Main", "-Xmx9g", "-XX:+AlwaysPreTouch"]
    assert vm_flags(args) == {"MaxHeapSize": "2g", "InitialHeapSize": "1g", "UseG1GC": "false",
                              "MaxHeapFreeRatio": "30", "ReduceSignalUsage": "true"}
    assert vm_flags(["-jar", "app.jar", "-Xmx1g"]) == {}
    assert [parse_size(s) for s in ("1g", "512M", "65536k", "123", "1.5g", "")] == [1 << 30, 512 * MiB, 64 * MiB,
                                                                                    123, None, None]


def test_release_file():
    text = ('IMPLEMENTOR="Debian"\nJAVA_RUNTIME_VERSION="17.0.15+6-Debian-1deb12u1"\nnot a line\n'
            'JAVA_VERSION="17.0.15"\n')
    assert parse_release(text) == {"IMPLEMENTOR": "Debian", "JAVA_RUNTIME_VERSION": "17.0.15+6-Debian-1deb12u1",
                                   "JAVA_VERSION": "17.0.15"}


def test_jcmd_outputs_agree_with_the_perf_data_and_the_maps():
    info = parse_heap_info(jvm_fixture("gc_heap_info.txt"))
    nmt = parse_native_memory(jvm_fixture("native_memory_summary.txt"))
    figures = jvm_figures(parse_perfdata(jvm_fixture("hsperfdata-rest", "rb")))
    maps = parse_maps(jvm_fixture("maps-rest.txt"))
    # The shape finds the range GC.heap_info prints, whose committed bytes NMT and the perf data count.
    assert find_reservation(maps, figures.limit, figures.committed, heap_piece) == (info.start, info.end)
    assert info.committed == nmt["Java Heap"][1] == figures.committed
    assert writable_bytes(sorted(maps, key=lambda m: m.start), info.start, info.end) == nmt["Java Heap"][1]
    assert within(info.used, figures.used)  # jcmd itself allocated (its eden region: 1024K) after the copy
    assert info.class_space == {"used": 66 << 10, "committed": 128 << 10, "reserved": 1 << 30}
    assert nmt["Total"] == (2528305 << 10, 151737 << 10) and nmt["GC"][1] > 0
    assert parse_native_memory("12:\nNative memory tracking is not enabled\n") == {}


def test_reservations_by_shape_in_captured_maps():
    maps = parse_maps(jvm_fixture("maps-live.txt"))
    figures = jvm_figures(parse_perfdata(jvm_fixture("hsperfdata-live", "rb")))
    heap = find_reservation(maps, figures.limit, figures.committed, heap_piece)
    assert heap == (0xC0000000, 0x100000000)
    code = code_cache(maps, None)
    assert code is not None and code[1] - code[0] == 240 * MiB
    node = first_metaspace_node(maps)
    nmt_metadata = int(re.search(r"Metadata:.*?committed=(\d+)KB", jvm_fixture("native_memory_summary.txt"), re.S)[1])
    assert node is not None and writable_bytes(sorted(maps, key=lambda m: m.start), *node) == nmt_metadata << 10
    assert find_reservation(maps, figures.limit + MiB, figures.committed, heap_piece) is None
