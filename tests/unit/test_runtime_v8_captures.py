"""V8's heap reader (memgap.runtimes.v8) on what was captured from a real Node 20 (fixtures/v8/): its page
headers against what Node said of itself, changed, fuzzed; its versions from Node's rodata, mapping
shapes, settings from the command line and NODE_OPTIONS; the inspector client's pieces (frames, the
accept key, /proc/net/tcp lines, ports), fuzzed. A live Node program against its own heap statistics:
tests/live/test_runtime_v8.py."""
import json
import os
import random
import struct

import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIXTURES
from memgap.errors import MalformedInput, Unsupported
from memgap.runtimes.v8 import (
    HEADER,
    build_census,
    parse_page_header,
    parse_settings,
    parse_versions,
    shape_pages,
)
from memgap.runtimes.v8_inspector import (
    accept_key,
    catches_sigusr1,
    client_frame,
    inspect_port,
    listening_inodes,
    parse_frame,
    parse_reply,
)
from memgap.sources.procfs import parse_maps


def _fixture():
    with open(os.path.join(FIXTURES, "v8", "node20-dropped.json")) as fh:
        return json.load(fh)


def _figures(line):
    return {k: int(v) for k, v in (w.split("=") for w in line.split())}


def _fixture_pages(doc):
    resident = {p["address"]: p["resident"] for p in doc["pages"]}
    pages, covered = [], 0
    for cand in doc["candidates"]:
        if cand["header"] is None or cand["address"] < covered:
            continue
        page = parse_page_header(bytes.fromhex(cand["header"]), cand["address"])
        if page is not None:
            pages.append((page, resident[page.address]))
            covered = page.address + page.size
    return pages


def test_headers_captured_from_node20_are_what_it_said_of_itself():
    """Every page header validated in the capture, summed per space, is V8's own getHeapSpaceStatistics()
    of that moment: committed to the byte, in use to the byte but for the new space (not in its headers)."""
    doc = _fixture()
    own = _figures(doc["figures_before"])
    pages = _fixture_pages(doc)
    assert [p.address for p, _ in pages] == [p["address"] for p in doc["pages"]]
    census = build_census(pages, {p["address"] for p in doc["pages"] if p["executable"]}, doc["v8"])
    spaces = census.totals()
    assert len(census.isolates) == 1 and census.read_only.pages == 1
    assert set(spaces) == {"old_space", "new_space", "code_space", "large_object_space"}
    for name, space in spaces.items():
        assert space.committed == own[f"space.{name}.space_size"], name
        if name != "new_space":
            assert space.in_use == own[f"space.{name}.space_used_size"], name
    assert spaces["new_space"].in_use is None
    assert sum(s.committed for s in spaces.values()) == own["heap.total_heap_size"]
    rejected = [c for c in doc["candidates"] if c["header"] and c["address"] not in {p.address for p, _ in pages}]
    assert rejected, "the capture holds aligned addresses that are no page header (glibc heaps, large objects)"


def test_a_header_changed_in_one_field_is_refused():
    doc = _fixture()
    page, _ = _fixture_pages(doc)[0]
    raw = bytes.fromhex(next(c["header"] for c in doc["candidates"] if c["address"] == page.address))
    words = list(HEADER.unpack(raw))
    for index, value in ((0, 100), (1, 1 << 40), (3, page.address), (4, page.address + (1 << 30)),
                         (5, 1 << 20), (7, 1 << 20), (10, page.address + 4096), (11, 4096), (8, 0)):
        bad = list(words)
        bad[index] = value
        assert parse_page_header(HEADER.pack(*bad), page.address) is None, index
    assert parse_page_header(raw, page.address + 4096) is None  # read at another address: not its header
    assert parse_page_header(raw[:95], page.address) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=96, max_size=96), st.integers(0, (1 << 47) - 1))
def test_garbage_is_no_page(data, address):
    address -= address % (256 << 10)
    page = parse_page_header(data, address)
    if page is not None:  # what passes holds together: a census of it never fails
        assert page.address < page.area_start < page.area_end <= page.address + page.size
        build_census([(page, 0)], set(), "11.3.244.8")


def test_random_words_in_a_page_shape_are_refused():
    """Headers shaped right (area and size plausible) but with random words elsewhere: the reservation check
    refuses them all."""
    rng = random.Random(24)
    for _ in range(5000):
        address = rng.randrange(1 << 30, 1 << 46) & ~((256 << 10) - 1)
        words = [rng.getrandbits(64) for _ in range(12)]
        words[0], words[3], words[4] = 256 << 10, address + 0x1148, address + (256 << 10)
        words[2], words[8] = words[2] & ~7, words[8] & ~7
        assert parse_page_header(HEADER.pack(*words), address) is None


def test_versions_from_node20_rodata():
    with open(os.path.join(FIXTURES, "v8", "node20-rodata-pieces.bin"), "rb") as fh:
        data = fh.read()
    assert parse_versions(data) == ("11.3.244.8-node.38", "20.20.2")
    assert parse_versions(b"") == ("", "")
    assert parse_versions(b"libv8-%d.%d.%d%s%s.so\x00not a version\x00") == ("", "")


def test_mapping_shapes_without_headers():
    """The fallback over the capture's maps: the regular pages' mappings, no glibc heap."""
    doc = _fixture()
    maps = parse_maps("\n".join(doc["anonymous_maps"]))
    shaped = shape_pages(maps)
    pages = {p["address"] for p in doc["pages"]}
    assert shaped and all(m.start in pages for m in shaped)
    assert len(shaped) >= 0.95 * (len(pages) - 4)


def test_settings_from_the_command_line_and_node_options():
    cmd = ["node", "--max-old-space-size=512", "--expose_gc", "app.js", "--max-semi-space-size=64"]
    assert parse_settings(cmd, {"NODE_OPTIONS": "--max-semi-space-size=16 --inspect"}) == {
        "max-old-space-size": "512", "expose-gc": "on", "max-semi-space-size": "16"}
    assert parse_settings([], {}) == {}


def test_header_struct_is_96_bytes():
    assert HEADER.size == 96 == struct.calcsize("<12Q")


def test_inspector_client_pieces():
    assert accept_key(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455's own example
    for size in (5, 200, 70000):
        payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
        frame = client_frame(payload, b"\x01\x02\x03\x04")
        assert frame[1] & 0x80  # masked
        unmasked = bytes([frame[0], frame[1] & 0x7F]) + frame[2:len(frame) - size - 4] + bytes(
            b ^ (1, 2, 3, 4)[i % 4] for i, b in enumerate(frame[len(frame) - size:]))
        assert parse_frame(unmasked) == (1, True, payload, len(unmasked))
        assert parse_frame(unmasked[:-1]) is None
    with pytest.raises(MalformedInput):
        parse_frame(frame)  # a masked frame from a server
    with pytest.raises(MalformedInput):
        parse_frame(b"\x81\x7f" + (1 << 40).to_bytes(8, "big"))
    tcp = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
           "   0: 0100007F:240D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1\n"
           "   1: 00000000:240D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4343 1\n"
           "   2: 0100007F:240D 0100007F:9999 01 00000000:00000000 00:00000000 00000000     0        0 4444 1\n")
    assert listening_inodes(tcp, 9229) == {4242} and listening_inodes(tcp, 9230) == set()
    assert inspect_port(["node", "app.js"], {}) == 9229
    assert inspect_port(["node", "--inspect-port=9333", "app.js"], {}) == 9333
    assert inspect_port(["node"], {"NODE_OPTIONS": "--inspect=127.0.0.1:9444"}) == 9444
    with pytest.raises(Unsupported):
        inspect_port(["node", "--inspect=0.0.0.0:9229"], {})
    assert catches_sigusr1("SigCgt:\t0000000000004200\n") and not catches_sigusr1("SigCgt:\t0000000000004000\n")
    with pytest.raises(MalformedInput):
        parse_reply(b'{"id":1,"result":{"result":{"type":"undefined"}}}')


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_frames_parse_or_are_refused(data):
    try:
        frame = parse_frame(data)
    except MalformedInput:
        return
    assert frame is None or frame[3] <= len(data)
