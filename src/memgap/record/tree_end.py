"""How a recorded run's tree ends when memgap is told to stop, and when memgap itself is killed.

- A stop signal to memgap (SIGTERM: ``docker stop``, systemd, Kubernetes; SIGHUP: its terminal
  closed; SIGINT: Ctrl-C) raises ``Stopped`` in memgap's main thread (``StopSignals``). The recorder
  passes it on and ends the tree (``end_tree``): the signal to every process of it (its process
  group, where it has one, and each process found below memgap: memgap is their subreaper, so the
  orphans of the tree come back to it instead of init), GRACE seconds for them to end, then SIGKILL
  for what is left. A second stop signal during the grace kills at once.
- memgap killed outright (SIGKILL, the OOM killer), where no handler runs: the command's
  parent-death signal (SIGTERM, set between fork and exec: ``child_setup``) reaches it, and the
  watchdog (``Watchdog``, memgap/record/watchdog.py) ends the rest: every process the sampler saw, by
  PID and start time, and the command's process group, SIGKILL after the same grace.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection

from memgap.record import watchdog  # the standard library only: light enough to load before the command starts

# procfs (its patterns compiled as it loads) is imported where a process is read: this module is loaded before
# memgap starts the command, its reads come after; so are typing (4 ms) and dataclasses (14 ms): none here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, NoReturn

    from memgap.documents.recorded import StopEnding

GRACE = 5.0  # seconds the tree has to end after the stop signal, before SIGKILL (not configurable)
CTRL_C_WAIT = 1.0  # Ctrl-C in a terminal reached the command too: it may end by itself first
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


class Stopped(KeyboardInterrupt):
    """memgap got a stop signal while it recorded (a KeyboardInterrupt, as Ctrl-C always was)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.ending: Ending | None = None  # how the recorder ended the tree, once it has


class Ending:
    """How a stopped run's tree ended (the recording's end event says it)."""

    def __init__(self, signal: str, forwarded: str | None, grace: float, killed: int) -> None:
        self.signal = signal  # what memgap got
        self.forwarded = forwarded  # what the tree got first (None: the terminal's Ctrl-C reached it, and it ended)
        self.grace = grace  # seconds it had to end before SIGKILL
        self.killed = killed  # processes still there after the grace, SIGKILLed

    def to_dict(self) -> StopEnding:
        return {"signal": self.signal, "forwarded": self.forwarded, "grace": self.grace, "killed": self.killed}


class StopSignals:
    """Within it, SIGINT, SIGTERM and SIGHUP raise ``Stopped`` in the main thread, once; a second one
    sets ``again`` (the grace ends at once). A signal ignored when it is entered (``nohup``) stays
    ignored; in another thread nothing is installed (Python lets only the main thread do it)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.again = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            raise Stopped(signum)
        self.again = True

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _libc_prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None
    return prctl


def die_with_parent(sig: int) -> None:
    """``sig`` to this process when the thread that forked it dies (memgap killed); exits at once where
    that parent has died already."""
    prctl, parent = _libc_prctl(), os.getppid()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if parent == 1 or os.getppid() != parent:
        os._exit(126)


def subreaper(on: bool) -> bool:
    """While on, orphans below memgap come back to it (not to init): found, and ended, with the tree.
    Returns whether it was on before (a container's init may have made it so: restored after the run)."""
    prctl = _libc_prctl()
    if prctl is None:
        return False
    was = ctypes.c_int(0)
    prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
    prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
    return bool(was.value)


def child_setup(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """What the command's child runs between fork and exec (Popen's preexec_fn): SIGTERM to it when
    memgap's thread that started it dies (memgap's main thread: memgap killed), then ``then``.
    Resolved before the fork: the child only calls."""
    prctl, parent = _libc_prctl(), os.getpid()

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held in memgap while it started: not in the command
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent:  # memgap died before the call took: nobody would end it
                os._exit(126)
        if then is not None:
            then()

    return setup


def _alive(pid: int) -> bool:
    """Running, not a zombie (a zombie has ended: it only waits to be reaped)."""
    from memgap.sources.procfs import ProcReader

    try:
        return not str(ProcReader(pid).status().get("State", "")).startswith("Z")
    except Exception:  # noqa: BLE001 - gone
        return False


def _below(root: int) -> list[int]:
    from memgap.sources.processes import tree_pids

    return [p for p in tree_pids(root) if p != root]


class TreeEnd:
    """The processes of a run's tree: the command, what is below it, and what is below memgap apart
    from memgap's own helpers (``spare``: the watchdog, a load command), orphans of the tree."""

    def __init__(self, proc: subprocess.Popen[bytes], own_group: bool, spare: Callable[[], set[int]]) -> None:
        self.proc, self.own_group, self.spare = proc, own_group, spare

    def members(self) -> list[int]:
        spared = set()
        for pid in self.spare():
            spared |= {pid, *_below(pid)}
        found = {self.proc.pid, *_below(self.proc.pid), *_below(os.getpid())} - spared - {os.getpid()}
        return sorted(p for p in found if p == self.proc.pid or _alive(p))

    def signal_all(self, sig: int) -> int:
        """``sig`` to the group and each member; how many members were running (counted first: the
        group's signal may end them before they are counted)."""
        members = [p for p in self.members() if p != self.proc.pid or self.proc.poll() is None]
        if self.own_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return len(members)

    def running(self) -> bool:
        return self.proc.poll() is None or any(p != self.proc.pid for p in self.members())

    def wait(self, seconds: float, again: Callable[[], bool] = lambda: False) -> bool:
        """Until the tree has ended (True), ``seconds`` pass or ``again`` says to stop waiting."""
        deadline = time.monotonic() + seconds
        while self.running():
            if time.monotonic() >= deadline or again():
                return False
            time.sleep(0.02)
        return True

    def reap(self, seen: Collection[int] | None = None) -> None:
        """Orphans of the tree that ended below memgap (their parent now): waited for, not left zombies.
        ``seen``: only those (the processes the sampler saw in the tree, while other threads of memgap's
        may have children of their own to wait for)."""
        from memgap.sources.procfs import ProcReader

        spared = self.spare() | {self.proc.pid}
        for pid in ProcReader(os.getpid()).children_pids():
            if pid not in spared and (seen is None or pid in seen) and not _alive(pid):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)


def end_tree(tree: TreeEnd, received: int | None, grace: float = GRACE,
             again: Callable[[], bool] = lambda: False) -> Ending:
    """End the tree: the signal memgap got passed on (SIGTERM where memgap itself stops it: idle,
    timeout, load done), ``grace`` seconds, then SIGKILL to what is left. Ctrl-C in a terminal
    reached the command (in memgap's process group) with memgap: it has CTRL_C_WAIT to end on
    its own before it gets SIGTERM."""
    got = signal.Signals(received).name if received is not None else "none"
    forwarded: str | None = None
    if received == signal.SIGINT and not tree.own_group and tree.wait(min(CTRL_C_WAIT, grace), again):
        tree.reap()
        return Ending(got, None, grace, 0)
    if received == signal.SIGINT and not tree.own_group:
        forwarded = "SIGTERM"
        sig = signal.SIGTERM
    else:
        sig = signal.Signals(received) if received is not None else signal.SIGTERM
        forwarded = sig.name
    tree.signal_all(sig)
    killed = 0
    if not tree.wait(grace, again):
        killed = tree.signal_all(signal.SIGKILL)
        tree.wait(GRACE)  # SIGKILL cannot be caught: they go (one in uninterruptible sleep takes its time)
    tree.proc.wait()
    tree.reap()
    return Ending(got, forwarded, grace, killed)


class Watchdog:
    """The watchdog process (memgap/record/watchdog.py): told the tree's processes as the sampler finds them,
    it ends them if memgap is killed; ``done`` once memgap has ended the run itself. A watchdog that
    cannot be started, or stops listening, is no reason to stop the run: it is then simply absent.

    Forked from memgap, not started as a new interpreter: an interpreter's start (0.015 s of CPU) beside the
    command's own slowed the command's start by 0.02 s on 2 cores. It is made before any other thread of the
    recording runs (as memgap's reader is), and holds no file of memgap's but its pipe."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._fd = -1  # the end of its pipe that memgap writes to
        try:
            read_end, write_end = os.pipe()
        except OSError:
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return
        if pid == 0:
            _watchdog_main(read_end)
        os.close(read_end)
        os.set_blocking(write_end, False)  # a watchdog that stopped reading never blocks memgap
        self.pid, self._fd = pid, write_end

    def _say(self, line: str) -> None:
        if self._fd < 0:
            return
        try:
            os.write(self._fd, line.encode() + b"\n")
        except OSError:  # gone, or its pipe full: this process goes unwatched
            pass

    def watch(self, pid: int) -> None:
        from memgap.sources.procfs import ProcReader

        try:
            self._say(f"pid {pid} {ProcReader(pid).stat().start_time}")
        except Exception:  # noqa: BLE001 - it exited already
            pass

    def group(self, pgid: int) -> None:
        self._say(f"group {pgid}")

    def forget(self, pid: int) -> None:
        self._say(f"gone {pid}")

    def let_go(self) -> None:
        """The run is over: the watchdog is told to leave the tree alone and exit (``done`` waits for it)."""
        if self._fd < 0:
            return
        self._say("done")
        os.close(self._fd)
        self._fd = -1

    def done(self) -> None:
        """The run is over (ended by memgap, or by itself): the watchdog leaves the tree alone and exits (a
        watchdog that does not within 5 s is killed), reaped."""
        if self.pid is None:
            return
        self.let_go()
        if not _reaped_within(self.pid, 5):
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        self.pid = None


def _watchdog_main(pipe: int) -> NoReturn:
    """The watchdog's process: its own session (a terminal's Ctrl-C or hangup does not reach it, nor memgap's
    killpg), the pipe on its stdin and nothing else open, the stop signals as the script wants them; then it
    watches (memgap.record.watchdog) and exits, never running memgap's cleanup."""
    code = 0
    try:
        os.setsid()
        os.dup2(pipe, 0)
        quiet = os.open(os.devnull, os.O_RDWR)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # close_range(2) where the C library has it: one call
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # memgap's own handler came with the fork
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM,))  # memgap held it off as it forked this
        for ignored in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(ignored, signal.SIG_IGN)
        watchdog.watch(os.fdopen(0, "rb"))
    except BaseException:  # noqa: BLE001 - memgap goes on unwatched
        code = 1
    os._exit(code)


def _pidfd_wait(pid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for child ``pid`` to exit, woken the moment it does, by its pidfd (Linux 5.3);
    False where it has none (an older kernel or Python; or it is reaped already): the caller polls."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return False
    try:
        select.select([fd], [], [], seconds)  # readable once it exits
    finally:
        os.close(fd)
    return True


def _reaped_within(pid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for child ``pid`` (one not started by Popen: the watchdog) to exit, and reap it."""
    deadline = time.monotonic() + seconds
    woken = _pidfd_wait(pid, seconds)
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            return True
        if woken or time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def exit_within(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait up to ``seconds`` for the command's exit, woken the moment it comes (``_pidfd_wait``), where
    Popen.wait polls with sleeps that grow to 50 ms (a run's end came that much late)."""
    if _pidfd_wait(proc.pid, seconds):
        return proc.poll() is not None
    try:
        proc.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def hold_stop_signals() -> set[int | signal.Signals]:
    """Hold the stop signals off (blocked, not lost) while a run starts, in this thread and the threads
    and processes it starts meanwhile (the command unblocks them: ``child_setup``); returns the mask
    to restore, which delivers a signal that came meanwhile."""
    return signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def release_stop_signals(mask: set[int | signal.Signals]) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
