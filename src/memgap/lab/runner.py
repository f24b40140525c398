"""Run the workload once per variant and repetition, interleaved, recording each run."""
from __future__ import annotations

import itertools
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field

from memgap.allocators.variants import Variant, parse_variant, resolve
from memgap.documents.lab_summary import AcrossCell, Cell, Recommendation, SweepRow
from memgap.documents.records import LAB_SCHEMA, LabDocument, RunDocument, RunFigures, RunStatus, TrimMode
from memgap.errors import Unsupported
from memgap.lab.adaptive import cannot_win, needs_every_rep
from memgap.lab.cgroup_limit import CgroupParent, find_parent, make_run_cgroup
from memgap.lab.choose import add_choices, choose, first_reasons, run_evidence, run_runtimes
from memgap.lab.figures import run_figures
from memgap.lab.fork_probe import ForkProbe
from memgap.lab.remedy_lines import recommendation_lines
from memgap.lab.verdict import Verdict, decide, material, run_to_run_spread, summarize
from memgap.record.envnames import TRIM_AFTER_ENV
from memgap.record.recorder import RunOptions, load_run, machine_info, record_run
from memgap.record.recording import RecordingWriter, private_folder
from memgap.report.remedy import remedy_forms
from memgap.sources.cgroup import read_memory_cgroup

LAB_EVENTS = "lab.jsonl"  # the lab's header and each finished run, appended as they come
TRIM_HINT = 0.8  # a trim at idle that leaves less than this share of the baseline's idle is worth trying
SHORT_WORKLOAD = 1.0  # seconds: shorter runs' wall times swing by tens of percent on a busy machine


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
    params: list[tuple[str, list[str]]] = field(default_factory=list)  # swept env vars, in order
    phase_regex: str = ""    # stdout lines that mark a phase (see memgap.record.marks)
    idle_after: float = 0.0  # seconds without a new phase: idle, measured from outside, then stopped
    agent: bool = True       # preload the native agent (statistics, trims and trimmers in non-Python programs)
    metric_regex: str = ""   # stdout lines that report the --metric value (group 1)
    skipped: list[str] = field(default_factory=list)  # variants not run, with the install line
    adaptive: bool = False   # after the first round, only the contenders run on (see lab.adaptive)
    dropped: dict[str, str] = field(default_factory=dict)  # variant (and cell) an adaptive lab stopped -> why
    process: str = ""        # a regular expression: the process of the tree the figures describe
    load: list[str] = field(default_factory=list)  # a load command against a service (see memgap.record.load)
    rest: float = 3.0        # with a load: the service's quiet after it, before it is measured and stopped
    memory_limit: int | None = None  # bytes: each run in a memory cgroup of its own capped there
    cgroup_parent: CgroupParent | None = None  # where run cgroups are made (found by run_lab)
    cgroup_note: str = ""    # why runs have no cgroup peak, where memgap itself runs in a limited cgroup
    choose: bool = False     # the default set: the baseline's first runs' findings add variants (lab.choose)
    chosen: dict[str, str] = field(default_factory=dict)  # variant -> why it runs (none given: first_reasons)

    def __post_init__(self) -> None:
        self.chosen = self.chosen or first_reasons(self.variants, self.choose)

    def cells(self) -> list[dict[str, str]]:
        """Every combination of the swept parameters (one empty cell without any)."""
        names = [name for name, _ in self.params]
        return [dict(zip(names, values, strict=True)) for values in itertools.product(*(v for _, v in self.params))]


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_lab(options: LabOptions, progress: Callable[[str], None] = lambda line: None) -> LabDocument:
    """Every variant x repetition, interleaved (A B C A B C ...); returns the lab document.

    Each finished run is appended to ``lab.jsonl`` in the lab folder at once,
    so an interrupted lab keeps every run recorded so far.
    """
    _find_cgroup_parent(options)  # with --memory-limit: refused here, before any run, where none can be made
    private_folder(options.lab_dir)  # made 0700; one there already: the user's own, no one else writes in it
    events = RecordingWriter(os.path.join(options.lab_dir, LAB_EVENTS))
    events.write({"type": "header", "schema": LAB_SCHEMA, "cmd": options.cmd, "reps": options.reps,
                  "variants": [v.spec for v in options.variants], "skipped": options.skipped,
                  "machine": machine_info(), "memory_limit": options.memory_limit, "chosen": options.chosen})
    results: list[RunFigures] = []
    started = time.monotonic()
    cells = options.cells()
    interrupted = False
    stopped = ""
    try:
        for rep, cell, variant in _schedule(options, cells, results, progress):
            if _pointless(variant, results):
                _skip_for_not_python(options, variant, progress)
                continue
            order = len(results) + 1
            probe = ForkProbe() if options.choose and variant.is_baseline and rep == 1 else None
            result, run = _run_one(options, variant, rep, order, cell, probe)
            results.append(result)
            events.write({"type": "run", **result.to_dict()})
            total = f"{'≤' if options.adaptive else ''}{len(options.variants) * options.reps * len(cells)}"
            progress(_progress_line(order, total, result))
            stopped = _baseline_unusable(variant, result)
            if stopped:
                events.write({"type": "stopped", "reason": stopped})
                break
            if probe is not None:
                _follow_findings(options, run, result, probe, events, progress)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        events.close()
    doc = lab_document(options, results, time.monotonic() - started, interrupted, stopped)
    if interrupted:
        raise LabInterrupted(doc)
    return doc


def _find_cgroup_parent(options: LabOptions) -> None:
    """Where each run's own memory cgroup is made: one per run, capped at --memory-limit, or
    uncapped to measure the run's peak. Without a limit, where none can be made, runs go
    without (their peak cannot be read from memgap's own cgroup, which they share)."""
    if options.cgroup_parent is not None:
        return
    try:
        options.cgroup_parent = find_parent()
    except Unsupported as exc:
        if options.memory_limit is not None:
            raise Unsupported(f"--memory-limit: {exc}") from None
        own = read_memory_cgroup("self")
        if own is not None and own.limit is not None:
            options.cgroup_note = (f"no cgroup peak per run: {exc}; memgap's own memory cgroup is shared by every "
                                   "run and memgap itself, so no run's peak can be read from it")


def _schedule(options: LabOptions, cells: list[dict[str, str]], results: list[RunFigures],
              progress: Callable[[str], None]) -> Iterator[tuple[int, dict[str, str], Variant]]:
    """(rep, cell, variant) in the lab's order: interleaved, the baseline first in each round.
    Adaptive: after the first round only the variants that can still win run on, until two
    rounds in a row give every cell the same verdict (``results`` grows as the runs finish)."""
    baseline = _baseline_first(options.variants)[0]
    verdicts: dict[int, str | None] = {}
    for rep in range(1, options.reps + 1):
        for cell in cells:
            k = 0
            while k < len(options.variants):  # the baseline's findings may add variants (_follow_findings)
                variant = _baseline_first(options.variants)[k]
                k += 1
                if options.adaptive and rep > 1 and _dropped(options, variant, baseline, cell, results, progress):
                    continue
                yield rep, cell, variant
        if options.adaptive and _settled(options, cells, results, verdicts) and rep >= 2:
            return


def _baseline_first(variants: list[Variant]) -> list[Variant]:
    return sorted(variants, key=lambda v: not v.is_baseline)


def _follow_findings(options: LabOptions, run: RunDocument, result: RunFigures, probe: ForkProbe,
                     events: RecordingWriter, progress: Callable[[str], None]) -> None:
    """The variants the baseline's run points to (memgap.lab.choose), run right after the
    baseline from here on, each with its reason in ``options.chosen``."""
    findings, allocators = run_evidence(run)
    before = dict(options.chosen)
    new = add_choices(choose([*probe.findings, *findings], allocators | probe.allocators, result.python,
                             run_runtimes(run), result.peak), options.chosen)
    ready, skipped = resolve([parse_variant(spec) for spec in new])
    for line in skipped:
        options.skipped.append(line)
        progress(f"skipped {line}")
    at = options.variants.index(_baseline_first(options.variants)[0]) + 1
    options.variants[at:at] = ready
    changed = {spec: why for spec, why in options.chosen.items() if before.get(spec) != why}
    if changed:
        events.write({"type": "chosen", "chosen": changed, "added": [v.spec for v in ready]})
    for v in ready:
        progress(f"added {v.spec}: {options.chosen[v.spec]}")


def _dropped(options: LabOptions, variant: Variant, baseline: Variant, cell: dict[str, str],
             results: list[RunFigures], progress: Callable[[str], None]) -> bool:
    label = variant.spec + "".join(f" {k}={v}" for k, v in cell.items())
    if label in options.dropped:
        return True
    why = cannot_win(variant, baseline, [r for r in results if r.params == cell], options.max_slowdown)
    if why:
        options.dropped[label] = why
        progress(f"dropped {label}: {why}")
    return bool(why)


def _settled(options: LabOptions, cells: list[dict[str, str]], results: list[RunFigures],
             verdicts: dict[int, str | None]) -> bool:
    """Whether this round left every cell's recommendation where the last round left it
    (and none of them rests on a costlier remedy clearing a simpler one: see lab.adaptive)."""
    same = True
    for k, cell in enumerate(cells):
        verdict, _ = _cell_verdict(options, [r for r in results if r.params == cell])
        chosen = verdict.recommended.spec if verdict.recommended else None
        same = same and k in verdicts and verdicts[k] == chosen and not needs_every_rep(verdict)
        verdicts[k] = chosen
    return same


def _baseline_unusable(variant: Variant, result: RunFigures) -> str:
    """Why the lab stops after this run: the baseline's first run failed, or has no idle
    to compare against (every other run would be compared with nothing)."""
    if not variant.is_baseline or result.rep != 1 or (result.status == RunStatus.OK and result.idle is not None):
        return ""
    if result.status == RunStatus.OOM_KILLED and result.cgroup_limit:  # what --memory-limit asks: the others may fit
        return ""
    why = f"{result.status}: {result.note}" if result.note else result.status
    if result.status in (RunStatus.OK, RunStatus.NO_IDLE):
        advice = ("mark idle in the program (memgap.phase('idle')), print a line for --phase-regex, or give "
                  "--idle-after S to stop it once quiet")
    else:
        advice = f"run the workload alone to see why (its recording: {result.record_dir})"
    return f"stopped after the baseline's first run ({why}): {advice}"


def _pointless(variant: Variant, results: list[RunFigures]) -> bool:
    """A Python setting, once the runs so far have shown the workload is not a Python program."""
    if not variant.python_only:
        return False
    seen = [r for r in results if r.layers or r.idle is not None]  # runs that saw their main process
    return bool(seen) and not any(r.python for r in seen)


def _skip_for_not_python(options: LabOptions, variant: Variant, progress: Callable[[str], None]) -> None:
    line = (f"{variant.spec}: the workload is not a Python program memgap can see inside; Python's settings "
            "(pymalloc, the collector) do not apply")
    if line not in options.skipped:
        options.skipped.append(line)
    progress(f"skipped {line}")


class LabInterrupted(KeyboardInterrupt):
    """Raised after an interrupted lab has assembled what it recorded so far."""

    def __init__(self, document: LabDocument) -> None:
        super().__init__("lab interrupted")
        self.document = document


def _run_one(options: LabOptions, variant: Variant, rep: int, order: int, cell: dict[str, str],
             probe: ForkProbe | None = None) -> tuple[RunFigures, RunDocument]:
    slug = "".join(c if c.isalnum() else "-" for c in variant.spec)[:60]
    record_dir = os.path.join(options.lab_dir, f"run-{order:03d}-{slug}")
    env = {**cell, **variant.env({**os.environ, **cell})}  # a swept variable the variant also sets keeps its value
    if TrimMode.of(variant.trim) is not TrimMode.QUIET:  # the idle trimmer's own trims are what its variant measures
        env.setdefault(TRIM_AFTER_ENV, "idle")  # every other run measures what one trim at idle releases
    sink = subprocess.DEVNULL if options.quiet_workload else None
    cpu_before = _cpu_of_children()
    cgroup = (make_run_cgroup(options.cgroup_parent, str(order), options.memory_limit)
              if options.cgroup_parent else None)
    try:
        with probe or nullcontext():
            record_run(RunOptions(options.cmd, record_dir, options.interval, env=env, timeout=options.timeout,
                                  stdout=sink, stderr=sink, mark_regex=options.phase_regex,
                                  idle_after=options.idle_after, metric_regex=options.metric_regex,
                                  metric_name=options.metric, agent=options.agent, load=options.load,
                                  rest=options.rest, cgroup=cgroup))
    finally:  # Ctrl-C or a crash of the run included: no cgroup is left behind
        if cgroup is not None:
            cgroup.remove()
    cpu = _cpu_of_children() - cpu_before
    run = load_run(record_dir)
    result = run_figures(run, variant, rep, order, cpu, metric=options.metric, process=options.process)
    result.params = dict(cell)
    return result, run


def _progress_line(order: int, total: str, r: RunFigures) -> str:
    idle = f"idle {r.idle / 2**20:.0f} MiB" if r.idle is not None else "no idle"
    status = "" if r.status == RunStatus.OK else f" [{r.status}{': ' + r.note if r.note else ''}]"
    cell = " ".join(f"{k}={v}" for k, v in r.params.items())
    return f"[{order}/{total}] {r.variant}{' ' + cell if cell else ''} (rep {r.rep}): {idle}, {r.wall:.1f} s{status}"


def _cell_verdict(options: LabOptions, runs: list[RunFigures]) -> tuple[Verdict, Recommendation | None]:
    by_spec = {v.spec: [r for r in runs if r.variant == v.spec] for v in options.variants}
    baseline = next((v for v in options.variants if v.is_baseline), None)
    base_runs = by_spec.get(baseline.spec, []) if baseline else []
    summaries = [summarize(v, by_spec[v.spec], base_runs) for v in options.variants if by_spec[v.spec]]
    verdict = decide(summaries, baseline.spec if baseline else "", options.max_slowdown)
    base = verdict.baseline
    if (base is not None and base.idle and base.after_trim and not any(v.trim for v in options.variants)
            and base.after_trim[2] < TRIM_HINT * base.idle[1]):
        # Every run measures one trim at idle: say so when it did what no variant here did.
        verdict.reason += (f"; note: one malloc_trim(0) at idle took the baseline from {base.idle[0] / 2**20:.0f} "
                           f"to {base.after_trim[0] / 2**20:.0f} MiB, and no trim variant ran: try "
                           "--variant glibc:trim=idle")
    recommendation = None
    if verdict.recommended is not None:
        chosen = next(v for v in options.variants if v.spec == verdict.recommended.spec)
        python = any(r.python for r in runs) or not runs
        forms = remedy_forms(recommendation_lines(chosen, python))
        recommendation = Recommendation(chosen.spec, verdict.reason, **forms)
        quiet_specs = {v.spec for v in options.variants if TrimMode.of(v.trim) is TrimMode.QUIET}
        trimmer_runs = [r for r in runs if r.variant in quiet_specs and r.status == RunStatus.OK]
        never_trimmed = trimmer_runs and all("did not trim" in r.note for r in trimmer_runs)
        if TrimMode.of(chosen.trim) is TrimMode.IDLE and never_trimmed:
            recommendation.notes.append(
                "in this lab the idle trimmer never trimmed (the trim=quiet runs): the program ended within 2 s "
                "of going quiet; a long-running process gets its trims, this workload as run here does not; "
                "MEMGAP_TRIM_AFTER=idle applies the measured trim where the program marks its idle phase")
    return verdict, recommendation


def _sweep(cells: list[Cell]) -> dict[str, list[SweepRow]]:
    """Per variant, its idle and peak medians in every cell and the growth over the first cell."""
    table: dict[str, list[SweepRow]] = {}
    for cell in cells:
        for v in cell.variants:
            table.setdefault(v.spec, []).append(SweepRow(cell.params, v.idle[0] if v.idle else None,
                                                         v.peak[0] if v.peak else None))
    for rows in table.values():
        first = rows[0]
        for row in rows:
            row.idle_growth = _growth(row.idle, first.idle)
            row.peak_growth = _growth(row.peak, first.peak)
    return table


def _growth(value: float | None, first: float | None) -> float | None:
    """A median's growth over the first cell's, as a share of it; None where either is unknown."""
    return (value / first - 1) if value and first else None


def _across_cells(cells: list[Cell], spec: str) -> list[AcrossCell]:
    """How one variant fares in every cell of a sweep: its word there, its idle and the baseline's."""
    found = []
    for cell in cells:
        v = next((x for x in cell.variants if x.spec == spec), None)
        if v is None:
            continue
        word = v.word(cell.recommendation.variant if cell.recommendation else None, None)
        found.append(AcrossCell(cell.params, word, v.idle[0] if v.idle else None, cell.baseline_idle or None))
    return found


def _throughput_warnings(options: LabOptions, results: list[RunFigures], baseline: Variant | None) -> list[str]:
    """What the reader should know before trusting the slowdown column."""
    if options.metric or baseline is None:
        return []
    walls = sorted(r.wall for r in results if r.variant == baseline.spec and r.status == RunStatus.OK and r.wall > 0)
    if not walls or walls[len(walls) // 2] >= SHORT_WORKLOAD:
        return []
    return [f"the workload's work lasts {walls[len(walls) // 2]:.2f} s "
            f"(baseline runs {walls[0]:.2f}-{walls[-1]:.2f} s): "
            f"the wall time of runs under {SHORT_WORKLOAD:g} s swings by tens of percent from scheduling noise "
            "alone, so read slowdowns below about x1.5 with care; give it more work, or report a throughput "
            "figure (--metric)"]


def lab_document(options: LabOptions, results: list[RunFigures], seconds: float,
                 interrupted: bool = False, stopped: str = "") -> LabDocument:
    """The lab's results. With swept parameters the verdict at the top is the one of
    the cell where the baseline idles highest (the worst case); every cell has its own."""
    baseline = next((v for v in options.variants if v.is_baseline), None)
    cells: list[Cell] = []
    for cell in options.cells():
        runs = [r for r in results if r.params == cell]
        if not runs:
            continue
        verdict, recommendation = _cell_verdict(options, runs)
        cells.append(Cell(cell, verdict.summaries, verdict.reason, recommendation,
                          verdict.baseline.idle[0] if verdict.baseline and verdict.baseline.idle else 0,
                          round(run_to_run_spread(verdict.baseline), 4)))
    worst = max(cells, key=lambda c: c.baseline_idle) if cells else None
    workload_seconds = sum(r.duration for r in results)

    def cell_label(r: RunFigures) -> str:
        return f" [{' '.join(f'{k}={v}' for k, v in r.params.items())}]" if r.params else ""

    return LabDocument(
        cmd=options.cmd,
        machine=machine_info(),
        python=sys.version.split()[0],
        reps=options.reps,
        max_slowdown=options.max_slowdown,
        material=material(),  # the margin below the baseline's idle that makes a variant better
        metric=options.metric or "wall time",
        params=dict(options.params),
        order=[f"{r.variant}#{r.rep}{cell_label(r)}" for r in results],
        runs=list(results),
        baseline=baseline.spec if baseline else None,
        cell=worst.params if worst else {},
        variants=worst.variants if worst else [],
        verdict=stopped or (worst.verdict if worst else "no run finished"),
        stopped=stopped,
        recommendation=worst.recommendation if worst else None,
        time_spread=worst.time_spread if worst else 0.0,
        cells=cells,
        sweep=_sweep(cells) if len(cells) > 1 else {},
        # the top recommendation in every cell of the sweep: does the worst case's remedy hold elsewhere?
        across_cells=(_across_cells(cells, worst.recommendation.variant)
                      if len(cells) > 1 and worst and worst.recommendation else []),
        skipped=options.skipped,
        chosen={v.spec: options.chosen[v.spec] for v in options.variants if v.spec in options.chosen},
        adaptive=options.adaptive,
        dropped=[f"{label}: {why}" for label, why in options.dropped.items()],
        warnings=_throughput_warnings(options, results, baseline),
        lab_seconds=round(seconds, 3),
        workload_seconds=round(workload_seconds, 3),
        complete=not interrupted and not stopped,  # every run made, or skipped with its reason in "skipped"
        lab_dir=options.lab_dir,
        # each run's own memory cgroup: its limit, and why runs have none where memgap is in a limited one
        cgroup={"limit": options.memory_limit, "note": options.cgroup_note,
                "per_run": options.cgroup_parent is not None or any(r.cgroup_peak is not None for r in results)},
    )
