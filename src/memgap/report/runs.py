"""Terminal rendering of a ``memgap run`` document (``documents.RunDocument``)."""
from __future__ import annotations

import os
from typing import Any, TextIO

from rich.console import RenderableType

from ..documents import ProcessRecord, RunDocument
from ..model import LAYER_NAMES, Finding, Snapshot
from ..units import mib
from .fit import CUT, WRAP, Col, ellipsis, fit_table
from .terminal import console_on, layer_columns, print_findings, render_snapshot

SPARK = " ▁▂▃▄▅▆▇█"


def sparkline(values: list[int], width: int = 40) -> str:
    if not values:
        return ""
    step = max(1, len(values) // width)
    points = [max(values[i:i + step]) for i in range(0, len(values), step)]
    top = max(points) or 1
    return "".join(SPARK[min(8, int(8 * v / top))] for v in points)


def squeeze(line: str, width: int) -> str:
    """A sparkline made narrower, each character the highest of those it stands for (the
    whole time span stays); other text is cut."""
    if len(line) <= width or width < 1 or not set(line) <= set(SPARK):
        return ellipsis(line, width)
    step = len(line) / width
    return "".join(max(line[int(i * step):int((i + 1) * step)] or " ", key=SPARK.index) for i in range(width))


def phase_table(process: ProcessRecord, width: int = 120) -> RenderableType:
    argv = process.cmd
    cmd = " ".join([os.path.basename(argv[0]), *argv[1:]]).replace("\n", " ")[:70] if argv else ""
    cols = [Col("phase", WRAP), Col("RSS"), *layer_columns(LAYER_NAMES)]
    rows = []
    for snap in process.snapshots:
        layers = snap["layers"]
        rows.append([str(snap.get("phase")), mib(snap["rss"]),
                     *(mib(layers[n]["resident"]) if n in layers else "-" for n in LAYER_NAMES),
                     mib(snap["unexplained"])])
    return fit_table(f"PID {process.pid} {cmd}: phases (MiB)", cols, rows, width)


def timeline_table(run: RunDocument, width: int = 120) -> RenderableType:
    cols = [Col("PID"), Col("command", CUT, optional=1, most=40), Col("samples", optional=3), Col("first"),
            Col("peak"), Col("last"), Col("shape", CUT, optional=2, shorten=squeeze)]
    by_pid: dict[int, list[int]] = {}
    for s in run.timeline:
        by_pid.setdefault(s["pid"], []).append(s["rss"])
    cmds = {p.pid: " ".join(p.cmd) for p in run.processes}
    rows = [[str(pid), cmds.get(pid, ""), str(len(values)), mib(values[0]), mib(max(values)), mib(values[-1]),
             sparkline(values)] for pid, values in by_pid.items()]
    return fit_table(f"RSS over time, every {run.interval} s (MiB)", cols, rows, width)


def _at_rest(process: ProcessRecord) -> tuple[dict[str, Any], str]:
    """The snapshot that shows the process at rest, and what moment it is: its idle
    (marked, or found: see memgap.idle), else its last snapshot."""
    snapshots, idle = process.snapshots, process.idle
    if idle is not None and idle.time is not None:
        for snap in snapshots:
            if snap.get("time") == idle.time:
                return snap, idle.label
    return snapshots[-1], str(snapshots[-1].get("phase"))


def _snapshots_of(run: RunDocument, pid: int) -> list[dict[str, Any]]:
    return next((p.snapshots for p in run.processes if p.pid == pid), [])


def agent_exit_line(pid: int, last: dict[str, Any]) -> str:
    """What a process's native agent said as it exited, in one line."""
    parts = [f"PID {pid} at exit, from memgap's agent in it: malloc is {last.get('allocator')}"]
    info = last.get("mallinfo2")
    if info:
        parts.append(f"{last.get('arenas', '?')} arenas of {mib(info['arena'])} MiB hold "
                     f"{mib(info['uordblks'])} MiB in use and {mib(info['fordblks'])} MiB free (mallinfo2); "
                     f"{mib(info['hblkhd'])} MiB in {info['hblks']} mmapped chunks")
    je = last.get("jemalloc")
    if je:
        parts.append(f"jemalloc: {mib(je['allocated'])} MiB allocated, {mib(je['resident'])} MiB resident")
    trimmer = last.get("trimmer") or {}
    if trimmer.get("mode", "off") != "off":
        parts.append(f"its {trimmer['mode']} trimmer trimmed {int(trimmer.get('trims', 0))} times, "
                     f"giving back {mib(int(trimmer.get('released', 0)))} MiB")
    return "; ".join(parts)


def tree_line(tree: dict[str, Any]) -> str:
    """The tree's total at idle (the run document's ``tree``), in one line."""
    return (f"The tree at idle: {tree['processes']} processes, PSS {mib(tree['pss'])} MiB ({tree['how']}: what "
            f"the tree costs); RSS summed {mib(tree['rss_sum'])} MiB (counts a shared page once per process)")


def render_run(run: RunDocument, stream: TextIO, width: int | None = None) -> None:
    console = console_on(stream, width)
    if run.timeline:
        console.print(timeline_table(run, console.width))
    final = None
    for process in run.processes:
        if process.snapshots:
            console.print(phase_table(process, console.width))
            rest = _at_rest(process)
            if final is None or rest[0]["rss"] > final[0]["rss"]:
                final = rest
    if final is not None:
        snap, moment = final
        console.print(f"Breakdown of PID {snap['pid']} at {moment} (the largest process at rest; "
                      "idle is the phase it marked, else its last quiet spell, else the moment before exit):")
        render_snapshot(Snapshot.from_dict(snap), stream, width)
        at_exit = [s for s in _snapshots_of(run, snap["pid"]) if s.get("phase") == "exit"]
        if at_exit and at_exit[-1] is not snap:
            console.print(f"...and at exit (after the program's own teardown began): RSS {mib(at_exit[-1]['rss'])} "
                          f"MiB against {mib(snap['rss'])} at {moment}")
            render_snapshot(Snapshot.from_dict(at_exit[-1]), stream, width)
    if run.tree:
        console.print(tree_line(run.tree))
    if run.findings:
        console.print("Over the phases:")
        print_findings(console, [Finding(**{k: v for k, v in f.items() if k != "pid"}) for f in run.findings])
    for process in run.processes:
        if process.agent_exit:
            console.print(agent_exit_line(process.pid, process.agent_exit))
    for err in run.errors:
        console.print(f"! PID {err.get('pid')}: no snapshot at {err.get('phase')} ({err.get('error')})")
    status = "complete" if run.complete else "cut short: everything up to the interruption is kept"
    ending = f"exit code {run.exit_code}"
    if run.exit_code == -9 and run.oom_kills:
        ending += f" (SIGKILL; the kernel's OOM killer killed {run.oom_kills} process(es) while it ran)"
    console.print(f"{ending}; {run.duration:.1f} s; recording {status}")
