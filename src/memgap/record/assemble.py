"""A recording folder assembled into the run document (``load_run``): the recorder's samples and
reads, what each process wrote of itself (its phases, its agent's last statistics), each process's
idle, peak and exit found, the findings over its phases, the tree summed at idle.

Apart from the recorder: `memgap run` starts its command before it imports any of this (what it
needs is imported while the command runs, memgap.cli._common._import_the_report).
"""
from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import cast

from memgap.diagnose.findings import diagnose_series
from memgap.documents.json_value import JsonObject
from memgap.documents.recorded import (
    CgroupCharge,
    ProcessEntry,
    RecordedError,
    RecordedEvent,
    RecordedFinding,
    RecordedSample,
)
from memgap.documents.records import ProcessRecord, RunDocument
from memgap.documents.snapshot import RUN_SCHEMA
from memgap.errors import MalformedInput, MemgapError
from memgap.record.idle import idle_of_process
from memgap.record.recording import SAMPLES_FILE, open_recorded, read_events
from memgap.record.tree_copies import Collections, copies_over_time, tree_copies_findings
from memgap.record.tree_idle import tree_at_idle
from memgap.record.tree_watch import best_peak, exit_of


def _events(path: str) -> Iterator[RecordedEvent]:
    """A recording's events, by the keys memgap writes (load_run's RunDocument.from_dict checks them)."""
    return cast("Iterator[RecordedEvent]", read_events(path))


def _add_event(processes: dict[int, ProcessEntry], errors: list[RecordedError], metrics: dict[str, float],
               event: RecordedEvent) -> None:
    """One event written by the recorder or by a process about itself, onto the run document."""
    kind = event.get("type")
    if kind == "error":  # its keys, less its type, are the error's
        errors.append(cast(RecordedError, {k: v for k, v in event.items() if k != "type"}))
    elif kind == "metric":
        metrics[event["name"]] = event["value"]
    elif kind == "trimmer":  # a trim of the idle trimmer in this process: its keys, less type and pid, its record's
        _process_entry(processes, event).setdefault("trims", []).append(
            cast(JsonObject, {k: v for k, v in event.items() if k not in ("type", "pid")}))
    elif kind == "trimmer-start":  # memgap's bootstrap started a trimmer in this process
        _process_entry(processes, event)["trimmer"] = event.get("mode", "")
    elif kind == "quiet":  # a spell told: [when, its start, its rest's start, its RSS]
        told = [event["time"], event["since"], event.get("rested_since") or event["since"], event.get("rss") or 0]
        _process_entry(processes, event).setdefault("quiet_told", []).append(told)
    elif kind == "quiet-end":
        _process_entry(processes, event).setdefault("quiet_ends", []).append(event["time"])
    elif kind == "pss":  # a quiet process's PSS read again as another one went quiet
        rss = event.get("rss")
        read = [event["time"], event["pss"]] + ([rss] if rss is not None else [])
        _process_entry(processes, event).setdefault("pss_reads", []).append(read)
    elif kind == "snapshot":
        entry = _process_entry(processes, event)
        snap = event["snapshot"]
        if snap.get("cmd") or not entry["cmd"]:  # read later than the first sample: after an exec
            entry["cmd"] = snap.get("cmd", [])
        entry["snapshots"].append(snap)
    elif kind == "peak":  # a new high read on the way (tree_watch.best_peak keeps one)
        entry = _process_entry(processes, event)
        entry.setdefault("peak_reads", []).append(event["snapshot"])
        entry["cmd"] = event["snapshot"].get("cmd") or entry["cmd"]  # read later: after an exec not seen
    elif kind == "gone":  # the sampler found it gone: it exited at or before then
        _process_entry(processes, event)["gone"] = event["t"]
    elif kind == "passed":  # it passed through: its exit let go unread (tree_watch.passing_through)
        _process_entry(processes, event)["passed"] = [event["lived"], event["hwm"]]


def _process_entry(processes: dict[int, ProcessEntry], event: RecordedEvent) -> ProcessEntry:
    """The run document's entry for the process an event is about, made on first sight (from any of the
    recording's files)."""
    pid = event["pid"]
    if pid is None:  # only an error may be about no process
        raise MalformedInput("recording", f"a {event.get('type')} event about no process")
    return processes.setdefault(pid, {"pid": pid, "ppid": None, "cmd": [], "snapshots": []})


def _add_agent_exit(processes: dict[int, ProcessEntry], errors: list[RecordedError], path: str) -> None:
    """The statistics an agent wrote as its process exited, onto that process's entry."""
    from memgap.agent.reply import parse_report

    try:
        with open_recorded(path) as fh:  # never through a link planted in the folder
            report = parse_report(fh.read(1 << 20), path)  # an agent writes a few KiB
    except (OSError, MemgapError) as exc:
        errors.append({"error": str(exc), "file": path})
        return
    entry = _process_entry(processes, {"pid": report.pid})
    entry["agent_exit"] = report.summary()


def _order_and_find_idle(entry: ProcessEntry, timeline: list[RecordedSample], start: float | None) -> None:
    """A process's marks read from outside and the program's own, in time order (a read from
    outside by when it began: it takes a while, and the program goes on meanwhile); then its idle."""
    # a read at the exit the agent held comes last: any other read under way then saw the same moment
    entry["snapshots"].sort(key=lambda snap: (bool(snap.get("held_exit")),
                                              snap.get("read_began") or snap.get("time", 0)))
    idle = idle_of_process(entry, timeline, start)
    entry["idle"] = idle.to_dict() if idle is not None else None


def _finish_entry(entry: ProcessEntry, timeline: list[RecordedSample], start: float | None) -> None:
    """A process's entry once every event is in: its idle, its exit, a command line that is never blank
    (what the sampler read, else its snapshots', else its agent's exit record's)."""
    _order_and_find_idle(entry, timeline, start)
    entry["peak"] = best_peak([*entry.get("peak_reads", []), *entry["snapshots"]])  # its exit's read may be higher
    copies = copies_over_time([*entry.get("peak_reads", []), *entry["snapshots"]])
    if copies:
        entry["copies"] = copies
    entry["exit"] = exit_of(entry, start)
    entry.pop("peak_reads", None)
    if entry["ppid"] is None and copies:  # never sampled (read only as it exited): the parent its copies name
        entry["ppid"] = copies[0]["split"]["parent"]
    entry["cmd"] = entry["cmd"] or (entry.get("agent_exit") or {}).get("cmdline") or [f"[PID {entry['pid']}]"]


def _read_process_files(record_dir: str, processes: dict[int, ProcessEntry], errors: list[RecordedError],
                        metrics: dict[str, float]) -> Collections:
    """What the processes wrote themselves: their phases (process-PID.jsonl), their agents' last words,
    their full collections once they forked (memgap._hook: returned, not kept in the document)."""
    collections = Collections()
    for path in sorted(glob.glob(os.path.join(record_dir, "process-*.jsonl"))):
        if os.path.islink(path):  # planted: never followed (read_events would refuse it too)
            errors.append({"error": "a link, not followed: memgap reads only the files it wrote", "file": path})
            continue
        for event in _events(path):
            if not collections.add(event):
                _add_event(processes, errors, metrics, event)
    for path in sorted(glob.glob(os.path.join(record_dir, "agent-*.txt"))):
        _add_agent_exit(processes, errors, path)
    return collections


def load_run(record_dir: str) -> RunDocument:
    """Assemble a recording folder (complete or cut short) into the run document (a recording
    whose events do not make one: MalformedInput)."""
    header: RecordedEvent = {}
    ends: dict[str, RecordedEvent] = {}  # the run's end, and its load's start (--load: the lab's work starts there)
    processes: dict[int, ProcessEntry] = {}
    timeline: list[RecordedSample] = []
    errors: list[RecordedError] = []
    metrics: dict[str, float] = {}  # the last value reported under each name, any process
    cgroup: CgroupCharge | None = None  # the run's own memory cgroup, where it ran in one
    for event in _events(path) if os.path.exists(path := os.path.join(record_dir, SAMPLES_FILE)) else []:
        kind = event.get("type")
        if kind == "header":
            header = event
        elif kind == "process":  # first seen, or after an exec: a new program, its peak read anew
            entry = _process_entry(processes, event)
            entry["ppid"], entry["cmd"] = event.get("ppid"), event.get("cmd", [])
            if event.get("exec"):
                entry.pop("peak_reads", None)
        elif kind == "sample":
            del event["type"]
            timeline.append(cast(RecordedSample, event))  # a sample's keys, once its type is gone
        elif kind in ("end", "load-start"):
            ends[kind] = event
        elif kind == "cgroup":
            cgroup = cast(CgroupCharge, {k: v for k, v in event.items() if k != "type"})  # its keys, less its type
        else:  # snapshots read from outside, errors, metrics, quiet spells' ends
            _add_event(processes, errors, metrics, event)
    collections = _read_process_files(record_dir, processes, errors, metrics)
    end = ends.get("end", {})
    _finish_entries(processes, timeline, header.get("start"))
    run = RunDocument.from_dict({
        "schema": RUN_SCHEMA,
        "cmd": header.get("cmd", []),
        "start": header.get("start"),
        "machine": header.get("machine", {}),
        "interval": header.get("interval"),
        "exit_code": end.get("exit_code"),
        "complete": bool(end) and not end.get("interrupted", False),
        "stopped": end.get("stopped"),  # a stop signal to memgap: how the tree ended
        "timed_out": bool(end.get("timed_out")),
        "stopped_at_idle": bool(end.get("stopped_at_idle")),
        "load_seconds": end.get("load_seconds"),  # with --load: how long the load ran (the work)
        "load_started": _after_start(ends.get("load-start", {}).get("time"), header.get("start")),
        "oom_kills": end.get("oom_kills"),  # the kernel's OOM kills, machine-wide, while it ran
        "cgroup": cgroup,  # limit, peak, oom_kills, limit_hits of the run's own memory cgroup
        "env": header.get("env", {}),
        "agent": header.get("agent", {}),
        "duration": end.get("t", timeline[-1]["t"] if timeline else 0.0),
        "processes": sorted(processes.values(), key=lambda p: p["pid"]),
        "timeline": timeline,
        "errors": errors,
        "metrics": metrics,
        "record_dir": record_dir,
    }, f"recording {record_dir}")
    run.findings = _series_findings(run.processes) + tree_copies_findings(run, collections=collections)
    run.tree = tree.to_dict() if (tree := tree_at_idle(run)) is not None else None  # summed by PSS
    return run


def _finish_entries(processes: dict[int, ProcessEntry], timeline: list[RecordedSample], start: float | None) -> None:
    """Each process's entry finished from its own samples (its idle looks at its own only)."""
    by_pid: dict[int, list[RecordedSample]] = {}
    for sample in timeline:
        by_pid.setdefault(sample["pid"], []).append(sample)
    for entry in processes.values():
        _finish_entry(entry, by_pid.get(entry["pid"], []), start)


def _after_start(when: float | None, start: float | None) -> float | None:
    """A moment of the clock as seconds after the run's start (as the samples' ``t``)."""
    return round(when - start, 4) if when is not None and start else None


def _series_findings(processes: list[ProcessRecord]) -> list[RecordedFinding]:
    """The findings over each process's phases (memgap.diagnose.findings.diagnose_series), each with its pid."""
    findings: list[RecordedFinding] = []
    for entry in processes:
        snaps = [s for s in entry.phases() if not str(s.phase or "").endswith(":end")]
        findings.extend(RecordedFinding(code=f.code, severity=f.severity, summary=f.summary, evidence=f.evidence,
                                        remedy=f.remedy, pid=entry.pid) for f in diagnose_series(snaps))
    return findings

