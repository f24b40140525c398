"""A stop signal to memgap (issue 23, item 4): SIGTERM (docker stop, systemd, Kubernetes), SIGHUP and
SIGKILL to `memgap run` and `memgap lab`, with a real C tree under it (programs/sig_tree.c: a child
and a grandchild, none of which execs, so a marker in their command lines finds any left running;
in one tree the child ignores SIGTERM). After memgap's exit, or its kill, nothing of the tree runs;
the recording's end event says how the tree ended; memgap says so in one line."""
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import child_env
from helpers import build_c

ROLE = re.compile(r"^sig_tree role=(\w+) pid=(\d+)$")


@pytest.fixture(scope="module")
def sig_tree(tmp_path_factory):
    return build_c(tmp_path_factory, "sig_tree")


def _running_with(marker):
    """PIDs of processes running (not zombies) whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if marker.encode() not in fh.read():
                    continue
            with open(f"/proc/{name}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


def _start(args, sig_tree, mode, tmp_path):
    """memgap with the tree under it, once the tree's three processes said who they are: (memgap, their
    PIDs by role, marker)."""
    marker = f"memgap-sig-{uuid.uuid4().hex[:12]}"
    proc = subprocess.Popen([sys.executable, "-m", "memgap", *args, "--", sig_tree, mode, marker], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    roles = {}
    while len(roles) < 3:
        line = proc.stdout.readline()
        assert line, (proc.wait(), proc.stderr.read())
        found = ROLE.match(line.strip())
        if found:
            roles[found[1]] = int(found[2])
    return proc, roles, marker


def _forks_of(pid):
    """memgap's children that run its own command line (its reader of processes from outside)."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        own = fh.read()
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        children = [int(c) for c in fh.read().split()]
    forks = set()
    for child in children:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as fh:
                if fh.read() == own:
                    forks.add(child)
        except OSError:
            continue
    return forks


def _gone_within(marker, seconds):
    """Wait (at most ``seconds``: the watchdog's grace) until nothing with ``marker`` runs; what is left."""
    deadline = time.monotonic() + seconds
    while _running_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _running_with(marker)


def _end_event(record_dir):
    with open(os.path.join(record_dir, "samples.jsonl")) as fh:
        events = [json.loads(line) for line in fh if line.strip()]
    return next(e for e in events if e["type"] == "end")


def _cleanup(proc, marker):
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in _running_with(marker):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode, sig", [("plain", signal.SIGTERM), ("stubborn", signal.SIGTERM),
                                       ("plain", signal.SIGHUP)])
def test_a_stop_signal_to_run_ends_the_whole_tree(sig_tree, tmp_path, mode, sig):
    out = tmp_path / "run.json"
    proc, roles, marker = _start(["run", "--interval", "0.05", "--json", str(out)], sig_tree, mode, tmp_path)
    try:
        # memgap's command line names it too, and so does memgap's reader (a fork of memgap, its child)
        assert sorted(set(_running_with(marker)) - {proc.pid} - _forks_of(proc.pid)) == sorted(roles.values())
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
        left = _running_with(marker)  # memgap has exited: nothing of its tree may be running now
    finally:
        _cleanup(proc, marker)
    assert not left, left
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"memgap: stopped by {sig.name}: {sig.name} passed on"), stderr
    assert proc.returncode == 128 + sig, (proc.returncode, stderr)
    end = _end_event(f"{out}.d")
    assert end["interrupted"] and end["exit_code"] == -sig
    stopped = end["stopped"]
    assert (stopped["signal"], stopped["forwarded"], stopped["grace"]) == (sig.name, sig.name, 5.0), stopped
    # the stubborn child is still there after the grace: SIGKILLed; in the plain tree the signal did it
    assert (stopped["killed"] >= 1) if mode == "stubborn" else stopped["killed"] == 0, stopped
    run = json.loads(out.read_text())  # the run as far as it went, written with the way it ended
    assert run["stopped"] == stopped and not run["complete"]
    assert f"stopped: memgap got {sig.name}, passed {sig.name} on" in stdout


def _seen_by_the_recorder(record_dir, pids, proc):
    """Wait until the sampler has recorded every one of ``pids`` (it tells the watchdog as it does)."""
    path = os.path.join(record_dir, "samples.jsonl")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        with open(path) as fh:
            seen = {e.get("pid") for e in map(json.loads, fh.read().splitlines()[:-1]) if e["type"] == "process"}
        if set(pids) <= seen:
            return
        time.sleep(0.05)
    raise AssertionError(f"the recorder did not see {pids}")


@pytest.mark.parametrize("mode", ["plain", "stubborn"])
def test_sigkill_to_run_ends_the_tree_too(sig_tree, tmp_path, mode):
    """memgap killed outright runs no handler: the command's parent-death signal and the watchdog end
    the tree (SIGTERM, then SIGKILL after the grace for the child that ignores SIGTERM)."""
    out = tmp_path / "run.json"
    proc, roles, marker = _start(["run", "--interval", "0.05", "--json", str(out)], sig_tree, mode, tmp_path)
    try:
        _seen_by_the_recorder(f"{out}.d", roles.values(), proc)
        proc.kill()
        proc.wait()
        left = _gone_within(marker, 20)
    finally:
        _cleanup(proc, marker)
    assert not left, left


def _own_memory_cgroup():
    with open("/proc/self/cgroup") as fh:
        lines = [line.rstrip("\n").split(":", 2) for line in fh]
    v1 = next((path for _, ctrl, path in lines if "memory" in ctrl.split(",")), None)
    return f"/sys/fs/cgroup/memory{v1}" if v1 is not None else f"/sys/fs/cgroup{lines[-1][2]}"


def _remove_run_cgroups(lab_pid):
    """Run cgroups a lab killed outright left (no finally ran in it), once their processes are gone."""
    base = _own_memory_cgroup()
    for name in os.listdir(base) if os.path.isdir(base) else []:
        if name.startswith(f"memgap-run-{lab_pid}-"):
            _rmdir_when_empty(os.path.join(base, name))


def _rmdir_when_empty(cgroup, within=10.0):
    """A cgroup v1 folder refuses rmdir (EBUSY) until its last task has left: a killed process's exit,
    its reaping by its new parent, lags its SIGKILL on a loaded machine (once in a fresh clone). Waits
    that long; a task still in it then is one the lab left running."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.rmdir(cgroup)
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                with open(os.path.join(cgroup, "cgroup.procs")) as fh:
                    raise AssertionError(f"{cgroup} still holds {fh.read().split()}") from exc
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_lab_leaves_nothing_running(sig_tree, tmp_path, sig):
    """The lab runs its workload through the same recorder: SIGTERM ends the run's tree (the stubborn
    child SIGKILLed after the grace), SIGKILL leaves it to the watchdog."""
    lab_dir = tmp_path / "lab"
    args = ["lab", "--reps", "1", "--variant", "glibc", "--show-output", "--dir", str(lab_dir)]
    proc, roles, marker = _start(args, sig_tree, "stubborn", tmp_path)
    try:
        record_dir = lab_dir / "run-001-glibc"
        _seen_by_the_recorder(str(record_dir), roles.values(), proc)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
        left = _gone_within(marker, 20 if sig == signal.SIGKILL else 0)
    finally:
        _cleanup(proc, marker)
        if sig == signal.SIGKILL:
            _remove_run_cgroups(proc.pid)
    assert not left, left
    if sig == signal.SIGTERM:
        assert proc.returncode == 130 and stderr.splitlines()[-1] == "memgap: interrupted", stderr
        stopped = _end_event(str(record_dir))["stopped"]
        assert (stopped["signal"], stopped["forwarded"]) == ("SIGTERM", "SIGTERM") and stopped["killed"] >= 1
