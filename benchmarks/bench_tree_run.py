"""What recording a C process tree costs: `memgap run` of an earlier memgap beside this one.

Since issue 22, `memgap run` reads every process of the tree from outside at its first sight, at
each new high (10% or 8 MiB above its last peak read), at its quiet spells and at its exit, which
memgap's preloaded agent holds (1 s at most) until the recorder has read the process. This
measures what that adds, on two C workloads that know nothing of memgap
(``tests/programs/tree_work.c``):

- ``c-tree``: ``tree_work exec 200 1``: a parent whose exec'd child mallocs 200 MiB in 4 KB
  blocks, works over them 0.4 s, frees 15 of 16, rests 1 s and exits;
- ``many-exits``: ``tree_work many 200``: 200 ``/bin/true`` run one after the other (each exit
  held for its read: the worst case of the hold, per exit);
- ``python``: ``tree_work run python -m memgap.scenarios.asyncburst ...`` (bench_run_overhead's
  scenario and knobs, under a C parent that times it): what reading a Python process from outside
  at its peaks costs it (its exit is its own, not held: the agent stays dormant in Python).

Observers, interleaved (A B C, A B C, ...) for ``--reps`` repetitions after one warm-up each:

- ``unobserved``: the workload alone;
- ``run-base``: ``memgap run --interval 0.1`` of the sources at ``--base`` (default ``main``),
  taken with ``git archive`` into a temporary folder (its agent built from its own agent.c);
- ``run-new``: the same with this tree's sources.

Per run: ``tree wall``, the workload's own time (its first process's, printed as it returns:
the holds of its children's exits are in it, its own exit's is not); ``memgap cpu``, the CPU
seconds of memgap itself (the command's rusage, the workload's reaped descendants included, less
the CPU the workload counts for its own tree); ``wall``, the whole command. Medians, with the
range, per observer and workload.

Then the differences run-new minus run-base, repetition by repetition (each pair ran back to
back, so a busy moment of the machine weighs on both), their medians and ranges.

Run from the repository root (about 3 minutes with the defaults on 2 cores)::

    PYTHONPATH=src python benchmarks/bench_tree_run.py [--reps 7] [--base main] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "tests", "programs", "tree_work.c")
WORKLOADS = {"c-tree": ["exec", "200", "1"], "many-exits": ["many", "200"],
             # a Python program under the C parent: what the outside reads of a Python process cost it
             "python": ["run", sys.executable, "-m", "memgap.scenarios.asyncburst", "--bursts", "4",
                        "--concurrency", "12", "--events", "1000", "--payload-kib", "8", "--rest", "1.0"]}
OBSERVERS = ("unobserved", "run-base", "run-new")
ROOT_LINE = re.compile(r"^tree_work root wall=([\d.]+) cpu=([\d.]+)$", re.M)


@dataclass
class Run:
    workload: str
    observer: str
    rep: int
    wall: float         # the whole command, seconds
    tree_wall: float    # the workload's own, from its first process
    tree_cpu: float     # the workload's CPU (its first process and its waited-for descendants)
    memgap_cpu: float   # the command's CPU less the workload's: memgap's own (0 unobserved)
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
    return os.path.join(folder, "src")


def measure(workload: str, observer: str, rep: int, exe: str, sources: dict[str, str], workdir: str) -> Run:
    cmd = [exe, *WORKLOADS[workload]]
    env = dict(os.environ)
    env["PYTHONPATH"] = sources["run-new" if observer == "unobserved" else observer]  # the scenario's too
    if observer != "unobserved":
        cmd = [sys.executable, "-m", "memgap", "run", "--interval", "0.1", "--", *cmd]
    env["TMPDIR"] = workdir  # the recording's folder
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=workdir)
    _, stderr = proc.communicate()
    wall = time.perf_counter() - started
    usage = resource_of(proc)
    text = stderr.decode(errors="replace")
    own = ROOT_LINE.search(text)
    if proc.returncode != 0 or own is None:
        return Run(workload, observer, rep, wall, 0.0, 0.0, 0.0, f"exit {proc.returncode}: {text[-300:]}")
    tree_wall, tree_cpu = float(own.group(1)), float(own.group(2))
    memgap_cpu = max(0.0, usage - tree_cpu) if observer != "unobserved" else 0.0
    return Run(workload, observer, rep, wall, tree_wall, tree_cpu, memgap_cpu)


_last_children = [0.0]


def resource_of(proc: subprocess.Popen[bytes]) -> float:
    """CPU seconds of the command just waited for, with the children it reaped (RUSAGE_CHILDREN grows
    by exactly that as each command is waited for)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    delta, _last_children[0] = total - _last_children[0], total
    return delta


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def render(runs: list[Run]) -> str:
    header = ("workload", "observer", "ok", "tree wall s med [min-max]", "memgap cpu s med [min-max]",
              "wall s med [min-max]")
    rows = [header]
    for workload in WORKLOADS:
        for observer in OBSERVERS:
            mine = [r for r in runs if r.workload == workload and r.observer == observer]
            ok = [r for r in mine if not r.error]
            rows.append((workload, observer, f"{len(ok)}/{len(mine)}", _spread([r.tree_wall for r in ok]),
                         _spread([r.memgap_cpu for r in ok]) if observer != "unobserved" else "-",
                         _spread([r.wall for r in ok])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", *paired(runs)])


def paired(runs: list[Run]) -> list[str]:
    """run-new minus run-base, repetition by repetition (each pair ran back to back): medians."""
    out = []
    for workload in WORKLOADS:
        by = {(r.observer, r.rep): r for r in runs if r.workload == workload and not r.error}
        reps = sorted({rep for _, rep in by})
        pairs = [(by[("run-new", rep)], by[("run-base", rep)]) for rep in reps
                 if ("run-new", rep) in by and ("run-base", rep) in by]
        if not pairs:
            continue
        wall = [new.tree_wall - base.tree_wall for new, base in pairs]
        cpu = [new.memgap_cpu - base.memgap_cpu for new, base in pairs]
        out.append(f"{workload}: run-new - run-base, paired: tree wall {_spread(wall)} s, "
                   f"memgap cpu {_spread(cpu)} s ({len(pairs)} pairs)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions (7)")
    parser.add_argument("--base", default="main", help="the git revision to compare with (main)")
    parser.add_argument("--json", metavar="FILE", help="also write every run as JSON")
    opts = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="memgap-bench-tree-")
    try:
        exe = os.path.join(workdir, "tree_work")
        subprocess.run(["gcc", "-O1", "-o", exe, PROGRAM], check=True)
        sources = {"run-base": base_sources(opts.base, workdir), "run-new": os.path.join(ROOT, "src")}
        named = ", ".join(f"{k} ({' '.join(v)})" for k, v in WORKLOADS.items())
        print(f"workloads: {named}; {opts.reps} interleaved reps; base {opts.base}")
        print(f"machine: {os.cpu_count()} cpus, glibc {' '.join(platform.libc_ver())}, "
              f"Python {platform.python_version()}", flush=True)
        runs: list[Run] = []
        for rep in range(opts.reps + 1):  # rep 0: the warm-up (agents built, caches warm), not kept
            for workload in WORKLOADS:
                for observer in OBSERVERS:
                    run = measure(workload, observer, rep, exe, sources, workdir)
                    if rep == 0:
                        continue
                    runs.append(run)
                    print(f"  rep {rep} {workload:<10} {observer:<10} tree wall {run.tree_wall:6.3f} s  "
                          f"memgap cpu {run.memgap_cpu:6.3f} s  wall {run.wall:6.3f} s"
                          + (f"  FAILED {run.error}" if run.error else ""), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(render(runs))
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"base": opts.base, "reps": opts.reps, "runs": [asdict(r) for r in runs]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
