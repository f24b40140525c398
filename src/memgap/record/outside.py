"""``memgap run``'s reads of its tree's processes from outside (the snapshot ``memgap inspect PID``
takes), and the thread that makes them beside the sampler.

A read from outside takes what the process's mappings cost to read: milliseconds for a small C
program, seconds for one that maps large C++ libraries (LLVM, a deep-learning framework). Made in
the sampler's loop, it stopped the timeline for that long (6 samples in the first second of a
12.6 s training run). So the sampler asks, and ``OutsideReads`` reads, one read at a time in its
own thread; what waits is bounded (one peak read per process, the newest; ``MAX_PENDING`` in all),
and each read records when it was asked, when it began and how long it took, so that a slow one is
said.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from typing import NoReturn, cast

from memgap.documents.json_value import shaped
from memgap.documents.recorded import RecordedSnapshot
from memgap.documents.snapshot import Snapshot
from memgap.errors import MemgapError
from memgap.record.idle import rss_slack
from memgap.record.recording import RecordingWriter
from memgap.record.tree_end import die_with_parent
from memgap.sources.procfs import ProcReader, status_int

MAX_PENDING = 64  # reads waiting at most: a flood of marks is refused past this, and said so
PSS_EVENT = "pss"  # a read of the PSS of the tree's quiet processes alone (smaps_rollup: milliseconds each)


def outside_snapshot(writer: RecordingWriter, pid: int, phase: str, start: float, trim_after: str = "",
                     quiet_since: float | None = None, rested_since: float | None = None,
                     event: str = "snapshot", held_exit: bool = False,
                     at_mark: tuple[int | None, float] | None = None,
                     asked: float | None = None, also: tuple[str, ...] = ()) -> RecordedSnapshot | None:
    """A phase snapshot of ``pid`` read from outside (for marks the program did not make itself).

    After the phase named ``trim_after``, the process's agent (if it has one)
    trims, and an "after-trim" snapshot records what that released.
    ``quiet_since``: the snapshot opens a quiet spell that began then; ``rested_since``:
    the process's rest began then (its work ended), earlier when a trim restarted the spell.
    ``event``: "snapshot" (a phase: an error is recorded) or "peak" (a high on the way: a
    process gone meanwhile is no error). ``held_exit``: read as the agent held the process's exit.
    ``at_mark``: its VmRSS and the time as the mark's line arrived, where the marks' reader read them.
    ``asked``: when the recorder asked for the read (it waited for the reads before it). ``also``: phases
    this read stands for too, each written as a snapshot of its own that says so (``same_read_as``).
    Returns the snapshot's record (None where it could not be read); ``moving`` in it: its RSS
    changed by more than ``rss_slack`` while it was read; ``read_started`` and ``read_seconds``:
    when the read began and how long it took.
    """
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

    try:
        # The program runs on while memgap reads it: its RSS at the mark comes first.
        read_began = read_started = time.time()
        rss_at_mark = status_int(ProcReader(pid).status(), "VmRSS")
        if at_mark is not None and at_mark[0] is not None:  # read as the line arrived, not now
            rss_at_mark, read_began = at_mark[0], at_mark[1]
        # at a held exit, glibc's heaps walked from outside are enough: its agent's exit record has
        # its mallinfo2, and the question would cost the wait 4 ms more (3 times the read)
        snap = snapshot_pid(pid, SnapshotOptions(regions=True, recorded=True, agent_beside_glibc=not held_exit))
    except MemgapError as exc:
        if event == "snapshot":
            writer.write({"type": "error", "pid": pid, "phase": phase, "error": str(exc)})
        return None
    read_seconds = time.time() - read_started
    # not at a held exit: the hold is short (1 s at most), and the reads before it measured the copies
    copies_seconds = None if held_exit else add_copies(snap)
    snap.phase = phase
    snap.quiet_since, snap.rested_since = quiet_since, rested_since
    record = cast(RecordedSnapshot, snap.to_dict(regions=False))  # a snapshot's keys, as the run keeps them
    record["rss_at_mark"], record["read_began"] = rss_at_mark, read_began
    record["read_started"], record["read_seconds"] = read_started, round(read_seconds, 4)
    if asked is not None:
        record["asked"] = asked
    if copies_seconds is not None:
        record["copies_seconds"] = round(copies_seconds, 4)
    if held_exit:
        record["held_exit"] = True
    if abs(snap.rss - rss_at_mark) > rss_slack(snap.rss):
        record["moving"] = True
    t = round(time.time() - start, 4)
    writer.write({"type": event, "pid": pid, "t": t, "snapshot": shaped(record)})
    for other in also:
        writer.write({"type": event, "pid": pid, "t": t, "snapshot": shaped({**record, "phase": other,
                                                                              "same_read_as": phase})})
    if phase == trim_after and snap.allocator.agent is not None:
        _agent_trim(writer, pid, start)
    return record


def add_copies(snap: Snapshot) -> float | None:
    """What a forked process copied from its parent (memgap.explain.cow, as ``inspect --tree`` measures it),
    set on its snapshot (``snap.regions`` split it by layer, then go); returns the seconds it took, None
    where it has no parent in the tree: the command itself, an orphan come back to memgap (their parent is
    memgap's recorder: this process's parent, or this process where the reads are made in a thread)."""
    from memgap.explain.cow import copied_from_parent

    regions, snap.regions = snap.regions, []
    try:
        parent = ProcReader(snap.pid).stat().ppid
        if parent in (0, 1, os.getpid(), os.getppid()):
            return None
        began = time.perf_counter()
        snap.copied_from_parent = copied_from_parent(snap.pid, parent, regions)
        return time.perf_counter() - began
    except (MemgapError, OSError):
        return None  # it, or its parent, exited meanwhile: the snapshot stands without


def _agent_trim(writer: RecordingWriter, pid: int, start: float) -> None:
    from memgap.agent.client import trim_pid
    from memgap.explain.snapshot import SnapshotOptions, snapshot_pid

    try:
        trimmed = trim_pid(pid)
        snap = snapshot_pid(pid, SnapshotOptions(regions=False, recorded=True))
    except (MemgapError, OSError) as exc:
        writer.write({"type": "error", "pid": pid, "phase": "after-trim", "error": str(exc)})
        return
    snap.phase = "after-trim"
    snap.trim = trimmed
    writer.write({"type": "snapshot", "pid": pid, "t": round(time.time() - start, 4),
                  "snapshot": snap.to_dict(regions=False)})


def pss_reads(writer: RecordingWriter, pids: list[int]) -> None:
    """The PSS of the processes already quiet, read again as another goes quiet too: a shared
    page's PSS moves when a sharer copies it (a forked worker's writes), with no CPU nor RSS of
    the sharer's own, so a tree is summed at idle from readings of one moment."""
    for other in pids:
        try:
            rollup = ProcReader(other).smaps_rollup()
        except MemgapError:
            continue  # it exited
        if rollup is not None:
            writer.write({"type": "pss", "pid": other, "time": time.time(), "pss": rollup.get("Pss"),
                          "rss": rollup.get("Rss")})


@dataclass(frozen=True)
class ReadAsked:
    """One read from outside, as the recorder asks it (data: it crosses to the reader's process).
    ``then_pss``: processes whose PSS is read again after it (a quiet spell's, ``pss_reads``)."""

    pid: int
    phase: str
    start: float
    asked: float
    event: str = "snapshot"
    trim_after: str = ""
    quiet_since: float | None = None
    rested_since: float | None = None
    at_mark: tuple[int | None, float] | None = None
    then_pss: tuple[int, ...] = ()
    held_exit: bool = False
    also: tuple[str, ...] = ()  # phases the same snapshot stands for too (a held exit's: memgap._hook)


@dataclass(frozen=True)
class ReadMade:
    """What a read found, for the sampler: whether it was read, whether its RSS moved meanwhile, when
    it began and ended (monotonic: one clock for every process of the machine), the RSS it read (a
    read that moved is made again once the process is still at that level: the RSS sampled as it
    was asked is older, by the reads it waited for)."""

    read: bool
    moving: bool
    began: float
    ended: float
    rss: int | None = None


def make_read(writer: RecordingWriter, asked: ReadAsked) -> ReadMade:
    """Make one read asked: the snapshot's event (or its error) written into the recording; a PSS_EVENT
    read: the PSS of its process and of ``then_pss``, no snapshot."""
    began = time.monotonic()
    if asked.event == PSS_EVENT:
        pss_reads(writer, [asked.pid, *asked.then_pss])
        return ReadMade(True, False, began, time.monotonic())
    record = outside_snapshot(writer, asked.pid, asked.phase, asked.start, asked.trim_after, asked.quiet_since,
                              asked.rested_since, asked.event, asked.held_exit, asked.at_mark, asked.asked,
                              asked.also)
    pss_reads(writer, list(asked.then_pss))
    if record is None:
        return ReadMade(False, False, began, time.monotonic())
    return ReadMade(True, bool(record.get("moving")), began, time.monotonic(), record["rss"])


Done = Callable[[ReadMade], None]


class OutsideReads:
    """The recorder's reads from outside, made one at a time beside the sampler, in the order asked
    (the tree's PSS, then the reads of a moment, before the peak reads: ``_next_key``):
    by a process of memgap's own, forked as the recording starts (``ReaderProcess``), so that a read
    that parses for seconds holding Python's GIL (a look at large C++ libraries: 0.6 s at a time
    here) never holds up the sampler's thread; in a thread of this process where none could be forked.

    A read asked under a ``key`` that is still waiting replaces the one waiting, in its place (a
    process's newer high replaces the older one not yet read: the newest wins); at most
    MAX_PENDING wait, and another is refused (``ask`` says False: its caller records why)."""

    def __init__(self, writer: RecordingWriter) -> None:
        self.writer = writer
        self._cond = threading.Condition()
        self._pending: dict[Hashable, tuple[ReadAsked, Done | None]] = {}  # in the order asked
        self._busy: Hashable | None = None  # the key of the read under way
        self._closed = False
        self._serial = itertools.count()
        self.process = ReaderProcess.start(writer)  # before any other thread of the recording runs
        self._thread = threading.Thread(target=self._serve, name="memgap-outside-reads", daemon=True)
        self._thread.start()

    def ask(self, read: ReadAsked, key: Hashable | None = None, done: Done | None = None) -> bool:
        """Have ``read`` made once the reads asked before it are (a peak read also waits for the reads of a
        moment asked later: ``_next_key``), ``done`` told what it found, in the reads' thread; False
        where it is refused (too many wait, or the recording is ending)."""
        with self._cond:
            if self._closed:
                return False
            if key is None:
                key = ("once", next(self._serial))
            if key not in self._pending and len(self._pending) >= MAX_PENDING:
                return False
            self._pending[key] = (read, done)
            self._cond.notify_all()
            return True

    def now(self, read: ReadAsked) -> ReadMade:
        """``read`` made at once, beside the reads asked (an exit held for it cannot wait behind them):
        by the reader's process still (what it parsed, it keeps: a first look at a process's libraries
        in this one took a second under load, past the hold), in its second thread."""
        process = self.process
        if process is not None:
            made = process.make(read, now=True)
            if made is not None:
                return made
        return make_read(self.writer, read)

    def under_way(self, key: Hashable) -> bool:
        """Whether the read asked under ``key`` is being made now (one waiting may still be replaced)."""
        with self._cond:
            return self._busy == key

    def settle(self) -> None:
        """Wait until every read asked so far is made (the tree is about to be stopped)."""
        with self._cond:
            while self._pending or self._busy is not None:
                self._cond.wait()

    def close(self, drop: bool = False, timeout: float | None = None) -> int:
        """No more reads; those waiting are made (or dropped, with ``drop``); returns once the last is
        made (or after ``timeout``: the reader's process is then killed), with how many were dropped."""
        with self._cond:
            self._closed = True
            dropped = len(self._pending) if drop else 0
            if drop:
                self._pending.clear()
            self._cond.notify_all()
        self._thread.join(timeout)
        if self.process is not None:
            self.process.end(kill=self._thread.is_alive())
        return dropped

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return  # closed, and every read made
                key = _next_key(self._pending)
                read, done = self._pending.pop(key)
                self._busy = key
            try:
                made = self._make(read)
                if done is not None:
                    done(made)
            except Exception as exc:  # noqa: BLE001 - one read that fails is recorded; the run goes on
                _failed(self.writer, read, exc)
            finally:
                with self._cond:
                    self._busy = None
                    self._cond.notify_all()

    def _make(self, read: ReadAsked) -> ReadMade:
        if self.process is not None:
            made = self.process.make(read)
            if made is not None:
                return made
            self.process = None  # it died (killed, out of memory): the reads go on in this thread
            self.writer.write({"type": "error", "pid": None, "phase": "read from outside",
                               "error": "memgap's reader process ended: reads go on beside the sampler's thread"})
        return make_read(self.writer, read)


def _next_key(pending: dict[Hashable, tuple[ReadAsked, Done | None]]) -> Hashable:
    """The read to make next: the tree's PSS read as a process went quiet (milliseconds: the tree summed
    at one moment of its rest, not after it), then the first asked of a moment (a mark, a quiet spell:
    the moment passes), else the first peak read (a process at rest holds what a peak read of it would
    find). Beside 2 busy loops a read of a 300 MiB Python worker took 2-4 s, and quiet reads waited
    10-20 s behind the peak reads of 4 workers first seen: a 3 s rest had ended, its tree shutting
    down, before they were made; with a shorter queue, a gunicorn master's quiet read still came
    after its 4 workers' and their exits, its PSS never read while they were there."""
    rank = {PSS_EVENT: 0, "peak": 2}
    return min(pending, key=lambda key: rank.get(pending[key][0].event, 1))  # min keeps the first of a rank


def _failed(writer: RecordingWriter, read: ReadAsked, exc: Exception) -> None:
    try:
        writer.write({"type": "error", "pid": read.pid, "phase": read.phase, "error": f"{type(exc).__name__}: {exc}"})
    except (OSError, ValueError):
        pass  # the recording is closed: memgap is ending


class ReaderProcess:
    """memgap's own process that makes the reads from outside: forked from the recorder (it has
    memgap's modules loaded already), it writes each read's events into the recording itself (a
    whole line per write, appended: memgap.record.recording) and answers the recorder with what
    it found. Two channels: the reads asked, one after the other, and the reads made at once (a
    held exit's), in a second thread beside them. It ends when the recorder closes its requests,
    or dies (PR_SET_PDEATHSIG), and ignores the stop signals a terminal sends its process group:
    the recorder ends it."""

    def __init__(self, pid: int, channels: list[tuple[int, int]]) -> None:
        self.pid = pid
        self._channels = [(os.fdopen(requests, "wb"), os.fdopen(answers, "rb")) for requests, answers in channels]
        self._now_lock = threading.Lock()  # one read at once at a time (exits held together take turns)

    @classmethod
    def start(cls, writer: RecordingWriter) -> ReaderProcess | None:
        """The reader forked; None where it cannot be (its reads are then made in a thread)."""
        pipes = [os.pipe() for _ in range(4)]  # per channel: requests to it, answers from it
        try:
            pid = os.fork()
        except OSError:
            for fd in itertools.chain(*pipes):
                os.close(fd)
            return None
        ours, its = [(pipes[0][1], pipes[1][0]), (pipes[2][1], pipes[3][0])], \
            [(pipes[0][0], pipes[1][1]), (pipes[2][0], pipes[3][1])]
        for fd in itertools.chain(*(its if pid else ours)):
            os.close(fd)
        if pid == 0:  # the reader: never returns
            _reader_main(writer.beside(), its)
        return cls(pid, ours)

    def make(self, read: ReadAsked, now: bool = False) -> ReadMade | None:
        """One read made by the reader (``now``: on its second channel, beside the reads asked); None
        where it has died."""
        with self._now_lock if now else contextlib.nullcontext():
            requests, answers = self._channels[1 if now else 0]
            try:
                requests.write(json.dumps(asdict(read)).encode() + b"\n")
                requests.flush()
                line = answers.readline()  # waits without the GIL
            except (OSError, ValueError):  # ValueError: closed, the recording is ending
                return None
        return ReadMade(**json.loads(line)) if line else None

    def end(self, kill: bool = False) -> None:
        """Its requests closed (it ends once its reads are made), or it is killed; then waited for."""
        with contextlib.suppress(OSError):
            if kill:
                os.kill(self.pid, signal.SIGKILL)
        for requests, _ in self._channels:
            with contextlib.suppress(OSError):
                requests.close()
        with contextlib.suppress(ChildProcessError):  # reaped already, by the tree's end (memgap the subreaper)
            os.waitpid(self.pid, 0)
        for _, answers in self._channels:
            with contextlib.suppress(OSError):
                answers.close()


def _reader_main(writer: RecordingWriter, channels: list[tuple[int, int]]) -> NoReturn:
    """The reader's process: each read asked, made; then exits, never running the recorder's cleanup."""
    code = 0
    try:
        die_with_parent(signal.SIGKILL)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        quiet = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # it prints nothing, and holds no terminal nor pipe of memgap's caller open
            os.dup2(quiet, fd)
        import memgap.explain.snapshot  # noqa: F401 - loaded here, beside the command starting, before the first read
        beside = threading.Thread(target=_serve_channel, args=(writer, *channels[1]), name="memgap-reads-now")
        beside.start()
        _serve_channel(writer, *channels[0])
        beside.join()
    except BaseException:  # noqa: BLE001 - the recorder sees it gone and goes on without it
        code = 1
    os._exit(code)


def _serve_channel(writer: RecordingWriter, requests: int, answers: int) -> None:
    """One channel of the reader's: each read asked on it made, answered, until it is closed."""
    with os.fdopen(requests, "rb") as inbox, os.fdopen(answers, "wb") as outbox:
        for line in inbox:
            fields = json.loads(line)
            at_mark = fields.pop("at_mark")
            read = ReadAsked(**fields, at_mark=tuple(at_mark) if at_mark else None)
            try:
                made = make_read(writer, read)
            except Exception as exc:  # noqa: BLE001 - recorded; the next read goes on
                _failed(writer, read, exc)
                made = ReadMade(False, False, time.monotonic(), time.monotonic())
            outbox.write(json.dumps(asdict(made)).encode() + b"\n")
            outbox.flush()
