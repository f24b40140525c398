"""Terminal rendering of a ``memgap run`` document."""
from __future__ import annotations

import os
from typing import Any, TextIO

from rich.table import Table

from ..model import LAYER_NAMES, Finding, Snapshot
from ..units import mib
from .terminal import LAYER_SHORT, _console, print_findings, render_snapshot

SPARK = " ▁▂▃▄▅▆▇█"


def sparkline(values: list[int], width: int = 40) -> str:
    if not values:
        return ""
    step = max(1, len(values) // width)
    points = [max(values[i:i + step]) for i in range(0, len(values), step)]
    top = max(points) or 1
    return "".join(SPARK[min(8, int(8 * v / top))] for v in points)


def phase_table(process: dict[str, Any]) -> Table:
    argv = process.get("cmd") or []
    cmd = " ".join([os.path.basename(argv[0]), *argv[1:]])[:70] if argv else ""
    table = Table(title=f"PID {process['pid']} {cmd}: phases (MiB)", title_justify="left")
    table.add_column("phase", no_wrap=True)
    table.add_column("RSS", justify="right")
    for name in LAYER_NAMES:
        table.add_column(LAYER_SHORT[name], justify="right")
    table.add_column("unexpl.", justify="right")
    for snap in process["snapshots"]:
        layers = snap["layers"]
        table.add_row(str(snap.get("phase")), mib(snap["rss"]),
                      *(mib(layers[n]["resident"]) if n in layers else "-" for n in LAYER_NAMES),
                      mib(snap["unexplained"]))
    return table


def timeline_table(run: dict[str, Any]) -> Table:
    table = Table(title=f"RSS over time, every {run.get('interval')} s (MiB)", title_justify="left")
    for col in ("PID", "command", "samples", "first", "peak", "last", "shape"):
        table.add_column(col, justify="left" if col in ("command", "shape") else "right")
    by_pid: dict[int, list[int]] = {}
    for s in run["timeline"]:
        by_pid.setdefault(s["pid"], []).append(s["rss"])
    cmds = {p["pid"]: " ".join(p.get("cmd") or [])[:40] for p in run["processes"]}
    for pid, values in by_pid.items():
        table.add_row(str(pid), cmds.get(pid, ""), str(len(values)), mib(values[0]), mib(max(values)),
                      mib(values[-1]), sparkline(values))
    return table


def _at_rest(process: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The snapshot that shows the process at rest, and what moment it is: its idle
    (marked, or found: see memgap.idle), else its last snapshot."""
    snapshots = process["snapshots"]
    idle = process.get("idle") or {}
    if idle.get("time") is not None:
        for snap in snapshots:
            if snap.get("time") == idle["time"]:
                return snap, idle["label"]
    return snapshots[-1], str(snapshots[-1].get("phase"))


def _snapshots_of(run: dict[str, Any], pid: int) -> list[dict[str, Any]]:
    return next((p["snapshots"] for p in run["processes"] if p["pid"] == pid), [])


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


def render_run(run: dict[str, Any], stream: TextIO, width: int | None = None) -> None:
    console = _console(stream, width)
    if run["timeline"]:
        console.print(timeline_table(run))
    final = None
    for process in run["processes"]:
        if process["snapshots"]:
            console.print(phase_table(process))
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
    if run["findings"]:
        console.print("Over the phases:")
        print_findings(console, [Finding(**{k: v for k, v in f.items() if k != "pid"}) for f in run["findings"]])
    for process in run["processes"]:
        if process.get("agent_exit"):
            console.print(agent_exit_line(process["pid"], process["agent_exit"]))
    for err in run.get("errors", []):
        console.print(f"! PID {err.get('pid')}: no snapshot at {err.get('phase')} ({err.get('error')})")
    status = "complete" if run["complete"] else "cut short: everything up to the interruption is kept"
    ending = f"exit code {run['exit_code']}"
    if run["exit_code"] == -9 and run.get("oom_kills"):
        ending += f" (SIGKILL; the kernel's OOM killer killed {run['oom_kills']} process(es) while it ran)"
    console.print(f"{ending}; {run['duration']:.1f} s; recording {status}")
