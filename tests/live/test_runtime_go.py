"""The Go runtime's own heap, read from outside (memgap.runtimes.go, issue 24).

The program: ``programs/go_heap/main.go`` (standard library only), built by the test with each Go
toolchain here (``TOOLCHAINS``: the system's Go 1.26 and Debian 12's Go 1.19) into tmp: it builds a
map of 1.5M entries and 2 KiB slices (about 490 MiB in use), drops
90% (or, with ``-hold``, nothing), runs ``runtime.GC()`` and rests; each line it reads gets one line of
its own figures (``runtime.ReadMemStats`` and ``runtime/metrics``' ``/memory/classes/*``), "tick" the
longest gap its 2 ms ticker saw since the last ask. Its figures are the witness: memgap reads, then
the program answers, then memgap reads again (the program idle in between: ReadMemStats stops its
world for microseconds and allocates little), and both of memgap's reads must agree with it.

The parsers are tested on what the reader read of a real program (``fixtures/go/``, captured by
``scripts/capture_go_fixture.py``) and on garbage: tests/unit/test_runtime_go_captures.py.
"""
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

import pytest

from conftest import HERE
from helpers import joined_heap_ranges, thread_states
from memgap.errors import MalformedInput
from memgap.runtimes import detect_runtimes, go
from memgap.runtimes.base import ProcessView
from memgap.runtimes.go_binary import read_go_binary
from memgap.sources.procfs import ProcReader

PROGRAM = os.path.join(HERE, "programs", "go_heap", "main.go")
MiB = 1 << 20
FLOOR = 64 * MiB          # retained above this at rest after the drop, below it at the live size
PAGE = os.sysconf("SC_PAGE_SIZE")


def _go():
    return shutil.which("go") or next((p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if os.path.exists(p)),
                                      None)


# Every Go toolchain the live tests build the program with: the system's (Go 1.26 here), and Debian 12's Go 1.19
# (golang-1.19-go, which scripts/setup.sh installs: missing, its tests skip, and --no-skips fails them).
GO_119 = "/usr/lib/go-1.19/bin/go"
TOOLCHAINS = [t for t in dict.fromkeys([_go() and os.path.realpath(_go()), GO_119]) if t] or [None]


def _toolchain_id(tool):
    return "go-" + os.path.basename(os.path.dirname(os.path.dirname(tool))) if tool else "no-go"


@pytest.fixture(scope="session", params=TOOLCHAINS, ids=_toolchain_id)
def go_exes(request, tmp_path_factory):
    """programs/go_heap/main.go built by one toolchain as is, stripped (``-ldflags='-s -w'``) and
    position-independent."""
    tool = request.param
    if tool is None or not os.path.exists(tool):
        pytest.skip(f"no Go toolchain at {tool or 'go'} to build programs/go_heap (scripts/setup.sh installs them)")
    out = tmp_path_factory.mktemp("go_heap")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"}
    if not (env.get("GOCACHE") or env.get("XDG_CACHE_HOME") or env.get("HOME")):
        env["GOCACHE"] = str(out / "cache")   # no cache of the user's: one in tmp
    built = {}
    for name, flags in (("plain", []), ("stripped", ["-ldflags=-s -w"]), ("pie", ["-buildmode=pie"])):
        exe = str(out / f"go_heap_{name}")
        subprocess.run([tool, "build", *flags, "-o", exe, PROGRAM], check=True, env=env, cwd=str(out))
        built[name] = exe
    version = subprocess.run([tool, "env", "GOVERSION"], capture_output=True, text=True, env=env, check=True)
    built["version"] = version.stdout.strip()
    built["settle"] = built["version"].startswith("go1.19")  # its scavenger works for seconds after the drop
    return built


class GoProgram:
    """programs/go_heap running: "ready pid=N" once at rest, then a line of its figures per line read.
    ``settle``: left until its scavenger is done (HeapReleased moved less than 1 MiB in 2 s, 15 s at most):
    Go 1.19's gives back the 137 MiB the drop freed in steps 0.5-2 s apart, 1-4 s after "ready" (measured
    on 5 runs), which a read and the program's answer just after would straddle; Go 1.26's keeps them."""

    def __init__(self, exe, *args, settle=False, **env):
        self.proc = subprocess.Popen([exe, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env})
        assert self.proc.stdout.readline().startswith("ready pid=")
        self.pid = self.proc.pid
        seen = [self.ask()["HeapReleased"]] if settle else []
        while seen and len(seen) < 30 and not (len(seen) > 4 and max(seen[-5:]) - min(seen[-5:]) < MiB):
            time.sleep(0.5)
            seen.append(self.ask()["HeapReleased"])

    def ask(self, line="figures"):
        assert self.proc.poll() is None, "the program died"
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return {k: int(v) for k, v in (w.split("=", 1) for w in self.proc.stdout.readline().split())}

    def view(self):
        reader = ProcReader(self.pid)
        return ProcessView(self.pid, reader, reader.maps(), os.readlink(f"/proc/{self.pid}/exe"), reader.environ())

    def read(self):
        view = self.view()
        info = go.GoReader().detect(view)
        assert info is not None
        return go.GoReader().read(view, info)

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def at_rest(go_exes):
    program = GoProgram(go_exes["plain"], settle=go_exes["settle"])
    yield program
    program.close()


@pytest.fixture(scope="module")
def stripped(go_exes):
    program = GoProgram(go_exes["stripped"], settle=go_exes["settle"])
    yield program
    program.close()


def _near(ours, theirs, share=0.05, floor=0):
    return abs(ours - theirs) <= max(share * theirs, floor)


def _resident(pid, start, end):
    """Bytes of [start, end) present in RAM, from the test's own read of /proc/PID/pagemap."""
    present = 0
    with open(f"/proc/{pid}/pagemap", "rb") as fh:
        step = 1 << 15
        for first in range(start // PAGE, end // PAGE, step):
            count = min(step, end // PAGE - first)
            data = os.pread(fh.fileno(), 8 * count, 8 * first)
            present += sum(1 for (entry,) in struct.iter_unpack("<Q", data) if entry >> 63)
    return present * PAGE


# --- detection ------------------------------------------------------------------------------------------

def test_a_go_program_is_detected_with_its_version(at_rest, stripped, go_exes):
    info = go.GoReader().detect(at_rest.view())
    assert info is not None and info.name == "go" and info.version == go_exes["version"]
    assert not info.stripped and ".go.buildinfo" in info.how
    assert [i.name for i in detect_runtimes(at_rest.view())] == ["go"]
    bare = go.GoReader().detect(stripped.view())
    assert bare is not None and bare.version == go_exes["version"] and bare.stripped and "-s" in bare.how


def test_other_processes_and_garbage_are_not_go(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        for pid in (sleeper.pid, os.getpid()):
            reader = ProcReader(pid)
            view = ProcessView(pid, reader, reader.maps(), os.readlink(f"/proc/{pid}/exe"), reader.environ())
            assert go.GoReader().detect(view) is None
    finally:
        sleeper.kill()
        sleeper.wait()
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF\x02\x01" + bytes(random.Random(1).randrange(256) for _ in range(4000)))
    try:
        assert read_go_binary(str(junk)) is None
    except MalformedInput:
        pass
    assert read_go_binary(sys.executable) is None


# --- the figures, against the program's own --------------------------------------------------------------

def test_figures_match_the_programs_own_at_rest(at_rest, go_exes):
    before = at_rest.read()
    own = at_rest.ask()
    after = at_rest.read()
    assert before.route.startswith(f"outside: /proc/{at_rest.pid}/mem") and "DWARF" in before.route
    for heap in (before, after):
        assert _near(heap.in_use, own["HeapInuse"])
        # within 1 MiB where little is retained (Go 1.19 after its scavenger): the ask's own pages
        assert _near(heap.retained, own["HeapIdle"] - own["HeapReleased"], floor=MiB)
        assert _near(heap.retained, own["/memory/classes/heap/free:bytes"], floor=MiB)
        assert _near(heap.released, own["HeapReleased"], floor=0.05 * own["HeapSys"])  # the scavenger works on
        assert _near(heap.committed, own["HeapSys"] - own["HeapReleased"])
        meta = heap.metadata
        assert _near(meta["stacks"], own["StackInuse"], floor=256 << 10)
        assert _near(meta["gc metadata"], own["GCSys"])
        assert _near(meta["mspan/mcache"], own["MSpanInuse"] + own["MCacheInuse"])
        assert _near(meta["other"], own["OtherSys"] + own["BuckHashSys"])
        assert heap.limit is None and heap.settings["GOGC (runtime)"] == "100"
        objects = next(int(m[1]) for n in heap.notes if (m := re.match(r"live objects (\d+) bytes", n)))
        assert _near(objects, own["/memory/classes/heap/objects:bytes"]) and _near(objects, own["HeapAlloc"])
    through = [n for n in before.notes if "runtime read through" in n]  # what an older release has instead
    if go_exes["version"].startswith("go1.19"):
        assert len(through) == 1 and all(f in through[0] for f in ("allArenas", "inPtrScalarBits", "class_to_size"))
    else:
        assert not through
    print(f"at rest: in_use {before.in_use / MiB:.1f} retained {before.retained / MiB:.1f} "
          f"released {before.released / MiB:.1f} MiB; own HeapInuse {own['HeapInuse'] / MiB:.1f} "
          f"HeapIdle-HeapReleased {(own['HeapIdle'] - own['HeapReleased']) / MiB:.1f}; {before.route}")


def _by_label(pid, ranges):
    """label -> (bytes, resident bytes read by the test in pagemap) of the heap's ranges."""
    out = {}
    for r in ranges:
        if r.heap:
            size, resident = out.get(r.label, (0, 0))
            out[r.label] = (size + r.end - r.start, resident + _resident(pid, r.start, r.end))
    return out


def test_heap_ranges_hold_what_the_figures_say(at_rest):
    """The arenas split by the page allocator's bitmaps: the free pages' ranges are the retained
    figure (HeapIdle - HeapReleased); the pages in spans are HeapInuse with the goroutine stacks and
    GC buffers; what was given back is not resident (read by the test in pagemap)."""
    heap = at_rest.read()
    own = at_rest.ask()
    labels = _by_label(at_rest.pid, heap.ranges)
    print({label: (round(size / MiB, 1), round(resident / MiB, 1)) for label, (size, resident) in labels.items()})
    assert set(labels) <= {"go heap", "go heap free", "go heap released", "go heap unused"}
    free = labels.get("go heap free", (0, 0))  # none where Go 1.19's scavenger gave every free page back
    assert _near(free[0], own["HeapIdle"] - own["HeapReleased"], floor=MiB)  # the ask's own pages: within 1 MiB
    assert free[1] <= free[0]
    spans = own["HeapInuse"] + own["StackInuse"]
    assert spans <= labels["go heap"][0] <= spans + own["GCSys"] + 8 * MiB
    assert labels.get("go heap released", (0, 0))[1] <= 2 * MiB and labels.get("go heap unused", (0, 0))[1] == 0
    arenas = [(lo, hi) for lo, hi in joined_heap_ranges(heap.ranges)]
    assert all(lo % (64 * MiB) == 0 == hi % (64 * MiB) for lo, hi in arenas)
    meta = [r for r in heap.ranges if not r.heap]
    assert {r.label for r in meta} == {"go arena index", "go heap arena metadata", "go page summary"}
    maps = ProcReader(at_rest.pid).maps()
    for r in heap.ranges:
        assert any(m.start <= r.start < m.end for m in maps), r


def _states(pid):
    return thread_states(pid)


def test_reading_never_stops_the_program(at_rest):
    """No thread stopped before, between or after reads (a ptrace stop shows 't'), reads every 5 ms for
    1.5 s as a monitor would; the program's own 2 ms ticker's gaps with and without reads are printed,
    not asserted: on a loaded 2-core machine the reads' own CPU delays it as any other process's would
    (a full suite beside it once gave 28-79 ms against 22), which says nothing of a stop."""
    at_rest.read()  # the DWARF parsed once, out of the rounds
    with_reads, without = [], []
    for _ in range(6):
        at_rest.ask("tick")
        time.sleep(0.25)
        without.append(at_rest.ask("tick")["longest_tick_gap_ns"] / 1e6)
        end = time.monotonic() + 0.25
        while time.monotonic() < end:
            assert not set(_states(at_rest.pid)) & {"t", "T"}
            assert at_rest.read().in_use is not None
            assert not set(_states(at_rest.pid)) & {"t", "T"}
            time.sleep(0.005)
        with_reads.append(at_rest.ask("tick")["longest_tick_gap_ns"] / 1e6)
    print(f"longest tick gaps, ms: with reads {sorted(with_reads)}, without {sorted(without)}")


def test_a_program_allocating_without_pause_is_read_or_refused(go_exes):
    """Under a goroutine that allocates without pause, each read is taken at a quiet moment of the
    runtime's counters or within 1% of agreeing (said in the notes), or refused, never torn: the heap's
    mapped total (in use + retained + released, which only grows as spans come and go) lies between
    the program's own HeapSys just before and just after, where in_use itself swings with each GC."""
    program = GoProgram(go_exes["plain"], "-entries", "200000", "-churn")
    try:
        told = refused = drifted = 0
        attempts = []
        for _ in range(20):
            before = program.ask()
            heap = program.read()
            after = program.ask()
            if heap.in_use is None:
                refused += 1
                assert any("torn" in n for n in heap.notes)
                continue
            told += 1
            drifted += any(n.startswith("read while the runtime allocated") for n in heap.notes)
            attempts.append(int(re.search(r"; (\d+) read\(s\)", heap.route)[1]))
            low, high = sorted((before["HeapSys"], after["HeapSys"]))
            assert 0.98 * low <= heap.committed + heap.released <= 1.02 * high
            assert heap.in_use <= heap.committed
        print(f"allocating without pause: {told} reads told ({drifted} within 1%, not exact; attempts "
              f"{sorted(attempts)}), {refused} refused")
        assert told >= 10
    finally:
        program.close()


def test_settings_as_the_runtime_holds_them(go_exes):
    program = GoProgram(go_exes["plain"], "-entries", "20000", settle=go_exes["settle"], GOGC="50", GOMEMLIMIT="1GiB",
                        GODEBUG="madvdontneed=1")
    try:
        heap = program.read()
        own = program.ask()
    finally:
        program.close()
    assert heap.settings["GOGC (runtime)"] == "50" == str(own["/gc/gogc:percent"])
    assert heap.limit == 1 << 30 == own["/gc/gomemlimit:bytes"]
    assert heap.settings["GODEBUG (environment)"] == "madvdontneed=1"
    assert heap.settings["GOMEMLIMIT (environment)"] == "1GiB"


def test_a_position_independent_program_is_read_where_it_was_loaded(go_exes):
    """-buildmode=pie: the globals' addresses moved by the load bias (its first mapping against its
    first PT_LOAD's address), the figures as the program's own."""
    program = GoProgram(go_exes["pie"], "-entries", "200000", settle=go_exes["settle"])
    try:
        heap = program.read()
        own = program.ask()
    finally:
        program.close()
    assert heap.in_use is not None, heap.notes
    assert _near(heap.in_use, own["HeapInuse"]) and _near(heap.retained, own["HeapIdle"] - own["HeapReleased"])


def test_retained_above_the_floor_at_rest_and_below_it_at_live_size(at_rest, go_exes):
    """The finding's figure: after the drop the runtime keeps what it freed (HeapIdle - HeapReleased);
    the same program held at its live size keeps next to nothing. Go 1.19's scavenger gives back what
    the drop freed within seconds (measured: 140 MiB in 1-3 s; its goal is the heap goal + 10%, where
    Go 1.26's stays above the retained heap after this drop): there the reader says what the program says."""
    dropped = at_rest.read()
    if go_exes["version"].startswith("go1.19"):
        own = at_rest.ask()
        print(f"go1.19 after the drop: retained {dropped.retained / MiB:.1f} MiB released "
              f"{dropped.released / MiB:.1f} MiB; own {(own['HeapIdle'] - own['HeapReleased']) / MiB:.1f} "
              f"{own['HeapReleased'] / MiB:.1f}")
        assert (dropped.retained > FLOOR) == (own["HeapIdle"] - own["HeapReleased"] > FLOOR)
        assert _near(dropped.released, own["HeapReleased"], floor=MiB)
        return
    live = GoProgram(go_exes["plain"], "-hold", settle=go_exes["settle"])
    try:
        held = live.read()
        own = live.ask()
    finally:
        live.close()
    assert _near(held.retained, own["HeapIdle"] - own["HeapReleased"], floor=2 * MiB)
    print(f"retained: {dropped.retained / MiB:.1f} MiB of {dropped.committed / MiB:.1f} after the drop, "
          f"{held.retained / MiB:.1f} MiB of {held.committed / MiB:.1f} at the live size")
    assert dropped.retained > FLOOR > held.retained
    assert dropped.retained / dropped.committed > 0.25 > 0.05 > held.retained / held.committed


# --- stripped ------------------------------------------------------------------------------------------

def test_a_stripped_program_is_named_not_read(stripped, go_exes):
    heap = stripped.read()
    own = stripped.ask()
    assert heap.in_use is heap.retained is heap.released is heap.committed is None and not heap.metadata
    assert any("-ldflags=-s" in note and "runtime/metrics" in note for note in heap.notes)
    assert "mapping shapes" in heap.route
    resident = sum(_resident(stripped.pid, r.start, r.end) for r in heap.ranges)
    # pages of spans in use need not be resident (taken from scavenged pages, never touched): Go 1.19's
    # scavenger gives back the free pages that make up for them in Go 1.26, so there the live objects bound it
    low = own["HeapAlloc"] if go_exes["version"].startswith("go1.19") else own["HeapInuse"]
    assert heap.ranges and low <= resident <= own["HeapSys"] - own["HeapReleased"] + 8 * MiB


def test_the_shape_rule_finds_the_arenas_the_symbols_name(at_rest):
    """On the program with symbols, the arenas told from mapping shapes alone are those its runtime lists."""
    heap = at_rest.read()
    named = joined_heap_ranges(heap.ranges)
    randomized = go._randomized(read_go_binary(os.readlink(f"/proc/{at_rest.pid}/exe")))  # Go 1.26: a random base
    assert go.shape_ranges(ProcReader(at_rest.pid).maps(), "amd64", randomized=randomized) == named
