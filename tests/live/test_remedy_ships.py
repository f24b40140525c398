"""A recommendation a user can ship: the printed lines hold no path of this machine,
and applied to a plain run in a fresh environment where memgap is installed as a
wheel (not from this checkout) they do what the lab measured."""
import json
import os
import re
import subprocess
import sys

from conftest import HERE

ROOT = os.path.dirname(HERE)
BURST = os.path.join(ROOT, "tests", "programs", "unmarked_burst.py")
MiB = 1 << 20


def _clean_env():
    """This environment without anything that points into this checkout."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MEMGAP_", "PYTHONPATH", "VIRTUAL_ENV"))}


def test_the_printed_lines_hold_no_path_of_this_machine_and_work_from_a_wheel(tmp_path, wheel_venv):
    python = str(wheel_venv / "bin" / "python")
    out = tmp_path / "lab.json"
    lab = subprocess.run([str(wheel_venv / "bin" / "memgap"), "lab", "--reps", "1", "--max-slowdown", "1",
                          "--variant", "glibc", "--variant", "glibc:trim=idle", "--json", str(out),
                          "--dir", str(tmp_path / "runs"), "--", python, BURST, "0.1", str(tmp_path / "lab-own.txt")],
                         env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert lab.returncode == 0, lab.stderr[-2000:]
    rec = json.loads(out.read_text())["recommendation"]
    assert rec["variant"] == "glibc:trim=idle"
    printed = json.dumps({k: rec[k] for k in ("env", "setup", "shell", "dockerfile", "systemd", "python",
                                              "python_plain")})
    for path in (ROOT, str(wheel_venv), str(tmp_path), sys.prefix, os.path.expanduser("~")):
        assert path not in printed, (path, printed)
    assert rec["env"] == {"MEMGAP_TRIMMER": "1"}

    # A plain run (no memgap run, no PYTHONPATH) with the env lines, and one without: a control.
    readings = {}
    runs = {}
    for name, extra in (("applied", rec["env"]), ("control", {})):
        readings[name] = tmp_path / f"{name}.txt"
        runs[name] = subprocess.Popen([python, BURST, "5", str(readings[name])], env={**_clean_env(), **extra})
    for proc in runs.values():
        assert proc.wait(timeout=60) == 0
    got = {}
    for name, path in readings.items():
        lines = dict(line.split() for line in path.read_text().splitlines())
        got[name] = (int(lines["work"]), int(lines["rest"]))
    work, rest = got["applied"]
    assert work - rest > 40 * MiB, got   # the idle trimmer trimmed during the rest (glibc held ~90 MiB free)
    work, rest = got["control"]
    assert abs(work - rest) < 4 * MiB, got  # nothing gives it back by itself


SERVER = os.path.join(ROOT, "tests", "programs", "server")


def test_a_load_driver_gets_its_server_measured_and_a_remedy_that_lowers_it_in_plain_runs(tmp_path, wheel_venv):
    """A driver that starts a real uvicorn server, loads it over loopback with 1 s rests and
    stops it: the lab, given nothing but the driver's command line, ranks on the server's
    post-rest figure, and what it recommends lowers that figure in plain runs."""
    python = str(wheel_venv / "bin" / "python")
    drive = [python, os.path.join(SERVER, "drive.py")]
    out = tmp_path / "lab.json"
    own = tmp_path / "lab-own.txt"
    # judged at its idle, after the last rest of 3.5 s (the trimmer's turn), as asked: the bursts' 1 s rests
    # would otherwise make the lab judge the mean over the work (test_lab_bursty.py)
    lab = subprocess.run([str(wheel_venv / "bin" / "memgap"), "lab", "--reps", "1", "--max-slowdown", "1",
                          "--objective", "idle", "--variant", "glibc", "--variant", "glibc:trim=quiet",
                          "--json", str(out), "--dir", str(tmp_path / "runs"), "--", *drive, str(own), "3.5"],
                         env=_clean_env(), capture_output=True, text=True, timeout=180)
    assert lab.returncode == 0, lab.stderr[-2000:]
    doc = json.loads(out.read_text())
    runs = {r["variant"]: r for r in doc["runs"]}
    for r in runs.values():
        assert r["status"] == "ok" and r["process"].startswith("python -m uvicorn"), r
    # the baseline's idle is the tree's PSS total after the rest, the server's own figure its RSS then,
    # each as the driver read them from /proc
    server_rest, server_pss, driver_pss = map(int, own.read_text().split()[1:4])
    base = runs["glibc"]
    assert abs(base["idle"] - (server_pss + driver_pss)) <= 0.1 * (server_pss + driver_pss), (base, server_pss,
                                                                                                driver_pss)
    assert abs(base["process_idle"] - server_rest) <= 0.1 * server_rest, (base["process_idle"], server_rest)
    said = " ".join(lab.stdout.split())
    assert "Idle is the tree's total" in said and "its largest process on its own at idle" in said.lower(), said
    assert re.search(r"it runs python -m uvicorn", said), said
    # each process of the tree has its own idle in the JSON: the driver's and the server's
    assert sorted("uvicorn" in p["cmd"] for p in runs["glibc"]["tree"]) == [False, True], runs["glibc"]["tree"]
    # the work's time ends where the rest begins: the trimmer's trims in the rest (3.5 s) do not count
    trimmed = runs["glibc:trim=quiet"]
    assert 0 < trimmed["wall"] < trimmed["duration"] - 3, trimmed
    rec = doc["recommendation"]
    assert rec is not None and rec["variant"] == "glibc:trim=quiet", doc["verdict"]

    # The recommendation in plain runs of the driver (no memgap run), against a control.
    procs, readings = {}, {}
    for name, extra in (("applied", rec["env"]), ("control", {})):
        readings[name] = tmp_path / f"{name}.txt"
        procs[name] = subprocess.Popen([*drive, str(readings[name]), "3.5"], env={**_clean_env(), **extra})
    assert all(p.wait(timeout=60) == 0 for p in procs.values())
    applied, control = (int(readings[n].read_text().split()[1]) for n in ("applied", "control"))
    assert applied < 0.7 * control, (applied, control)
