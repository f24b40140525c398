"""What the collections' count costs a program under `memgap run` (issue 31): from a Python process's first fork
on, memgap's bootstrap runs a gc callback at every collection (young ones too) to write each full one down
(memgap._hook._count_full_collections). The worst case is a program that forks and then makes containers as
fast as it can and keeps them.

The workload (it does not import memgap): fork one child that exits at once (``fork``) or not (``nofork``),
then make and keep 2,000,000 small lists and dicts (a young collection every 700 of them, more than 2,800 in
all), and print the loop's own seconds.
Interleaved (A B, A B, ...), each under ``memgap run`` with no option: ``fork`` runs with the callback
registered, ``nofork`` without it; the fork itself costs a few milliseconds, outside the timed loop. Also
the callback's count of collections, and its cost per collection. Medians and ranges, the load beside them.

    .venv/bin/python benchmarks/bench_gc_callback.py [--reps 7]
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile

WORK = r"""
import gc, os, sys, time
if sys.argv[1] == "fork":
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
counts = [0]
gc.callbacks.append(lambda phase, info: counts.__setitem__(0, counts[0] + (phase == "start")))
kept = []
began = time.perf_counter()
for i in range(2_000_000):
    kept.append([i] if i % 2 else {"i": i})
took = time.perf_counter() - began
print(f"loop {took:.4f} collections {counts[0]} callbacks {len(gc.callbacks)}", flush=True)
"""


def one(mode: str) -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([sys.executable, "-m", "memgap", "run", "--json", os.path.join(folder, "run.json"),
                               "--", sys.executable, "-c", WORK, mode], capture_output=True, text=True, check=True,
                              timeout=300)
    line = next(x for x in done.stdout.splitlines() if x.startswith("loop "))
    _loop, took, _c, collections, _cb, callbacks = line.split()
    return float(took), int(collections), int(callbacks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    gc.collect()
    load = os.getloadavg()[0]
    rows: dict[str, list[tuple[float, int, int]]] = {"nofork": [], "fork": []}
    for _ in range(args.reps):
        for mode in rows:
            rows[mode].append(one(mode))
    for mode, runs in rows.items():
        took = [r[0] for r in runs]
        print(f"{mode:7} loop {statistics.median(took):.3f} s [{min(took):.3f}-{max(took):.3f}], "
              f"{runs[0][1]} collections, {runs[0][2]} gc callbacks (the program's own counter among them)")
    base, hooked = (statistics.median(r[0] for r in rows[m]) for m in ("nofork", "fork"))
    collections = rows["fork"][0][1]
    print(f"fork/nofork x{hooked / base:.3f}; {1e6 * (hooked - base) / collections:.2f} us a collection "
          f"(medians); load {load:.2f} -> {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
