"""One look (`memgap inspect PID`) beside reading the kernel's own files, on big processes (issue 30).

Targets, each a program that does not import memgap, started here and stopped at the end:

- ``unit``: a small Python process (``python3 -c 'import sys; sys.stdin.read()'``): its look is the unit;
- ``llvm``: a Python process that maps libLLVM-14, libLLVM-15 and libclang-cpp-14 with ctypes
  (``tests/programs/big/big_libs.py``);
- ``chunks``: a C heap of 1.8 million live 16-256 B chunks and a 1 GiB buffer
  (``tests/programs/big/many_chunks.c``, built with gcc into a temporary folder);
- ``tree9``: a master and 8 forked workers (``tests/programs/big/tree9.py``), looked at with
  ``inspect --tree``;
- ``service``: the standard library's threaded HTTP server after a few requests
  (``tests/programs/service/http_service.py``);
- ``anon``: a Python process holding 1.5 GiB of private anonymous memory it wrote through its own
  ``mmap`` (no allocator's: a GPU process's driver memory is such), searched for mmapped chunks and
  pymalloc arenas as memgap searches any unclaimed anonymous memory.

For each of ``--rounds`` rounds, target after target (A B C D E, A B C D E, ...):

- ``first``: ``memgap inspect PID`` as the user runs it (the ``memgap`` command beside this Python,
  else ``python -m memgap``), timed around the subprocess, with memgap's cache of what it read of
  files empty: a fresh empty ``TMPDIR``, ``XDG_CACHE_HOME`` and ``HOME`` for each first look, so it
  is empty wherever memgap keeps it;
- ``second``: another ``memgap inspect PID`` with the same environment (its cache as the first left it);
- ``kernel``: reading, in this process with plain reads, /proc/PID/smaps, smaps_rollup and the
  pagemap's entries for every mapped range (of every process of the tree).

Per target: median [min-max] seconds of each, each look's ratio to the unit's look of the same kind
(first to first, second to second: medians), the look over the kernel's reads, and the 1-minute load
average as its rounds began and ended. Then the issue's goals and whether each held: the llvm
process's first look at most 2x the unit's, its second at most 1.25x, the chunks' first at most 2x.

Then the run's timeline (unless ``--no-run``): ``memgap run --interval 0.1 --json FILE -- python3
big_libs.py --grow 10 --rest 3`` (a process whose look is slow: the big libraries, growing 40 MiB/s
for 10 s, then resting 3 s). From the run's JSON (``timeline``: one sample per process per tick,
``{"t", "pid", "rss", ...}``; the process's ``peak``: the snapshot read at its highest RSS): that
process's samples per second against 1/interval, the share of the samples its interval asks for
over its sampled span (goal: at least 90%), the largest gap between two of its samples (goal: at
most 3 intervals), and whether its peak breakdown was taken (a ``peak`` snapshot whose RSS is within
10% or 8 MiB of the timeline's highest sample, the margin tests/live/test_tree_run.py holds).

And memgap's own start (item 4): ``memgap --help`` beside ``python -c pass``, ``python -c 'import
argparse'`` and ``python -c 'import argparse, rich.console, rich.table'`` (what a look's table
needs), each with the Python that runs memgap, interleaved, ``--rounds`` x 3 times.

Run from the repository root (about 3 minutes with the defaults on 2 cores; needs gcc and
llvm-14, llvm-15, libclang-cpp14)::

    .venv/bin/python benchmarks/bench_look.py [--rounds 3] [--no-run] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG = os.path.join(ROOT, "tests", "programs", "big")
PYTHON = os.path.realpath(sys.executable)  # the interpreter itself, not a venv's: targets know nothing of memgap
MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


def memgap_command() -> tuple[list[str], dict[str, str]]:
    """The ``memgap`` command beside this Python (a venv's), else ``python -m memgap`` on src/."""
    script = os.path.join(os.path.dirname(sys.executable), "memgap")
    if os.access(script, os.X_OK):
        return [script], {}
    path = os.pathsep.join(p for p in (os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")) if p)
    return [sys.executable, "-m", "memgap"], {"PYTHONPATH": path}


MEMGAP, MEMGAP_ENV = memgap_command()


@dataclass
class Target:
    """A running program to look at: its processes (the first is the one looked at)."""

    name: str
    proc: subprocess.Popen[str]
    pids: list[int]
    look_args: tuple[str, ...] = ()
    first: list[float] = field(default_factory=list)
    second: list[float] = field(default_factory=list)
    kernel: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def rss(self) -> int:
        total = 0
        for pid in self.pids:
            with open(f"/proc/{pid}/status") as fh:
                total += next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))
        return total

    def stop(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def _started(name: str, argv: Sequence[str], look_args: tuple[str, ...] = ()) -> Target:
    """Start ``argv`` with a pipe on stdin (closed to stop it) and wait for its "ready PID..." line."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != "ready":
        proc.kill()
        raise SystemExit(f"{name}: {' '.join(argv)} did not start (it said {' '.join(line)!r})")
    pids = [int(w) for w in line[1:] if w.isdigit()] if name == "tree9" else [int(line[1])]
    return Target(name, proc, pids, look_args)


def _service() -> Target:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = os.path.join(ROOT, "tests", "programs", "service", "http_service.py")
    proc = subprocess.Popen([PYTHON, script, str(port)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            for _ in range(8):  # a few requests, so it holds what a service holds
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("service: the HTTP service did not answer") from None
            time.sleep(0.1)
    return Target("service", proc, [proc.pid])


ANON = ("import mmap, os, sys\nm = mmap.mmap(-1, 1536 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
        "for at in range(0, 1536 << 20, 1 << 20):\n    m[at:at + (1 << 20)] = b'\\1' * (1 << 20)\n"
        "print('ready', os.getpid(), flush=True)\nsys.stdin.read()\n")


def start_targets(folder: str) -> list[Target]:
    exe = os.path.join(folder, "many_chunks")
    subprocess.run(["gcc", "-O2", "-o", exe, os.path.join(BIG, "many_chunks.c")], check=True)
    targets = [_started("unit", [PYTHON, "-c", "import os, sys; print('ready', os.getpid(), flush=True); "
                                              "sys.stdin.read()"])]
    try:
        targets.append(_started("llvm", [PYTHON, os.path.join(BIG, "big_libs.py")]))
        targets.append(_started("chunks", [exe]))
        targets.append(_started("tree9", [PYTHON, os.path.join(BIG, "tree9.py")], ("--tree",)))
        targets.append(_service())
        targets.append(_started("anon", [PYTHON, "-c", ANON]))
    except BaseException:
        for t in targets:
            t.stop()
        raise
    return targets


def look(target: Target, env: dict[str, str]) -> float:
    """Wall seconds of one ``memgap inspect PID`` (its failure kept, said at the end)."""
    started = time.perf_counter()
    out = subprocess.run([*MEMGAP, "inspect", str(target.pids[0]), *target.look_args], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - started
    if out.returncode != 0:
        target.failures.append(f"exit {out.returncode}: {out.stderr.strip()[-200:]}")
    return took


def _ranges(pid: int) -> list[tuple[int, int]]:
    with open(f"/proc/{pid}/maps") as fh:
        spans = [line.split(None, 1)[0].split("-") for line in fh]
    return [(int(a, 16), int(b, 16)) for a, b in spans if int(a, 16) < 1 << 47]  # [vsyscall] is not in pagemap


def read_kernel_files(pids: Sequence[int]) -> float:
    """Seconds to read smaps, smaps_rollup and the pagemap of every mapped range, plain reads."""
    started = time.perf_counter()
    for pid in pids:
        for name in ("smaps", "smaps_rollup"):
            with open(f"/proc/{pid}/{name}", "rb") as fh:
                fh.read()
        with open(f"/proc/{pid}/pagemap", "rb", buffering=0) as fh:
            for start, end in _ranges(pid):
                fh.seek(start // PAGE * 8)
                left = (end - start) // PAGE * 8
                while left > 0:
                    chunk = fh.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    left -= len(chunk)
    return time.perf_counter() - started


def fresh_env(folder: str) -> dict[str, str]:
    """The environment of a new user: memgap's private folder, wherever it is, empty."""
    places = {var: os.path.join(folder, sub) for var, sub in
              (("TMPDIR", "tmp"), ("XDG_CACHE_HOME", "cache"), ("HOME", "home"))}
    for path in places.values():
        os.makedirs(path, mode=0o700)
    return {**os.environ, **MEMGAP_ENV, **places}


def one_round(targets: Sequence[Target]) -> None:
    for target in targets:
        target.loads.append(os.getloadavg()[0])
        folder = tempfile.mkdtemp(prefix="bench-look-")
        try:
            env = fresh_env(folder)
            target.first.append(look(target, env))
            target.second.append(look(target, env))
            target.kernel.append(read_kernel_files(target.pids))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        target.loads.append(os.getloadavg()[0])


def spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):6.3f} [{min(values):.3f}-{max(values):.3f}]"


def report_looks(targets: Sequence[Target]) -> dict[str, dict[str, float]]:
    unit = targets[0]
    rows: dict[str, dict[str, float]] = {}
    print(f"\nlooks: medians over {len(unit.first)} interleaved rounds; 'x unit': median over the unit's "
          f"look of the same kind\n")
    print(f"{'target':8} {'procs':>5} {'RSS MiB':>8}  {'first look s':>21} {'x unit':>6}  {'second look s':>21} "
          f"{'x unit':>6}  {'kernel files s':>21} {'look/kernel':>11}  load")
    for t in targets:
        first, second, kernel = (statistics.median(v) for v in (t.first, t.second, t.kernel))
        row = {"first": first, "second": second, "kernel": kernel,
               "first_x_unit": first / statistics.median(unit.first),
               "second_x_unit": second / statistics.median(unit.second), "rss": t.rss() / MiB}
        rows[t.name] = row
        print(f"{t.name:8} {len(t.pids):5d} {row['rss']:8.1f}  {spread(t.first):>21} {row['first_x_unit']:6.2f}  "
              f"{spread(t.second):>21} {row['second_x_unit']:6.2f}  {spread(t.kernel):>21} "
              f"{first / max(kernel, 1e-9):11.1f}  {t.loads[0]:.2f}->{t.loads[-1]:.2f}")
    for t in targets:
        for failure in dict.fromkeys(t.failures):
            print(f"  {t.name}: a look failed: {failure}")
    return rows


def goal(text: str, held: bool, figure: str) -> None:
    print(f"  {text}: {'held' if held else 'MISSED'} ({figure})")


def report_goals(rows: dict[str, dict[str, float]]) -> None:
    print("\ngoals (issue 30), as ratios to the unit's look:")
    llvm, chunks = rows["llvm"], rows["chunks"]
    goal("llvm first look <= 2x", llvm["first_x_unit"] <= 2, f"{llvm['first_x_unit']:.2f}x")
    goal("llvm second look <= 1.25x", llvm["second_x_unit"] <= 1.25, f"{llvm['second_x_unit']:.2f}x")
    goal("chunks first look <= 2x", chunks["first_x_unit"] <= 2, f"{chunks['first_x_unit']:.2f}x")


@dataclass
class Timeline:
    """The run's timeline of one process, against its interval."""

    interval: float
    times: list[float]
    highest: int
    peak_rss: int | None
    peak_read: float | None
    duration: float

    @property
    def span(self) -> float:
        return self.times[-1] - self.times[0]

    @property
    def share(self) -> float:
        return len(self.times) / (self.span / self.interval + 1)

    @property
    def gap(self) -> float:
        return max((b - a for a, b in zip(self.times, self.times[1:], strict=False)), default=0.0)

    @property
    def peak_taken(self) -> bool:
        return self.peak_rss is not None and self.peak_rss >= self.highest - max(self.highest // 10, 8 * MiB)


def timeline_of(doc: dict[str, Any], marker: str) -> Timeline:
    """The timeline of the process whose command line holds ``marker``, from a run's JSON."""
    proc = next(p for p in doc["processes"] if any(marker in str(word) for word in p["cmd"]))
    samples = [s for s in doc["timeline"] if s["pid"] == proc["pid"]]
    peak = proc.get("peak") or {}
    return Timeline(float(doc["interval"]), sorted(float(s["t"]) for s in samples),
                    max(int(s["rss"]) for s in samples), peak.get("rss"), peak.get("collect_seconds"),
                    float(doc["duration"]))


def run_timeline(folder: str, interval: float) -> Timeline:
    out = os.path.join(folder, "run.json")
    argv = [*MEMGAP, "run", "--interval", str(interval), "--json", out, "--",
            PYTHON, os.path.join(BIG, "big_libs.py"), "--grow", "10", "--rest", "3"]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(argv, env={**os.environ, **MEMGAP_ENV}, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"memgap run failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    with open(out) as fh:
        t = timeline_of(json.load(fh), "big_libs.py")
    print(f"\nthe run's timeline: memgap run --interval {interval:g} -- python3 big_libs.py --grow 10 --rest 3 "
          f"({wall:.1f} s, load {load:.2f}->{os.getloadavg()[0]:.2f})")
    print(f"  samples of the process: {len(t.times)} over {t.span:.2f} s: "
          f"{(len(t.times) - 1) / max(t.span, 1e-9):.2f} per second against {1 / interval:g} asked")
    print(f"  peak breakdown: {'taken' if t.peak_taken else 'NOT taken'} (peak snapshot "
          f"{(t.peak_rss or 0) / MiB:.1f} MiB, its collect_seconds {t.peak_read or 0:.2f}; "
          f"highest sample {t.highest / MiB:.1f} MiB)")
    goal("samples >= 90% of those the interval asks for", t.share >= 0.9, f"{t.share:.1%}")
    goal("largest gap <= 3 intervals", t.gap <= 3 * interval, f"{t.gap:.2f} s, {t.gap / interval:.1f} intervals")
    goal("peak breakdown taken", t.peak_taken, f"{(t.peak_rss or 0) / MiB:.1f} of {t.highest / MiB:.1f} MiB")
    return t


def start_figures(rounds: int) -> dict[str, list[float]]:
    """memgap's own start beside the interpreter's and the libraries a look needs, interleaved."""
    cases: dict[str, list[str]] = {
        "python -c pass": [sys.executable, "-c", "pass"],  # memgap's interpreter, its site-packages read as memgap's
        "python -c 'import argparse'": [sys.executable, "-c", "import argparse"],
        "memgap --help": [*MEMGAP, "--help"],
        "python -c 'import argparse, rich...'": [sys.executable, "-c", "import argparse, rich.console, rich.table"],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    env = {**os.environ, **MEMGAP_ENV}
    for _ in range(rounds * 3):
        for name, argv in cases.items():
            started = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - started)
    print(f"\nmemgap's start, {rounds * 3} interleaved runs each:")
    for name, values in times.items():
        print(f"  {name:38} {spread(values)} s")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.1, help="the run's interval (0.1)")
    parser.add_argument("--no-run", action="store_true", help="leave out the run's timeline")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    print(f"memgap: {' '.join(MEMGAP)}; python {PYTHON}; {os.cpu_count()} cores; "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-look-") as folder:
        targets = start_targets(folder)
        try:
            for _ in range(args.rounds):
                one_round(targets)
            out["looks"] = report_looks(targets)
            out["raw"] = {t.name: {"first": t.first, "second": t.second, "kernel": t.kernel, "loads": t.loads}
                          for t in targets}
        finally:
            for t in targets:
                t.stop()
        report_goals(out["looks"])
        if not args.no_run:
            line = run_timeline(folder, args.interval)
            out["timeline"] = {"samples": len(line.times), "span": line.span, "share": line.share, "gap": line.gap,
                               "peak_taken": line.peak_taken, "peak_rss": line.peak_rss, "highest": line.highest}
    out["start"] = start_figures(args.rounds)
    print(f"\nload at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
