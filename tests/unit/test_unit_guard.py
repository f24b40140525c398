"""The guard of tests/unit (tests/conftest.py): a unit test that starts a process or opens an IP socket
fails, naming what it asked, even where the code under test catches the refusal; a test in
tests/live is left alone. Run by pytest in this process (pytester), on a suite of the test's own
with this conftest: nothing is started, the refusals come before any fork or connect."""
import _posixsubprocess
import os
import socket
import subprocess

from conftest import HERE

pytest_plugins = ["pytester"]

CONFTEST = os.path.join(HERE, "conftest.py")

REFUSED = '''
import os
import socket
import subprocess

import pytest


def test_a_subprocess():
    subprocess.run(["true"])


def test_a_subprocess_whose_refusal_is_caught():
    try:
        subprocess.run(["true"])
    except BaseException:  # as careless code under test might
        pass


def test_a_fork():
    if os.fork() == 0:
        os._exit(0)


def test_a_shell_command():
    os.system("true")


def test_a_tcp_connection():
    socket.create_connection(("127.0.0.1", 9), timeout=1)


@pytest.fixture(scope="module")
def started():
    return subprocess.Popen(["sleep", "1"])


def test_a_module_fixture_that_starts_a_program(started):
    pass
'''

ALLOWED = '''
import os
import socket


def test_nothing_started():
    assert sum(range(4)) == 6


def test_a_unix_socket(tmp_path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))
'''

LIVE = '''
import os
import subprocess


def test_a_live_test_sees_no_guard_of_its_own():
    assert (id(subprocess._fork_exec), id(os.fork)) == tuple(map(int, os.environ["STARTS_BEFORE"].split()))
'''


def _suite(pytester):
    with open(CONFTEST) as fh:
        pytester.makeconftest(fh.read())
    pytester.makepyfile(**{"unit/test_refused": REFUSED, "unit/test_allowed": ALLOWED, "live/test_left_alone": LIVE})


def test_a_unit_test_that_starts_a_process_or_opens_an_ip_socket_fails(pytester, monkeypatch):
    """Each way refused, named; a live test and the functions after the run untouched."""
    _suite(pytester)
    # what the live test must find: the functions as they are outside the inner suite's guard
    monkeypatch.setenv("STARTS_BEFORE", f"{id(subprocess._fork_exec)} {id(os.fork)}")
    before = subprocess._fork_exec, _posixsubprocess.fork_exec, os.fork, socket.socket.connect
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    assert (subprocess._fork_exec, _posixsubprocess.fork_exec, os.fork, socket.socket.connect) == before  # lifted
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("failed"), outcomes.get("errors")) == (3, 5, 1), result.stdout.str()
    for test in ("test_a_subprocess", "test_a_subprocess_whose_refusal_is_caught", "test_a_fork",
                 "test_a_shell_command", "test_a_tcp_connection"):
        result.stdout.fnmatch_lines([f"FAILED unit/test_refused.py::{test} - *"])
    result.stdout.fnmatch_lines(["ERROR unit/test_refused.py::test_a_module_fixture_that_starts_a_program - *"])
    text = result.stdout.str()
    assert "a unit test started a process (subprocess._fork_exec)" in text
    assert "a unit test started a process (os.fork)" in text and "a unit test started a process (os.system)" in text
    assert "a unit test opened an IP socket (connect (('127.0.0.1', 9),))" in text
    assert "a unit test tried what tests/unit refuses: started a process (subprocess._fork_exec)" in text

