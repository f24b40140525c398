"""Issue 32's goal on a bursty service: the lab's pick, applied by its printed lines to the plain
service, lowers the RSS after its rests by 25% at least and makes its bursts at most 10% slower.

Runs ``memgap lab -- python tests/programs/server/drive_bursts.py`` (no option: the default set,
adaptive, the default objective), or reads a lab's JSON (``--lab FILE``), then runs the plain
driver with the recommendation's environment and without it, interleaved (A B A B ...), and
prints per run the server's mean RSS after its rests and the bursts' time (what the driver read),
then the medians and their ratios with the load average beside them.

    PYTHONPATH=src python benchmarks/bench_lab_bursty.py [--reps 5] [--lab lab.json] [--python PY]

``--python``: the interpreter that runs the driver and its server, in an environment where memgap
is installed as users install it (a wheel: its ``memgap-activate.pth`` is what a trimmer's lines
reach; an editable install has none); default: this one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVE = os.path.join(ROOT, "tests", "programs", "server", "drive_bursts.py")


def lab(where: str, python: str) -> dict:
    out = os.path.join(where, "lab.json")
    subprocess.run([python, "-m", "memgap", "lab", "--json", out, "--dir", os.path.join(where, "runs"),
                    "--", python, DRIVE, os.path.join(where, "lab-own.txt")], check=True, stdout=subprocess.DEVNULL)
    with open(out) as fh:
        return json.load(fh)


def plain(python: str, env: dict[str, str], path: str) -> tuple[float, float]:
    """One plain run of the driver: (mean RSS after its rests, the bursts' seconds)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGAP_", "PYTHONPATH"))}
    subprocess.run([python, DRIVE, path], env={**clean, **env}, check=True)
    with open(path) as fh:
        lines = [line.split() for line in fh.read().splitlines()]
    return statistics.mean(int(v) for k, v in lines if k == "rest"), next(float(v) for k, v in lines if k == "work")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--lab", help="a lab's JSON to take the recommendation from (default: run the lab)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the driver and its server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-lab-bursty-") as where:
        if args.lab:
            with open(args.lab) as fh:
                doc = json.load(fh)
        else:
            doc = lab(where, args.python)
        rec = doc["recommendation"]
        print(f"lab: {doc['verdict']}\njudged by {doc.get('objective', 'idle')}: {doc.get('objective_why', '')}")
        if rec is None:
            print("no recommendation: nothing to apply")
            return
        print(f"applying {rec['variant']}: {rec['env']}")
        got: dict[str, list[tuple[float, float]]] = {"applied": [], "control": []}
        for rep in range(args.reps):
            for name, env in (("applied", rec["env"]), ("control", {})):
                rss, work = plain(args.python, env, os.path.join(where, f"{name}-{rep}.txt"))
                got[name].append((rss, work))
                print(f"  rep {rep + 1} {name:8} after-rest RSS {rss / 2**20:6.1f} MiB, bursts {work:.2f} s")
    rss = {k: statistics.median(r for r, _ in v) for k, v in got.items()}
    work = {k: statistics.median(w for _, w in v) for k, v in got.items()}
    print(f"median after-rest RSS: applied {rss['applied'] / 2**20:.1f} MiB, control {rss['control'] / 2**20:.1f} "
          f"MiB: x{rss['applied'] / rss['control']:.2f} (goal: x0.75 or lower)")
    print(f"median bursts' time: applied {work['applied']:.2f} s, control {work['control']:.2f} s: "
          f"x{work['applied'] / work['control']:.2f} (goal: x1.10 or lower)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
