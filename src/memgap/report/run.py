"""Terminal rendering of a ``memgap run`` document (``documents.RunDocument``)."""
from __future__ import annotations

import os
from typing import Any, TextIO

from rich.console import RenderableType

from memgap.documents.recorded import AgentExit, ProcessExit, RecordedSnapshot, TreeIdle
from memgap.documents.records import ProcessRecord, RunDocument, finding_of
from memgap.documents.snapshot import LATER_LAYERS, LAYER_NAMES, NOT_PYTHON, PYTHON_LAYERS, Snapshot
from memgap.report.fit import CUT, WRAP, Col, ellipsis, fit_table
from memgap.report.terminal import console_on, layer_columns, print_findings, render_snapshot
from memgap.report.units import mib

SPARK = " ▁▂▃▄▅▆▇█"
SLOW_READ = 1.0  # seconds: a read from outside this long is said beside its breakdown


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


def _python_shown(snaps: list[RecordedSnapshot]) -> bool:
    """Whether a process's tables show the Python layers: not where memgap found no Python in it."""
    return not snaps or not all(_not_python(s) for s in snaps)


def _not_python(snap: RecordedSnapshot) -> bool:
    """``Snapshot.not_python``, read from the recorded snapshot as it is (not each built again: this is
    asked of every snapshot of a process, for every layer of its table)."""
    layer = (snap.get("layers") or {}).get("python_objects")
    return isinstance(layer, dict) and layer.get("resident") is None and layer.get("note") == NOT_PYTHON


def command_text(argv: list[str], most: int = 70) -> str:
    """A command line in a title: its program's name, then its arguments, on one line."""
    return " ".join([os.path.basename(argv[0]), *argv[1:]]).replace("\n", " ")[:most] if argv else ""


def _among(snap: RecordedSnapshot, snaps: list[RecordedSnapshot]) -> bool:
    """Whether ``snap`` is one of ``snaps`` (a process's peak may be one of its phases: its exit's read)."""
    return any(s.get("time") == snap.get("time") and s.get("phase") == snap.get("phase") for s in snaps)


def phase_table(process: ProcessRecord, width: int = 120) -> RenderableType:
    """Its snapshots in time order, its peak among them."""
    peak = [process.peak] if process.peak and not _among(process.peak, process.snapshots) else []
    snaps = sorted([*process.snapshots, *peak], key=lambda s: s.get("read_began") or s.get("time") or 0)
    python = _python_shown(snaps)
    names = [n for n in LAYER_NAMES if (python or n not in PYTHON_LAYERS)
             and (n not in LATER_LAYERS or any(n in s["layers"] for s in snaps))]
    cols = [Col("phase", WRAP), Col("RSS"), *layer_columns(names)]
    rows = []
    for snap in snaps:
        layers = snap["layers"]
        rows.append([str(snap.get("phase")), mib(snap["rss"]),
                     *(mib(layers[n]["resident"]) if n in layers else "-" for n in names),
                     mib(snap["unexplained"])])
    return fit_table(f"PID {process.pid} {command_text(process.cmd)}: phases (MiB)", cols, rows, width)


def timeline_table(run: RunDocument, width: int = 120) -> RenderableType:
    """Each process's RSS over the run; its GPU memory's peak and last beside it (not in it), where the
    driver counted some for a process."""
    by_pid: dict[int, list[int]] = {}
    gpu: dict[int, list[int]] = {}
    for s in run.timeline:
        by_pid.setdefault(s["pid"], []).append(s["rss"])
        if "gpu" in s:
            gpu.setdefault(s["pid"], []).append(s["gpu"])
    cols = [Col("PID"), Col("command", CUT, optional=1, most=40), Col("samples", optional=3), Col("first"),
            Col("peak"), Col("last"), *([Col("GPU peak"), Col("GPU last")] if gpu else []),
            Col("shape", CUT, optional=2, shorten=squeeze)]
    cmds = {p.pid: " ".join(p.cmd) for p in run.processes}
    rows = [[str(pid), cmds.get(pid, ""), str(len(values)), mib(values[0]), mib(max(values)), mib(values[-1]),
             *([mib(max(gpu[pid])), mib(gpu[pid][-1])] if pid in gpu else ["-", "-"] if gpu else []),
             sparkline(values)] for pid, values in by_pid.items()]
    beside = "; GPU: device memory, beside RSS" if gpu else ""
    return fit_table(f"RSS over time, every {run.interval} s (MiB{beside})", cols, rows, width)


def _at_rest(process: ProcessRecord) -> tuple[RecordedSnapshot, str]:
    """The snapshot that shows the process at rest, and what moment it is: its idle
    (marked, or found: see memgap.record.idle), else its last snapshot."""
    snapshots, idle = process.snapshots, process.idle
    if idle is not None and idle.time is not None:
        for snap in snapshots:
            if snap.get("time") == idle.time:
                return snap, idle.label
    return snapshots[-1], str(snapshots[-1].get("phase"))


def agent_exit_line(pid: int, last: AgentExit) -> str:
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


def tree_line(tree: TreeIdle) -> str:
    """The tree's total at idle (the run document's ``tree``), in one line."""
    return (f"The tree at idle: {tree['processes']} processes, PSS {mib(tree['pss'])} MiB ({tree['how']}: what "
            f"the tree costs); RSS summed {mib(tree['rss_sum'])} MiB (counts a shared page once per process)")


def highest_samples(run: RunDocument) -> dict[int, int]:
    """Each process's highest RSS sampled."""
    out: dict[int, int] = {}
    for s in run.timeline:
        out[s["pid"]] = max(out.get(s["pid"], 0), s["rss"])
    return out


def process_that_matters(run: RunDocument) -> ProcessRecord | None:
    """The process whose breakdown comes first: of those read from outside or from inside, the one
    with the highest peak (sampled, or its peak snapshot's), then the highest idle."""
    highest = highest_samples(run)
    read = [p for p in run.processes if p.snapshots or p.peak]
    return max(read, key=lambda p: (max(highest.get(p.pid, 0), p.peak["rss"] if p.peak else 0),
                                    p.idle.rss if p.idle else 0), default=None)


def exit_words(ended: ProcessExit | None) -> str:
    """How close a process's last snapshot came to its exit (a process record's ``exit``)."""
    gap = ended.get("gap") if ended else None
    passed = ended.get("passed") if ended else None
    if passed:
        return (f"it passed through (lived {passed[0]:.3f} s, under an interval, its VmHWM {mib(int(passed[1]))} "
                "MiB): its exit was let go unread")
    if not ended or gap is None:
        return ""
    if ended["by"] == "agent":
        how = (f"memgap's agent held its exit {ended['held']:.3f} s for that read" if ended.get("answered")
               else f"its agent waited {ended['held']:.3f} s for memgap, in vain")
        return f"its last snapshot {max(0.0, gap):.3f} s before its exit ({how})"
    return f"its last snapshot at most {gap:.1f} s before its exit (the first sample that found it gone)"


def process_line(process: ProcessRecord, highest: int | None) -> str:
    """One process of a run in one line: its peak, its idle, how close to its exit it was read."""
    parts = [f"PID {process.pid} {command_text(process.cmd, 50)}:"]
    if process.peak:
        parts.append(f"peak {mib(process.peak['rss'])} MiB read from outside (highest sample {mib(highest)} MiB)"
                     if highest else f"peak {mib(process.peak['rss'])} MiB read from outside")
    elif highest:
        parts.append(f"peak {mib(highest)} MiB sampled")
    if process.idle is not None:
        parts.append(f"{process.idle.label}: {mib(process.idle.rss)} MiB")
    parts.append(exit_words(process.exit) or "")
    return " ".join(parts[:1]) + " " + "; ".join(p for p in parts[1:] if p)


def slow_read(snap: RecordedSnapshot, start: float | None) -> str:
    """How long a read from outside took, where it took SLOW_READ seconds or more (a recording of a
    memgap that did not time its reads has no such figure: nothing is said), with when it began, how long it
    waited for the reads asked before it; the RSS samples went on meanwhile."""
    seconds, started = snap.get("read_seconds"), snap.get("read_started")
    if seconds is None or started is None or seconds < SLOW_READ:
        return ""
    began = f", from t={started - start:.1f} s" if start is not None else ""
    asked = snap.get("asked")
    waited = started - asked if asked is not None else 0.0
    queue = f", after {waited:.1f} s waiting for the reads before it" if waited >= SLOW_READ else ""
    return f"{snap.get('phase')} breakdown read in {seconds:.1f} s{began}{queue} (sampled meanwhile)"


def _render_peak(console: Any, run: RunDocument, process: ProcessRecord, highest: int | None, why: str,
                 stream: TextIO, width: int | None) -> None:
    peak = process.peak or {}
    hwm = (peak.get("status") or {}).get("VmHWM")
    slow = slow_read(peak, run.start)
    console.print(f"Breakdown of PID {process.pid} {command_text(process.cmd, 50)} at its peak: RSS "
                  f"{mib(peak['rss'])} MiB as read (highest sample {mib(highest)} MiB, VmHWM {mib(hwm)} MiB then; "
                  "read again whenever its RSS passed the last read by 10% or 8 MiB)"
                  + (f"; its RSS moved from {mib(peak.get('rss_at_mark'))} MiB while it was read, so its layers "
                     "add up less well" if peak.get("moving") else "") + (f"; {slow}" if slow else "")
                  + (f". {why}:" if why else ":"))
    render_snapshot(Snapshot.from_dict(peak), stream, width)


def _render_main(console: Any, run: RunDocument, process: ProcessRecord, stream: TextIO,
                 width: int | None) -> None:
    """The process that matters: its breakdown at its peak, its phases, at rest, at exit."""
    highest = highest_samples(run).get(process.pid)
    why = "The process that matters: the highest peak of the tree" if len(run.processes) > 1 else ""
    if process.peak:
        _render_peak(console, run, process, highest, why, stream, width)
    if not process.snapshots:
        return
    console.print(phase_table(process, console.width))
    snap, moment = _at_rest(process)
    lead = "" if process.peak or not why else f"{why.lower()}; "
    if process.peak and _among(process.peak, [snap]):
        console.print(f"PID {snap['pid']} at {moment}: its peak, above (idle is the phase it marked, else its "
                      "last quiet spell, else the moment before exit)")
    else:
        slow = slow_read(snap, run.start)
        console.print(f"Breakdown of PID {snap['pid']} at {moment} ({lead}idle is the phase it marked, "
                      "else its last quiet spell, else the moment before exit" + (f"; {slow}" if slow else "") + "):")
        render_snapshot(Snapshot.from_dict(snap), stream, width)
    at_exit = [s for s in process.snapshots if s.get("phase") == "exit"]
    if at_exit and at_exit[-1].get("same_read_as") == snap.get("phase"):
        console.print(f"...and at exit: the same read as at {moment} (nothing of the program could run between "
                      "them: no other thread, no atexit handler of its own)")
    elif at_exit and at_exit[-1] is not snap:
        line = (f"...and at exit (after the program's own teardown began): RSS {mib(at_exit[-1]['rss'])} "
                f"MiB against {mib(snap['rss'])} at {moment}")
        if _shown_alike(at_exit[-1], snap):  # its table would repeat the one above to the last figure
            console.print(f"{line}, every layer the same to 0.1 MiB")
        else:
            console.print(line)
            render_snapshot(Snapshot.from_dict(at_exit[-1]), stream, width)


def _shown_alike(one: RecordedSnapshot, other: RecordedSnapshot) -> bool:
    """Whether two snapshots' layer tables would show the same figures: RSS and each layer's resident MiB,
    at the table's precision."""
    def shown(snap: RecordedSnapshot) -> list[tuple[str, str]]:
        return [("rss", mib(snap["rss"])), *((name, mib(layer.get("resident")))
                                              for name, layer in sorted(snap["layers"].items()))]

    return shown(one) == shown(other)


def render_run(run: RunDocument, stream: TextIO, width: int | None = None) -> None:
    console = console_on(stream, width)
    if run.timeline:
        console.print(timeline_table(run, console.width))
    main = process_that_matters(run)
    if main is not None:
        _render_main(console, run, main, stream, width)
        gap = exit_words(main.exit)
        if gap:
            console.print(f"PID {main.pid}: {gap}")
    others = [p for p in run.processes if p is not main]
    if others:
        highest = highest_samples(run)
        console.print("Every other process:" if main is not None else "Every process:")
        for process in others:
            console.print(f"- {process_line(process, highest.get(process.pid))}")
    if run.tree:
        console.print(tree_line(run.tree))
    if run.findings:
        console.print("Over the phases:")
        print_findings(console, [finding_of(f) for f in run.findings])
    if main is not None and main.agent_exit:
        console.print(agent_exit_line(main.pid, main.agent_exit))
    for err in run.errors:
        console.print(f"! PID {err.get('pid')}: no snapshot at {err.get('phase')} ({err.get('error')})")
    status = "complete" if run.complete else "cut short: everything up to the interruption is kept"
    ending = f"exit code {run.exit_code}"
    if run.exit_code == -9 and run.oom_kills:
        ending += f" (SIGKILL; the kernel's OOM killer killed {run.oom_kills} process(es) while it ran)"
    if run.stopped:  # memgap got a stop signal: how it ended the tree, on a line of its own
        stop = run.stopped
        passed = f"passed {stop.get('forwarded')} on" if stop.get('forwarded') else "the tree ended by itself"
        console.print(f"stopped: memgap got {stop.get('signal')}, {passed}; {stop.get('killed')} process(es) "
                      f"SIGKILLed after the {stop.get('grace')} s grace")
    console.print(f"{ending}; {run.duration:.1f} s; recording {status}")
