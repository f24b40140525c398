"""V8's heap read from outside (memgap.runtimes.v8), live: a Node program (programs/v8_heap/heap.js) that
grows, drops 90% and rests, against its own v8.getHeapStatistics() and getHeapSpaceStatistics()
read just before and just after memgap's read, its smaps read by the test, and its threads' states.
The page-header parser on headers captured from a real Node 20 (fixtures/v8/), fuzzed:
tests/unit/test_runtime_v8_captures.py."""
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import HERE
from memgap.errors import Unsupported
from memgap.runtimes import ProcessView, RuntimeInfo, detect_runtimes
from memgap.runtimes.v8 import (
    V8Reader,
    read_census,
    read_deep,
)
from memgap.sources.procfs import ProcReader

PROGRAM = os.path.join(HERE, "programs", "v8_heap", "heap.js")
NODE = shutil.which("node")
MiB = 1 << 20
needs_node = pytest.mark.skipif(NODE is None, reason="needs node (Node.js 20: apt-get install nodejs)")


def _figures(line):
    return {k: int(v) for k, v in (w.split("=") for w in line.split())}


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
        """memgap's read between two of the program's own readings that agree on the heap, every isolate's
        (a collection between them: read again): the same committed size, the used size within 1% (each
        request for the figures allocates a little). A fresh clone's main isolate went from 5.87 MB used to
        5.49 between two that agreed on the committed size alone. Returns (before, heap, census, after)."""
        for _ in range(5):
            before = self.figures()
            view = self.view()
            info = V8Reader().detect(view)
            heap = V8Reader().read(view, info)
            census = read_census(self.reader, view.maps, info.version)
            after = self.figures()
            if _steady(before, after):
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


def _steady(before, after):
    """No collection between two of the program's readings: each isolate's committed size the same, its used
    size within 1%."""
    return all(before[k] == after[k] for k in before if k.endswith("total_heap_size")) and all(
        abs(before[k] - after[k]) <= 0.01 * after[k] for k in before if k.endswith("used_heap_size"))


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
