"""V8's heap read from outside (memgap.runtimes.v8): the page-header parser on headers captured from
a real Node 20 (fixtures/v8/), fuzzed; and live, a Node program (programs/v8_heap/heap.js) that
grows, drops 90% and rests, against its own v8.getHeapStatistics() and getHeapSpaceStatistics()
read just before and just after memgap's read, its smaps read by the test, and its threads' states."""
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIXTURES, HERE
from memgap.errors import MalformedInput, Unsupported
from memgap.runtimes import ProcessView, RuntimeInfo, detect_runtimes
from memgap.runtimes.v8 import (
    HEADER,
    V8Reader,
    build_census,
    parse_page_header,
    parse_settings,
    parse_versions,
    read_census,
    read_deep,
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
from memgap.sources.procfs import ProcReader, parse_maps

PROGRAM = os.path.join(HERE, "programs", "v8_heap", "heap.js")
NODE = shutil.which("node")
MiB = 1 << 20
needs_node = pytest.mark.skipif(NODE is None, reason="needs node (Node.js 20: apt-get install nodejs)")


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


class NodeHeap:
    """programs/v8_heap/heap.js running, with its own figures on request."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([NODE, "--expose-gc", PROGRAM, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == f"ready pid={self.proc.pid}\n"
        self.reader = ProcReader(self.proc.pid)

    def figures(self):
        assert self.proc.poll() is None, "the program died"
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return _figures(self.proc.stdout.readline())

    def view(self):
        return ProcessView(self.proc.pid, self.reader, self.reader.maps())

    def states(self):
        out = []
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            with open(f"/proc/{self.proc.pid}/task/{tid}/stat") as fh:
                out.append(fh.read().rpartition(")")[2].split()[0])
        return out

    def read_bracketed(self):
        """memgap's read between two of the program's own readings that agree on the heap (a collection
        between them: read again). Returns (before, heap, census, after)."""
        for _ in range(5):
            before = self.figures()
            view = self.view()
            info = V8Reader().detect(view)
            heap = V8Reader().read(view, info)
            census = read_census(self.reader, view.maps, info.version)
            after = self.figures()
            if before["heap.total_heap_size"] == after["heap.total_heap_size"]:
                return before, heap, census, after
        raise AssertionError("the heap kept changing under five reads")

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0
        self.reader.close()


@pytest.fixture
def dropped():
    node = NodeHeap()
    yield node
    node.close()


def _smaps_rss(pid, ranges):
    """Rss of the smaps entries inside ``ranges``, parsed here (the witness is not memgap's parser)."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                start, end = (int(x, 16) for x in head.split("-"))
                inside = any(s <= start and end <= e for s, e in ranges)
            elif head == "Rss:" and inside:
                total += int(line.split()[1]) * 1024
    return total


def _close(ours, theirs, tolerance=0.05):
    return abs(ours - theirs) <= tolerance * theirs


@needs_node
def test_read_at_rest_is_what_node_says(dropped):
    """After the drop, at rest: committed, resident and in use against V8's own figures of the same moment,
    per space; the heap ranges' resident bytes against the process's smaps; and the process never stopped."""
    states = dropped.states()
    before, heap, census, after = dropped.read_bracketed()
    assert "T" not in states + dropped.states() and "t" not in states + dropped.states()
    assert after["ticker_worst_ms"] < 500, "a stop of the process would show in its ticker"
    assert heap.route.startswith("outside: V8's page headers")
    resident = heap.committed - heap.released
    for own in (before, after):
        assert _close(heap.committed, own["heap.total_heap_size"], 0.01)
        assert _close(resident, own["heap.total_physical_size"])
        assert _close(heap.in_use, own["heap.used_heap_size"])
        assert _close(heap.in_use, own["heap.used_heap_size"] - own["space.new_space.space_used_size"], 0.01)
    assert heap.retained == resident - heap.in_use
    for name, space in census.totals().items():
        assert _close(space.committed, after[f"space.{name}.space_size"], 0.01), name
        if space.committed >= MiB:
            assert _close(space.resident, after[f"space.{name}.physical_space_size"]), name
        if space.in_use is not None and space.in_use >= MiB:
            assert _close(space.in_use, after[f"space.{name}.space_used_size"], 0.01), name
    heap_ranges = [(r.start, r.end) for r in heap.ranges if r.heap]
    assert sum(e - s for s, e in heap_ranges) == heap.committed
    assert _close(_smaps_rss(dropped.proc.pid, heap_ranges), resident, 0.01)
    assert resident >= heap.in_use
    assert heap.metadata["read_only_space"] > 0 and any(r.label == "v8 read-only space" for r in heap.ranges)


@needs_node
def test_retained_above_the_floor_after_the_drop_and_not_at_live_size(dropped):
    """The finding-ready figure: V8 keeps its heap far above the live size after the drop (retained over 64 MiB
    and more than in use), and not at the live size (the same program, nothing dropped)."""
    _, heap, _, own = dropped.read_bracketed()
    assert heap.retained > 64 * MiB and heap.retained > heap.in_use, (heap.retained, heap.in_use)
    assert own["heap.total_heap_size"] > 4 * own["heap.used_heap_size"]
    live = NodeHeap("--keep")
    try:
        _, heap_live, _, own_live = live.read_bracketed()
    finally:
        live.close()
    assert heap_live.in_use > 100 * MiB and _close(heap_live.in_use, own_live["heap.used_heap_size"])
    assert heap_live.retained < heap_live.in_use / 2, (heap_live.retained, heap_live.in_use)


@needs_node
def test_a_worker_thread_is_an_isolate_of_its_own():
    """A worker thread holding 80 MiB beside a main thread holding 20 MiB: two isolates (two Heap*), each
    against its own getHeapStatistics() of the same moment; the RuntimeHeap sums them."""
    node = NodeHeap("--worker", "80", "--objects", "20", "--buffers", "2")
    try:
        before, heap, census, after = node.read_bracketed()
    finally:
        node.close()
    assert len(census.isolates) == 2
    worker, main = census.isolates  # the larger first
    for iso, prefix in ((worker, "worker.heap"), (main, "heap")):
        committed = sum(s.committed for s in iso.spaces.values())
        in_use = sum(s.in_use or 0 for s in iso.spaces.values())
        for own in (before, after):
            assert _close(committed, own[f"{prefix}.total_heap_size"], 0.01), prefix
            assert _close(in_use, own[f"{prefix}.used_heap_size"]), prefix
    assert heap.committed == sum(s.committed for iso in census.isolates for s in iso.spaces.values())
    assert _close(heap.committed, after["heap.total_heap_size"] + after["worker.heap.total_heap_size"], 0.01)


@needs_node
def test_detected_with_its_version(dropped):
    version = subprocess.run([NODE, "-p", "process.versions.v8"], capture_output=True, text=True,
                             check=True).stdout.strip()
    found = detect_runtimes(dropped.view())
    assert [i.name for i in found] == ["v8"] and found[0].version == version
    assert "v8::V8::Initialize" in found[0].how and "Node v" in found[0].how


@needs_node
def test_unrelated_processes_are_not_v8(tmp_path):
    """sleep, a Python process, and sleep copied under the name node: none is V8 (a name alone tells nothing)."""
    fake = tmp_path / "node"
    shutil.copy(shutil.which("sleep"), fake)
    procs = [subprocess.Popen([cmd, *args]) for cmd, args in
             ((shutil.which("sleep"), ["30"]), (sys.executable, ["-c", "import time; time.sleep(30)"]),
              (str(fake), ["30"]))]
    try:
        time.sleep(0.3)
        for proc in procs:
            reader = ProcReader(proc.pid)
            assert V8Reader().detect(ProcessView(proc.pid, reader, reader.maps())) is None
            census = read_census(reader, reader.maps(), "")
            assert not census.isolates or census.route == "shapes"
            reader.close()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


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


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@needs_node
def test_deep_route_through_the_inspector(tmp_path):
    """read_deep: SIGUSR1 opens Node's inspector on loopback (the port its --inspect-port names), one
    Runtime.evaluate; its figures against the program's own, and the port left open by the process, as said."""
    port = _free_port()
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen([NODE, "--expose-gc", f"--inspect-port={port}", PROGRAM, "--objects", "32",
                                 "--buffers", "4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True)
    try:
        proc.stdout.readline()
        reader = ProcReader(proc.pid)
        view = ProcessView(proc.pid, reader, reader.maps())
        info = V8Reader().detect(view)
        heap = read_deep(view, info)
        proc.stdin.write("\n")
        proc.stdin.flush()
        own = _figures(proc.stdout.readline())
        assert heap.route == f"inspector: Runtime.evaluate of v8.getHeapStatistics() on 127.0.0.1:{port}"
        assert "stays open" in heap.notes[0]
        assert _close(heap.committed, own["heap.total_heap_size"], 0.01)
        assert _close(heap.in_use, own["heap.used_heap_size"])
        assert heap.limit == own["heap.heap_size_limit"]
        with open(f"/proc/{proc.pid}/net/tcp") as fh:
            assert f"0100007F:{port:04X} 00000000:0000 0A" in fh.read()  # the inspector the signal opened
        again = read_deep(view, info)
        assert "already open" in again.notes[0] and proc.poll() is None
        assert "Debugger listening on ws://127.0.0.1" in (tmp_path / "stderr").read_text()
        reader.close()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_deep_route_refused_where_sigusr1_would_end_the_process():
    proc = subprocess.Popen([shutil.which("sleep"), "30"])
    try:
        time.sleep(0.2)
        reader = ProcReader(proc.pid)
        with pytest.raises(Unsupported, match="does not catch SIGUSR1"):
            read_deep(ProcessView(proc.pid, reader, reader.maps()), RuntimeInfo("v8", "", "test"), timeout=1)
        assert proc.poll() is None, "the signal was sent"
        reader.close()
    finally:
        proc.kill()
        proc.wait()
