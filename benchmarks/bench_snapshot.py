"""In-process snapshot latency on a process with 16 glibc arenas and about 1 GiB RSS.

    python benchmarks/bench_snapshot.py [--threads 16] [--mib-per-thread 60] [--reps 30]

16 threads each keep ~60 MiB of 100 KB blocks (each thread gets its own arena),
then the main thread times, interleaved in one run:
  - memgap.snapshot() (the sampling path: no gc walk, no memory map kept),
  - memgap.snapshot(walk=True) (what a phase records),
  - reading and parsing /proc/self/smaps (what a per-mapping tool would do),
  - reading /proc/self/status alone (the floor: one RSS figure).
Goal (issue 2): snapshot() <= 5 ms here.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import memgap
from memgap.sources.procfs import parse_smaps


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--mib-per-thread", type=int, default=60)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()

    ready = threading.Barrier(args.threads + 1)
    done = threading.Event()
    keep: list[list[bytearray]] = []

    def hold() -> None:
        keep.append([bytearray(100_000) for _ in range(args.mib_per_thread * 10)])
        ready.wait()
        done.wait()

    threads = [threading.Thread(target=hold) for _ in range(args.threads)]
    for t in threads:
        t.start()
    ready.wait()

    def smaps() -> None:
        with open("/proc/self/smaps") as fh:
            parse_smaps(fh.read())

    def status() -> None:
        with open("/proc/self/status") as fh:
            fh.read()

    cases = {
        "memgap.snapshot()": lambda: memgap.snapshot(regions=False),
        "memgap.snapshot(walk=True)": lambda: memgap.snapshot(walk=True, regions=False),
        "read+parse /proc/self/smaps": smaps,
        "read /proc/self/status": status,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.reps):  # interleaved: A B C D A B C D ...
        for name, fn in cases.items():
            times[name].append(_timed(fn))
    snap = memgap.snapshot(regions=False)
    done.set()
    for t in threads:
        t.join()

    base = statistics.median(times["read+parse /proc/self/smaps"])
    print(f"process: RSS {snap.rss >> 20} MiB, {snap.allocator.arenas} glibc arenas, "
          f"{snap.status.get('Threads')} threads; {os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
    print(f"{'case':<30} {'median ms':>10} {'min-max ms':>16} {'vs smaps':>9}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<30} {med:>10.2f} {min(values):>7.2f}-{max(values):<8.2f} {med / base:>8.2f}x")
    goal = statistics.median(times["memgap.snapshot()"])
    print(f"goal snapshot() <= 5 ms: {'met' if goal <= 5 else 'missed'} ({goal:.2f} ms)")


if __name__ == "__main__":
    main()
