"""What measuring a forked worker's copies costs beside the read from outside it rides on (issue 31).

tests/programs/fork_readers.py with DICTS dicts (1,000,000 by default): its 4 workers read the parent's
dicts, say "read PID" and rest. On the rested tree, interleaved per worker and repetition: the snapshot
``memgap run``'s reader takes (``snapshot_pid`` with regions, as ``record.outside`` asks it), then
``copied_from_parent`` over that snapshot's regions (``record.outside.add_copies``). Both run in memgap's
reader process under ``memgap run``, never in the sampler's loop; the ratio says what the copies add to
each read. Prints medians and ranges, and the load.

    PYTHONPATH=src python benchmarks/bench_copies_cost.py [DICTS] [--reps N]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from memgap.explain.cow import copied_from_parent
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "..", "tests", "programs", "fork_readers.py")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dicts", nargs="?", default="1000000")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    proc = subprocess.Popen([sys.executable, PROGRAM, args.dicts, "600"], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(proc.stdout.readline().split()[1]) for _ in range(4)]
        reads, copies, ratios = [], [], []
        for _ in range(args.reps):
            for pid in workers:
                began = time.perf_counter()
                snap = snapshot_pid(pid, SnapshotOptions(regions=True, recorded=True))
                read = time.perf_counter() - began
                began = time.perf_counter()
                split = copied_from_parent(pid, proc.pid, snap.regions)
                copy = time.perf_counter() - began
                reads.append(read)
                copies.append(copy)
                ratios.append(copy / read)
        print(f"load: {os.getloadavg()}; {args.dicts} dicts; last worker: copied {split.copied / 2**20:.1f} MiB "
              f"of USS {(snap.uss or 0) / 2**20:.1f} MiB")
        for name, values in (("read (snapshot_pid)", reads), ("copies (copied_from_parent)", copies),
                             ("copies / read", ratios)):
            print(f"{name}: median {statistics.median(values):.3f}, range {min(values):.3f}-{max(values):.3f}, "
                  f"n={len(values)}")
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
