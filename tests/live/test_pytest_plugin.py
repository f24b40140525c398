"""The pytest plugin (memgap_pytest, by its pytest11 entry point) on real test files, run by
pytest in a subprocess: a test that keeps objects fails its limit with what grew, layer by
layer, and the types that grew; one that only leaves glibc free memory passes and is reported
as allocator retention (its own VmRSS and mallinfo2, written by the test, are the witness);
warm-ups run with fresh fixtures; the summary comes back from xdist's workers; bad sizes are
usage errors."""
import os
import re
import subprocess
import sys

import pytest

from conftest import SRC

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _this_checkouts_plugin(monkeypatch):
    """pytester's subprocess runs in a folder of its own: a relative PYTHONPATH=src would not
    find this checkout, and pytest would load an installed memgap's plugin instead."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])]))


TESTS = '''
import ctypes
import random

import pytest

kept = []
cache = {}
libc = ctypes.CDLL("libc.so.6")


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


libc.mallinfo2.restype = Mallinfo2


def witness(name, when):
    """The test's own reading, beside the plugin's: VmRSS and glibc's free bytes, in a file."""
    with open("/proc/self/status") as fh:
        rss = next(int(line.split()[1]) << 10 for line in fh if line.startswith("VmRSS:"))
    with open("witness.txt", "a") as fh:
        fh.write(f"{name} {when} {rss} {libc.mallinfo2().fordblks}\\n")


@pytest.mark.memgap_retained("20 MiB")
def test_keeps_objects():
    kept.extend(b"k" * (1 << 20) for _ in range(40))   # 40 MiB of bytes, held by the module


@pytest.mark.memgap_retained("20 MiB")
def test_leaves_free_memory():
    witness("free_memory", "before")
    big = b"b" * (4 << 20)      # an mmapped chunk freed: glibc's mmap threshold rises to 4 MiB,
    del big                     # so the blocks below come from the heap
    rng, blocks, total = random.Random(1), [], 0
    while total < 60 << 20:
        size = rng.randint(64 << 10, 1 << 20)
        blocks.append(b"x" * size)
        total += size
    blocks.append(b"l" * (1 << 20))
    kept.append(blocks[-1])     # the last block stays: the freed ones below it cannot join the top
    del blocks                  # 60 MiB freed, kept by glibc: RSS stays up
    witness("free_memory", "after")


@pytest.mark.memgap_retained("20 MiB")
def test_gives_back():
    scratch = b"s" * (64 << 20)   # an mmapped chunk: freed, returned to the kernel
    del scratch


@pytest.fixture
def fresh_list():
    return []


@pytest.mark.memgap_retained("20 MiB", warmup=1)
def test_warm_up_gets_fresh_fixtures(fresh_list, tmp_path):
    with open(tmp_path / "out.txt", "x") as fh:   # "x": fails where a run before left the file
        fh.write("once")
    fresh_list.append(1)
    assert fresh_list == [1]


@pytest.mark.memgap_retained("20 MiB", warmup=1)
def test_fills_a_cache_once():
    if "table" not in cache:    # the warm-up run fills it; the measured run finds it
        cache["table"] = b"t" * (48 << 20)


def test_unmarked_keeps():
    kept.extend(b"u" * (1 << 20) for _ in range(40))
'''
ROW = re.compile(r"^\s*(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+test_memory\.py::(\w+)(.*)$", re.M)
MiB = 1 << 20


def _run(pytester, *args):
    pytester.makepyfile(test_memory=TESTS)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", *args)


def _summary(out):
    """test name -> (live MiB, RSS MiB, kept free MiB, the rest of its line)."""
    return {m[4]: (float(m[1]), float(m[2]), float(m[3]), m[5]) for m in ROW.finditer(out.split("left behind")[1])}


def _witness(pytester, name):
    """The test's own (VmRSS, glibc free bytes) growth, in MiB."""
    rows = {w: (int(rss), int(free)) for n, w, rss, free in
            (line.split() for line in (pytester.path / "witness.txt").read_text().splitlines()) if n == name}
    return ((rows["after"][0] - rows["before"][0]) / MiB, (rows["after"][1] - rows["before"][1]) / MiB)


def test_kept_objects_fail_and_allocator_retention_passes(pytester):
    result = _run(pytester, "--memgap")
    result.assert_outcomes(passed=5, failed=1)
    out = result.stdout.str()
    assert re.search(r"FAILED test_memory.py::test_keeps_objects", out)
    grew = re.search(r"live bytes \(Python objects \+ C allocator in use\) grew ([\d.]+) MiB", out)
    assert grew and 39.5 <= float(grew[1]) <= 42, out          # the 40 MiB it kept
    in_use = re.search(r"C allocator in use \(glibc.*?\)\s+([\d.]+)", out)
    assert in_use and 39.5 <= float(in_use[1]) <= 42, out      # bytes of 1 MiB: malloc's, not pymalloc's
    # the census run names them: 40 bytes objects of 1 MiB
    bytes_row = re.search(r"^\s+bytes\s+\+(\d+) objects\s+([\d.]+) MiB", out, re.M)
    assert bytes_row and int(bytes_row[1]) >= 40 and 39.5 <= float(bytes_row[2]) <= 42, out
    assert "cgroup" not in out
    rows = _summary(out)
    live, rss, free, tail = rows["test_leaves_free_memory"]
    rss_witness, free_witness = _witness(pytester, "free_memory")
    assert rss_witness >= 40, rss_witness                      # the retention is real: RSS stayed up
    assert abs(rss - rss_witness) <= 2 and abs(free - free_witness) <= 2, (rows, rss_witness, free_witness)
    assert live <= 2 and "allocator retention" in tail, rows   # kept one 1 MiB block: passes its 20 MiB
    assert rows["test_gives_back"][0] <= 1 and rows["test_fills_a_cache_once"][0] <= 1, rows


def test_a_limit_on_rss_fails_allocator_retention(pytester):
    result = _run(pytester, "--memgap-limit-on", "rss", "-k", "free_memory")
    result.assert_outcomes(failed=1, deselected=5)
    out = result.stdout.str()
    grew = re.search(r"the test's RSS grew ([\d.]+) MiB, over its limit of 20.00 MiB", out)
    assert grew and float(grew[1]) >= 40, out
    assert "most of it is allocator retention" in out
    assert re.search(r"arenas that grew \(MiB\): main [\d.]+ in use, (\d+)\.\d+ free", out), out


def test_a_global_limit_and_the_summary_under_xdist(pytester):
    result = _run(pytester, "--memgap-retained", "30MiB", "--memgap", "-n", "2")
    result.assert_outcomes(passed=4, failed=2)  # the marked one, and the unmarked 40 MiB one
    rows = _summary(result.stdout.str())
    assert set(rows) == {"test_keeps_objects", "test_leaves_free_memory", "test_gives_back",
                         "test_warm_up_gets_fresh_fixtures", "test_fills_a_cache_once", "test_unmarked_keeps"}
    assert 39.5 <= rows["test_unmarked_keeps"][0] <= 42 and "limit 30.00 MiB on live: failed" in \
        rows["test_unmarked_keeps"][3], rows
    assert re.search(r"6 tests measured: \d+ readings", result.stdout.str())


def test_bad_sizes_are_usage_errors(pytester):
    pytester.makepyfile(test_memory=TESTS)
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--memgap-retained", "50XB")
    assert bad.ret == 4 and [line for line in bad.stderr.lines if line.strip()] == [
        "ERROR: --memgap-retained: not a size: '50XB' (say 50 MiB, 1.5 GiB, or bytes)"], bad.stderr.lines
    for marker, said in (("", "no size"), ('"50 XB"', "not a size: '50 XB'"), ('"5 MiB", warmup=-1', "warmup=-1")):
        pytester.makepyfile(test_marked=f"import pytest\n\n@pytest.mark.memgap_retained({marker})\n"
                                        "def test_one():\n    pass\n")
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_marked.py")
        errors = [line for line in result.stderr.lines if line.strip()]
        assert result.ret == 4 and len(errors) == 1 and said in errors[0], (marker, result.stderr.lines)
        assert errors[0].startswith("ERROR: memgap_retained on test_marked.py::test_one: ")


def test_loading_the_plugin_loads_nothing_of_memgap():
    """pytest loads the plugin in every session: it must not import memgap's modules until a test is
    measured."""
    code = ("import sys, memgap_pytest\n"
            "print(sorted(m for m in sys.modules if m == 'memgap' or m.startswith('memgap.')))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"
