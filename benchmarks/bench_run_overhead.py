"""Observer effect: what it costs to watch the async-burst scenario.

Runs ``memgap.scenarios.asyncburst`` under each observer, interleaved
(A B C D E, A B C D E, ...) for ``--reps`` repetitions, and reports per
observer the wall time of the whole command, its ratio to the unobserved run
of the same repetition, the scenario's own idle RSS (its ``memgap-phase: idle
rss_kib=`` line) and the peak RSS. Then it checks the goals for ``memgap run``:
at most 2% more wall time, at most 3 MiB more idle RSS, and an idle RSS inside
the unobserved range (retention unchanged).

Observers:

- ``unobserved``: ``python -m memgap.scenarios.asyncburst`` alone (a
  scenario takes snapshots only when ``memgap run`` records it).
- ``memgap-run``: ``memgap run --interval 0.1 -- python -m ...``: 10 Hz
  sampling of the tree, phase snapshots, the exit snapshot, the final report.
- ``memgap-run-walk``: the same with ``--walk`` (phase snapshots also walk
  the gc for large buffers, O(objects)): what that option costs.
- ``tracemalloc``: the scenario with ``PYTHONTRACEMALLOC=1``.
- ``memray``: ``python -m memray run --quiet -o FILE -m memgap.scenarios...``,
  when memray is importable (skipped, and said so, when it is not).

Peak RSS is ``ru_maxrss`` from ``os.wait4`` on the command. For ``memgap run``
the scenario is a grandchild that memgap reaps, and Linux folds a reaped
child's peak into its parent's wait4 figure: that row's peak is max(memgap,
scenario). memgap's own peak is read separately, by polling ``VmHWM`` of the
memgap process every 50 ms while it runs (a high-water mark, so only growth in
its last 50 ms could be missed). ``getrusage(RUSAGE_CHILDREN)`` deltas would
not help: its ru_maxrss is the largest child ever, not a sum.

Run from the repository root (about 2 minutes with the defaults on 2 cores)::

    PYTHONPATH=src python benchmarks/bench_run_overhead.py [--reps 5] [--json out.json]
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
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
sys.path.insert(0, SRC)

from memgap.scenarios import SCENARIOS, scenario_command  # noqa: E402

SCENARIO = "asyncburst"
#: the scenario's knobs for the measured runs: about 3 s unobserved on 2 cores, 2 s
#: of bursts (the work an observer slows down) then the 1 s rest before `idle`;
#: about 110 MiB idle, 180 MiB peak
KNOBS = {"bursts": 4, "concurrency": 12, "events": 1000, "payload_kib": 8, "rest": 1.0}
#: a tiny run of each observer first, unrecorded, to warm caches and .pyc files
WARMUP_KNOBS = {"bursts": 1, "concurrency": 2, "events": 10, "payload_kib": 1, "rest": 0.0}
OBSERVERS = ("unobserved", "memgap-run", "memgap-run-walk", "tracemalloc", "memray")
GOAL_WALL_RATIO = 1.02
GOAL_RSS_KIB = 3 * 1024

LEGEND = """\
ratio: median over repetitions of (this run / the unobserved run of the same repetition)
span: from the scenario's first output line to its idle line (no interpreter start-up,
  no memgap start-up or report); cpu: user+system of the command and the children it reaped
idle: the scenario's own VmRSS at its idle mark; d idle: median minus unobserved median
peak: ru_maxrss of the command; for memgap-run that is max(memgap, scenario)"""

IDLE_LINE = re.compile(r"^memgap-phase: idle rss_kib=(\d+)\s*$", re.MULTILINE)
START_LINE = "memgap-scenario: "

@dataclass
class Run:
    observer: str
    rep: int
    wall: float  # seconds, the whole command
    span: float | None  # seconds from the scenario's first line to its idle line
    cpu: float  # user + system seconds of the command and the children it reaped
    idle_kib: int | None
    peak_kib: int  # ru_maxrss of the command (see the module docstring)
    observer_peak_kib: int | None = None  # memgap's own VmHWM, memgap-run only
    exit_code: int = 0
    error: str = ""


def memray_available() -> bool:
    try:
        import memray  # noqa: F401
    except ImportError:
        return False
    return True


def command(observer: str, knobs: dict[str, object], workdir: str, rep: int) -> list[str]:
    plain = scenario_command(SCENARIO, **knobs)  # [python, -m, module, --knob, value, ...]
    if observer in ("unobserved", "tracemalloc"):
        return plain
    if observer == "memgap-run":
        return [sys.executable, "-m", "memgap", "run", "--interval", "0.1", "--", *plain]
    if observer == "memgap-run-walk":
        return [sys.executable, "-m", "memgap", "run", "--walk", "--interval", "0.1", "--", *plain]
    if observer == "memray":
        out = os.path.join(workdir, f"memray-{rep}.bin")
        return [sys.executable, "-m", "memray", "run", "--quiet", "--force", "-o", out, *plain[1:]]
    raise ValueError(observer)


def environment(observer: str, workdir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env["TMPDIR"] = workdir  # memgap run keeps its recording under a temp folder
    env.pop("PYTHONTRACEMALLOC", None)
    for var, _default, _help in SCENARIOS[SCENARIO].knobs.values():
        env.pop(var, None)  # the knobs come from the command line only
    if observer == "tracemalloc":
        env["PYTHONTRACEMALLOC"] = "1"
    return env


def _poll_hwm(pid: int, result: list[int], stop: threading.Event) -> None:
    """Keep the last VmHWM (KiB) of ``pid`` in result[0] until ``stop``."""
    path = f"/proc/{pid}/status"
    while not stop.is_set():
        try:
            with open(path, "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmHWM:"):
                        result[0] = max(result[0], int(line.split()[1]))
                        break
        except (OSError, ValueError):
            return
        stop.wait(0.05)


def measure(observer: str, rep: int, knobs: dict[str, object], workdir: str) -> Run:
    cmd = command(observer, knobs, workdir, rep)
    stderr_path = os.path.join(workdir, "stderr.txt")
    with open(stderr_path, "wb") as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr,
                                env=environment(observer, workdir), cwd=workdir)
        hwm = [0]
        stop = threading.Event()
        poller = None
        if observer.startswith("memgap-run"):
            poller = threading.Thread(target=_poll_hwm, args=(proc.pid, hwm, stop), daemon=True)
            poller.start()
        first = idle_at = None
        lines = []
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            if first is None and line.startswith(START_LINE):
                first = time.perf_counter()
            elif idle_at is None and IDLE_LINE.match(line):
                idle_at = time.perf_counter()
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        stop.set()
        if poller is not None:
            poller.join()
    text = "".join(lines)
    idle = IDLE_LINE.search(text)
    error = ""
    if proc.returncode != 0 or idle is None:
        with open(stderr_path, errors="replace") as fh:
            tail = [ln.strip() for ln in fh if ln.strip()]
        error = f"exit {proc.returncode}" + (f": {tail[-1]}" if tail else "") + ("" if idle else "; no idle line")
    if observer == "memray":
        for name in os.listdir(workdir):
            if name.startswith("memray-"):
                os.unlink(os.path.join(workdir, name))
    return Run(
        observer=observer, rep=rep, wall=wall,
        span=(idle_at - first) if first is not None and idle_at is not None else None,
        cpu=usage.ru_utime + usage.ru_stime,
        idle_kib=int(idle.group(1)) if idle else None,
        peak_kib=usage.ru_maxrss,
        observer_peak_kib=hwm[0] if poller is not None else None,
        exit_code=proc.returncode, error=error,
    )


# ------------------------------------------------------------------ summary

@dataclass
class Summary:
    observer: str
    runs: int
    failed: int
    wall: list[float] = field(default_factory=list)  # median, min, max
    ratio: float | None = None  # median of per-repetition wall ratios to unobserved
    span: float | None = None
    span_ratio: float | None = None  # the same, for the span (the scenario's own run)
    cpu: float | None = None
    idle_mib: list[float] = field(default_factory=list)  # median, min, max
    idle_delta_mib: float | None = None  # median idle minus unobserved median idle
    peak_mib: float | None = None
    observer_peak_mib: float | None = None


def _spread(values: list[float]) -> list[float]:
    return [statistics.median(values), min(values), max(values)] if values else []


def summarize(runs: list[Run], observers: list[str]) -> dict[str, Summary]:
    base = {r.rep: r for r in runs if r.observer == "unobserved" and not r.error}
    out: dict[str, Summary] = {}
    for name in observers:
        mine = [r for r in runs if r.observer == name]
        ok = [r for r in mine if not r.error]
        s = Summary(name, len(mine), len(mine) - len(ok))
        s.wall = _spread([r.wall for r in ok])
        ratios = [r.wall / base[r.rep].wall for r in ok if r.rep in base]
        s.ratio = statistics.median(ratios) if ratios else None
        spans = [r.span for r in ok if r.span is not None]
        s.span = statistics.median(spans) if spans else None
        span_ratios = [r.span / base[r.rep].span for r in ok
                       if r.span is not None and r.rep in base and base[r.rep].span]
        s.span_ratio = statistics.median(span_ratios) if span_ratios else None
        s.cpu = statistics.median([r.cpu for r in ok]) if ok else None
        s.idle_mib = _spread([r.idle_kib / 1024 for r in ok if r.idle_kib is not None])
        s.peak_mib = statistics.median([r.peak_kib / 1024 for r in ok]) if ok else None
        own = [r.observer_peak_kib / 1024 for r in ok if r.observer_peak_kib]
        s.observer_peak_mib = statistics.median(own) if own else None
        out[name] = s
    ref = out.get("unobserved")
    for s in out.values():
        if ref and ref.idle_mib and s.idle_mib:
            s.idle_delta_mib = s.idle_mib[0] - ref.idle_mib[0]
    return out


def _fmt(x: float | None, spec: str = ".2f", signed: bool = False) -> str:
    if x is None:
        return "-"
    return format(x, ("+" if signed else "") + spec)


def render_table(summaries: dict[str, Summary]) -> str:
    header = ("observer", "ok", "wall s med [min-max]", "ratio", "span s", "ratio", "cpu s",
              "idle MiB med [min-max]", "d idle", "peak MiB")
    rows = [header]
    for s in summaries.values():
        wall = f"{s.wall[0]:.2f} [{s.wall[1]:.2f}-{s.wall[2]:.2f}]" if s.wall else "-"
        idle = f"{s.idle_mib[0]:.1f} [{s.idle_mib[1]:.1f}-{s.idle_mib[2]:.1f}]" if s.idle_mib else "-"
        rows.append((s.observer, f"{s.runs - s.failed}/{s.runs}", wall, _fmt(s.ratio, ".3f"), _fmt(s.span),
                     _fmt(s.span_ratio, ".3f"),
                     _fmt(s.cpu), idle, _fmt(s.idle_delta_mib, ".1f", signed=True), _fmt(s.peak_mib, ".1f")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def goals(summaries: dict[str, Summary]) -> list[str]:
    """One line per goal for memgap run: held, MISSED (by how much) or unknown."""
    m, u = summaries.get("memgap-run"), summaries.get("unobserved")
    if not m or not u or m.ratio is None or not m.idle_mib or not u.idle_mib:
        return ["goals: unknown (memgap-run or unobserved has no successful run)"]
    out = []
    limit = (GOAL_WALL_RATIO - 1) * 100
    extra = (m.ratio - 1) * 100
    out.append(f"wall <= +{limit:.0f}%: {'held' if m.ratio <= GOAL_WALL_RATIO else 'MISSED'} ({extra:+.1f}%)")
    delta = m.idle_delta_mib or 0.0
    out.append(f"idle RSS <= +{GOAL_RSS_KIB // 1024} MiB: "
               f"{'held' if delta * 1024 <= GOAL_RSS_KIB else 'MISSED'} ({delta:+.1f} MiB)")
    lo, hi = u.idle_mib[1], u.idle_mib[2]
    med = m.idle_mib[0]
    outside = "" if lo <= med <= hi else f", {lo - med:.1f} MiB below" if med < lo else f", {med - hi:.1f} MiB above"
    out.append(f"retention unchanged (memgap-run idle median inside unobserved {lo:.1f}-{hi:.1f} MiB): "
               f"{'MISSED' if outside else 'held'} ({med:.1f} MiB{outside})")
    return out


def machine() -> dict[str, object]:
    return {"cpus": os.cpu_count(), "glibc": " ".join(platform.libc_ver()),
            "python": platform.python_version(), "kernel": platform.release()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions (5)")
    parser.add_argument("--json", metavar="FILE", help="also write every run and the summary as JSON")
    opts = parser.parse_args(argv)
    if opts.reps < 1:
        parser.error("--reps must be at least 1")

    observers = list(OBSERVERS)
    notes = []
    if not memray_available():
        observers.remove("memray")
        notes.append("memray: skipped, not importable here (pip install memray)")
    workdir = tempfile.mkdtemp(prefix="memgap-bench-")
    try:
        info = machine()
        print(f"asyncburst {KNOBS}, {opts.reps} interleaved reps, observers: {', '.join(observers)}")
        print(f"machine: {info['cpus']} cpus, glibc {info['glibc']}, Python {info['python']}", flush=True)
        for name in observers:  # warm-up, not recorded
            run = measure(name, 0, WARMUP_KNOBS, workdir)
            if run.error:
                print(f"  warm-up {name}: {run.error}")
        runs: list[Run] = []
        for rep in range(1, opts.reps + 1):
            for name in observers:
                run = measure(name, rep, KNOBS, workdir)
                runs.append(run)
                idle = f"{run.idle_kib / 1024:.1f} MiB" if run.idle_kib is not None else "-"
                print(f"  rep {rep} {name:<12} wall {run.wall:6.2f} s  idle {idle:>10}  "
                      f"peak {run.peak_kib / 1024:6.1f} MiB" + (f"  FAILED {run.error}" if run.error else ""),
                      flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    summaries = summarize(runs, observers)
    print()
    print(render_table(summaries))
    print(LEGEND)
    m = summaries.get("memgap-run")
    if m and m.observer_peak_mib is not None:
        print(f"memgap run's own process (VmHWM, polled): {m.observer_peak_mib:.1f} MiB peak, median")
    for note in notes:
        print(note)
    print()
    print("goals for memgap run, vs unobserved:")
    goal_lines = goals(summaries)
    for line in goal_lines:
        print("  " + line)
    if opts.json:
        doc = {"machine": info, "knobs": KNOBS, "reps": opts.reps, "notes": notes,
               "runs": [asdict(r) for r in runs],
               "summary": {k: asdict(v) for k, v in summaries.items()}, "goals": goal_lines}
        with open(opts.json, "w") as fh:
            json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
