"""Issue 32: a service driven in bursts with short rests is judged by what it holds while it works.

The service (tests/programs/server/thread_server.py, standard library only) answers each request
in a thread of its own, which allocates and frees 6 MB of 3000-byte buffers in its glibc arena;
its driver (drive_bursts.py) starts it, sends 4 bursts of 8 concurrent requests with 1 s rests and
reads the server's RSS from /proc after each rest, as the field report's driver did (4 bursts: 3
rests within the work, so that one rest the samples miss leaves the 2 that make it bursty). The user runs
``memgap lab -- DRIVER`` with no option (the driver starts the server: what a user who has a load
script does; ``--load`` is for a service started on its own), in a fresh environment where memgap
is installed from a wheel. The lab judges it by its mean over the work, and its slowdowns by a
burst's time at most (the CPU a variant adds to a burst, over the baseline's burst length). The
lines for the variant that held the least over the work (a trim every second, or jemalloc's 1 s decay,
76 MiB against 92 at load 17: too slow by their bursts' CPU, x1.33 and x1.38, and by a burst's time at
most since, each burst faulting back in what the rest gave away; the lab picks what is left within
the budget, or keeps the defaults), applied to the plain driver: the server's RSS after its rests
must fall by a quarter at least against a control. (How much slower the remedy makes the bursts is
a timing: benchmarks/bench_lab_bursty.py measures it side by side.)
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
    """The mean of the server's RSS after each rest, as the driver read it."""
    lines = [line.split() for line in path.read_text().splitlines()]
    return statistics.mean(int(line[1]) for line in lines if line[0] == "rest")


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
    assert "Judged by the mean RSS over the work" in said, said
    assert doc["verdict"].startswith("mean RSS") or "mean over the work" in doc["verdict"], doc["verdict"]
    base = [r for r in doc["runs"] if r["variant"] == "glibc" and r["status"] == "ok"]
    assert base and all(0.5 <= x < 2.5 for r in base for x in r["rests"]), [r["rests"] for r in base]
    # the trimmer waits for 2 s of quiet, which this service never has while it works: said so
    assert any("acts only after 2 s of quiet" in w for w in doc["warnings"]), doc["warnings"]
    # its slowdown is its bursts' (a burst's time at most: the CPU a variant adds to one over the baseline's
    # burst length, from the first rest on), not the driver's whole time
    assert all(r["work_cpu"] > 0 and r["work_wall"] > 0 for r in doc["runs"] if r["status"] == "ok"), doc["runs"]
    assert all(v["slowdown_by"].startswith("its bursts' time, at most") for v in doc["variants"] if v["ok"]), \
        doc["variants"]
    assert "Too slow by its bursts' time, at most" in said, said
    # the variant that held the least over the work: the lines the lab prints for it (recommended, or not
    # within the slowdown budget), applied to the plain driver (no memgap run), against a control: one pair
    # (the server's RSS after its rests, under glibc:trim=every:1's lines, was x0.53-0.64 its control's over
    # 20 pairs at load 11-20, under jemalloc:dirty_decay_ms=1000's x0.60-0.65 over 5)
    lowest = min((v for v in doc["variants"] if v["better"]), key=lambda v: v["mean"][0])
    rec = doc["recommendation"]
    env = rec["env"] if rec and rec["variant"] == lowest["spec"] else _lines_of(lowest["spec"])
    readings = {}
    for name, extra in (("applied", env), ("control", {})):
        path = tmp_path / f"{name}.txt"
        subprocess.run([*drive, str(path)], env=_clean_env(extra), check=True, timeout=120)
        readings[name] = _after_rests(path)
    assert readings["applied"] <= 0.75 * readings["control"], (lowest["spec"], doc["verdict"], readings)


def _lines_of(spec):
    """The environment the lab prints for a variant it recommends (memgap.lab.remedy_lines)."""
    from memgap.allocators.variants import parse_variant, resolve
    from memgap.lab.remedy_lines import recommendation_lines

    return recommendation_lines(resolve([parse_variant(spec)])[0][0]).env
