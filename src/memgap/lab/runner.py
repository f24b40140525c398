"""Run the workload once per variant and repetition, interleaved, recording each run."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from ..recording import RecordingWriter
from ..runs import BOOTSTRAP_DIR, RunOptions, load_run, machine_info, record_run
from .metrics import RunMetrics, run_metrics
from .variants import TRIM_AFTER_ENV, Variant
from .verdict import Verdict, decide, summarize

LAB_SCHEMA = "memgap.lab/1"


@dataclass
class LabOptions:
    cmd: list[str]
    variants: list[Variant]
    reps: int = 3
    timeout: float = 600.0
    max_slowdown: float = 0.05
    interval: float = 0.1
    lab_dir: str = ""
    quiet_workload: bool = True
    metric: str = ""  # a throughput the workload reports with memgap.metric(); else wall time counts
    skipped: list[str] = field(default_factory=list)


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_lab(options: LabOptions, progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Every variant x repetition, interleaved (A B C A B C ...); returns the lab document.

    Each finished run is appended to ``lab.jsonl`` in the lab folder at once,
    so an interrupted lab keeps every run recorded so far.
    """
    os.makedirs(options.lab_dir, exist_ok=True)
    events = RecordingWriter(os.path.join(options.lab_dir, "lab.jsonl"))
    events.write({"type": "header", "schema": LAB_SCHEMA, "cmd": options.cmd, "reps": options.reps,
                  "variants": [v.spec for v in options.variants], "skipped": options.skipped,
                  "machine": machine_info()})
    results: list[RunMetrics] = []
    started = time.monotonic()
    total = len(options.variants) * options.reps
    interrupted = False
    try:
        for rep in range(1, options.reps + 1):
            for variant in options.variants:
                order = len(results) + 1
                result = _run_one(options, variant, rep, order)
                results.append(result)
                events.write({"type": "run", **asdict(result)})
                progress(_progress_line(order, total, result))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        events.close()
    doc = lab_document(options, results, time.monotonic() - started, interrupted)
    if interrupted:
        raise LabInterrupted(doc)
    return doc


class LabInterrupted(KeyboardInterrupt):
    """Raised after an interrupted lab has assembled what it recorded so far."""

    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__("lab interrupted")
        self.document = document


def _run_one(options: LabOptions, variant: Variant, rep: int, order: int) -> RunMetrics:
    slug = "".join(c if c.isalnum() else "-" for c in variant.spec)[:60]
    record_dir = os.path.join(options.lab_dir, f"run-{order:03d}-{slug}")
    env = variant.env()
    env.setdefault(TRIM_AFTER_ENV, "idle")  # every run measures what one trim at idle releases
    sink = subprocess.DEVNULL if options.quiet_workload else None
    cpu_before = _cpu_of_children()
    record_run(RunOptions(options.cmd, record_dir, options.interval, env=env, timeout=options.timeout,
                          stdout=sink, stderr=sink))
    cpu = _cpu_of_children() - cpu_before
    run = load_run(record_dir)
    return run_metrics(run, variant.spec, rep, order, cpu, trims_at_idle=variant.trim == "idle",
                       allocator=variant.allocator, metric=options.metric)


def _progress_line(order: int, total: int, r: RunMetrics) -> str:
    idle = f"idle {r.idle / 2**20:.0f} MiB" if r.idle is not None else "no idle"
    status = "" if r.status == "ok" else f" [{r.status}{': ' + r.note if r.note else ''}]"
    return f"[{order}/{total}] {r.variant} (rep {r.rep}): {idle}, {r.wall:.1f} s{status}"


def recommendation_lines(variant: Variant) -> dict[str, Any]:
    """The ways to apply a variant: env lines, Dockerfile, systemd, Python for spawned children."""
    env = variant.env()
    notes = []
    if variant.trim:
        env["PYTHONPATH"] = BOOTSTRAP_DIR
        notes.append("PYTHONPATH: put memgap's bootstrap folder in front of any PYTHONPATH the program has; "
                     "memgap must be importable by the program's Python")
        if variant.trim == "idle":
            notes.append("trim=idle trims after the program calls memgap.phase('idle'); in a program that "
                         "marks no phase, call memgap.trim() after each burst instead")
    if variant.library:
        notes.append(f"{variant.library} must exist where the program runs "
                     f"(Debian: apt-get install {_package(variant)})")
    items = list(env.items())
    return {
        "env": env,
        "shell": [f"{k}={_quote(v)}" for k, v in items],
        "dockerfile": ("ENV " + " \\\n    ".join(f"{k}={_quote(v)}" for k, v in items)) if items else "",
        "systemd": [f'Environment="{k}={v}"' for k, v in items],
        "python": ("import os\n"
                   "# before the child process starts: the allocator reads these when it starts\n"
                   f"os.environ.update({dict(items)!r})\n"
                   "# multiprocessing children (spawn or forkserver) and subprocess.Popen inherit os.environ"),
        "notes": notes,
    }


def _package(variant: Variant) -> str:
    from .variants import LIBRARIES

    return LIBRARIES[variant.allocator][1]


def _quote(value: str) -> str:
    """A value as the shell and a Dockerfile read it."""
    if value and all(c.isalnum() or c in "/._-:,=+" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'



def lab_document(options: LabOptions, results: list[RunMetrics], seconds: float,
                 interrupted: bool = False) -> dict[str, Any]:
    by_spec = {v.spec: [r for r in results if r.variant == v.spec] for v in options.variants}
    baseline = next((v for v in options.variants if v.is_baseline), None)
    base_runs = by_spec.get(baseline.spec, []) if baseline else []
    summaries = [summarize(v, by_spec[v.spec], base_runs) for v in options.variants if by_spec[v.spec]]
    verdict: Verdict = decide(summaries, baseline.spec if baseline else "", options.max_slowdown)
    recommendation = None
    if verdict.recommended is not None:
        chosen = next(v for v in options.variants if v.spec == verdict.recommended.spec)
        recommendation = {"variant": chosen.spec, "reason": verdict.reason, **recommendation_lines(chosen)}
    workload_seconds = sum(r.wall for r in results)
    return {
        "schema": LAB_SCHEMA,
        "cmd": options.cmd,
        "machine": machine_info(),
        "python": sys.version.split()[0],
        "reps": options.reps,
        "max_slowdown": options.max_slowdown,
        "metric": options.metric or "wall time",
        "order": [f"{r.variant}#{r.rep}" for r in results],
        "runs": [asdict(r) for r in results],
        "baseline": baseline.spec if baseline else None,
        "variants": [asdict(s) for s in verdict.summaries],
        "skipped": options.skipped,
        "verdict": verdict.reason,
        "recommendation": recommendation,
        "lab_seconds": round(seconds, 3),
        "workload_seconds": round(workload_seconds, 3),
        "complete": not interrupted and len(results) == len(options.variants) * options.reps,
        "lab_dir": options.lab_dir,
    }
