"""`memgap run` on process trees whose work is not in the process it started: a C parent whose
child (or grandchild) does the work, a shell and a pipeline (programs/tree_work.c, which knows
nothing of memgap). Every process is read from outside at its peak, its quiet spells and its exit
(the agent holds the exit for the recorder); the process that worked is shown first; a program
that is not Python hears nothing of Python. Witnesses: the worker's own VmHWM and VmRSS, read by
itself from /proc/self/status as it exits."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import HERE, child_env
from helpers import build_c, memgap

PROGRAMS = os.path.join(HERE, "programs")
MiB = 1 << 20
OWN = re.compile(r"^tree_work pid=(\d+) hwm=(\d+) rss=(\d+)$", re.M)


@pytest.fixture(scope="module")
def tree_work(tmp_path_factory):
    return build_c(tmp_path_factory, "tree_work")


def _run(tmp_path, *cmd):
    out = tmp_path / "run.json"
    proc = memgap("run", "--json", str(out), "--", *cmd, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, json.loads(out.read_text())


def _adds_up(snap):
    layers = sum(layer["resident"] or 0 for layer in snap["layers"].values())
    assert layers + snap["unexplained"] == snap["rss"]
    assert abs(snap["unexplained"]) <= 0.02 * snap["rss"], {k: snap.get(k) for k in (
        "phase", "rss", "unexplained", "rss_at_mark", "read_began", "time", "collect_seconds", "layers")}


TREES = {
    "fork": lambda exe: [exe, "fork"],            # the child works, forked, no exec
    "exec": lambda exe: [exe, "exec"],            # the child execs the worker
    "grandchild": lambda exe: [exe, "deep"],      # a child whose child execs the worker
    "sh -c": lambda exe: ["sh", "-c", f"{exe} work 200 1"],
    "pipeline": lambda exe: ["sh", "-c", f"{exe} work 200 1 | cat"],
}


@pytest.mark.parametrize("tree", list(TREES))
def test_the_process_that_worked_is_read_at_its_peak_and_its_exit_and_shown_first(tmp_path, tree_work, tree):
    proc, run = _run(tmp_path, *TREES[tree](tree_work))
    own = OWN.search(proc.stderr)
    assert own, proc.stderr[-2000:]
    pid, hwm, rss_at_exit = (int(v) for v in own.groups())
    by_pid = {p["pid"]: p for p in run["processes"]}
    worker = by_pid[pid]
    assert len(run["processes"]) >= 2 and all(p["cmd"] and p["cmd"][0] for p in run["processes"]), run["processes"]
    # its peak: a snapshot taken there, its layers adding up to its VmRSS then, near its own VmHWM
    peak = worker["peak"]
    assert peak and peak["route"].startswith("outside"), worker.keys()
    _adds_up(peak)
    # VmHWM and VmRSS are read from per-thread counters the kernel folds in now and then: a few
    # pages of slack above (20 KiB over it was seen)
    assert hwm - max(8 * MiB, 0.10 * hwm) <= peak["rss"] <= hwm + 256 * 1024, (peak["rss"], hwm)
    # its exit: held by the agent for a last read, at the RSS the program read as it returned
    assert worker["snapshots"], worker
    last = worker["snapshots"][-1]
    assert last["phase"] == "before-exit" and last.get("held_exit"), [s["phase"] for s in worker["snapshots"]]
    _adds_up(last)
    assert abs(last["rss"] - rss_at_exit) <= max(MiB, 0.02 * rss_at_exit), (last["rss"], rss_at_exit)
    ended = worker["exit"]
    assert ended["by"] == "agent" and ended["answered"] and ended["last_snapshot"] >= last["time"], (ended, last)
    # the exit came right after the read it waited for; a peak read of its own may end later still,
    # during the exit (CI: 0.0098 s after the agent let go), so the document's gap may be below 0
    waited = ended["time"] - last["time"]
    assert 0 <= waited <= ended["held"] + 0.05, (ended, last["time"], last["read_began"])
    assert ended["gap"] <= waited + 1e-3, (ended, waited)
    assert worker["idle"] and worker["idle"]["rule"] in ("quiet", "before exit"), worker["idle"]
    # the terminal: the worker's peak breakdown first, every other process in a line
    first = re.search(r"^Breakdown of PID (\d+) .*?at (its peak|\S+)", proc.stdout, re.M)
    assert first and first.groups() == (str(pid), "its peak"), proc.stdout[:3000]
    others = proc.stdout.split("Every other process:\n")[1]
    for other in by_pid:
        if other != pid:
            assert re.search(rf"^- PID {other} \S", others, re.M), others
    assert not re.search("python|pymalloc", proc.stdout + proc.stderr, re.I)


def test_a_short_c_program_hears_nothing_of_python_and_is_read_as_it_exits(tmp_path):
    proc, run = _run(tmp_path, "sleep", "0.3")
    assert not re.search("python|pymalloc", proc.stdout + proc.stderr, re.I), proc.stdout
    (sleep,) = run["processes"]
    assert sleep["cmd"] == ["sleep", "0.3"] and sleep["exit"]["by"] == "agent", sleep
    assert [s["phase"] for s in sleep["snapshots"]] == ["before-exit"] and sleep["idle"]["rule"] == "before exit"
    # not Python: its layers say so, and the table leaves the Python layers out
    assert sleep["snapshots"][0]["layers"]["python_objects"]["resident"] is None
    assert "C allocator in use" in proc.stdout


def test_a_python_process_under_run_is_not_told_to_run_under_run(tmp_path):
    """PYTHONMALLOC=malloc: no pymalloc arena to find from outside, so the outside peak snapshot
    cannot count Python's objects; its note no longer sends the user to `memgap run`."""
    out = tmp_path / "run.json"
    proc = memgap("run", "--json", str(out), "--", sys.executable, "-c", "import time; time.sleep(0.5)",
                  env=child_env(PYTHONMALLOC="malloc"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (python,) = json.loads(out.read_text())["processes"]
    with open(f"{out}.d/samples.jsonl") as fh:  # the recording: every read from outside on the way up
        reads = [event["snapshot"] for event in map(json.loads, fh) if event["type"] == "peak"]
    assert reads and all(read["pid"] == python["pid"] for read in reads)
    for read in reads:
        note = read["layers"]["python_objects"]["note"]
        assert note.startswith("no pymalloc arena found from outside") and "memgap run" not in note, note
    assert "memgap run`" not in proc.stdout


def test_a_process_without_a_command_line_is_named_by_its_comm(tree_work):
    """A zombie (exited, not waited for) has an empty /proc/PID/cmdline: its comm stands in."""
    from memgap.record.tree_watch import command_of
    from memgap.sources.procfs import ProcReader

    child = subprocess.Popen([tree_work, "work", "1", "0"], stderr=subprocess.DEVNULL)
    try:
        while ProcReader(child.pid).status().get("State", "").startswith(("R", "S", "D")):
            os.sched_yield()  # until it has exited; it stays a zombie until waited for
        reader = ProcReader(child.pid)
        assert reader.cmdline() == []
        assert command_of(reader, reader.status()) == ["[tree_work]"]
    finally:
        child.wait()


def test_a_shims_passing_processes_are_let_go_unread_and_its_python_is_recorded(tmp_path):
    """A pyenv-like shim (programs/shim/python3: a bash script whose command substitutions fork subshells
    and exec short commands, then execs Python): those that lived under an interval with a small VmHWM
    are let go at their exit unread, and say so; the Python program it became is recorded as ever."""
    out = tmp_path / "run.json"
    shim = os.path.join(PROGRAMS, "shim", "python3")
    proc = memgap("run", "--interval", "0.5", "--json", str(out), "--", shim, "-c", "import time; time.sleep(1)",
                  env=child_env(SHIM_PYTHON=sys.executable), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = json.loads(out.read_text())
    root, *passing = run["processes"]  # the command memgap started (the shim, then Python): the lowest PID
    # Python's exit, read from outside as its bootstrap held it: before its shutdown and after its atexit handlers
    assert [s["phase"] for s in root["snapshots"]][-2:] == ["before-exit", "exit"], root["snapshots"]
    assert all(s["route"] == "outside" and s["held_exit"] for s in root["snapshots"][-2:]), root["snapshots"]
    assert root["cmd"] == [sys.executable, "-c", "import time; time.sleep(1)"], root
    assert len(passing) == 20, [p["cmd"] for p in passing]  # 10 subshells, 10 basenames
    passed = [p for p in passing if (p["exit"] or {}).get("passed")]
    assert passed, [p["exit"] for p in passing]
    lines = re.sub(r" *\n(?!- PID ) *", " ", proc.stdout)  # a wrapped line keeps the space it broke at
    for p in passed:
        lived, hwm = p["exit"]["passed"]
        assert 0 <= lived < 0.5 and 0 < hwm < 16 * MiB, p["exit"]
        assert p["exit"]["by"] == "agent" and p["exit"]["answered"], p["exit"]
        assert not any(s["phase"] == "before-exit" for s in p["snapshots"]), p["snapshots"]
        # its line (wrapped at the terminal's width: its words joined again)
        assert re.search(rf"- PID {p['pid']} [^\n]* it passed through \(lived {lived:.3f} s", lines), lines
    for p in passing:  # the others, read at exit as before
        if p not in passed:
            assert p["snapshots"][-1]["phase"] == "before-exit" and p["snapshots"][-1].get("held_exit"), p
