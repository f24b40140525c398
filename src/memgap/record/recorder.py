"""``memgap run``'s recording: sample a command's process tree while its Python
processes record their own phases (memgap.record.assemble makes the folder one document).

Layout of a recording folder (each file appended line by line as it happens):
``samples.jsonl`` (header, processes seen, RSS samples, the reads from outside, end)
written by the sampler and memgap's reader, and ``process-PID.jsonl`` (phase
snapshots) written through the bootstrap by each Python child that snapshots
itself (one that uses memgap's API, runs CUDA through PyTorch, or runs under
``--walk`` or without the exit hold; the others' exits are read from outside).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

from memgap.errors import MemgapError
from memgap.record.envnames import (
    EXIT_READS_ENV,
    EXIT_SOCKET_ENV,
    RECORD_DIR_ENV,
    TRIM_AFTER_ENV,
    WALK_ENV,
)
from memgap.record.exit_hold import ExitHold
from memgap.record.recording import (
    SAMPLES_FILE as SAMPLES_FILE,  # re-exported: callers name it here
    RecordingWriter,
    private_folder,
)
from memgap.record.tree_end import (
    GRACE,
    Ending,
    Stopped,
    StopSignals,
    TreeEnd,
    Watchdog,
    child_setup,
    end_tree,
    exit_within,
    hold_stop_signals,
    release_stop_signals,
    subreaper,
)

# What watches the command (the reader of its processes from outside, the sampler, the marks, the load) is
# loaded once the command has started, beside its own start: imported before, it delayed every command
# memgap runs by 0.1 s. Imported here only for the type checker; so is typing (4 ms), and this module
# makes no dataclass (dataclasses imports inspect: 14 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from memgap.documents.recorded import MachineInfo
    from memgap.lab.cgroup_limit import RunCgroup
    from memgap.record.load import LoadDriver
    from memgap.record.marks import StdoutMarks
    from memgap.record.outside import OutsideReads

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/memgap, this file is in record/
BOOTSTRAP_DIR = os.path.join(PACKAGE_DIR, "_bootstrap")


def machine_info() -> MachineInfo:
    import platform  # its libc_ver reads the interpreter's file: after the command has started

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


class RunOptions:
    """How a command is recorded (``record_run``): by `memgap run`, the demo and the lab."""

    def __init__(self, cmd: list[str], record_dir: str, interval: float = 0.1, walk: bool = False, *,
                 env: dict[str, str] | None = None, timeout: float | None = None, stdout: Any = None,
                 stderr: Any = None, mark_regex: str = "", metric_regex: str = "", metric_name: str = "",
                 idle_after: float = 0.0, agent: bool = True, load: list[str] | None = None, rest: float = 3.0,
                 cgroup: RunCgroup | None = None, forked: Callable[[], None] | None = None,
                 outside_exits: bool = False) -> None:
        self.cmd = cmd
        self.record_dir = record_dir
        self.interval = interval
        self.walk = walk  # phase snapshots with the gc walk (see `memgap run --walk`)
        self.env = env or {}  # set for the command, over memgap's own
        self.timeout = timeout
        self.stdout, self.stderr = stdout, stderr  # passed to Popen: None inherits
        self.mark_regex = mark_regex  # stdout lines that mark a phase (group 1 names it)
        self.metric_regex = metric_regex  # stdout lines that report a metric (group 1 its value)...
        self.metric_name = metric_name  # ...recorded under this name
        self.idle_after = idle_after  # seconds without a new phase after which the program counts as idle
        self.agent = agent  # preload the native agent (it stays dormant in Python interpreters)
        self.load = load or []  # a load command to run against the service (memgap.record.load)
        self.rest = rest  # with a load: seconds of the service's quiet after it, before it is stopped
        self.cgroup = cgroup  # a memory cgroup the command enters before it execs (the lab's)
        self.forked = forked  # called once the command started (memgap's reader forked before): a caller's
        # thread started then is not running as the reader is copied
        self.outside_exits = outside_exits  # Python children's exits read from outside under the hold
        # (memgap._hook), unless they use memgap's API or CUDA, or phases walk the gc (--walk)


def _with_agent(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` with the native agent preloaded, and what the header says about it."""
    from memgap.agent import agent_env, library_path

    try:
        return agent_env(env, mode="auto"), {"library": library_path(), "mode": "auto"}
    except MemgapError as exc:  # no compiler: the run goes on without the agent
        return env, {"problem": str(exc)}


def _exit_hold(record_dir: str, env: dict[str, str], writer: RecordingWriter) -> ExitHold | None:
    """The socket where the agents of the tree (and Python's bootstrap, where ``outside_exits``) say they
    exit (``env`` names it for them; ``_exit_reads`` serves it once the reader is there). None where it
    cannot be made: the run goes on, its exits unheld."""
    try:
        hold = ExitHold(record_dir)
    except OSError as exc:
        writer.write({"type": "error", "pid": None, "phase": "exit", "error": f"exits not held: {exc}"})
        return None
    env[EXIT_SOCKET_ENV] = hold.path
    return hold


def _exit_reads(reads: OutsideReads, start: float, interval: float) -> Callable[[int, tuple[str, ...]], None]:
    """How a process that says it exits is read from outside as its exit waits: its ``before-exit``
    snapshot (Python's also ``exit``, after its atexit handlers, or in the same read where nothing of its
    program could run between the two; by memgap's reader, at once, beside the reads asked), unless it only
    passed through (``passing_through``: let go at once, and at its second call too, unasked: it was told by
    its first)."""
    from memgap.record.outside import ReadAsked
    from memgap.record.tree_watch import passing_through

    let_go: set[int] = set()

    def read(pid: int, phases: tuple[str, ...]) -> None:
        if pid in let_go:
            return
        passed = passing_through(pid, interval)
        if passed is None:
            reads.now(ReadAsked(pid, phases[0], start, time.time(), held_exit=True, also=phases[1:]))
        else:
            let_go.add(pid)
            reads.writer.write({"type": "passed", "pid": pid, "lived": passed[0], "hwm": passed[1]})

    return read


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
        self.start = time.time()
        env = child_env(options.record_dir)
        if not options.walk:
            env[WALK_ENV] = "0"
        env.update(options.env)
        agent_info: dict[str, str] = {}
        self.hold: ExitHold | None = None
        if options.agent:
            env, agent_info = _with_agent(env)
            self.hold = _exit_hold(options.record_dir, env, self.writer)
            if self.hold is not None and options.outside_exits and not options.walk:
                env[EXIT_READS_ENV] = "outside"
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
            self.writer.close()
            raise MemgapError(f"cannot run {options.cmd[0]!r}: {exc.strerror or exc}") from None
        self.watchdog.watch(self.proc.pid)
        if self.own_group:
            self.watchdog.group(self.proc.pid)
        from memgap.documents.json_value import shaped
        from memgap.documents.recorded import RUN_SCHEMA

        self.writer.write({"type": "header", "schema": RUN_SCHEMA, "cmd": options.cmd, "start": self.start,
                           "interval": options.interval, "machine": shaped(machine_info()), "env": options.env,
                           "agent": agent_info})
        self._start_watching(service_metric)

    def _start_watching(self, service_metric: str) -> None:
        """What watches the command, loaded and started as it starts (see the imports above)."""
        from memgap.record.load import LoadDriver
        from memgap.record.marks import CpuActivity, PhaseClock, StdoutMarks
        from memgap.record.outside import OutsideReads
        from memgap.record.tree_watch import OutsideQuiet, TreeSampler
        from memgap.sources.procfs import oom_kills

        options = self.options
        self.reads = OutsideReads(self.writer)  # beside the sampler (forked now, before any other thread)
        if self.hold is not None:
            self.hold.serve(_exit_reads(self.reads, self.start, options.interval))
        if options.forked is not None:
            options.forked()
        self.marks: StdoutMarks | None = (
            StdoutMarks(self.proc.stdout, options.mark_regex, options.stdout is None, service_metric, self.proc.pid)
            if self.proc.stdout is not None and (options.mark_regex or service_metric) else None)
        self.load: LoadDriver | None = (LoadDriver(options.load, options.record_dir, options.rest, self.writer.write)
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
        from memgap.sources.processes import tree_pids

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
        from memgap.record.outside import ReadAsked
        from memgap.record.tree_watch import TOO_MANY

        read = ReadAsked(self.proc.pid, name, self.start, at, trim_after=self.trim_after, at_mark=(rss, at))
        if not self.reads.ask(read):
            self.writer.write({"type": "error", "pid": self.proc.pid, "phase": name, "error": TOO_MANY})

    def _quiet_long_enough(self, busy: bool) -> bool:
        """--idle-after: quiet that long (no new phase, little CPU): its idle, read from outside
        (unless it marked idle itself: that one was measured already, and a trim may have followed)."""
        from memgap.record.outside import ReadAsked
        from memgap.record.tree_watch import TOO_MANY

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
        from memgap.documents.json_value import shaped

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
        from dataclasses import asdict

        from memgap.sources.procfs import oom_kills

        code = self.proc.wait()
        self.watchdog.let_go()  # it exits (a Python process: a few ms) while the reads close
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
        return exit_within(proc, seconds)
    if marks.arrived.wait(seconds):  # set by a mark, and by the end of its output
        marks.arrived.clear()
    return proc.poll() is not None
