"""What the shared/private split costs on a preforked tree: 9 processes of about 500 MiB each.

    PYTHONPATH=src python benchmarks/bench_tree_split.py [--workers 8] [--rows 1700000] [--reps 7]

A master that does not import memgap builds ``--rows`` small dicts (a list inside each:
tracked by the collector; 1.7M rows is about 500 MiB of RSS), forks ``--workers`` workers
that each run one full collection (which copies the pages of every dict and list, as a
busy preforked worker's do) and rest. Here, interleaved (A B C D E F, A B C D E F, ...):
  - `memgap inspect --tree MASTER --json FILE`, the whole command (interpreter start included),
  - snapshot_tree() of the master (every snapshot and the split below, in process: what the command does),
  - snapshot_pid() of each process apart (the layers, each split into shared, private and PSS),
  - add_copied_from_parent() on those snapshots (pagemap bit 56 of each worker and the master),
  - smaps of each process read and parsed per mapping (the PSS share inside the snapshots),
  - smaps_rollup of each process (the kernel's PSS total, no split: what an RSS/PSS-only sum reads),
  - status of each process (VmRSS alone: the floor).
Goal (issue 15): at most 2 s per snapshot of `inspect --tree`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
sys.path.insert(0, SRC)

from memgap.explain.cow import add_copied_from_parent  # noqa: E402
from memgap.explain.snapshot import SnapshotOptions, snapshot_pid  # noqa: E402
from memgap.explain.tree import snapshot_tree  # noqa: E402
from memgap.sources.procfs import ProcReader  # noqa: E402

TREE = ("import gc, os, sys, time\n"
        "table = [{'id': i, 'tags': [i]} for i in range(int(sys.argv[1]))]\n"
        "for _ in range(int(sys.argv[2])):\n"
        "    if os.fork() == 0:\n"
        "        gc.collect()  # a busy worker's full collection: copies every dict's and list's page\n"
        "        os.write(1, f'ready {os.getpid()}\\n'.encode())\n"
        "        time.sleep(900)\n"
        "        os._exit(0)\n"
        "os.write(1, f'ready {os.getpid()}\\n'.encode())\n"
        "time.sleep(900)\n")


def _s(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _read_all(pids: list[int], name: str) -> None:
    for pid in pids:
        with open(f"/proc/{pid}/{name}") as fh:
            fh.read()


def _rollup(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field + ":"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rows", type=int, default=1_700_000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    tree = subprocess.Popen([sys.executable, "-c", TREE, str(args.rows), str(args.workers)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    env = dict(os.environ, PYTHONPATH=SRC)
    try:
        assert tree.stdout is not None
        pids = [int(tree.stdout.readline().split()[1]) for _ in range(args.workers + 1)]
        master = tree.pid
        cli = [sys.executable, "-m", "memgap", "inspect", "--tree", str(master), "--json", out]
        snaps: list = []  # type: ignore[type-arg]

        def snapshots() -> None:
            snaps[:] = [snapshot_pid(pid, SnapshotOptions(regions=True)) for pid in pids]

        def tree_read() -> None:
            snapshot_tree(master)

        def smaps() -> None:
            for pid in pids:
                with ProcReader(pid) as reader:
                    reader.smaps_pss()

        cases = {
            "inspect --tree (command)": lambda: subprocess.run(cli, env=env, check=True, stdout=subprocess.DEVNULL),
            "snapshot_tree()": tree_read,
            "9 x snapshot_pid() apart": snapshots,
            "add_copied_from_parent()": lambda: add_copied_from_parent(snaps),
            "9 x smaps, per mapping": smaps,
            "9 x smaps_rollup": lambda: _read_all(pids, "smaps_rollup"),
            "9 x status (VmRSS)": lambda: _read_all(pids, "status"),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.reps):  # interleaved; snapshots before the split that reads them
            for name, fn in cases.items():
                times[name].append(_s(fn))
        rss = [_rollup(pid, "Rss") for pid in pids]
        pss = sum(_rollup(pid, "Pss") for pid in pids)
        copied = sum((s.copied_from_parent or {}).get("copied", 0) for s in snaps)
    finally:
        os.killpg(tree.pid, 9)
        tree.wait()
        os.unlink(out)
    print(f"tree: {len(pids)} processes, RSS {min(rss) >> 20}-{max(rss) >> 20} MiB each "
          f"(sum {sum(rss) >> 20} MiB), PSS sum {pss >> 20} MiB, workers copied {copied >> 20} MiB; "
          f"{os.cpu_count()} CPUs; Python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<26} {'median s':>9} {'min-max s':>14}")
    for name, values in times.items():
        print(f"{name:<26} {statistics.median(values):9.3f} {min(values):6.3f}-{max(values):.3f}")
    med = statistics.median(times["inspect --tree (command)"])
    print(f"goal inspect --tree <= 2 s per snapshot: {'met' if med <= 2 else 'MISSED'} ({med:.2f} s median)")


if __name__ == "__main__":
    main()
