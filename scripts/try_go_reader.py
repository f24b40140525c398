"""Try the Go reader on a running Go program: its figures, ranges and how long each read took.

    python scripts/try_go_reader.py PID [READS]

Detects, reads once (the program's DWARF parsed: the first read's cost), then READS more times
(default 200: the cost of a read once the layout is known), and prints the figures and timings.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from memgap.runtimes import go
from memgap.runtimes.base import ProcessView
from memgap.sources.procfs import ProcReader


def main() -> None:
    pid, reads = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 200
    reader = ProcReader(pid)
    view = ProcessView(pid, reader, reader.maps(), os.readlink(f"/proc/{pid}/exe"), reader.environ())
    started = time.perf_counter()
    info = go.GoReader().detect(view)
    detected = time.perf_counter()
    if info is None:
        sys.exit(f"PID {pid} is no Go program")
    heap = go.GoReader().read(view, info)
    first = time.perf_counter()
    times = []
    for _ in range(reads):
        t = time.perf_counter()
        go.GoReader().read(view, info)
        times.append((time.perf_counter() - t) * 1000)
    print(f"{info.name} {info.version} ({info.how}); stripped={info.stripped}")
    print(f"route: {heap.route}")
    for name in ("in_use", "retained", "released", "committed", "limit"):
        value = getattr(heap, name)
        print(f"{name:>10}: {'-' if value is None else f'{value / 2**20:.1f} MiB'}")
    for name, value in {**heap.metadata}.items():
        print(f"{name:>14}: {value / 2**20:.2f} MiB")
    for r in heap.ranges:
        print(f"  {r.start:#x}-{r.end:#x} {(r.end - r.start) / 2**20:9.2f} MiB {r.label}")
    for line in [*heap.notes, *(f"{k}={v[:80]}" for k, v in heap.settings.items())]:
        print(f"  {line}")
    print(f"detect {1000 * (detected - started):.1f} ms; first read {1000 * (first - detected):.1f} ms; "
          f"then {reads} reads: median {statistics.median(times):.2f} ms, max {max(times):.2f} ms")


if __name__ == "__main__":
    main()
