"""The native agent: the real library preloaded into real programs (its replies parsed, from captures:
tests/unit/test_agent_replies.py)."""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time

import pytest

from conftest import HERE
from helpers import JEMALLOC, MiB, memgap

HAVE_CC = bool(shutil.which("cc") or shutil.which("gcc"))
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler")


# --- the real library ----------------------------------------------------------------------

IDLE_C = r"""
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
/* Allocates and frees 40 MiB in 4 KiB blocks (glibc keeps it), says "ready", waits.
   With an argument, forks first and both sides wait. */
int main(int argc, char **argv) {
    enum { N = 10240 };
    static char *blocks[N];
    for (int i = 0; i < N; i++) { blocks[i] = malloc(4000); memset(blocks[i], 1, 4000); }
    for (int i = 0; i < N - 1; i++) free(blocks[i]);  /* the last one pins the top */
    if (argc > 1) {
        pid_t child = fork();
        if (child == 0) { printf("child %d\n", getpid()); fflush(stdout); sleep(60); return 0; }
    }
    printf("ready %d\n", getpid());
    fflush(stdout);
    for (int i = 0; i < 600; i++) { usleep(100000); printf("tick %d\n", i); fflush(stdout); }
    return 0;
}
"""


@pytest.fixture(scope="module")
def idle_exe(tmp_path_factory):
    if not HAVE_CC:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("agent")
    src = d / "idle.c"
    src.write_text(IDLE_C)
    exe = d / f"memgap-agent-test-{os.getpid()}"
    subprocess.run([shutil.which("cc") or "gcc", "-O1", "-o", str(exe), str(src)], check=True)
    return str(exe)


def _start(cmd, env, until="ready"):
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    for line in proc.stdout:
        if line.startswith(until):
            return proc
    raise AssertionError(f"{cmd} exited before saying {until!r}")


def _stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _agent_env(tmp_path, **extra):
    from memgap.agent import agent_env

    env = agent_env(mode="auto")
    env["MEMGAP_AGENT_DIR"] = str(tmp_path)
    env.update(extra)
    return env


def _start_under_jemalloc(exe, tmp_path):
    if not os.path.exists(JEMALLOC):
        pytest.skip("jemalloc is not installed")
    env = _agent_env(tmp_path)
    env["LD_PRELOAD"] = f"{JEMALLOC} {env['LD_PRELOAD']}"  # the allocator first, the agent after it
    return _start([exe], env)


def _socket(tmp_path, pid):
    return os.path.join(str(tmp_path), f"agent-{pid}.sock")


@needs_cc
def test_agent_answers_privately_and_adds_no_arena(idle_exe, tmp_path):
    from memgap.agent import query

    proc = _start([idle_exe], _agent_env(tmp_path))
    try:
        path = _socket(tmp_path, proc.pid)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        for _ in range(5):
            report = query(path)
        assert report.pid == proc.pid and report.allocator == "glibc"
        # a single-threaded program keeps its single arena: the agent's threads never malloc
        assert len(report.malloc_info.arenas) == 1 and report.mallinfo.fordblks > 30 * MiB
        if os.getuid() == 0 and shutil.which("setpriv"):  # another user cannot connect
            other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "python3", "-c",
                                    f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({path!r})"],
                                   capture_output=True, text=True)
            assert other.returncode != 0 and "Permission denied" in other.stderr
    finally:
        _stop(proc)


@needs_cc
def test_agent_trim_releases_what_the_outside_estimate_said(idle_exe, tmp_path):
    from memgap.agent import trim
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

    proc = _start([idle_exe], _agent_env(tmp_path))
    try:
        snap = snapshot_pid(proc.pid, SnapshotOptions(regions=False))
        assert snap.route == "outside, with the agent"
        estimate = snap.layers["allocator_free"].detail["trim_releasable"]
        pid, result = trim(_socket(tmp_path, proc.pid))
        assert pid == proc.pid
        assert estimate > 30 * MiB
        assert abs(result.released - estimate) <= 0.2 * estimate, (result.released, estimate)
    finally:
        _stop(proc)


@needs_cc
def test_agent_follows_a_fork(idle_exe, tmp_path):
    from memgap.agent import query

    proc = _start([idle_exe, "fork"], _agent_env(tmp_path))
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as fh:
            child = int(fh.read().split()[0])
        deadline = time.monotonic() + 5
        while not os.path.exists(_socket(tmp_path, child)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert query(_socket(tmp_path, child)).pid == child
        assert query(_socket(tmp_path, proc.pid)).pid == proc.pid
    finally:
        _stop(proc)


@needs_cc
@pytest.mark.parametrize("setting", [{"MEMGAP_TRIMMER": "1"}, {"MEMGAP_TRIM_EVERY": "0.5"}])
def test_agent_trimmers_give_memory_back(idle_exe, tmp_path, setting):
    from memgap.agent import query

    proc = _start([idle_exe], _agent_env(tmp_path, **setting))
    try:
        path = _socket(tmp_path, proc.pid)
        deadline = time.monotonic() + 8  # the idle trimmer waits for 2 s of quiet, checking each second
        report = query(path)
        while report.trimmer["trims"] == 0 and time.monotonic() < deadline:
            time.sleep(0.25)
            report = query(path)
        assert report.trimmer["mode"] == ("idle" if "MEMGAP_TRIMMER" in setting else "every")
        assert report.trimmer["trims"] >= 1 and report.trimmer["released"] > 30 * MiB
        assert report.rss < 20 * MiB
    finally:
        _stop(proc)


@needs_cc
def test_agent_is_dormant_in_python_unless_asked(tmp_path):
    import sys

    code = "import time; print('ready', flush=True); time.sleep(30)"
    # through a shell that execs Python: the shell's agent made a socket, Python's removes it
    for mode, expect in (("auto", False), ("on", True)):
        env = _agent_env(tmp_path)
        env["MEMGAP_AGENT"] = mode
        proc = _start(["sh", "-c", 'sleep 0.2; exec "$0" -c "$1"', sys.executable, code], env)
        try:
            assert os.path.exists(_socket(tmp_path, proc.pid)) == expect, mode
        finally:
            _stop(proc)


@needs_cc
def test_layers_add_up_within_one_percent_with_the_agent(tmp_path):
    """The issue's bar: outside with the agent, the layers add up to VmRSS within 1%; outside
    without it the free chunks walked account for at least 90% of what glibc itself counts free."""
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid
    from memgap.scenarios.native import build

    exe = build("blockingpool", str(tmp_path / "bin"))
    proc = _start([exe], _agent_env(tmp_path, CONCURRENCY="16", PAYLOAD_KIB="200"), until="phase: idle")
    try:
        with_agent = snapshot_pid(proc.pid, SnapshotOptions(regions=False))
        outside = snapshot_pid(proc.pid, SnapshotOptions(regions=False, agent=False))
    finally:
        _stop(proc)
    assert with_agent.route == "outside, with the agent" and outside.route == "outside"
    assert abs(with_agent.unexplained) <= 0.01 * with_agent.rss, (with_agent.unexplained, with_agent.rss)
    rows = with_agent.layers["allocator_free"].detail["arenas"]
    # as many arenas as glibc itself lists (malloc_info, through the agent): 16 threads make up to 16,
    # fewer when a loaded machine runs them one after another
    assert len(rows) == with_agent.allocator.arenas >= 4 and all(r["walk_complete"] for r in rows)
    walked, counted = sum(r["free_walked"] for r in rows), sum(r["free"] for r in rows)
    assert 0.9 * counted <= walked <= 1.02 * counted, (walked, counted)
    # and the outside walk alone classified every resident page of the arenas it found
    detail = outside.layers["allocator_free"].detail
    assert detail["arena_count"] == len(rows) and not detail["problems"]


@needs_cc
def test_agent_reports_jemalloc(idle_exe, tmp_path):
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

    proc = _start_under_jemalloc(idle_exe, tmp_path)
    try:
        snap = snapshot_pid(proc.pid, SnapshotOptions(regions=False))
    finally:
        _stop(proc)
    assert snap.allocator.name == "jemalloc" and snap.allocator.agent["jemalloc"]["resident"] > 0
    assert snap.layers["allocator_in_use"].resident is not None  # outside alone has no figure for jemalloc
    assert abs(snap.unexplained) <= 0.01 * snap.rss


@needs_cc
def test_memgap_run_preloads_the_agent_and_keeps_its_last_words(tmp_path):
    src = tmp_path / "short.c"
    src.write_text("#include <stdlib.h>\n#include <string.h>\nint main(void){ for (int i = 0; i < 1000; i++)"
                   " memset(malloc(5000), 1, 5000); return 0; }\n")
    exe = tmp_path / "short"
    subprocess.run([shutil.which("cc") or "gcc", "-o", str(exe), str(src)], check=True)
    out = tmp_path / "run.json"
    proc = memgap("run", "--json", str(out), "--", str(exe))
    assert proc.returncode == 0, proc.stderr
    run = json.loads(out.read_text())
    assert run["agent"]["library"]
    last = run["processes"][0]["agent_exit"]
    assert last["allocator"] == "glibc" and last["mallinfo2"]["uordblks"] >= 1000 * 5000
    assert f"PID {run['processes'][0]['pid']} at exit, from memgap's agent in it" in proc.stdout


@needs_cc
def test_a_folder_too_long_for_a_socket_falls_back_to_the_private_one(idle_exe, tmp_path):
    from memgap.agent import query, socket_path

    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    proc = _start([idle_exe], _agent_env(deep))
    try:
        path = socket_path(proc.pid, {"MEMGAP_AGENT_DIR": str(deep)}, os.getuid())
        assert path == f"/tmp/memgap-agent-{os.getuid()}/agent-{proc.pid}.sock"
        assert query(path).pid == proc.pid
    finally:
        _stop(proc)


@needs_cc
def test_stale_sockets_of_killed_processes_are_removed(idle_exe):
    from memgap.agent import agent_env

    folder = f"/tmp/memgap-agent-{os.getuid()}"
    dead = subprocess.Popen(["true"])
    dead.wait()
    os.makedirs(folder, mode=0o700, exist_ok=True)
    stale = os.path.join(folder, f"agent-{dead.pid}.sock")
    open(stale, "w").close()
    env = agent_env(mode="on")
    env.pop("MEMGAP_AGENT_DIR", None)
    env.pop("MEMGAP_RECORD_DIR", None)
    proc = _start([idle_exe], env)
    try:
        assert not os.path.exists(stale)
        assert os.path.exists(os.path.join(folder, f"agent-{proc.pid}.sock"))
    finally:
        _stop(proc)


@needs_cc
def test_inspect_trim_goes_through_the_agent_without_gdb(idle_exe, tmp_path):
    """With the agent in the process, --trim needs no gdb, and works for jemalloc too."""
    proc = _start_under_jemalloc(idle_exe, tmp_path)
    try:
        result = memgap("inspect", str(proc.pid), "--trim", "--gdb", str(tmp_path / "no-gdb-here"), "--json", "-")
    finally:
        _stop(proc)
    assert result.returncode == 0, result.stderr
    trim = json.loads(result.stdout)["after_trim"]["trim"]
    assert trim["route"] == "agent" and trim["released"] > 10 * MiB, trim


# --- a process that only pretends to have the agent (issue 23) ------------------------------

FAKE_AGENT = os.path.join(HERE, "programs", "fake_agent.py")


def _fake(tmp_path, mode, *mark):
    import sys

    from conftest import child_env

    env = child_env(LD_PRELOAD="/nonexistent/memgap-agent.so", MEMGAP_AGENT_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, FAKE_AGENT, mode, *mark], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    line = proc.stdout.readline()
    assert line.startswith("ready"), (mode, line, proc.poll())
    return proc


def _inspect_peak(pid, tmp_path, limit=120.0):
    """``memgap inspect PID --json FILE`` as a child: (exit code, text output, JSON, seconds, stderr),
    the JSON with ``_peak``: the child's peak RSS in bytes (wait4's ru_maxrss)."""
    import sys

    from conftest import child_env

    out, text, err = (tmp_path / f"inspect-{time.monotonic_ns()}.{ext}" for ext in ("json", "txt", "err"))
    began = time.monotonic()
    with open(text, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "memgap", "inspect", str(pid), "--json", str(out)],
                                env=child_env(COLUMNS="200"), stdout=stdout, stderr=stderr)
    while True:  # wait4, not wait: the peak RSS of this child alone
        done, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - began > limit:  # an exchange without a deadline hangs here: end it, fail below
            proc.kill()
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.monotonic() - began
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc["_peak"] = usage.ru_maxrss * 1024
    return proc.returncode, text.read_text(), doc, took, err.read_text()


@pytest.mark.parametrize("mode, said", [
    ("huge", "sent more than 1024 KiB"),
    ("slow", "did not answer within 2 s"),
    ("rss", "said rss 1000000000000000, above the machine's memory"),
    ("negative", "said mallinfo2 uordblks -5, not a count of bytes"),
    ("nan", "said trimmer released nan, not a count of bytes"),
    ("chown", "belongs to uid 65534, not to the process's user (uid 0)"),
    ("not-peer", "is served by PID"),
    ("symlink", "is not a socket"),
])
def test_a_fake_agent_is_not_believed(tmp_path, mode, said):
    """Any user can name memgap in LD_PRELOAD and listen where the agent would: root's inspect
    finishes within the exchange's 2 s, its memory bounded, says why in one line, and reads the
    process from outside as if it had no agent (exit code 0)."""
    from memgap.agent.client import REPLY_CAP, TIMEOUT

    if os.geteuid() != 0 and mode == "chown":
        pytest.skip("handing a socket to another user needs root")
    if REPLY_CAP != 1 << 20:
        said = said.replace("1024 KiB", f"{REPLY_CAP >> 10} KiB")
    proc = _fake(tmp_path, mode)
    try:
        code, out, doc, took, err = _inspect_peak(proc.pid, tmp_path)
        base_code, _, base, _, _ = _inspect_peak(os.getpid(), tmp_path)  # this process: no agent
    finally:
        _stop(proc)
    assert code == base_code == 0, err
    # the note, its wrapped continuation lines (indented) joined back
    notes = [" ".join(line.split()) for line in re.sub(r"\n    (?=\S)", " ", out).splitlines()
             if line.startswith("Note: read without memgap's agent: ")]
    assert len(notes) == 1 and said in notes[0], (notes, out)
    assert doc["route"] == "outside" and "agent" not in doc["allocator"], doc["allocator"]
    assert said in doc["allocator"]["agent_problem"]
    assert took < TIMEOUT + 60, took  # a per-read timeout never ends with "slow"; a loaded machine is slow
    # the reply is capped: a huge one costs at most the cap (and what decoding it takes) over a plain inspect
    assert doc["_peak"] <= base["_peak"] + 8 * REPLY_CAP + 8 * MiB, (doc["_peak"], base["_peak"])


def test_a_good_fake_is_believed_so_the_refusals_above_are_the_checks(tmp_path):
    """The same fake answering credibly from its own socket is taken: what the tests above refuse
    is the lie, not the fake."""
    proc = _fake(tmp_path, "good")
    try:
        code, out, doc, _, err = _inspect_peak(proc.pid, tmp_path)
    finally:
        _stop(proc)
    assert code == 0, err
    assert doc["route"] == "outside, with the agent" and "agent_problem" not in doc["allocator"], doc["allocator"]
    agent = doc["allocator"]["agent"]
    assert agent["mallinfo2"]["uordblks"] == 512 << 10 and 0 < agent["rss"] <= doc["status"]["VmSize"], agent
    assert "Note: " not in out


def test_serve_metrics_match_serves_beside_an_agent_that_never_finishes(tmp_path):
    """The issue: `serve-metrics --match` never started serving beside an agent sending one byte a
    second. Now the exchange ends at its deadline, the server starts, and the process is served,
    read from outside, with its own VmRSS."""
    import urllib.request
    import uuid

    from test_serve_metrics import parse, read_line, samples, start, stop

    mark = f"fake-{uuid.uuid4().hex[:12]}"
    fake = _fake(tmp_path, "slow", mark)
    server = start("-m", "memgap", "serve-metrics", "--port", "0", "--refresh", "0", "--match", mark)
    try:
        url = read_line(server, timeout=60).split()[2]
        with urllib.request.urlopen(url, timeout=60) as resp:
            families = parse(resp.read().decode())
        (labels, rss), = samples(families, "memgap_rss_bytes")
        with open(f"/proc/{fake.pid}/status") as fh:
            vmrss = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))
        assert abs(rss - vmrss) <= 1 * MiB and labels["role"] == "fake_agent.py", (rss, vmrss, labels)
    finally:
        stop(server)
        _stop(fake)
