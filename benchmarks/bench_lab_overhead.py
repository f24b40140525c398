"""The lab's own cost: its wall time against the time of the runs it makes.

Issue 3 asks that `memgap lab` take at most 1.15x the sum of its runs' workload
time. Two readings of "workload time", both measured here, in rounds that
alternate (lab, plain, lab, plain, ...):

- ``lab / recorded``: the lab's wall time over the sum of its runs' durations
  as the lab recorded them (each run under memgap's recording: sampling, phase
  snapshots, the trim at idle). This is what the lab itself prints.
- ``lab / plain``: the lab's wall time over the sum of the same runs made
  without memgap at all: the same command, the same variant environments (the
  allocator settings; memgap's trims need memgap, so those runs are plain),
  the same interleaved order. The stricter reading: it also charges the lab
  for what recording costs inside each run.

Run from the repository root (about 2 minutes with the defaults on 2 cores)::

    PYTHONPATH=src python benchmarks/bench_lab_overhead.py [--rounds 2] [--reps 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from memgap.lab.variants import parse_variant, resolve

VARIANTS = ["glibc", "glibc:arena_max=2", "glibc:trim=idle", "jemalloc:dirty_decay_ms=1000"]
WORKLOAD = [sys.executable, "-m", "memgap.scenarios.asyncburst"]
GOAL = 1.15


def _env(extra: dict[str, str]) -> dict[str, str]:
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.abspath(src), os.environ.get("PYTHONPATH", "")]))
    return env


def run_lab(specs: list[str], reps: int) -> tuple[float, float, int]:
    """(lab wall seconds, recorded workload seconds, runs) for one lab."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "lab.json")
        cmd = [sys.executable, "-m", "memgap", "lab", "--reps", str(reps), "--json", out,
               "--dir", os.path.join(tmp, "runs")]
        for spec in specs:
            cmd += ["--variant", spec]
        started = time.perf_counter()
        done = subprocess.run([*cmd, "--", *WORKLOAD], env=_env({}), capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the lab failed ({done.returncode}): {done.stderr[-2000:]}")
        wall = time.perf_counter() - started
        with open(out, encoding="utf-8") as fh:
            lab = json.load(fh)
    return wall, lab["workload_seconds"], len(lab["runs"])


def run_plain(specs: list[str], reps: int) -> float:
    """Seconds of the same runs without memgap, in the lab's order (A B C, A B C, ...)."""
    variants, _ = resolve([parse_variant(s) for s in specs])
    total = 0.0
    for _rep in range(reps):
        for v in variants:
            env = {k: val for k, val in v.env().items() if not k.startswith("MEMGAP_")}
            started = time.perf_counter()
            subprocess.run(WORKLOAD, check=True, env=_env(env), stdout=subprocess.DEVNULL)
            total += time.perf_counter() - started
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    specs = [s for s in VARIANTS if resolve([parse_variant(s)])[0]]  # allocators this machine has
    rows = []
    for rnd in range(1, args.rounds + 1):
        lab_wall, recorded, runs = run_lab(specs, args.reps)
        plain = run_plain(specs, args.reps)
        rows.append({"round": rnd, "runs": runs, "lab_wall": lab_wall, "recorded": recorded, "plain": plain,
                     "lab_per_recorded": lab_wall / recorded, "lab_per_plain": lab_wall / plain})
        print(f"round {rnd}: lab {lab_wall:.1f} s for {runs} runs; recorded runs {recorded:.1f} s "
              f"(x{lab_wall / recorded:.3f}); the same runs plain {plain:.1f} s (x{lab_wall / plain:.3f})",
              flush=True)
    for key, words in (("lab_per_recorded", "lab / recorded runs"), ("lab_per_plain", "lab / plain runs")):
        values = [r[key] for r in rows]
        verdict = "met" if statistics.median(values) <= GOAL else "MISSED"
        print(f"{words}: x{statistics.median(values):.3f} (x{min(values):.3f}-x{max(values):.3f}); "
              f"goal <= x{GOAL}: {verdict}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"variants": specs, "reps": args.reps, "workload": WORKLOAD, "rounds": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
