"""The pytest plugin (memgap_pytest, by its pytest11 entry point) on real test files, run by
pytest in a subprocess: a leak fails with its breakdown, work that gives memory back
passes, a warm-up run keeps a cache out of the figure, and --memgap ranks the tests."""
import re
import subprocess
import sys

pytest_plugins = ["pytester"]

TESTS = '''
import pytest

kept = []
cache = {}


@pytest.mark.memgap_retained("20 MiB")
def test_leaks():
    kept.append(bytearray(64 << 20))          # 64 MiB held by the module after the test


@pytest.mark.memgap_retained("20 MiB")
def test_gives_back():
    scratch = bytearray(64 << 20)             # an mmapped chunk: freed, returned to the kernel
    del scratch


@pytest.mark.memgap_retained("20 MiB", warmup=1)
def test_fills_a_cache_once():
    if "table" not in cache:                  # the first (warm-up) run fills it; the measured run finds it
        cache["table"] = bytearray(48 << 20)


def test_unmarked_leak():
    kept.append(bytearray(40 << 20))
'''


def _run(pytester, *args):
    pytester.makepyfile(test_memory=TESTS)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", *args)


def test_a_leak_fails_with_the_breakdown_and_the_rest_pass(pytester):
    result = _run(pytester)
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert re.search(r"FAILED test_memory.py::test_leaks", out)
    left = re.search(r"the test left RSS ([\d.]+) MiB higher", out)
    assert left and 60 <= float(left.group(1)) <= 70, out  # the 64 MiB it kept
    # where it went, named: the gc walk counts the bytearray among Python's objects
    objects = re.search(r"Python objects\s*│\s*([\d.]+)", out)
    assert objects and float(objects.group(1)) >= 64, out


def test_a_global_limit_and_the_summary(pytester):
    result = _run(pytester, "--memgap-retained", "30MiB", "--memgap")
    result.assert_outcomes(passed=2, failed=2)  # the marked leak, and the unmarked 40 MiB one
    out = result.stdout.str()
    summary = out.split("RSS retained by test")[1]
    ranked = re.findall(r"^\s*([\d.-]+) MiB\s+(\S+)", summary, re.M)
    assert [name for _, name in ranked[:2]] == ["test_memory.py::test_leaks", "test_memory.py::test_unmarked_leak"]
    assert 36 <= float(ranked[1][0]) <= 44, ranked


def test_loading_the_plugin_loads_nothing_of_memgap():
    """pytest loads the plugin in every session: it must not import memgap's modules until a test asks
    (test_a_leak_fails_with_the_breakdown_and_the_rest_pass shows an unmarked test goes unmeasured)."""
    code = ("import sys, memgap_pytest\n"
            "print(sorted(m for m in sys.modules if m == 'memgap' or m.startswith('memgap.')))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"
