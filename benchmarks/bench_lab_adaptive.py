"""The adaptive lab against the full grid: does it recommend what the grid
recommends, and with what share of the grid's runs?

Issue 11 asks for the same recommendation as the full 3-repetition grid in at
least 4 of 5 labs on each of the thread-pool and async-burst scenarios, with at
most 60% of the grid's runs. Per scenario, labs alternate (grid, adaptive, grid,
adaptive, ...); the grid's answer is the recommendation its labs gave most often.

Run from the repository root (the lab's 15 default variants: about 5 minutes a
grid lab of the thread pool on 2 cores; --variant narrows them)::

    PYTHONPATH=src python benchmarks/bench_lab_adaptive.py [--labs 5] [--scenario threadpool] [--variant SPEC ...]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from memgap.scenarios import scenario_command

SHARE_GOAL, AGREE_GOAL = 0.60, 0.8


def one_lab(scenario: str, grid: bool, variants: list[str], folder: str) -> dict:
    out = os.path.join(folder, "lab.json")
    args = [sys.executable, "-m", "memgap", "lab", "--json", out, "--dir", os.path.join(folder, "runs")]
    args += ["--reps", "3"] if grid else []
    for v in variants:
        args += ["--variant", v]
    subprocess.run([*args, "--", *scenario_command(scenario)], check=True, capture_output=True)
    with open(out) as fh:
        lab = json.load(fh)
    return {"scenario": scenario, "grid": grid, "runs": len(lab["runs"]),
            "recommended": (lab["recommendation"] or {}).get("variant"), "seconds": lab["lab_seconds"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", type=int, default=5, help="labs of each kind per scenario")
    parser.add_argument("--scenario", action="append", help="threadpool, asyncburst (default: both)")
    parser.add_argument("--variant", action="append", default=[], help="variants (default: the lab's own)")
    parser.add_argument("--json", help="write every lab's figures here")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="memgap-bench-adaptive-") as folder:
        for scenario in args.scenario or ["threadpool", "asyncburst"]:
            for k in range(args.labs):
                for grid in (True, False):
                    row = one_lab(scenario, grid, args.variant, os.path.join(folder, f"{scenario}-{k}-{grid}"))
                    results.append(row)
                    print(f"{scenario} {'grid' if grid else 'adaptive'} {k + 1}: {row['recommended']} "
                          f"({row['runs']} runs, {row['seconds']:.0f} s)", flush=True)
    for scenario in dict.fromkeys(r["scenario"] for r in results):
        grid = [r for r in results if r["scenario"] == scenario and r["grid"]]
        adaptive = [r for r in results if r["scenario"] == scenario and not r["grid"]]
        answer, _ = collections.Counter(r["recommended"] for r in grid).most_common(1)[0]
        agree = sum(1 for r in adaptive if r["recommended"] == answer)
        share = sum(r["runs"] for r in adaptive) / sum(r["runs"] for r in grid)
        print(f"{scenario}: the grid recommends {answer} ({[r['recommended'] for r in grid]}); adaptive agrees in "
              f"{agree} of {len(adaptive)} labs (goal {AGREE_GOAL:.0%}) with {share:.0%} of the grid's runs "
              f"(goal at most {SHARE_GOAL:.0%})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
