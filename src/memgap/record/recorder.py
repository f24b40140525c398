"""``memgap run``'s recording: sample a command's process tree while its Python
processes record their own phases, then assemble everything into one document.

Layout of a recording folder (each file appended line by line as it happens):
``samples.jsonl`` (header, processes seen, RSS samples, end) written by the
sampler, and ``process-PID.jsonl`` (phase snapshots) written by each Python
child through the bootstrap.
"""
from __future__ import annotations

import glob
import os
import platform
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

from memgap.diagnose.findings import diagnose_series
from memgap.documents.json_value import JsonObject, shaped
from memgap.documents.recorded import (
    CgroupCharge,
    MachineInfo,
    ProcessEntry,
    RecordedError,
    RecordedEvent,
    RecordedFinding,
    RecordedSample,
)
from memgap.documents.records import ProcessRecord, RunDocument
from memgap.documents.snapshot import RUN_SCHEMA
from memgap.errors import MalformedInput, MemgapError
from memgap.record.envnames import EXIT_SOCKET_ENV, RECORD_DIR_ENV, TRIM_AFTER_ENV, WALK_ENV
from memgap.record.idle import BEFORE_EXIT_PHASE, idle_of_process
from memgap.record.load import LoadDriver
from memgap.record.marks import CpuActivity, PhaseClock, StdoutMarks
from memgap.record.outside import OutsideReads, ReadAsked
from memgap.record.recording import RecordingWriter, open_recorded, private_folder, read_events
from memgap.record.tree_copies import copies_over_time, tree_copies_findings
from memgap.record.tree_end import (
    GRACE,
    Ending,
    Stopped,
    StopSignals,
    TreeEnd,
    Watchdog,
    child_setup,
    end_tree,
    hold_stop_signals,
    release_stop_signals,
    subreaper,
)
from memgap.record.tree_idle import tree_at_idle
from memgap.record.tree_watch import TOO_MANY, ExitHold, OutsideQuiet, TreeSampler, best_peak, exit_of
from memgap.sources.processes import tree_pids
from memgap.sources.procfs import oom_kills

if TYPE_CHECKING:
    from memgap.lab.cgroup_limit import RunCgroup

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/memgap, this file is in record/
BOOTSTRAP_DIR = os.path.join(PACKAGE_DIR, "_bootstrap")
SAMPLES_FILE = "samples.jsonl"


def machine_info() -> MachineInfo:
    return {"cpus": os.cpu_count(), "glibc": " ".join(platform.libc_ver()), "python": platform.python_version(),
            "kernel": platform.release()}


def child_env(record_dir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that makes Python children record into ``record_dir``."""
    env = dict(os.environ if base is None else base)
    paths = [BOOTSTRAP_DIR]
    package_parent = os.path.dirname(PACKAGE_DIR)
    if os.path.basename(package_parent) not in ("site-packages", "dist-packages"):
        paths.append(package_parent)  # a source checkout: let children import memgap too
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[RECORD_DIR_ENV] = record_dir
    return env


@dataclass
class RunOptions:
    cmd: list[str]
    record_dir: str
    interval: float = 0.1
    walk: bool = False  # phase snapshots with the gc walk (see `memgap run --walk`)
    env: dict[str, str] = field(default_factory=dict)  # set for the command, over memgap's own
    timeout: float | None = None
    stdout: Any = None  # passed to Popen: None inherits
    stderr: Any = None
    mark_regex: str = ""     # stdout lines that mark a phase (group 1 names it)
    metric_regex: str = ""   # stdout lines that report a metric (group 1 its value)...
    metric_name: str = ""    # ...recorded under this name
    idle_after: float = 0.0  # seconds without a new phase after which the program counts as idle
    agent: bool = True       # preload the native agent (it stays dormant in Python interpreters)
    load: list[str] = field(default_factory=list)  # a load command to run against the service (memgap.record.load)
    rest: float = 3.0        # with a load: seconds of the service's quiet after it, before it is stopped
    cgroup: RunCgroup | None = None  # a memory cgroup the command enters before it execs (the lab's)
    forked: Callable[[], None] | None = None  # called once the command started (memgap's reader forked before): a
                                              # caller's thread started then is not running as the reader is copied


def _with_agent(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` with the native agent preloaded, and what the header says about it."""
    from memgap.agent import agent_env, library_path

    try:
        return agent_env(env, mode="auto"), {"library": library_path(), "mode": "auto"}
    except MemgapError as exc:  # no compiler: the run goes on without the agent
        return env, {"problem": str(exc)}


def _exit_hold(record_dir: str, reads: OutsideReads, start: float, env: dict[str, str]) -> ExitHold | None:
    """The socket where the agents of the tree say they exit (``env`` names it for them); each such
    process is read from outside as its exit waits, its ``before-exit`` snapshot (by memgap's reader,
    at once, beside the reads asked). None where it cannot be made: the run goes on, its exits unheld."""
    writer = reads.writer

    def read(pid: int) -> None:
        reads.now(ReadAsked(pid, BEFORE_EXIT_PHASE, start, time.time(), held_exit=True))

    try:
        hold = ExitHold(record_dir, read)
    except OSError as exc:
        writer.write({"type": "error", "pid": None, "phase": "exit", "error": f"exits not held: {exc}"})
        return None
    env[EXIT_SOCKET_ENV] = hold.path
    return hold


def record_run(options: RunOptions) -> int:
    """Run the command, sampling its tree until it exits; returns its exit code.

    With ``timeout`` the command runs in its own process group, and the whole
    group is stopped when the time is up (the end event says ``timed_out``).
    A stop signal to memgap (SIGINT, SIGTERM, SIGHUP) is passed on to the tree, which is ended
    (memgap.record.tree_end); the end event says how, and ``Stopped`` is raised (a KeyboardInterrupt).
    """
    with StopSignals() as stops:
        mask = hold_stop_signals()  # none may come between the command's start and the watch
        try:
            recording = _Recording(options)
        except BaseException:
            release_stop_signals(mask)
            raise
        try:
            release_stop_signals(mask)  # one that came meanwhile is raised here
            recording.watch()
        except KeyboardInterrupt as stop:
            received = stop.signum if isinstance(stop, Stopped) else int(signal.SIGINT)  # Ctrl-C's
            ending = recording.interrupted(received, lambda: stops.again)
            if isinstance(stop, Stopped):
                stop.ending = ending
            raise
    return recording.finish()


class _Recording:
    """One run being recorded: the command, what reads its marks, and how it ends."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        private_folder(options.record_dir)  # made 0700; one there already: the user's own, no one else writes in it
        self.writer = RecordingWriter(os.path.join(options.record_dir, SAMPLES_FILE))
        self.reads = OutsideReads(self.writer)  # beside the sampler (forked now, before any other thread)

        self.start = time.time()
        env = child_env(options.record_dir)
        if not options.walk:
            env[WALK_ENV] = "0"
        env.update(options.env)
        agent_info: dict[str, str] = {}
        self.hold: ExitHold | None = None
        if options.agent:
            env, agent_info = _with_agent(env)
            self.hold = _exit_hold(options.record_dir, self.reads, self.start, env)
        self.writer.write({"type": "header", "schema": RUN_SCHEMA, "cmd": options.cmd, "start": self.start,
                           "interval": options.interval, "machine": shaped(machine_info()), "env": options.env,
                           "agent": agent_info})
        self.trim_after = env.get(TRIM_AFTER_ENV, "")
        self.own_group = options.timeout is not None or bool(options.idle_after) or bool(options.load)
        service_metric = "" if options.load else options.metric_regex  # with a load, the load prints it
        self.was_subreaper = subreaper(True)  # the tree's orphans come back to memgap: found and ended with it
        self.watchdog = Watchdog()  # ends the tree if memgap is killed outright
        try:
            stdout = subprocess.PIPE if options.mark_regex or service_metric else options.stdout
            self.proc = subprocess.Popen(options.cmd, env=env, start_new_session=self.own_group,
                                         stdout=stdout, stderr=options.stderr,
                                         preexec_fn=child_setup(options.cgroup.enter if options.cgroup else None))
        except OSError as exc:
            self.watchdog.done()
            subreaper(self.was_subreaper)
            self._close_hold()
            self.reads.close()
            self.writer.close()
            raise MemgapError(f"cannot run {options.cmd[0]!r}: {exc.strerror or exc}") from None
        if options.forked is not None:
            options.forked()
        self.watchdog.watch(self.proc.pid)
        if self.own_group:
            self.watchdog.group(self.proc.pid)
        self.marks = (StdoutMarks(self.proc.stdout, options.mark_regex, options.stdout is None, service_metric,
                                  self.proc.pid)
                      if self.proc.stdout is not None and (options.mark_regex or service_metric) else None)
        self.load = (LoadDriver(options.load, options.record_dir, options.rest, self.writer.write)
                     if options.load else None)
        self.quiet = None if options.idle_after else OutsideQuiet(options.record_dir)  # else its own rule
        self.sampler = TreeSampler(self.reads, self.start, self.quiet, self.watchdog)
        self.tree = TreeEnd(self.proc, self.own_group, self._helpers)
        self.clock = PhaseClock(options.record_dir)
        self.activity = CpuActivity()
        self.timed_out = self.stopped_at_idle = self.marked_idle = False
        self.due = 0.0  # monotonic time of the next round of samples
        self.oom_before = oom_kills()  # the kernel's count: did its OOM killer act while this ran?

    def watch(self) -> None:
        """Sample until the command exits, or memgap stops it (idle, load done, timeout)."""
        options, proc = self.options, self.proc
        deadline = None if options.timeout is None else time.monotonic() + options.timeout
        while True:
            self.sampler.sample(proc.pid)
            self.tree.reap(self.sampler.names)
            if options.cgroup is not None:
                options.cgroup.sample()
            self._read_marks()
            busy = self.activity.busy(tree_pids(proc.pid)) if options.idle_after or self.load else False
            if (options.idle_after and self._quiet_long_enough(busy)) or (self.load and self.load.step(busy)):
                self.stopped_at_idle = True  # measured at its idle (or after the load and its rest): stopped
                self._stop_tree()
                return
            if _exited_within(proc, self.marks, self._next_sample()):
                return
            if deadline is not None and time.monotonic() > deadline:
                self.timed_out = True
                self._stop_tree()
                return

    def _next_sample(self) -> float:
        """Seconds to the next round of samples: rounds keep to a schedule of one per interval from the
        first, whatever a round cost (one running late is not made up for: the next is an interval on)."""
        now, interval = time.monotonic(), self.options.interval
        self.due = max(self.due + interval, now) if self.due else now + interval
        return self.due - now

    def _stop_tree(self) -> None:
        """The reads asked are made while the tree still runs (they are of it at its idle), then it is stopped."""
        self.reads.settle()
        end_tree(self.tree, None)

    def _read_marks(self) -> None:
        for name, rss, at in self.marks.pending_marks() if self.marks else []:
            if self.quiet is not None:
                self.quiet.marked.add(self.proc.pid)
            self._read_mark(name, rss, at)
            self.marked_idle = self.marked_idle or name == "idle"
            self.clock.mark()
        for value in self.marks.pending_values() if self.marks else []:
            self._metric(value, self.proc.pid)

    def _read_mark(self, name: str, rss: int | None, at: float) -> None:
        read = ReadAsked(self.proc.pid, name, self.start, at, trim_after=self.trim_after, at_mark=(rss, at))
        if not self.reads.ask(read):
            self.writer.write({"type": "error", "pid": self.proc.pid, "phase": name, "error": TOO_MANY})

    def _quiet_long_enough(self, busy: bool) -> bool:
        """--idle-after: quiet that long (no new phase, little CPU): its idle, read from outside
        (unless it marked idle itself: that one was measured already, and a trim may have followed)."""
        self.clock.poll()
        if busy:
            self.clock.mark()  # working, even without a phase: not idle yet
        if self.clock.quiet_for() < self.options.idle_after:
            return False
        if not self.marked_idle:
            # by the reader, after the marks and peaks asked before it (it keeps what it parsed)
            read = ReadAsked(self.proc.pid, "idle", self.start, time.time(), trim_after=self.trim_after,
                             quiet_since=time.time() - self.clock.quiet_for())
            if not self.reads.ask(read):
                self.writer.write({"type": "error", "pid": self.proc.pid, "phase": "idle", "error": TOO_MANY})
            self.reads.settle()
        return True

    def _metric(self, value: float, pid: int | None) -> None:
        self.writer.write({"type": "metric", "pid": pid, "name": self.options.metric_name, "value": value,
                           "time": time.time()})

    def _close_hold(self) -> None:
        if self.hold is not None:
            self.hold.close()
            self.hold = None

    def _helpers(self) -> set[int]:
        """memgap's own children that are not the tree's: the watchdog, the load command."""
        reader = self.reads.process
        return {pid for pid in (self.watchdog.pid, self.load.proc.pid if self.load and self.load.proc else None,
                                reader.pid if reader is not None else None) if pid is not None}

    def interrupted(self, received: int, again: Callable[[], bool]) -> Ending:
        """A stop signal: the tree ended (memgap.record.tree_end), the end event says how."""
        ending = end_tree(self.tree, received, GRACE, again)
        self.watchdog.done()
        subreaper(self.was_subreaper)
        self._close_hold()
        dropped = self.reads.close(drop=True, timeout=GRACE)  # the one under way ends; those waiting are not made
        if dropped:
            self.writer.write({"type": "error", "pid": None, "phase": "read from outside",
                               "error": f"{dropped} read(s) asked were not made: memgap was stopped"})
        if self.load is not None:
            self.load.stop()
        self.writer.write({"type": "end", "t": round(time.time() - self.start, 4),
                           "exit_code": self.proc.returncode, "interrupted": True, "stopped": shaped(ending.to_dict())})
        self.writer.close()
        return ending

    def finish(self) -> int:
        """The command's end: late marks and metrics, what it left running, the end event."""
        code = self.proc.wait()
        self._close_hold()  # the exits it held are read: their snapshots are in
        self.reads.close()  # ...and every read asked (one of a process gone meanwhile finds it gone)
        self.watchdog.done()
        self.sampler.finish()
        oom_after = oom_kills()
        if self.load is not None:
            self.load.stop()
            value = self.load.metric(self.options.metric_regex) if self.options.metric_regex else None
            if value is not None:
                self._metric(value, None)
        if self.marks is not None:  # lines read after the last sample: the metrics still count
            self.marks.thread.join(timeout=2)
            for name in self.marks.pending():  # a mark printed just before the end: too late to read
                self.writer.write({"type": "error", "pid": self.proc.pid, "phase": name,
                                   "error": "the process ended before memgap could read it at this mark"})
            for value in self.marks.pending_values():
                self._metric(value, self.proc.pid)
        if self.own_group and not self.timed_out:
            try:  # children the command left running in its group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.tree.reap()
        subreaper(self.was_subreaper)
        if self.options.cgroup is not None:  # the run's own cgroup: its peak, and the OOM killer's acts in it
            self.writer.write({"type": "cgroup", "limit": self.options.cgroup.limit,
                               **asdict(self.options.cgroup.charge())})
        self.writer.write({"type": "end", "t": round(time.time() - self.start, 4), "exit_code": code,
                           "timed_out": self.timed_out, "stopped_at_idle": self.stopped_at_idle,
                           "load_seconds": round(self.load.load_seconds, 4) if self.load is not None else None,
                           "oom_kills": None if self.oom_before is None or oom_after is None
                           else oom_after - self.oom_before})
        self.writer.close()
        return code


def _exited_within(proc: subprocess.Popen[bytes], marks: StdoutMarks | None, seconds: float) -> bool:
    """Wait up to ``seconds`` for the command to exit; a mark's line ends the wait early, so
    that the mark is measured while the program is still at it."""
    if marks is None or not marks.thread.is_alive():  # no marks, or its output has ended
        try:
            proc.wait(timeout=seconds)  # returns the moment the command exits
            return True
        except subprocess.TimeoutExpired:
            return False
    if marks.arrived.wait(seconds):  # set by a mark, and by the end of its output
        marks.arrived.clear()
    return proc.poll() is not None


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
                        metrics: dict[str, float]) -> None:
    """What the processes wrote themselves: their phases (process-PID.jsonl), their agents' last words."""
    for path in sorted(glob.glob(os.path.join(record_dir, "process-*.jsonl"))):
        if os.path.islink(path):  # planted: never followed (read_events would refuse it too)
            errors.append({"error": "a link, not followed: memgap reads only the files it wrote", "file": path})
            continue
        for event in _events(path):
            _add_event(processes, errors, metrics, event)
    for path in sorted(glob.glob(os.path.join(record_dir, "agent-*.txt"))):
        _add_agent_exit(processes, errors, path)


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
    _read_process_files(record_dir, processes, errors, metrics)
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
    run.findings = _series_findings(run.processes) + tree_copies_findings(run)
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

