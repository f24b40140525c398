"""Run the workload once per variant and repetition, interleaved, recording each run.

The options stay as given (``LabOptions``, frozen); what the lab learns as it goes is its
``LabState`` (memgap.lab.state), which the runner owns; each event goes to the lab's journal as it
happens (memgap.lab.journal); the document is made from the two (memgap.lab.document).
"""
from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext

from memgap.allocators.variants import Variant, parse_variant, resolve
from memgap.documents.records import LabDocument, RunDocument, RunFigures, RunStatus, TrimMode
from memgap.errors import Unsupported
from memgap.lab.adaptive import cannot_win, needs_every_rep
from memgap.lab.cgroup_limit import CgroupParent, find_parent, make_run_cgroup
from memgap.lab.choose import add_choices, choose, run_evidence, run_runtimes
from memgap.lab.document import cell_objective, cell_verdict, lab_document
from memgap.lab.figures import run_figures
from memgap.lab.fork_probe import ForkProbe
from memgap.lab.journal import Journal, worth_running
from memgap.lab.state import LabOptions, LabState
from memgap.record.assemble import load_run
from memgap.record.envnames import TRIM_AFTER_ENV
from memgap.record.recorder import RunOptions, record_run
from memgap.sources.cgroup import read_memory_cgroup


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_lab(options: LabOptions, progress: Callable[[str], None] = lambda line: None) -> LabDocument:
    """Every variant x repetition, interleaved (A B C A B C ...); returns the lab document.

    Each finished run is appended to the lab's journal (``lab.jsonl`` in its folder) at once,
    so an interrupted lab keeps every run recorded so far.
    """
    state = LabState.start(options)
    _find_cgroup_parent(options, state)  # with --memory-limit: refused here, before any run, where none can be made
    started = time.monotonic()
    cells = options.cells()
    interrupted = False
    stopped = ""
    with Journal(options.lab_dir) as journal:
        journal.header(options, state)
        try:
            stopped = _run_all(options, state, cells, journal, progress)
        except KeyboardInterrupt:
            interrupted = True
    doc = lab_document(options, state, time.monotonic() - started, interrupted, stopped)
    if interrupted:
        raise LabInterrupted(doc)
    return doc


def _run_all(options: LabOptions, state: LabState, cells: list[dict[str, str]], journal: Journal,
             progress: Callable[[str], None]) -> str:
    """The runs in the schedule's order, each journaled as it ends; why the lab stopped short, or ""."""
    for rep, cell, variant in _schedule(options, state, cells, progress):
        if not worth_running(variant, state.results):
            _skip_for_not_python(state, variant, progress)
            continue
        order = len(state.results) + 1
        probe = ForkProbe() if options.choose and variant.is_baseline and rep == 1 else None
        result, run = _run_one(options, state.cgroup_parent, variant, rep, order, cell, probe)
        state.results.append(result)
        journal.run(result)
        total = f"{'≤' if options.adaptive else ''}{len(state.variants) * options.reps * len(cells)}"
        progress(_progress_line(order, total, result))
        stopped = _baseline_unusable(variant, result)
        if stopped:
            journal.stopped(stopped)
            return stopped
        if probe is not None:
            _follow_findings(state, run, result, probe, journal, progress)
    return ""


def _find_cgroup_parent(options: LabOptions, state: LabState) -> None:
    """Where each run's own memory cgroup is made: one per run, capped at --memory-limit, or
    uncapped to measure the run's peak. Without a limit, where none can be made, runs go
    without (their peak cannot be read from memgap's own cgroup, which they share)."""
    try:
        state.cgroup_parent = find_parent()
    except Unsupported as exc:
        if options.memory_limit is not None:
            raise Unsupported(f"--memory-limit: {exc}") from None
        own = read_memory_cgroup("self")
        if own is not None and own.limit is not None:
            state.cgroup_note = (f"no cgroup peak per run: {exc}; memgap's own memory cgroup is shared by every "
                                 "run and memgap itself, so no run's peak can be read from it")


def _schedule(options: LabOptions, state: LabState, cells: list[dict[str, str]],
              progress: Callable[[str], None]) -> Iterator[tuple[int, dict[str, str], Variant]]:
    """(rep, cell, variant) in the lab's order: interleaved, the baseline first in each round.
    Adaptive: after the first round only the variants that can still win run on, until two
    rounds in a row give every cell the same verdict (``state.results`` grows as the runs finish)."""
    baseline = state.in_order()[0]
    for rep in range(1, options.reps + 1):
        for cell in cells:
            k = 0
            while k < len(state.variants):  # the baseline's findings may add variants (_follow_findings)
                variant = state.in_order()[k]
                k += 1
                if options.adaptive and rep > 1 and _dropped(options, state, variant, baseline, cell, progress):
                    continue
                yield rep, cell, variant
        if options.adaptive and _settled(options, state, cells) and rep >= 2:
            return


def _follow_findings(state: LabState, run: RunDocument, result: RunFigures, probe: ForkProbe,
                     journal: Journal, progress: Callable[[str], None]) -> None:
    """The variants the baseline's run points to (memgap.lab.choose), run right after the
    baseline from here on, each with its reason in ``state.chosen``."""
    findings, allocators = run_evidence(run)
    before = dict(state.chosen)
    new = add_choices(choose([*probe.findings, *findings], allocators | probe.allocators, result.python,
                             run_runtimes(run), result.peak), state.chosen)
    ready, skipped = resolve([parse_variant(spec) for spec in new])
    for line in skipped:
        state.skipped.append(line)
        progress(f"skipped {line}")
    at = state.variants.index(state.in_order()[0]) + 1
    state.variants[at:at] = ready
    changed = {spec: why for spec, why in state.chosen.items() if before.get(spec) != why}
    if changed:
        journal.chosen(changed, [v.spec for v in ready])
    for v in ready:
        progress(f"added {v.spec}: {state.chosen[v.spec]}")


def _dropped(options: LabOptions, state: LabState, variant: Variant, baseline: Variant, cell: dict[str, str],
             progress: Callable[[str], None]) -> bool:
    label = variant.spec + "".join(f" {k}={v}" for k, v in cell.items())
    if label in state.dropped:
        return True
    runs = [r for r in state.results if r.params == cell]
    objective, _ = cell_objective(options, state.variants, runs)
    why = cannot_win(variant, baseline, runs, options.max_slowdown, objective)
    if why:
        state.dropped[label] = why
        progress(f"dropped {label}: {why}")
    return bool(why)


def _settled(options: LabOptions, state: LabState, cells: list[dict[str, str]]) -> bool:
    """Whether this round left every cell's recommendation where the last round left it
    (and none of them rests on a costlier remedy clearing a simpler one: see lab.adaptive)."""
    same = True
    for k, cell in enumerate(cells):
        verdict, _ = cell_verdict(options, state.variants, [r for r in state.results if r.params == cell])
        chosen = verdict.recommended.spec if verdict.recommended else None
        same = same and k in state.verdicts and state.verdicts[k] == chosen and not needs_every_rep(verdict)
        state.verdicts[k] = chosen
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


def _skip_for_not_python(state: LabState, variant: Variant, progress: Callable[[str], None]) -> None:
    line = (f"{variant.spec}: the workload is not a Python program memgap can see inside; Python's settings "
            "(pymalloc, the collector) do not apply")
    if line not in state.skipped:
        state.skipped.append(line)
    progress(f"skipped {line}")


class LabInterrupted(KeyboardInterrupt):
    """Raised after an interrupted lab has assembled what it recorded so far."""

    def __init__(self, document: LabDocument) -> None:
        super().__init__("lab interrupted")
        self.document = document


def _run_one(options: LabOptions, cgroup_parent: CgroupParent | None, variant: Variant, rep: int, order: int,
             cell: dict[str, str], probe: ForkProbe | None = None) -> tuple[RunFigures, RunDocument]:
    slug = "".join(c if c.isalnum() else "-" for c in variant.spec)[:60]
    record_dir = os.path.join(options.lab_dir, f"run-{order:03d}-{slug}")
    env = {**cell, **variant.env({**os.environ, **cell})}  # a swept variable the variant also sets keeps its value
    if TrimMode.of(variant.trim) is not TrimMode.QUIET:  # the idle trimmer's own trims are what its variant measures
        env.setdefault(TRIM_AFTER_ENV, "idle")  # every other run measures what one trim at idle releases
    sink = subprocess.DEVNULL if options.quiet_workload else None
    cpu_before = _cpu_of_children()
    cgroup = make_run_cgroup(cgroup_parent, str(order), options.memory_limit) if cgroup_parent else None
    try:
        with probe or nullcontext():
            record_run(RunOptions(list(options.cmd), record_dir, options.interval, env=env, timeout=options.timeout,
                                  stdout=sink, stderr=sink, mark_regex=options.phase_regex,
                                  idle_after=options.idle_after, metric_regex=options.metric_regex,
                                  metric_name=options.metric, agent=options.agent, load=list(options.load),
                                  rest=options.rest, cgroup=cgroup, forked=probe.start if probe else None))
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
    if r.work_mean is not None:
        idle += f", work mean {r.work_mean / 2**20:.0f} MiB"
    status = "" if r.status == RunStatus.OK else f" [{r.status}{': ' + r.note if r.note else ''}]"
    cell = " ".join(f"{k}={v}" for k, v in r.params.items())
    return f"[{order}/{total}] {r.variant}{' ' + cell if cell else ''} (rep {r.rep}): {idle}, {r.wall:.1f} s{status}"
