"""Whether `memgap run`'s timeline keeps its interval while memgap reads the tree from outside, and
what `memgap run` costs a plain Python workload, against the code of another revision (issue 30).

Two workloads, neither of which imports memgap:

- ``big-libs``: ``tests/programs/big/big_libs.py --grow 10 --rest 3``: a Python process that maps
  libLLVM-14, libLLVM-15 and libclang-cpp-14 (a look at it takes seconds), grows 40 MiB/s for
  10 s, then rests 3 s. Per run, of its process's samples: how many against those its interval
  asks for over the span they cover (share), the largest gap between two, whether its peak
  breakdown was taken (its peak read within 10% of its highest sample), and memgap's slowest read
  of it (seconds, and when it began, where the recording says: the base may not);
- ``plain-8s``: ``python3 -c`` of 8 s of pure-Python work (a loop over a dict and a list, no
  imports): the wall time of the whole command, ``memgap run`` against the workload alone.

Observers, interleaved (A B C, A B C, ...) after one warm-up each: ``alone`` (plain-8s only),
``run-base``: ``memgap run --interval 0.1`` of the sources at ``--base`` (default ``main``, taken
with ``git archive``, with this tree's native builds where their C sources are the same: git keeps
none, and without them the base builds its own into TMPDIR and looks them up there each run, which
no install pays), and ``run-new``: this tree's.
Medians and ranges; the machine's load average beside them.

Run from the repository root (about 4 minutes with the defaults on 2 cores)::

    .venv/bin/python benchmarks/bench_run_timeline.py [--reps 7] [--base main|none] [--only big-libs]
"""
from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG = [sys.executable, os.path.join(ROOT, "tests", "programs", "big", "big_libs.py"), "--grow", "10", "--rest", "3"]
PLAIN = [sys.executable, "-c", "import time\nend = time.monotonic() + 8\nd, n = {}, 0\n"
         "while time.monotonic() < end:\n    n += 1\n    d[n % 5000] = [n] * 8\n"]
WORKLOADS = {"big-libs": BIG, "plain-8s": PLAIN}
INTERVAL = 0.1


@dataclass
class Run:
    workload: str
    observer: str
    rep: int
    wall: float
    load: float                      # the load average (1 min) as it began
    samples: int = 0                 # of the workload's main process
    asked: int = 0                   # samples its interval asks for over their span
    largest_gap: float = 0.0
    peak_taken: bool = False
    slowest_read: float | None = None
    slowest_from: float | None = None
    error: str = ""


def base_sources(rev: str, folder: str) -> str:
    """The ``src`` folder of ``rev``, written out under ``folder``."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", rev, "src"], check=True,
                             capture_output=True).stdout
    path = os.path.join(folder, "base.tar")
    with open(path, "wb") as fh:
        fh.write(archive)
    with tarfile.open(path) as tar:
        tar.extractall(folder, filter="data")
    # this tree's native builds beside them (git keeps none), where the base's C sources in their folder
    # are this tree's: without them the base compiles its own into TMPDIR on first use, and each run's
    # processes import memgap.native.build (hashlib, subprocess) to find them there
    for lib in glob.glob(os.path.join(ROOT, "src", "memgap", "**", "*.so"), recursive=True):
        into = os.path.join(folder, os.path.relpath(lib, ROOT))
        there = os.path.dirname(into)
        sources = glob.glob(os.path.join(os.path.dirname(lib), "*.c"))
        if os.path.isdir(there) and all(_same(c, os.path.join(there, os.path.basename(c))) for c in sources):
            shutil.copy2(lib, into)
    return os.path.join(folder, "src")


def _same(a: str, b: str) -> bool:
    try:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            return fa.read() == fb.read()
    except OSError:
        return False


def timeline(doc_path: str, run: Run) -> None:
    """The figures of the main process's timeline (the one with the highest peak sample)."""
    with open(doc_path) as fh:
        doc = json.load(fh)
    by_pid: dict[int, list[tuple[float, int]]] = {}
    for s in doc["timeline"]:
        by_pid.setdefault(s["pid"], []).append((s["t"], s["rss"]))
    pid, samples = max(by_pid.items(), key=lambda kv: max(r for _, r in kv[1]))
    times = [t for t, _ in samples]
    run.samples = len(times)
    run.asked = round((times[-1] - times[0]) / doc["interval"]) + 1
    run.largest_gap = max((b - a for a, b in itertools.pairwise(times)), default=0.0)
    process = next(p for p in doc["processes"] if p["pid"] == pid)
    highest = max(r for _, r in samples)
    run.peak_taken = bool(process["peak"]) and process["peak"]["rss"] >= 0.9 * highest
    events = os.path.join(doc_path + ".d", "samples.jsonl")
    with open(events) as fh:
        reads = [e["snapshot"] for e in map(json.loads, fh) if e.get("type") in ("peak", "snapshot")
                 and e.get("pid") == pid]
    timed = [r for r in reads if r.get("read_seconds") is not None]
    if timed:
        slowest = max(timed, key=lambda r: r["read_seconds"])
        run.slowest_read, run.slowest_from = slowest["read_seconds"], slowest["read_started"] - doc["start"]


def measure(workload: str, observer: str, rep: int, sources: dict[str, str], workdir: str) -> Run:
    cmd = list(WORKLOADS[workload])
    env = dict(os.environ)
    env["TMPDIR"] = workdir
    out = os.path.join(workdir, f"{workload}-{observer}-{rep}.json")
    if observer != "alone":
        env["PYTHONPATH"] = sources[observer]
        cmd = [sys.executable, "-m", "memgap", "run", "--interval", str(INTERVAL), "--json", out, "--", *cmd]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=workdir)
    run = Run(workload, observer, rep, time.perf_counter() - started, load)
    if proc.returncode != 0:
        run.error = f"exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-300:]}"
    elif observer != "alone" and workload == "big-libs":
        timeline(out, run)
    shutil.rmtree(out + ".d", ignore_errors=True)
    return run


def _spread(values: list[float], spec: str = ".3f") -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{spec}} [{min(values):{spec}}-{max(values):{spec}}]"


def render(runs: list[Run]) -> list[str]:
    lines = []
    big = [r for r in runs if r.workload == "big-libs" and not r.error]
    for observer in ("run-base", "run-new"):
        mine = [r for r in big if r.observer == observer]
        if not mine:
            continue
        slow = [r.slowest_read for r in mine if r.slowest_read is not None]
        lines.append(f"big-libs {observer}: share of samples {_spread([r.samples / r.asked for r in mine])}, "
                     f"largest gap {_spread([r.largest_gap for r in mine])} s, peak breakdown taken "
                     f"{sum(r.peak_taken for r in mine)}/{len(mine)}, slowest read {_spread(slow, '.2f')} s, "
                     f"load {_spread([r.load for r in mine], '.1f')}")
    plain = {(r.observer, r.rep): r for r in runs if r.workload == "plain-8s" and not r.error}
    for observer in ("run-base", "run-new"):
        ratios = [plain[(observer, rep)].wall / plain[("alone", rep)].wall for (o, rep) in plain
                  if o == observer and ("alone", rep) in plain]
        if ratios:
            walls = [r.wall for (o, _), r in plain.items() if o == observer]
            lines.append(f"plain-8s {observer}: wall {_spread(walls)} s, ratio to alone {_spread(ratios)} "
                         f"({len(ratios)} pairs)")
    alone = [r.wall for (o, _), r in plain.items() if o == "alone"]
    if alone:
        lines.append(f"plain-8s alone: wall {_spread(alone)} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions (7)")
    parser.add_argument("--base", default="main",
                        help="the git revision to compare with (main); 'none': this tree alone (a machine "
                             "without the repository's history, as the GPU machine's copy)")
    parser.add_argument("--only", choices=list(WORKLOADS), help="one workload only")
    parser.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    opts = parser.parse_args(argv)
    workloads = [opts.only] if opts.only else list(WORKLOADS)
    workdir = tempfile.mkdtemp(prefix="memgap-bench-timeline-")
    runs: list[Run] = []
    try:
        sources = {"run-new": os.path.join(ROOT, "src")}
        if opts.base != "none":
            sources["run-base"] = base_sources(opts.base, workdir)
        print(f"{opts.reps} interleaved reps; base {opts.base}; {os.cpu_count()} cpus", flush=True)
        for rep in range(opts.reps + 1):  # rep 0: the warm-up (agents built, caches warm), not kept
            for workload in workloads:
                observers = [o for o in ("alone", "run-base", "run-new") if o in sources or o == "alone"] \
                    if workload == "plain-8s" else [o for o in ("run-base", "run-new") if o in sources]
                for observer in observers:
                    run = measure(workload, observer, rep, sources, workdir)
                    if rep == 0:
                        continue
                    runs.append(run)
                    print(f"  rep {rep} {workload:<9} {observer:<9} wall {run.wall:6.2f} s load {run.load:4.1f}"
                          + (f" samples {run.samples}/{run.asked} gap {run.largest_gap:.3f} s peak "
                             f"{'taken' if run.peak_taken else 'MISSED'} slowest read {run.slowest_read}"
                             if run.asked else "") + (f"  FAILED {run.error}" if run.error else ""), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print("\n".join(render(runs)))
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"base": opts.base, "reps": opts.reps, "runs": [asdict(r) for r in runs]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
