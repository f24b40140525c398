"""Programs that do not import memgap and mark nothing: `run` and `lab` find their idle."""
import json
import os
import subprocess
import sys

import pytest

from conftest import HERE
from helpers import memgap, recommended, run_recorded

PROGRAMS = os.path.join(HERE, "programs")
BURST = os.path.join(PROGRAMS, "unmarked_burst.py")


def _own_readings(path, moment="work"):
    """The program's own RSS readings at one moment ("work": the end of its work; "rest": after it)."""
    with open(path) as fh:
        return [int(line.split()[1]) for line in fh if line.startswith(moment + " ")]


def _lab(tmp_path, rest, *variants):
    own = tmp_path / "own.txt"
    out = tmp_path / "lab.json"
    args = ["lab", "--reps", "1", "--max-slowdown", "1", "--json", str(out), "--dir", str(tmp_path / "runs")]
    for v in variants:
        args += ["--variant", v]
    proc = memgap(*args, "--", sys.executable, BURST, str(rest), str(own), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, json.loads(out.read_text()), _own_readings(own)


def test_lab_with_no_flag_gives_a_verdict_on_a_program_that_exits_straight_after_its_work(tmp_path):
    """The lab as a new user runs it: every default variant, adaptive, nothing marked."""
    own = tmp_path / "own.txt"
    out = tmp_path / "lab.json"
    proc = memgap("lab", "--json", str(out), "--dir", str(tmp_path / "runs"), "--",
                  sys.executable, BURST, "0.1", str(own), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lab = json.loads(out.read_text())
    base = lab["runs"][0]
    assert base["variant"] == "glibc" and base["idle_rule"] == "idle (before exit)", base
    assert abs(base["idle"] - _own_readings(own)[0]) <= 0.10 * base["idle"]
    # a trim at idle is what frees a burst's leftovers; the cheapest variant with it wins, unless noise
    # made it read slower than one that adds a setting (arena_max=2 once, under a parallel run)
    assert "trim=idle" in (recommended(lab) or ""), lab["verdict"]
    assert len(lab["runs"]) <= 0.6 * 45 and lab["dropped"], lab["order"]


@pytest.mark.parametrize("rest, rule", [(3.0, "idle (quiet")])  # 2 s was once too short at load 4
def test_lab_finds_idle_in_an_unmarked_program_and_ranks_on_it(tmp_path, rest, rule):
    proc, lab, own = _lab(tmp_path, rest, "glibc", "glibc:trim=idle")
    runs = {r["variant"]: r for r in lab["runs"]}
    assert [r["status"] for r in lab["runs"]] == ["ok", "ok"], lab["runs"]
    base = runs["glibc"]
    assert base["idle_rule"].startswith(rule), base["idle_rule"]
    # the idle ranked on is the program's own reading at the end of its work (the first run is the baseline)
    assert abs(base["idle"] - own[0]) <= 0.10 * own[0], (base["idle"], own[0])
    # the lab's one trim acted at that idle: the trim variant's idle is what it left, far below
    assert runs["glibc:trim=idle"]["idle"] < 0.6 * base["idle"], runs
    assert recommended(lab) == "glibc:trim=idle", lab["verdict"]
    assert "Idle, as found:" in proc.stdout


def test_a_baseline_with_no_idle_stops_the_lab_after_its_first_run(tmp_path):
    out = tmp_path / "lab.json"
    proc = memgap("lab", "--json", str(out), "--dir", str(tmp_path / "runs"), "--",
                  sys.executable, str(tmp_path / "no-such-script.py"), timeout=60)
    lab = json.loads(out.read_text())
    assert proc.returncode == 1
    assert len(lab["runs"]) == 1 and lab["runs"][0]["variant"] == "glibc"
    assert lab["stopped"].startswith("stopped after the baseline's first run (crashed: exit code 2)")
    assert proc.stderr.strip().splitlines()[-1] == f"memgap lab: {lab['stopped']}"
    assert not lab["complete"]


def test_run_shows_an_unmarked_program_at_its_found_idle_and_at_exit(tmp_path):
    own = tmp_path / "own.txt"
    out = tmp_path / "run.json"
    proc = memgap("run", "--json", str(out), "--", sys.executable, BURST, "2", str(own))
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = json.loads(out.read_text())
    main = next(p for p in run["processes"] if p["snapshots"])
    phases = [s["phase"] for s in main["snapshots"]]
    assert phases == ["quiet", "before-exit", "exit"], phases
    assert main["idle"]["rule"] == "quiet"
    assert abs(main["idle"]["rss"] - _own_readings(own)[0]) <= 0.1 * main["idle"]["rss"]
    assert f"Breakdown of PID {main['pid']} at idle (quiet " in proc.stdout
    assert "...and at exit" in proc.stdout


@pytest.fixture(scope="module")
def c_rest(tmp_path_factory):
    exe = tmp_path_factory.mktemp("c") / "c_rest"
    subprocess.run(["gcc", "-O1", "-o", str(exe), os.path.join(PROGRAMS, "c_rest.c")], check=True)
    return str(exe)


def test_run_finds_the_quiet_spell_of_a_c_program_from_outside(tmp_path, c_rest):
    out = tmp_path / "run.json"
    proc = memgap("run", "--json", str(out), "--", c_rest, "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    own = int(proc.stdout.split("rss ")[1].split()[0])
    run = json.loads(out.read_text())
    main = next(p for p in run["processes"] if p["cmd"] and p["cmd"][0] == c_rest)
    assert main["idle"]["rule"] == "quiet", main["idle"]
    quiet = next(s for s in main["snapshots"] if s["phase"] == "quiet")
    assert quiet["route"].startswith("outside") and quiet["quiet_since"]
    assert abs(main["idle"]["rss"] - own) <= 0.1 * own, (main["idle"], own)
    assert quiet["layers"]["allocator_free"]["resident"] > 40 << 20  # 15/16 of 80 MiB freed, kept by glibc


ADAPTIVE_WORKLOAD = r"""
import os, sys, time
if os.environ.get("MALLOC_TOP_PAD_"):
    sys.exit(3)                                     # crashes under this variant
held = [bytes(2048) for _ in range(30000)][::16]    # leaves glibc holding freed pages
if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
    ballast = bytearray(64 << 20)                   # idles far above the baseline under this one
    ballast[::4096] = b"x" * len(ballast[::4096])
time.sleep(0.1)
"""


def test_the_adaptive_lab_drops_what_cannot_win_and_settles_in_fewer_runs(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(ADAPTIVE_WORKLOAD)
    out = tmp_path / "lab.json"
    variants = ["glibc", "glibc:trim=idle", "glibc:top_pad=131072", "glibc:mmap_threshold=131072"]
    args = ["lab", "--max-slowdown", "1", "--json", str(out), "--dir", str(tmp_path / "runs")]
    for v in variants:
        args += ["--variant", v]
    proc = memgap(*args, "--", sys.executable, str(script), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lab = json.loads(out.read_text())
    assert lab["adaptive"] and recommended(lab) == "glibc:trim=idle", lab["verdict"]
    assert lab["dropped"] == [
        "glibc:top_pad=131072: no usable run (crashed)",
        "glibc:mmap_threshold=131072: its idle was not materially below the baseline's in any run"]
    # round 1: all four; round 2: the two contenders, and the verdict has not moved: settled
    assert lab["order"] == [f"{v}#1" for v in variants] + ["glibc#2", "glibc:trim=idle#2"], lab["order"]
    assert "dropped after its first runs" in proc.stdout


TREE_WORKLOAD = r"""
import subprocess, sys, time
if sys.argv[1:] == ["child"]:
    held = [bytes(2048) for _ in range(10000)][::16]
    time.sleep(1.5)
else:
    ballast = bytearray(96 << 20)
    ballast[::4096] = b"x" * len(ballast[::4096])   # the driver is the largest process
    subprocess.run([sys.executable, sys.argv[0], "child"], check=True)
"""


def test_lab_process_names_the_process_whose_figures_count(tmp_path):
    script = tmp_path / "tree.py"
    script.write_text(TREE_WORKLOAD)
    out = tmp_path / "lab.json"
    proc = memgap("lab", "--reps", "1", "--variant", "glibc", "--process", r"tree\.py child$", "--json", str(out),
                  "--dir", str(tmp_path / "runs"), "--", sys.executable, str(script), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = json.loads(out.read_text())["runs"][0]
    assert run["process"].endswith("tree.py child") and run["processes"] == 2, run["process"]
    assert run["idle"] < 64 << 20, run["idle"]
    # by default, the largest process: the driver with its ballast
    proc = memgap("lab", "--reps", "1", "--variant", "glibc", "--json", str(out), "--dir", str(tmp_path / "runs2"),
                  "--", sys.executable, str(script), timeout=120)
    run = json.loads(out.read_text())["runs"][0]
    assert run["idle"] > 96 << 20, json.dumps({k: run.get(k) for k in ("process", "idle", "process_idle", "tree",
                                                                       "tree_how", "note", "idle_rule")})


SERVICE = os.path.join(PROGRAMS, "service")


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_lab_drives_a_service_that_never_exits_with_the_users_load_tool(tmp_path):
    """The service is started, loaded by the user's own tool once it is up, measured after
    its rest and stopped; the load tool's rate is the throughput."""
    port = _free_port()
    load = f"{sys.executable} {os.path.join(SERVICE, 'load.py')} {port} 40 8"
    out = tmp_path / "lab.json"
    # judged at its idle, after the rest (a service under --load is judged by its mean over the load by
    # default: the trimmer acts in the rest, not while the load runs)
    proc = memgap("lab", "--reps", "1", "--max-slowdown", "1", "--variant", "glibc", "--variant", "glibc:trim=quiet",
                  "--objective", "idle", "--load", load, "--rest", "3.5", "--metric", "req/s",
                  "--metric-regex", r"([\d.]+) req/s", "--timeout", "60", "--json", str(out),
                  "--dir", str(tmp_path / "runs"),
                  "--", sys.executable, os.path.join(SERVICE, "http_service.py"), str(port), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lab = json.loads(out.read_text())
    runs = {r["variant"]: r for r in lab["runs"]}
    for r in runs.values():
        assert r["status"] == "ok" and r["note"] == "stopped by the lab once idle", r
        assert r["throughput"] > 0 and 0 < r["wall"] < r["duration"] - 3, r  # the load's time, not the rest
        assert r["idle_rule"].startswith("idle (quiet"), r["idle_rule"]
    assert runs["glibc:trim=quiet"]["idle"] < runs["glibc"]["idle"] - (10 << 20), runs
    assert recommended(lab) == "glibc:trim=quiet", lab["verdict"]
    with open(os.path.join(runs["glibc"]["record_dir"], "load-output.txt")) as fh:
        assert fh.read().strip().endswith("req/s")


def test_lab_ranks_a_c_program_on_the_quiet_spell_it_found_from_outside(tmp_path, c_rest):
    out = tmp_path / "lab.json"
    proc = memgap("lab", "--reps", "1", "--max-slowdown", "1", "--variant", "glibc", "--variant", "glibc:trim=idle",
                  "--json", str(out), "--dir", str(tmp_path / "runs"), "--", c_rest, "1.5", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = {r["variant"]: r for r in json.loads(out.read_text())["runs"]}
    base = runs["glibc"]
    assert base["status"] == "ok" and base["idle_rule"].startswith("idle (quiet"), base
    assert base["idle"] > 40 << 20 and not base["python"]
    # the one trim at idle needs a marked idle or a Python program's moment before exit: said, not faked
    trim = runs["glibc:trim=idle"]
    assert trim["status"] == "not-applied" and "trim=quiet" in trim["note"], trim


def test_lab_sweeps_a_preforked_tree_s_workers_and_ranks_each_on_its_pss_total(tmp_path):
    """A master and one or two forked workers (--param WORKERS=1,2, the workload's env) sharing its
    data, all resting at once: each cell's idle is the tree's sum by PSS, as each process read its
    own at rest, not the RSS sum that counts the shared pages once per process; its peak is the
    tree's (one sampling round's RSS summed), not its largest process's; the sweep's table shows both."""
    readings = tmp_path / "readings.txt"
    out = tmp_path / "lab.json"
    proc = memgap("lab", "--reps", "1", "--variant", "glibc", "--param", "WORKERS=1,2", "--json", str(out),
                  "--dir", str(tmp_path / "runs"), "--", sys.executable, os.path.join(PROGRAMS, "forked_tree.py"),
                  str(readings), "rest", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = sorted(json.loads(out.read_text())["runs"], key=lambda r: r["order"])
    rows = [list(map(int, line.split())) for line in readings.read_text().splitlines()]
    assert [r["params"] for r in runs] == [{"WORKERS": "1"}, {"WORKERS": "2"}] and len(rows) == 5, (runs, rows)
    for run, own in ((runs[0], rows[:2]), (runs[1], rows[2:])):  # run one after the other: the readings too
        assert run["status"] == "ok" and len(run["tree"]) == len(own), (run, own)
        pss, rss = sum(r[2] for r in own), sum(r[1] for r in own)
        assert abs(run["idle"] - pss) <= 0.1 * pss, (run["idle"], pss, run["tree_how"])
        assert rss > 1.5 * pss  # the shared data: what summing RSS would have counted once per process
        largest = max(r[1] for r in own)  # the largest process on its own: its RSS
        assert abs(run["process_idle"] - largest) <= 0.1 * largest, (run["process_idle"], own)
        # the tree's peak: at least its RSS summed at rest (each process's own reading), above its largest's
        assert run["peak"] >= 0.95 * rss and run["process_peak"] < 0.8 * rss, (run["peak"], run["process_peak"], own)
    text = " ".join(proc.stdout.split())
    assert "Idle is the tree's total" in text and "the peak is the tree's" in text
    assert "the tree's idle PSS and peak RSS per setting" in text
    for cell, run in zip(("WORKERS=1", "WORKERS=2"), runs, strict=True):  # each cell's row: the tree's PSS
        assert f"{cell} │ {run['idle'] / 2**20:.0f} │" in text, (cell, text)


def test_lab_measures_freezing_the_collector_at_fork_on_a_preforked_tree(tmp_path):
    """A master that loads tracked objects and forks workers whose collections copy them (the
    preforked server's way): the freeze-at-fork variant, applied through the bootstrap to the
    unmodified program, halves the tree's PSS at idle, each variant's figure as the processes
    read their own PSS; the lab recommends it with lines that apply it."""
    readings = tmp_path / "readings.txt"
    out = tmp_path / "lab.json"
    # the budget wide open: this is about memory, and one run a variant times nothing on a loaded machine (a
    # fresh clone's suite once found the frozen run slower and kept the defaults)
    proc = memgap("lab", "--reps", "1", "--max-slowdown", "10", "--variant", "glibc", "--variant",
                  "glibc:gc=freeze-at-fork", "--json", str(out), "--dir", str(tmp_path / "runs"),
                  "--", sys.executable, os.path.join(PROGRAMS, "prefork_gc.py"), str(readings), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lab = json.loads(out.read_text())
    runs = {r["variant"]: r for r in lab["runs"]}
    rows = [list(map(int, line.split())) for line in readings.read_text().splitlines()]
    assert len(rows) == 8, rows  # four processes per run, the baseline's run first
    for variant, own in (("glibc", rows[:4]), ("glibc:gc=freeze-at-fork", rows[4:])):
        r = runs[variant]
        pss = sum(row[2] for row in own)
        assert r["status"] == "ok" and r["tree_how"], r
        assert abs(r["idle"] - pss) <= 0.1 * pss, (variant, r["idle"], pss, r["tree_how"], r["tree"], own)
    # the workers' collections copied the master's objects; frozen, they did not
    assert runs["glibc:gc=freeze-at-fork"]["idle"] <= 0.6 * runs["glibc"]["idle"], runs
    assert max(row[3] for row in rows[4:]) < 0.25 * min(row[3] for row in rows[1:4]), rows  # workers' USS
    assert recommended(lab) == "glibc:gc=freeze-at-fork", lab["verdict"]
    rec = lab["recommendation"]
    assert rec["env"] == {"MEMGAP_GC_FREEZE_AT_FORK": "1"} and "gc.freeze" in rec["python_plain"]
    assert "pre_fork" in " ".join(rec["notes"])


def test_run_totals_a_preforked_tree_by_pss_at_idle(tmp_path):
    """`memgap run` on a master and two forked workers sharing its data, all resting at once: the
    run's JSON and its report total the tree at idle by PSS, as each process read its own at rest,
    beside the RSS sum (which counts the shared pages once per process)."""
    readings = tmp_path / "readings.txt"
    proc, run = run_recorded(tmp_path, [sys.executable, os.path.join(PROGRAMS, "forked_tree.py"), str(readings),
                                        "rest"])
    rows = [list(map(int, line.split())) for line in readings.read_text().splitlines()]
    tree = run["tree"]
    assert len(rows) == 3 and sorted(tree["pids"]) == sorted(r[0] for r in rows), (tree, rows)
    pss, rss = sum(r[2] for r in rows), sum(r[1] for r in rows)
    assert abs(tree["pss"] - pss) <= 0.1 * pss, (tree, pss)
    assert abs(tree["rss_sum"] - rss) <= 0.1 * rss and rss > 2 * pss, (tree, rss)
    text = " ".join(proc.stdout.split())
    assert f"The tree at idle: 3 processes, PSS {tree['pss'] / 2**20:.1f} MiB" in text, text[-3000:]
    assert f"RSS summed {tree['rss_sum'] / 2**20:.1f} MiB (counts a shared page once per process)" in text
