"""What a careless or hostile user does to memgap run as root (issue 23, items 1 and 7): each bad
input gets one line and its exit code, no traceback, and nothing outside memgap's own folder is
touched. Real commands, as a user types them."""
import os
import subprocess
import sys

import pytest

from conftest import child_env
from helpers import memgap

NOBODY = 65534


def one_line(proc, code):
    """The command failed with ``code`` and said why in one line on stderr, no traceback."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("memgap: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# --- recording folders (item 1) ----------------------------------------------------------------

@pytest.fixture
def shared_tmp(tmp_path):
    """A sticky folder every user may write in, as /tmp is."""
    where = tmp_path / "shared"
    where.mkdir()
    os.chmod(where, 0o1777)
    return where


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the folder is made another user's")
def test_run_refuses_a_recording_folder_another_user_made(shared_tmp, tmp_path):
    victim = tmp_path / "root-owned.txt"
    victim.write_text("root's own\n")
    planted = shared_tmp / "out.json.d"
    planted.mkdir()
    for pid in range(os.getpid(), os.getpid() + 200):  # links named for the next PIDs, to root's file
        os.symlink(victim, planted / f"agent-{pid}.txt")
        os.symlink(victim, planted / f"process-{pid}.jsonl")
    os.chown(planted, NOBODY, NOBODY)
    os.chmod(planted, 0o777)
    line = one_line(memgap("run", "--json", str(shared_tmp / "out.json"), "--", "true"), 2)
    assert "not a folder only you may write in" in line
    assert victim.read_text() == "root's own\n"
    assert not (shared_tmp / "out.json").exists()


def test_run_refuses_a_link_where_its_folder_goes(shared_tmp, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, shared_tmp / "out.json.d")
    one_line(memgap("run", "--json", str(shared_tmp / "out.json"), "--", "true"), 2)
    assert os.listdir(elsewhere) == []


def test_run_makes_its_folder_for_itself(tmp_path):
    proc = memgap("run", "--json", str(tmp_path / "out.json"), "--", "true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = os.stat(tmp_path / "out.json.d")
    assert made.st_uid == os.getuid() and made.st_mode & 0o777 == 0o700
    # the same --json again replaces the earlier recording, as it replaces the JSON
    assert memgap("run", "--json", str(tmp_path / "out.json"), "--", "true").returncode == 0


def test_run_cannot_make_its_folder(tmp_path):
    line = one_line(memgap("run", "--json", "/proc/memgap-test.json", "--", "true"), 1)
    assert "cannot make the recording folder /proc/memgap-test.json.d" in line


# --- bad options (item 7) ------------------------------------------------------------------------

def test_a_bad_phase_regex_is_a_usage_error():
    line = one_line(memgap("run", "--phase-regex", "(", "--", "true"), 2)
    assert "not a regular expression" in line


def test_json_into_a_folder_that_is_not_there(tmp_path):
    target = tmp_path / "x" / "y" / "z.json"
    one_line(memgap("inspect", str(os.getpid()), "--json", str(target)), 2)
    assert not (tmp_path / "x").exists()


def test_a_gdb_that_is_not_there():
    line = one_line(memgap("inspect", str(os.getpid()), "--deep", "--gdb", "/missing/gdb"), 9)
    assert "/missing/gdb is not an executable gdb" in line and "apt-get" not in line


def test_pids_that_are_not_processes():
    line = one_line(memgap("inspect", "2"), 5)  # kthreadd
    assert "kernel thread" in line
    with open("/proc/sys/kernel/pid_max") as fh:
        never = next(p for p in range(int(fh.read()) - 1, 1, -1) if not os.path.exists(f"/proc/{p}"))
    assert one_line(memgap("inspect", str(never)), 3) == f"memgap: no process with PID {never}"


# --- documents memgap did not write (item 7) -----------------------------------------------------

@pytest.mark.parametrize("text, said", [
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    ('{"schema": "memgap.run/1", "pid": 1' + "0" * 400 + "}", "beyond 64 bits"),
    ('{"schema": "memgap.run/1", "rss": NaN}', "NaN is not a figure"),
    ('{"schema": "memgap.run/1", "rss": -Infinity}', "-Infinity is not a figure"),
    ('{"schema": "memgap.run/1", "rss": 1e999}', "out of range"),
    ('{"schema": "memgap.lab/0"}', "an older memgap wrote it"),
    ('{"schema": "memgap.lab/9"}', "a newer memgap wrote it"),
])
def test_report_refuses_what_memgap_did_not_write(tmp_path, text, said):
    path = tmp_path / "doc.json"
    path.write_text(text)
    assert said in one_line(memgap("report", str(path)), 6)


def test_deep_in_a_program_with_its_own_memgap_module(tmp_path):
    """A Python program that ships a module named memgap: --deep does not run it, and says so."""
    (tmp_path / "memgap").mkdir()
    (tmp_path / "memgap" / "__init__.py").write_text("def snapshot(**options):\n    return 42\n")
    prog = tmp_path / "prog.py"
    prog.write_text("import memgap, sys, time\nprint('ready', flush=True)\nsys.stdin.read()\n")
    env = child_env()
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen([sys.executable, str(prog)], cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        done = memgap("inspect", str(proc.pid), "--deep", "--json", "-", timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
        import json

        notes = json.loads(done.stdout)["deep"]["notes"]
        assert any("a module of its own named memgap" in n for n in notes), notes
    finally:
        proc.kill()
        proc.wait()
