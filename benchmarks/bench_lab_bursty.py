"""Issue 32's goal on a bursty service: the lab's pick, applied by its printed lines to the plain
service, lowers the RSS after its rests by 25% at least and makes its bursts at most 10% slower.

Runs ``memgap lab -- python tests/programs/server/drive_bursts.py`` (no option: the default set,
adaptive, the default objective), or reads a lab's JSON (``--lab FILE``), then runs the plain
driver with the recommendation's environment and without it, interleaved (A B A B ...), and
prints per run the server's mean RSS after its rests, the time of its bursts after the first and the
CPU time the server and the driver used in them (what the driver read), then the medians and their ratios with
the load average beside them, and the slowdown the lab measured for its pick: by the CPU its
bursts used, as its samples tell it (the driver's bursts' time is its clock's, which the load on
the machine moves far more than the CPU they use).

    PYTHONPATH=src python benchmarks/bench_lab_bursty.py [--reps 5] [--lab lab.json] [--python PY] [--apply SPEC]
        [--server async_server.py --concurrency 16]

``--python``: the interpreter that runs the driver and its server, in an environment where memgap
is installed as users install it (a wheel: its ``memgap-activate.pth`` is what a trimmer's lines
reach; an editable install has none); default: this one. Where the lab keeps the defaults, the lines
applied are those of the variant it found better by memory with the lowest figure (all too slow);
``--apply SPEC`` names another. ``--server``: the service the driver starts (``thread_server.py``, the
default, or ``async_server.py``: one asyncio worker, mostly I/O, as the field report's), ``--concurrency``
its bursts' requests (8).
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
SHAPE: list[str] = []  # the driver's arguments after its readings' path: BURSTS REST CONCURRENCY SERVER


def lab(where: str, python: str) -> dict:
    out = os.path.join(where, "lab.json")
    subprocess.run([python, "-m", "memgap", "lab", "--json", out, "--dir", os.path.join(where, "runs"),
                    "--", python, DRIVE, os.path.join(where, "lab-own.txt"), *SHAPE], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as fh:
        return json.load(fh)


def plain(python: str, env: dict[str, str], path: str) -> tuple[float, float, float]:
    """One plain run of the driver: (mean RSS after its rests, the seconds of its bursts after the first,
    their CPU seconds): the first burst's server is cold (its heap new, under any remedy), and the lab
    measures a bursty run from its first rest on."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGAP_", "PYTHONPATH"))}
    subprocess.run([python, DRIVE, path, *SHAPE], env={**clean, **env}, check=True)
    with open(path) as fh:
        lines = [line.split() for line in fh.read().splitlines()]
    bursts = [(float(took), float(cpu)) for k, took, cpu in (line for line in lines if line[0] == "burst")][1:]
    return (statistics.mean(int(line[1]) for line in lines if line[0] == "rest"), sum(t for t, _ in bursts),
            sum(c for _, c in bursts))


def best_by_memory(doc: dict) -> dict | None:
    """Where the lab kept the defaults: the variant it found better by memory with the lowest figure
    (too slow, then), with its lines."""
    figure = {"mean": "mean", "peak": "peak"}.get(doc.get("objective", "idle"), "idle")
    better = sorted((v for v in doc["variants"] if v["better"] and v.get(figure)), key=lambda v: v[figure][0])
    if not better:
        return None
    print(f"no recommendation: {better[0]['spec']} is the lowest of the variants better by memory")
    return lines_of(better[0]["spec"])


def lines_of(spec: str) -> dict:
    """A variant's environment as the lab prints it for a recommendation (memgap.lab.remedy_lines)."""
    from memgap.allocators.variants import parse_variant, resolve
    from memgap.lab.remedy_lines import recommendation_lines

    variant = resolve([parse_variant(spec)])[0][0]
    return {"variant": variant.spec, "env": recommendation_lines(variant).env}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--lab", help="a lab's JSON to take the recommendation from (default: run the lab)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the driver and its server")
    parser.add_argument("--apply", metavar="SPEC", help="apply this variant's lines instead of the lab's pick")
    parser.add_argument("--server", default="thread_server.py", help="the service the driver starts, beside it")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in a burst (8)")
    args = parser.parse_args()
    SHAPE[:] = ["4", "1.0", str(args.concurrency), args.server]
    with tempfile.TemporaryDirectory(prefix="bench-lab-bursty-") as where:
        if args.lab:
            with open(args.lab) as fh:
                doc = json.load(fh)
        else:
            doc = lab(where, args.python)
        print(f"lab: {doc['verdict']}\njudged by {doc.get('objective', 'idle')}: {doc.get('objective_why', '')}")
        rec = lines_of(args.apply) if args.apply else doc["recommendation"] or best_by_memory(doc)
        if rec is None:
            print("no variant better by memory: nothing to apply")
            return
        print(f"applying {rec['variant']}: {rec['env']}")
        got: dict[str, list[tuple[float, float, float]]] = {"applied": [], "control": []}
        for rep in range(args.reps):
            for name, env in (("applied", rec["env"]), ("control", {})):
                rss, work, cpu = plain(args.python, env, os.path.join(where, f"{name}-{rep}.txt"))
                got[name].append((rss, work, cpu))
                print(f"  rep {rep + 1} {name:8} after-rest RSS {rss / 2**20:6.1f} MiB, bursts {work:.2f} s, "
                      f"their CPU {cpu:.2f} s")
    for k, what, unit, goal in ((0, "after-rest RSS", "MiB", "x0.75 or lower"),
                                (1, "bursts' time", "s", "x1.10 or lower"),
                                (2, "bursts' CPU", "s", "what the lab measures their time by")):
        med = {name: statistics.median(run[k] for run in runs) for name, runs in got.items()}
        pairs = [a[k] / b[k] for a, b in zip(got["applied"], got["control"], strict=True)]
        scale = 2**20 if unit == "MiB" else 1
        print(f"median {what}: applied {med['applied'] / scale:.2f} {unit}, "
              f"control {med['control'] / scale:.2f} {unit}: x{med['applied'] / med['control']:.2f}, "
              f"pairs x{min(pairs):.2f}-{max(pairs):.2f} (goal: {goal})")
    picked = next((v for v in doc["variants"] if v["spec"] == rec["variant"]), {})
    print(f"the lab's slowdown of {rec['variant']}: x{picked.get('slowdown') or 1:.2f} by "
          f"{picked.get('slowdown_by') or 'wall time'}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
