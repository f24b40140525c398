"""The suite's own rule: with --no-skips (scripts/test.sh passes it) a skip fails the run."""
import os

from conftest import HERE

pytest_plugins = ["pytester"]

CONFTEST = os.path.join(HERE, "conftest.py")


def _suite(pytester, body):
    with open(CONFTEST) as fh:
        pytester.makeconftest(fh.read())
    pytester.makepyfile(test_one=body)


def test_a_skip_fails_the_run_under_no_skips(pytester):
    _suite(pytester, "import pytest\n\ndef test_ok():\n    pass\n\n"
                     "def test_needs_a_tool():\n    pytest.skip('gdb is not installed')\n")
    strict = pytester.runpytest("--no-skips", "-ra")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*--no-skips: 1 test(s) skipped, so the run fails*"])
    strict.stdout.fnmatch_lines(["SKIPPED*gdb is not installed*"])
    assert pytester.runpytest().ret == 0  # without the switch a skip is a skip


def test_a_clean_run_passes_under_no_skips(pytester):
    _suite(pytester, "def test_ok():\n    pass\n")
    assert pytester.runpytest("--no-skips").ret == 0
