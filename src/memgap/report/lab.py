"""Terminal rendering of a lab document (``documents.LabDocument``); the Markdown and HTML
reports (memgap.report.html) share its table and lines."""
from __future__ import annotations

import statistics
from typing import TextIO

from rich.console import RenderableType

from memgap.documents.lab_summary import CHOSEN, Recommendation, Spread, SweepRow, VariantSummary, noise_allowance
from memgap.documents.records import LabDocument, RunStatus
from memgap.report.fit import WRAP, Col, fit_table
from memgap.report.remedy import with_forms
from memgap.report.terminal import console_on
from memgap.report.units import mib


def _spread(value: Spread | None) -> str:
    if not value:
        return "-"
    med, lo, hi = value
    return f"{mib(med, 0)} ({mib(lo, 0)}-{mib(hi, 0)})"


def recommended(lab: LabDocument) -> str | None:
    """The variant the lab recommends; None where it keeps the defaults."""
    return lab.recommendation.variant if lab.recommendation else None


def _pattern(v: VariantSummary) -> str:
    """The commonest pattern word over the repetitions."""
    words = v.pattern_counts
    return max(words, key=lambda w: words[w]) if words else ", ".join(v.patterns)


def table_rows(lab: LabDocument) -> list[list[str]]:
    """The variants table's cells, as text (the terminal, Markdown and HTML reports share them),
    in the order of ``variant_columns(lab)``."""
    rows = []
    cgroup, means = _cgroup_peaks(lab), _means(lab)
    for v in lab.variants:
        wall = f"{v.wall[0]:.2f}" if v.wall else "-"
        slow = f"x{v.slowdown:.2f}" if v.slowdown else "-"
        peaks = ([_spread(v.peak)] + ([_spread(v.cgroup_peak)] if cgroup else [])
                 + ([_spread(v.mean)] if means else []))
        rate = [_rates(v.throughput)] if _metric(lab) else []
        gpu = [_spread(v.gpu_idle), _spread(v.gpu_peak)] if _gpu(lab) else []
        rows.append([v.spec, _spread(v.baseline), *peaks, _spread(v.idle), *gpu, *rate, _spread(v.after_trim), wall,
                     slow, _pattern(v), v.word(recommended(lab), lab.baseline)])
    return rows


def _gpu(lab: LabDocument) -> bool:
    """Whether the lab's runs recorded device memory (a GPU process, NVML): shown beside RSS, never in it."""
    return any(v.gpu_idle is not None or v.gpu_peak is not None for v in lab.variants)


def _metric(lab: LabDocument) -> str:
    """The throughput the workload reported (--metric), shown beside idle; "" where wall time counts."""
    return "" if lab.metric == "wall time" else lab.metric


def _rate(value: float) -> str:
    """Three significant figures, never in exponent form: 1530, 7.46, 0.0123."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _rates(value: Spread | None) -> str:
    if not value:
        return "-"
    med, lo, hi = value
    return f"{_rate(med)} ({_rate(lo)}-{_rate(hi)})"


def _means(lab: LabDocument) -> bool:
    """Whether the lab measured the mean over the work (a lab saved before issue 32 did not)."""
    return any(v.mean is not None for v in lab.variants)


def _cgroup_peaks(lab: LabDocument) -> bool:
    """Whether any run had a memory cgroup of its own, whose peak the table then shows."""
    return any(r.cgroup_peak is not None for r in lab.runs)


# The variants table's columns (the terminal's, Markdown's and HTML's): where a terminal is
# narrow, the optional ones give way (highest first), and below the essential four each
# variant is printed as lines.
VARIANT_COLUMNS = (Col("variant", WRAP), Col("first phase", optional=5), Col("peak", optional=2), Col("idle"),
                   Col("after trim", optional=1), Col("wall s", optional=4), Col("slowdown"),
                   Col("pattern", WRAP, optional=3), Col("verdict", justify="left"))
COLUMNS = tuple(c.header for c in VARIANT_COLUMNS)


def variant_columns(lab: LabDocument) -> tuple[Col, ...]:
    """The columns of this lab's table: the run cgroups' peak after the RSS peak where runs had
    cgroups of their own (under --memory-limit it is what the limit met, so it always stays);
    the workload's throughput (--metric), higher is better, after idle; the tree's GPU memory at idle and
    at its peak (device memory beside RSS, NVML) after idle, where the runs recorded some."""
    cols = list(VARIANT_COLUMNS)
    if _metric(lab):
        cols.insert(4, Col(_metric(lab), optional=1))
    if _gpu(lab):  # after idle, before the metric: essential where the GPU's memory decides
        cols[4:4] = [Col("GPU idle", optional=0 if lab.objective == "gpu" else 2), Col("GPU peak", optional=3)]
    if _means(lab):  # essential where it decides
        cols.insert(3, Col("work mean", optional=0 if lab.objective == "mean" else 2))
    if _cgroup_peaks(lab):
        limited = bool(lab.cgroup.get("limit"))
        cols.insert(3, Col("cgroup peak", optional=0 if limited else 6))
    return tuple(cols)


OBJECTIVE_WORDS = {"mean": "the mean RSS over the work (time-weighted; a tree's processes summed per sampling "
                           "round), the \"work mean\" column", "idle": "the idle", "peak": "the peak",
                   "gpu": "the tree's GPU memory at idle (device memory as the driver counts it, NVML, beside RSS: "
                          "the \"GPU idle\" column)"}


def objective_lines(lab: LabDocument) -> list[str]:
    """Which figure decided the verdict and why (none for a lab saved before issue 32)."""
    if not lab.objective or not lab.objective_why:
        return []
    return [f"Judged by {OBJECTIVE_WORDS.get(lab.objective, lab.objective)}: {lab.objective_why} "
            f"(--objective {'mean, idle, peak or gpu' if _gpu(lab) else 'mean, idle or peak'} chooses)"]


def cgroup_lines(lab: LabDocument) -> list[str]:
    """The memory limit each run had and the variants it OOM-killed; or why runs had no cgroup peak."""
    cgroup = lab.cgroup
    if cgroup.get("note"):
        return [f"cgroup peak: {cgroup['note']}"]
    if not cgroup.get("limit"):
        return []
    killed: dict[str, int] = {}
    for r in lab.runs:
        if r.status is RunStatus.OOM_KILLED:
            killed[r.variant] = killed.get(r.variant, 0) + 1
    runs = {v.spec: v.runs for v in lab.variants}
    limit = f"Each run in a memory cgroup of its own limited to {mib(cgroup['limit'], 0)} MiB"
    if not killed:
        return [f"{limit}: no run was OOM-killed"]
    names = ", ".join(f"{spec} ({n} of {runs.get(spec, n)} run{'s' * (runs.get(spec, n) != 1)})"
                      for spec, n in killed.items())
    return [f"{limit}. OOM-killed at the limit: {names}; a variant killed in any run is not recommended"]


def chosen_lines(lab: LabDocument) -> list[str]:
    """Why the variants ran: how many of each plain reason (the default set, named), then each
    variant a finding of the baseline's chose, with the finding; none for a lab saved before."""
    plain: dict[str, int] = {}
    found = []
    for spec, why in lab.chosen.items():
        head, sep, finding = why.partition(CHOSEN)
        if sep:
            found.append(f"  {spec}: {CHOSEN}{finding}" + (f" (and {head.rstrip('; ')})" if head else ""))
        else:
            plain[why] = plain.get(why, 0) + 1
    if not plain and not found:
        return []
    counts = ", ".join(f"{why} ({n})" for why, n in plain.items())
    return [f"Variants: {counts}" + (f"; {len(found)} chosen from the baseline's findings:" if found else "")] + found


def pattern_evidence(lab: LabDocument, spec: str) -> list[str]:
    """Each repetition's RSS at its phases, for one variant (what its pattern word was read from)."""
    return [f"rep {r.rep}: {r.pattern}, {r.pattern_evidence}" for r in lab.runs
            if r.variant == spec and r.pattern_evidence and r.params == lab.cell]


def too_slow_line(lab: LabDocument) -> str:
    spread, budget = lab.time_spread, lab.max_slowdown
    allowed = noise_allowance(spread, budget)
    by = next((f" by {v.slowdown_by}" for v in lab.variants if v.slowdown_by), "")  # a bursty workload's
    line = f"Too slow{by}: beyond x{1 + budget + allowed:.2f} (the {budget:.0%} budget"
    if spread > allowed:  # too wide to grant whole: said, with what would narrow it
        return line + (f", plus as much again for the baseline's own spread between its runs, {spread:.1%}: too "
                       "wide to tell a cost below it from noise; more --reps, or a steadier --metric, would)")
    return line + (f", plus the baseline's own {spread:.1%} spread between its runs)" if spread else ")")


def better_line(lab: LabDocument) -> str:
    """The margin the verdict asked of a variant to call it better (a lab from before it: none)."""
    floor = lab.material
    if not floor:
        return ""
    what = {"mean": "work mean", "peak": "peak"}.get(lab.objective, "idle")
    return (f"Better: its whole {what} range below the baseline's, and its median at least {floor['share']:.0%} "
            f"and {floor['bytes'] / 2**20:g} MiB lower")


def apply_block(rec: Recommendation) -> list[tuple[str, bool]]:
    """The recommendation in every form it is given (shell, Dockerfile, systemd, Kubernetes, Python, notes),
    each line with whether it is one to copy: those are printed whole, never wrapped."""
    rec = with_forms(rec)  # the lab's own: rendered from its data; a saved lab's: as written
    lines = [(f"Apply {rec.variant}:", False)]
    lines += [(f"  setup, once:  {line}", True) for line in rec.setup]
    lines.append(("  environment:  " + " ".join(rec.shell), True))
    if rec.dockerfile:
        lines.append(("  Dockerfile:   " + rec.dockerfile.replace("\n", "\n                "), True))
    lines.append(("  systemd:      " + " ".join(rec.systemd), True))
    if rec.kubernetes:  # a lab saved before it has none
        lines.append(("  Kubernetes (the container's env):", False))
        lines += [("    " + line, True) for line in rec.kubernetes.splitlines()]
    lines.append(("  Python (children spawned by this process):", False))
    lines += [("    " + line, True) for line in rec.python.splitlines()]
    if rec.python_plain:
        lines.append(("  or without memgap, plain Python in the program:", False))
        lines += [("    " + line, True) for line in rec.python_plain.splitlines()]
    lines += [(f"  note: {note}", False) for note in rec.notes]
    return lines


def apply_lines(rec: Recommendation) -> list[str]:
    """The same, as lines (the HTML report's <pre>)."""
    return [line for line, _ in apply_block(rec)]


def across_line(lab: LabDocument) -> str:
    """The top recommendation's fate in each setting of a sweep, grouped by its word there."""
    rows = lab.across_cells
    if not rows or lab.recommendation is None:  # a sweep without a recommendation has none
        return ""
    groups: dict[str, list[str]] = {}
    for r in rows:
        where = " ".join(f"{k}={v}" for k, v in r.params.items())
        idle = f"{mib(r.idle, 0)} vs {mib(r.baseline_idle, 0)} MiB" if r.idle and r.baseline_idle else "-"
        groups.setdefault(r.word, []).append(f"{where} ({idle})")
    order = ["recommended", "better", "too slow", "not better"]
    words = sorted(groups, key=lambda w: order.index(w) if w in order else len(order))
    parts = [f"{word} at {', '.join(groups[word])}" for word in words]
    return (f"Across the {len(rows)} settings, {lab.recommendation.variant} (idle against the baseline's) is "
            + "; ".join(parts))


def markdown_table(lab: LabDocument) -> str:
    """The variants as a Markdown table (MiB, median and min-max)."""
    headers = [c.header for c in variant_columns(lab)]
    rows = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for spec, *cells in table_rows(lab):
        rows.append(f"| `{spec}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def variants_table(lab: LabDocument, width: int = 170) -> RenderableType:
    reps = f"up to {lab.reps} (adaptive)" if lab.adaptive else str(lab.reps)
    rows = table_rows(lab)
    return fit_table(f"{reps} interleaved repetitions per variant, MiB: median (min-max)", variant_columns(lab), rows,
                     width, ["bold" if row[0] == recommended(lab) else None for row in rows])


def _growth(value: float | None) -> str:
    return f"{100 * value:+.0f}%" if value is not None else "-"


def sweep_table(lab: LabDocument, spec: str, width: int = 170) -> RenderableType | None:
    """Seed 004's table for one variant: idle (and peak) per setting, growth over the first setting."""
    rows = lab.sweep.get(spec)
    if not rows:
        return None
    tree = any(r.tree_how for r in lab.runs if r.variant == spec)  # a tree's totals (measured_line)
    what = "the tree's idle PSS and peak RSS" if tree else "idle and peak RSS"
    title = f"{spec}: {what} per setting (MiB), growth over the first setting"
    names = list(lab.params)
    if len(names) == 2:
        return _sweep_grid(lab, rows, title, width)
    cols = [Col("setting", WRAP), Col("idle"), Col("growth", optional=2), Col("peak", optional=1),
            Col("growth", optional=3)]
    cells = [[" ".join(f"{k}={v}" for k, v in row.params.items()), mib(row.idle, 0),
              _growth(row.idle_growth), mib(row.peak, 0), _growth(row.peak_growth)] for row in rows]
    return fit_table(title, cols, cells, width)


def _sweep_grid(lab: LabDocument, rows: list[SweepRow], title: str, width: int) -> RenderableType:
    """Two swept parameters: the first down the side, the second across (idle, growth, peak each)."""
    first, second = list(lab.params)
    cols = [Col(first, WRAP)]
    for v2 in lab.params[second]:
        cols += [Col(f"{second}={v2} idle"), Col("growth", optional=2), Col("peak", optional=1)]
    cells = []
    for v1 in lab.params[first]:
        line = [v1]
        for v2 in lab.params[second]:
            row = next((r for r in rows if r.params == {first: v1, second: v2}), None)
            line += [mib(row.idle, 0), _growth(row.idle_growth), mib(row.peak, 0)] if row else ["-"] * 3
        cells.append(line)
    return fit_table(title, cols, cells, width)


def idle_rules_line(lab: LabDocument) -> str:
    """How each run's idle was found (marked, a quiet spell, before exit), counted over the runs."""
    counts: dict[str, int] = {}
    for r in lab.runs:
        rule = _rule_kind(r.idle_rule)
        if rule:
            counts[rule] = counts.get(rule, 0) + 1
    if not counts or set(counts) == {"idle (marked)"}:
        return ""
    return "Idle, as found: " + ", ".join(f"{rule} in {n} run{'s' * (n != 1)}" for rule, n in counts.items())


def measured_line(lab: LabDocument) -> str:
    """Which process the figures describe, when the workload ran more than one; where idle
    is the tree's total, how it was summed and the largest process's own idle per variant."""
    if not any(r.processes > 1 for r in lab.runs):
        return ""
    summed = [r for r in lab.runs if r.tree_how]
    if not summed:
        return "Figures of the largest process of the workload's tree: " + "; ".join(
            sorted({r.process for r in lab.runs if r.process}))
    own: dict[str, list[float]] = {}
    for r in summed:
        if r.process_idle is not None:  # a tree's total always keeps it (lab.metrics)
            own.setdefault(r.variant, []).append(r.process_idle)
    figures = ", ".join(f"{variant} {mib(statistics.median(values))}" for variant, values in own.items())
    timed = (f"the throughput is the workload's own {lab.metric}" if _metric(lab) else
             "wall s is that process's work alone (a preforked master's ends once it has forked, before its "
             "workers serve): for the tree's throughput, have the load report one (--metric, --metric-regex)")
    return (f"Idle is the tree's total: {summed[0].tree_how} (--process REGEX ranks one process). "
            f"Its largest process on its own at idle, MiB (median): {figures}; it runs {summed[0].process}; "
            f"{timed}")


def _rule_kind(label: str) -> str:
    """A rule's label without the spell's length: "idle (quiet 2.1 s)" -> "idle (quiet spell)"."""
    if label.startswith("idle (quiet ") and "--idle-after" not in label:
        return "idle (quiet spell)"
    return label


def render_lab(lab: LabDocument, stream: TextIO, width: int | None = None) -> None:
    if width is None and not (hasattr(stream, "isatty") and stream.isatty()):
        width = 170  # a log or a file: room for the whole table
    console = console_on(stream, width)
    m = lab.machine
    console.print(f"memgap lab on {m.get('cpus')} CPUs, {m.get('glibc')}, Python {m.get('python')}: "
                  f"{' '.join(lab.cmd)}")
    for line in lab.skipped:
        console.print(f"skipped {line}")
    for line in lab.dropped:
        console.print(f"dropped after its first runs (adaptive lab; --reps N runs the full grid): {line}")
    for line in chosen_lines(lab):
        console.print(line, highlight=False, markup=False)
    if lab.sweep:
        for spec in dict.fromkeys(filter(None, [lab.baseline, recommended(lab)])):  # the baseline's first
            table = sweep_table(lab, spec, console.width)
            if table is not None:
                console.print(table)
        cell = " ".join(f"{k}={v}" for k, v in lab.cell.items())
        console.print(f"Variants at {cell}, where the baseline idles highest:")
    console.print(variants_table(lab, console.width))
    console.print(too_slow_line(lab))
    for line in cgroup_lines(lab):
        console.print(line, highlight=False, markup=False)
    if better_line(lab):
        console.print(better_line(lab))
    for warning in lab.warnings:
        console.print(f"! {warning}")
    for spec in dict.fromkeys(filter(None, [lab.baseline, recommended(lab)])):
        lines = pattern_evidence(lab, spec)
        if lines:
            console.print(f"Pattern of {spec} (RSS at each phase after the first): " + "; ".join(lines))
    if idle_rules_line(lab):
        console.print(idle_rules_line(lab))
    if measured_line(lab):
        console.print(measured_line(lab), highlight=False, markup=False)
    for line in objective_lines(lab):
        console.print(line, highlight=False, markup=False)
    console.print(f"Verdict: {lab.verdict}")
    if across_line(lab):
        console.print(across_line(lab))
    for line, copy in apply_block(lab.recommendation) if lab.recommendation else []:
        # a line to copy is written whole: the terminal may fold it on screen, but a newline
        # inside a path or a token would break it when pasted
        console.print(line, soft_wrap=copy)
    overhead = lab.lab_seconds / lab.workload_seconds if lab.workload_seconds else 0
    ending = "" if lab.complete else ("; STOPPED EARLY" if lab.stopped else "; INCOMPLETE: interrupted")
    console.print(f"{len(lab.runs)} runs in {lab.lab_seconds:.1f} s ({overhead:.2f}x the workloads' "
                  f"own {lab.workload_seconds:.1f} s); recordings in {lab.lab_dir}" + ending)
