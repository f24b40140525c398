"""What reading pymalloc's pool headers from outside costs, and how close it comes.

    PYTHONPATH=src python benchmarks/bench_pool_census.py [--objects 2000000] [--reps 15]

A child that does not import memgap builds ``--objects`` tuples of an int and a str
(about 160 bytes of small objects each: 2M is about 320 MiB), writes pymalloc's own
"# bytes in allocated blocks" (sys._debugmallocstats) and sleeps. Here, interleaved:
  - snapshot_pid() (what `memgap inspect PID` reads, the census included),
  - census() alone, on the arenas and pagemap that snapshot found (one read per resident pool).
Printed: medians and ranges, the pools read, and python_objects against the witness.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from memgap.explain.memory_map import read_memory_map
from memgap.explain.snapshot import DEFAULT_POOL_SIZE, SnapshotOptions, label_regions, snapshot_pid
from memgap.sources.procfs import ProcReader
from memgap.sources.pymalloc_pools import census

CHILD = ("import sys, time\n"
         "keep = [(i, str(i)) for i in range(int(sys.argv[1]))]\n"
         "sys._debugmallocstats()\n"
         "print('ready', file=sys.stderr, flush=True)\n"
         "time.sleep(600)\n")


def _ms(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(args.objects)], stderr=subprocess.PIPE, text=True)
    try:
        assert child.stderr is not None
        stats = "".join(iter(child.stderr.readline, "ready\n"))
        witness = int(re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", stats).group(1).replace(",", ""))
        with ProcReader(child.pid) as reader:
            memmap = read_memory_map(reader)
            arenas = [(r.start, r.end) for r in label_regions(reader, memmap, None, 1 << 20, DEFAULT_POOL_SIZE)
                      if r.owner == "pymalloc-arena"]
            times: dict[str, list[float]] = {"snapshot_pid()": [], "census() alone": []}
            for _ in range(args.reps):  # interleaved
                times["snapshot_pid()"].append(_ms(lambda: snapshot_pid(child.pid, SnapshotOptions(regions=False))))
                times["census() alone"].append(_ms(lambda: census(reader, memmap.resident, arenas,
                                                                  DEFAULT_POOL_SIZE)))
            counted = census(reader, memmap.resident, arenas, DEFAULT_POOL_SIZE)
        snap = snapshot_pid(child.pid, SnapshotOptions(regions=False))
    finally:
        child.kill()
        child.wait()
    py = snap.layers["python_objects"].resident or 0
    print(f"child: RSS {snap.rss >> 20} MiB, {counted.arenas} arenas, {counted.pools_read} pools read; "
          f"{os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
    for name, values in times.items():
        print(f"{name:<16} median {statistics.median(values):7.1f} ms  ({min(values):.1f}-{max(values):.1f})")
    per_pool = statistics.median(times["census() alone"]) * 1000 / max(1, counted.pools_read)
    print(f"census: {per_pool:.2f} us per pool read")
    print(f"python_objects {py:,} vs the child's own {witness:,} ({(py - witness) / witness:+.4%}); "
          f"pymalloc_free {snap.layers['pymalloc_free'].resident:,}")


if __name__ == "__main__":
    main()
