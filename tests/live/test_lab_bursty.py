"""Issue 32: a service driven in bursts with short rests is judged by what it holds while it works.

The service (tests/programs/server/thread_server.py, standard library only) answers each request
in a thread of its own, which allocates and frees 6 MB of 3000-byte buffers in its glibc arena;
its driver (drive_bursts.py) starts it, sends bursts of 8 concurrent requests with 1 s rests and
reads the server's RSS from /proc after each rest, as the field report's driver did. The user runs
``memgap lab -- DRIVER`` with no option (the driver starts the server: what a user who has a load
script does; ``--load`` is for a service started on its own), in a fresh environment where memgap
is installed from a wheel, then applies the printed lines to the plain driver: the server's RSS
after its rests must fall by a quarter at least against a control. (How much slower the remedy
makes the bursts is a timing: benchmarks/bench_lab_bursty.py measures it side by side.)
"""
import json
import os
import statistics
import subprocess

from conftest import HERE

SERVER = os.path.join(os.path.dirname(HERE), "tests", "programs", "server")


def _clean_env(extra=None):
    """This environment without anything that points into this checkout, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGAP_", "PYTHONPATH", "VIRTUAL_ENV"))}
    return {**env, **(extra or {})}


def _after_rests(path):
    """The mean of the server's RSS after each rest, as the driver read it, and the bursts' time."""
    lines = [line.split() for line in path.read_text().splitlines()]
    return statistics.mean(int(v) for k, v in lines if k == "rest"), next(float(v) for k, v in lines if k == "work")


def test_a_bursty_service_gets_a_remedy_that_holds_between_its_bursts(tmp_path, wheel_venv):
    drive = [str(wheel_venv / "bin" / "python"), os.path.join(SERVER, "drive_bursts.py")]
    out = tmp_path / "lab.json"
    lab = subprocess.run([str(wheel_venv / "bin" / "memgap"), "lab", "--json", str(out), "--dir",
                          str(tmp_path / "runs"), "--", *drive, str(tmp_path / "lab-own.txt")],
                         env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert lab.returncode == 0, lab.stderr[-3000:]
    doc = json.loads(out.read_text())
    said = " ".join(lab.stdout.split())
    # judged by the mean over the work: the baseline rested between its bursts, and the lab says so
    assert doc["objective"] == "mean" and "works in bursts" in doc["objective_why"], doc["objective_why"]
    assert "Judged by the mean RSS over the work" in said and doc["verdict"].startswith("mean RSS"), said
    base = [r for r in doc["runs"] if r["variant"] == "glibc" and r["status"] == "ok"]
    assert base and all(len(r["rests"]) >= 2 and all(0.5 <= x < 2.5 for x in r["rests"]) for r in base), \
        [r["rests"] for r in base]
    # the trimmer waits for 2 s of quiet, which this service never has while it works: said so
    assert any("acts only after 2 s of quiet" in w for w in doc["warnings"]), doc["warnings"]
    rec = doc["recommendation"]
    assert rec is not None, doc["verdict"]

    # The printed lines applied to the plain driver (no memgap run), against a control, interleaved.
    readings: dict[str, list[tuple[float, float]]] = {"applied": [], "control": []}
    for rep in range(2):
        for name, extra in (("applied", rec["env"]), ("control", {})):
            path = tmp_path / f"{name}-{rep}.txt"
            subprocess.run([*drive, str(path)], env=_clean_env(extra), check=True, timeout=120)
            readings[name].append(_after_rests(path))
    applied = statistics.median(rss for rss, _ in readings["applied"])
    control = statistics.median(rss for rss, _ in readings["control"])
    assert applied <= 0.75 * control, (rec["variant"], readings)
