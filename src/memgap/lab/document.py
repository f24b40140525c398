"""The lab's document (``documents.LabDocument``), made from its options and its state: each cell's
verdict and recommendation, the sweep's table, the top recommendation across the cells, the warnings.

A recommendation holds the data that applies it (memgap.lab.remedy_lines); its forms for a shell, a
Dockerfile, systemd, Kubernetes and Python are rendered at the edge (``report.remedy.with_forms``).
"""
from __future__ import annotations

import statistics
import sys

from memgap.allocators.variants import Variant
from memgap.diagnose.copies import FrozenCopies, copies_remain
from memgap.diagnose.floors import FLOOR
from memgap.documents.lab_summary import AcrossCell, Cell, Recommendation, SweepRow
from memgap.documents.records import LabDocument, RunFigures, RunStatus, TrimMode
from memgap.lab.objective import IDLE, decide_objective, quiet_warnings
from memgap.lab.remedy_lines import recommendation_lines
from memgap.lab.state import LabOptions, LabState
from memgap.lab.verdict import Verdict, decide, material, run_to_run_spread, summarize
from memgap.record.recorder import machine_info

TRIM_HINT = 0.8  # a trim at idle that leaves less than this share of the baseline's idle is worth trying
SHORT_WORKLOAD = 1.0  # seconds: shorter runs' wall times swing by tens of percent on a busy machine


def cell_objective(options: LabOptions, variants: list[Variant], runs: list[RunFigures]) -> tuple[str, str]:
    """The figure that decides one cell's verdict, and why (memgap.lab.objective)."""
    baseline = next((v for v in variants if v.is_baseline), None)
    base_runs = [r for r in runs if baseline is not None and r.variant == baseline.spec]
    return decide_objective(options.objective, bool(options.load), base_runs, any(v.device_memory for v in variants))


def cell_verdict(options: LabOptions, variants: list[Variant],
                 runs: list[RunFigures]) -> tuple[Verdict, Recommendation | None]:
    """The verdict of one cell's runs among the lab's ``variants``, and its recommendation (its data:
    the environment, setup lines and notes that apply it)."""
    by_spec = {v.spec: [r for r in runs if r.variant == v.spec] for v in variants}
    baseline = next((v for v in variants if v.is_baseline), None)
    base_runs = by_spec.get(baseline.spec, []) if baseline else []
    summaries = [summarize(v, by_spec[v.spec], base_runs) for v in variants if by_spec[v.spec]]
    objective, _ = cell_objective(options, variants, runs)
    verdict = decide(summaries, baseline.spec if baseline else "", options.max_slowdown, objective)
    base = verdict.baseline
    if (objective == IDLE and base is not None and base.idle and base.after_trim and not any(v.trim for v in variants)
            and base.after_trim[2] < TRIM_HINT * base.idle[1]):
        # Every run measures one trim at idle: say so when it did what no variant here did.
        verdict.reason += (f"; note: one malloc_trim(0) at idle took the baseline from {base.idle[0] / 2**20:.0f} "
                           f"to {base.after_trim[0] / 2**20:.0f} MiB, and no trim variant ran: try "
                           "--variant glibc:trim=idle")
    remain = _copies_remain(variants, runs, baseline, verdict.recommended.spec if verdict.recommended else None)
    verdict.reason += f"; {remain}" if remain else ""
    if verdict.recommended is None:
        return verdict, None
    chosen = next(v for v in variants if v.spec == verdict.recommended.spec)
    lines = recommendation_lines(chosen, any(r.python for r in runs) or not runs)
    recommendation = Recommendation(chosen.spec, verdict.reason, env=lines.env, setup=lines.setup,
                                    python_plain=lines.python_plain, notes=lines.notes)
    quiet_specs = {v.spec for v in variants if TrimMode.of(v.trim) is TrimMode.QUIET}
    trimmer_runs = [r for r in runs if r.variant in quiet_specs and r.status == RunStatus.OK]
    never_trimmed = trimmer_runs and all("did not trim" in r.note for r in trimmer_runs)
    waits = quiet_warnings([chosen, *(v for v in variants if v.is_baseline)], runs, objective).get(chosen.spec)
    if waits:
        recommendation.notes.append(waits)
    if TrimMode.of(chosen.trim) is TrimMode.IDLE and never_trimmed:
        recommendation.notes.append(
            "in this lab the idle trimmer never trimmed (the trim=quiet runs): the program ended within 2 s "
            "of going quiet; a long-running process gets its trims, this workload as run here does not; "
            "MEMGAP_TRIM_AFTER=idle applies the measured trim where the program marks its idle phase")
    return verdict, recommendation


def _copies_remain(variants: list[Variant], runs: list[RunFigures], baseline: Variant | None,
                   chosen: str | None) -> str:
    """Where the baseline's forked workers copied their parent's pages (its runs' medians, at least the findings'
    floor): why the copies remain, told by the runs with the collector frozen at fork where some ran, beside
    the recommendation (``chosen``) if any."""
    def copied(specs: set[str]) -> int | None:
        values = [r.copied for r in runs if r.variant in specs and r.status == RunStatus.OK and r.copied is not None]
        return int(statistics.median(values)) if values else None

    base = copied({baseline.spec}) if baseline is not None else None
    if base is None or base < FLOOR:
        return ""
    freezes = [v for v in variants if v.gc_freeze and not v.is_baseline]
    frozen = copied({v.spec for v in freezes})
    return copies_remain(base, FrozenCopies(base, frozen, freezes[0].spec) if frozen is not None else None, chosen)


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


def _cells(options: LabOptions, state: LabState) -> tuple[list[Cell], list[str]]:
    """Each cell that ran, with its verdict, and why its objective decided there ("" where an earlier
    memgap's runs cannot say: then the cell states none)."""
    cells: list[Cell] = []
    whys: list[str] = []
    for cell in options.cells():
        runs = [r for r in state.results if r.params == cell]
        if not runs:
            continue
        verdict, recommendation = cell_verdict(options, state.variants, runs)
        objective, why = cell_objective(options, state.variants, runs)
        cells.append(Cell(cell, verdict.summaries, verdict.reason, recommendation,
                          verdict.baseline.idle[0] if verdict.baseline and verdict.baseline.idle else 0,
                          round(run_to_run_spread(verdict.baseline), 4), objective if why else ""))
        whys.append(why)
    return cells, whys


def lab_document(options: LabOptions, state: LabState, seconds: float,
                 interrupted: bool = False, stopped: str = "") -> LabDocument:
    """The lab's results: its runs (``state.results``) among its variants. With swept parameters the
    verdict at the top is the one of the cell where the baseline idles highest (the worst case); every
    cell has its own."""
    results = state.results
    baseline = state.baseline()
    cells, whys = _cells(options, state)
    worst = max(cells, key=lambda c: c.baseline_idle) if cells else None
    workload_seconds = sum(r.duration for r in results)

    def cell_label(r: RunFigures) -> str:
        return f" [{' '.join(f'{k}={v}' for k, v in r.params.items())}]" if r.params else ""

    return LabDocument(
        cmd=list(options.cmd),
        machine=machine_info(),
        python=sys.version.split()[0],
        reps=options.reps,
        max_slowdown=options.max_slowdown,
        material=material(),  # the margin below the baseline's idle that makes a variant better
        metric=options.metric or "wall time",
        params={name: list(values) for name, values in options.params},
        order=[f"{r.variant}#{r.rep}{cell_label(r)}" for r in results],
        runs=list(results),
        baseline=baseline.spec if baseline else None,
        cell=worst.params if worst else {},
        variants=worst.variants if worst else [],
        verdict=stopped or (worst.verdict if worst else "no run finished"),
        objective=worst.objective if worst else "",
        objective_why=whys[cells.index(worst)] if worst else "",
        stopped=stopped,
        recommendation=worst.recommendation if worst else None,
        time_spread=worst.time_spread if worst else 0.0,
        cells=cells,
        sweep=_sweep(cells) if len(cells) > 1 else {},
        # the top recommendation in every cell of the sweep: does the worst case's remedy hold elsewhere?
        across_cells=(_across_cells(cells, worst.recommendation.variant)
                      if len(cells) > 1 and worst and worst.recommendation else []),
        skipped=state.skipped,
        chosen={v.spec: state.chosen[v.spec] for v in state.variants if v.spec in state.chosen},
        adaptive=options.adaptive,
        dropped=[f"{label}: {why}" for label, why in state.dropped.items()],
        warnings=[*_throughput_warnings(options, results, baseline),
                  *quiet_warnings(state.variants, results, worst.objective if worst else IDLE).values()],
        lab_seconds=round(seconds, 3),
        workload_seconds=round(workload_seconds, 3),
        complete=not interrupted and not stopped,  # every run made, or skipped with its reason in "skipped"
        lab_dir=options.lab_dir,
        # each run's own memory cgroup: its limit, and why runs have none where memgap is in a limited one
        cgroup={"limit": options.memory_limit, "note": state.cgroup_note,
                "per_run": state.cgroup_parent is not None or any(r.cgroup_peak is not None for r in results)},
    )
