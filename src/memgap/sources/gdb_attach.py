"""Run a few C calls inside another process through gdb, and always let it go.

One job: attach gdb (a subprocess speaking its machine interface, MI) to a PID,
evaluate expressions that call functions in it, and detach whatever happens:
an error, a timeout, Ctrl-C. What the calls mean (malloc_info, malloc_trim,
Python's C API) is the caller's business (``memgap.inside.gdb``). gdb's output is
parsed in ``gdb_mi`` (tested on text captured from gdb), why ptrace is
refused is explained in ``ptrace_access``, and what is read of the process and
sent to it without gdb (thread states, a thread's SIGINT, the checks before
attaching and after letting go) is in ``gdb_target``.

Why each guard is here:

- ``unwindonsignal``: a call that faults or is interrupted is unwound, gdb
  puts the thread's registers back as they were before the call.
- A timeout or Ctrl-C interrupts the call with SIGINT sent to the thread that
  runs it (tgkill), never to gdb: gdb hands its own SIGINT to the whole
  process, and a signal that lands in another thread makes gdb abandon the
  call *without* unwinding it (the thread would later return from the called
  function into the program's entry point). Once gdb may have touched the
  process, a step that is not a call (attaching, reading) is let finish,
  then gdb detaches; a SIGINT that reached a thread just as its call ended is
  caught and dropped before the detach.
- For the same reason asynchronous signals (SIGTERM, SIGPIPE, SIGCHLD,
  timers...) pass straight through to the process without stopping it; faults
  (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) still stop, so one raised by a
  call of ours is unwound instead of killing the process.
- Other threads run while a call runs (scheduler-locking off): a stopped
  thread holding a malloc lock would otherwise deadlock the call. Callers lock
  the scheduler around calls that must not let others run.
- ``non_stop``: gdb attaches in the background (non-stop mode) and stops only
  the thread it calls on; the others run on between calls too, stopped only
  while gdb attaches and detaches. A thread let go goes on with its errno put
  back; a call runs on its thread alone.
- At the deadline a call that waits (thread state S: on a futex, in a system
  call) is interrupted at once; one still on the CPU, perhaps inside a lock it
  took, gets a short grace first, as unwinding it there would leave the lock
  taken.
- gdb runs in its own session, so a Ctrl-C in memgap's terminal reaches memgap
  only; memgap decides what gdb and the process get.
- Once gdb is gone every thread's state is read: a process memgap left
  stopped (T) is continued, one that was stopped before is left alone.
"""
from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import time

from memgap.errors import MalformedInput, MemgapError, NoSuchProcess, PtraceDisallowed, ToolMissing
from memgap.sources.gdb_errors import CallFailed, GdbFailed, GdbTimeout, sigint_deferred
from memgap.sources.gdb_memory import ProcessMemory
from memgap.sources.gdb_mi import MiRecord, mi_quote, parse_int, parse_mi_line, parse_threads
from memgap.sources.gdb_target import (
    DEFAULT_TIMEOUT,
    attach_race,
    check_attachable,
    check_start_time,
    comm,
    continue_if_left_stopped,
    executable,
    sigint_pending,
    task_states,
    tgkill,
)
from memgap.sources.processes import ProcessIdentity
from memgap.sources.procfs import ProcReader, status_int
from memgap.sources.ptrace_access import has_cap_sys_ptrace, ptrace_refusal, read_yama_scope

GRACE_ON_CPU = 2.0     # more seconds for a call still running on the CPU at the deadline
INTERRUPT_WAIT = 3.0   # for gdb to unwind an interrupted call
CLEANUP_WAIT = 3.0     # for each cleanup command (errno, free, detach)
EXIT_WAIT = 2.0        # for gdb to exit after -gdb-exit, then after SIGTERM

# Setup before attaching. (command, required): an optional one may be unknown to an older gdb.
SETUP = (
    ("-gdb-set pagination off", False),
    ("-gdb-set confirm off", False),
    ("-gdb-set unwindonsignal on", True),
    ("-gdb-set unwind-on-terminating-exception on", False),
    ('-interpreter-exec console "set auto-load off"', False),
    ('-interpreter-exec console "set debuginfod enabled off"', False),
    # Separate debug info is not needed (every call is cast) and is slow to read.
    ("-gdb-set debug-file-directory /nonexistent", False),
    ('-interpreter-exec console "handle all nostop noprint pass"', True),
    ('-interpreter-exec console "handle SIGSEGV SIGBUS SIGILL SIGFPE SIGABRT SIGSYS stop print"', True),
)
# Non-stop: no library's symbols read while the attach holds every thread (0.1-0.2 s for libpython
# on the loaded machine); they are read once the threads run on ("sharedlibrary").
NON_STOP_SETUP = ("-gdb-set non-stop on", "-gdb-set mi-async on", "-gdb-set auto-solib-add off")


# --- the session ----------------------------------------------------------------

class GdbSession(ProcessMemory):
    """gdb attached to one process: ``call`` functions in it; ``close`` always lets it go.

    Use as a context manager. ``timeout`` bounds everything from starting gdb
    to the last call; letting go (detach, gdb's exit) has its own short limits.
    ``expected_start_time`` (from /proc/PID/stat, read when memgap looked at the
    process from outside) makes a reused PID an error instead of a stranger.
    """

    def __init__(self, pid: int, *, timeout: float = DEFAULT_TIMEOUT, gdb: str = "gdb",
                 proc_root: str = "/proc", expected_start_time: int | None = None,
                 needed_for: str = "--deep/--trim", non_stop: bool = False) -> None:
        self.pid = pid
        self.timeout = timeout
        self.gdb = gdb
        self.proc_root = proc_root
        self.expected_start_time = expected_start_time
        self.needed_for = needed_for
        self.non_stop = non_stop
        self.notes: list[str] = []                 # what happened that the user should know
        self.timings: dict[str, float] = {}        # attach, held (attach to detach), per call
        self._proc: subprocess.Popen[bytes] | None = None
        self._selector: selectors.BaseSelector | None = None
        self._buffer = b""
        self._token = 0
        self._log: list[str] = []                  # recent console and log text, for messages
        self._attached = False
        self._attach_sent = False
        self._broken = False                       # after an interrupt: no more calls
        self._stuck = False                        # gdb never answered an interrupt: only end it
        self._threads: dict[str, int] = {}         # gdb thread id -> LWP
        self._current: str | None = None
        self._stopped: set[str] = set()            # non-stop: the threads gdb reports stopped
        self._call_lwp: int | None = None          # the thread running a call of ours
        self._signaled: set[int] = set()           # threads memgap sent SIGINT
        self._errno: dict[int, tuple[int, int] | None] = {}  # LWP -> (errno address, value before our calls)
        self._blocks: list[int] = []               # malloc'ed in the process by us, freed before detaching
        self._pages: list[tuple[int, int]] = []    # (address, size) mmap'ed by us, unmapped before detaching
        self._states_before: dict[int, str] = {}
        self._before: tuple[ProcessIdentity, str] | None = None  # the process and its program before attaching
        self._started = self._attached_at = 0.0
        self.deadline = 0.0

    # -- lifecycle

    def __enter__(self) -> GdbSession:
        try:
            self.attach()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def attach(self) -> None:
        path = shutil.which(self.gdb)
        if path is None and os.sep in self.gdb:  # a path the user named (--gdb): not "install gdb"
            raise ToolMissing(self.gdb, self.needed_for, "name another with --gdb, or leave it out for the gdb on "
                              "PATH", missing="is not an executable gdb")
        if path is None:
            raise ToolMissing("gdb", self.needed_for, "apt-get install gdb")
        self._check_process()
        self._before = (ProcessIdentity.of(self.pid, self.proc_root), executable(self.pid, self.proc_root))
        self._states_before = task_states(self.pid, self.proc_root)
        self._started = time.monotonic()
        self.deadline = self._started + self.timeout
        env = dict(os.environ, LC_ALL="C", LANG="C")  # gdb's messages are parsed: keep them English
        env.pop("DEBUGINFOD_URLS", None)
        self._proc = subprocess.Popen([path, "--interpreter=mi2", "-nx", "-q"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
        self._selector = selectors.DefaultSelector()
        assert self._proc.stdout is not None  # stdout=PIPE
        self._selector.register(self._proc.stdout, selectors.EVENT_READ)
        self._set_up()
        self._attach_sent = True  # from here on, detach when letting go (an attach cut short may hold)
        rec = self._command(f'-interpreter-exec console "attach {self.pid} &"' if self.non_stop
                            else f"-target-attach {self.pid}", "attaching")
        if rec.cls == "error":
            self._attach_refused(str(rec.results.get("msg", "")))
        self._attached = True
        self._attached_at = time.monotonic()
        self.timings["attach"] = self._attached_at - self._started
        # attached, the PID cannot change hands: is it still the process memgap read?
        self._check_start_time("between memgap's outside read and gdb's attach")
        self.scheduler_locking(False)
        self._threads = dict(parse_threads(self._command("-thread-info", "listing threads").results))
        if self.non_stop and (rec := self._command('-interpreter-exec console "sharedlibrary"',
                                                   "reading the libraries' symbols")).cls == "error":
            raise GdbFailed(f"gdb could not read the libraries of PID {self.pid}: {rec.results.get('msg', '')}")
        main = next((gid for gid, lwp in self._threads.items() if lwp == self.pid), None)
        if main is None and self._threads:
            main = next(iter(self._threads))
        if main is None:
            raise GdbFailed(f"gdb attached to PID {self.pid} but lists no thread")
        self.select_thread(main)

    def _set_up(self) -> None:
        """gdb's settings; non-stop: the executable's symbols read before attaching, while the process runs."""
        setup = [*SETUP, *((command, True) for command in NON_STOP_SETUP if self.non_stop)]
        if self.non_stop:  # optional: a program deleted since it started has no file to read
            setup.append((f"-file-exec-and-symbols {mi_quote(f'{self.proc_root}/{self.pid}/exe')}", False))
        for command, required in setup:
            rec = self._command(command, "setting gdb up")
            if rec.cls == "error" and required:
                raise GdbFailed(f"gdb refused {command!r}: {rec.results.get('msg', '')}")

    def close(self) -> None:
        """Detach and end gdb, however it is doing; then check the process is not left stopped."""
        proc = self._proc
        if proc is None:
            return
        with sigint_deferred():
            try:
                self._let_go()
            finally:
                self._proc = None
                self._end_gdb(proc)
                if self._attached_at:
                    self.timings["held"] = time.monotonic() - self._attached_at
                self._check_not_left_stopped()

    def _let_go(self) -> None:
        try:
            if self._attached and not self._stuck:
                if self._signaled:
                    self._drain_sigint()
                for loc, value in filter(None, self._errno.values()):  # a memory write, not a call
                    self._cleanup_command(f"-data-evaluate-expression {mi_quote(f'*(int *) {loc} = {value}')}")
                if not self._broken:  # after an interrupt no call that may take a lock
                    for block in self._blocks:
                        self._cleanup_command(
                            f"-data-evaluate-expression {mi_quote(f'(void) free((void *) {block})')}")
                elif self._blocks:
                    self.notes.append("a block of a few bytes memgap allocated in the process stays allocated")
                if not self._broken:
                    for address, size in self._pages:
                        self._cleanup_command(f"-data-evaluate-expression "
                                              f"{mi_quote(f'(int) munmap((void *) {address}, {size})')}")
                elif self._pages:
                    self.notes.append("a page memgap mapped in the process stays mapped")
            if self._attach_sent and self._cleanup_command("-target-detach") is None:
                self.notes.append("gdb did not answer the detach; it was ended (the kernel then detaches)")
            self._send("-gdb-exit")
        except (GdbFailed, OSError, MalformedInput):
            pass  # gdb is gone or unusable: _end_gdb ends it, the kernel detaches what it traced

    def _cleanup_command(self, command: str) -> MiRecord | None:
        self.deadline = time.monotonic() + CLEANUP_WAIT
        token = self._send(command)
        return self._read_until(token)

    def _end_gdb(self, proc: subprocess.Popen[bytes]) -> None:
        if not self._attach_sent:
            proc.kill()  # it never touched the process
        for step in ("wait", "terminate", "kill"):
            if step == "terminate":
                proc.terminate()
            elif step == "kill":
                proc.kill()
                self.notes.append("gdb did not exit and was killed")
            try:
                proc.wait(EXIT_WAIT)
                break
            except subprocess.TimeoutExpired:
                continue
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if self._selector is not None:
            self._selector.close()
            self._selector = None

    def _check_not_left_stopped(self) -> None:
        note = continue_if_left_stopped(self.pid, self.proc_root, self._states_before)
        if note:
            self.notes.append(note)

    # -- checks

    def _check_process(self) -> None:
        check_attachable(self.pid, self.proc_root, self.expected_start_time)

    def _check_start_time(self, when: str) -> None:
        check_start_time(self.pid, self.proc_root, self.expected_start_time, when)

    def _attach_refused(self, message: str) -> None:
        changed = attach_race(*self._before, self.proc_root) if self._before is not None else None
        if changed is not None:  # it exited, became another process or program while gdb attached
            raise changed
        if "Operation not permitted" in message or "Permission denied" in message:
            tracer = 0
            try:
                tracer = status_int(ProcReader(self.pid, self.proc_root).status(), "TracerPid")
            except MemgapError:
                pass
            raise PtraceDisallowed(self.pid, ptrace_refusal(read_yama_scope(), has_cap_sys_ptrace(), tracer,
                                                            comm(tracer, self.proc_root), refused=True) or "")
        if "No such process" in message or not os.path.exists(f"{self.proc_root}/{self.pid}"):
            raise NoSuchProcess(self.pid, "it exited before gdb could attach")
        raise GdbFailed(f"gdb could not attach to PID {self.pid}: {message.strip()}")

    # -- calls

    def select_thread(self, gdb_id: str) -> None:
        """The thread calls run on; non-stop: the only one held (the one held before goes on)."""
        if self.non_stop and gdb_id != self._current:
            self._hold_only(gdb_id)
        rec = self._command(f"-thread-select {gdb_id}", "selecting a thread")
        if rec.cls == "error":
            raise CallFailed(f"thread {gdb_id}", str(rec.results.get("msg", "")))
        self._current = gdb_id

    def _hold_only(self, gdb_id: str) -> None:
        """Non-stop: the thread held until now goes on, its errno put back first; ``gdb_id`` is stopped."""
        held = self._current
        if held is not None and held in self._stopped:
            saved = self._errno.pop(self._threads.get(held, 0), None)
            if saved is not None:
                self._command(f"-data-evaluate-expression {mi_quote(f'*(int *) {saved[0]} = {saved[1]}')}",
                              "putting errno back")
            self._command(f"-exec-continue --thread {held}", "letting a thread go on")
            self._stopped.discard(held)
            self._current = None
        if gdb_id not in self._stopped:
            self._command(f"-exec-interrupt --thread {gdb_id}", "stopping a thread")
            while gdb_id not in self._stopped:  # its *stopped comes after the command's answer
                line = self._next_line()
                if line is None:
                    raise GdbTimeout(self.pid, f"stopping thread {gdb_id}", self.timeout)
                self._note(parse_mi_line(line))

    def threads(self) -> list[tuple[str, int]]:
        """(gdb thread id, LWP), the process's main thread first."""
        return sorted(self._threads.items(), key=lambda t: (t[1] != self.pid, t[1]))

    @property
    def current_lwp(self) -> int | None:
        return self._threads.get(self._current) if self._current else None

    def scheduler_locking(self, on: bool) -> None:
        """On: only the selected thread runs during a call. Off (default): all threads run.

        Non-stop: nothing to set, the other threads run all the time and a call runs its thread
        alone; the selected thread, stopped, cannot take a lock (the GIL) meanwhile."""
        if self.non_stop:
            return
        rec = self._command(f"-gdb-set scheduler-locking {'on' if on else 'off'}", "setting scheduler-locking")
        if rec.cls == "error":
            raise GdbFailed(f"gdb refused scheduler-locking: {rec.results.get('msg', '')}")

    def call(self, expr: str, what: str | None = None, patience: float = 0.0) -> str:
        """Evaluate ``expr``, which calls functions in the process, on the selected thread.

        Returns gdb's value text. Every function needs a cast to its return
        type (libraries have no debug info): ``(int) malloc_trim(0)``. ``patience``:
        seconds from now the call may take even past the session's deadline (one that
        runs Python code, which must not be unwound).
        """
        self._usable()
        lwp = self.current_lwp
        if lwp is not None and lwp not in self._errno:
            self._save_errno(lwp)
        deadline = self.deadline
        self.deadline = max(deadline, time.monotonic() + patience)
        try:
            if not patience:
                return self._evaluate(expr, what, lwp)
            with sigint_deferred():  # a Ctrl-C meanwhile would unwind it: the call ends on its own first
                return self._evaluate(expr, what, lwp)
        finally:
            self.deadline = deadline if patience else self.deadline

    def call_int(self, expr: str, what: str | None = None, patience: float = 0.0) -> int:
        return parse_int(self.call(expr, what, patience))

    def _evaluate(self, expr: str, what: str | None, lwp: int | None) -> str:
        started = time.monotonic()
        self._call_lwp = lwp
        try:
            rec = self._command(f"-data-evaluate-expression {mi_quote(expr)}", what or expr)
        finally:
            self._call_lwp = None
        self.timings[what or expr] = time.monotonic() - started
        if rec.cls == "error":
            message = str(rec.results.get("msg", ""))
            if "exited while in a function" in message or "program is not being run" in message:
                self._attached = False
                raise NoSuchProcess(self.pid, f"it exited during gdb's call {expr}")
            if "in another thread" in message or "stopped while in a function" in message:
                # the call was left on its thread's stack: nothing more may run in this session
                self._broken = True
                self.notes.append(f"gdb abandoned {expr} without unwinding it ({message.splitlines()[0]})")
            raise CallFailed(expr, message)
        return str(rec.results.get("value", ""))

    def _save_errno(self, lwp: int) -> None:
        """Our calls may set the thread's errno; it is put back before detaching."""
        try:
            loc = parse_int(self._evaluate("(unsigned long) __errno_location()", "__errno_location", lwp))
            value = parse_int(self._evaluate(f"*(int *) {loc}", "errno", lwp))
        except (CallFailed, MalformedInput):
            self._errno[lwp] = None  # no errno to keep (a static binary without __errno_location)
            return
        self._errno[lwp] = (loc, value)

    @property
    def usable(self) -> bool:
        """Attached, and no call interrupted: more calls may run."""
        return self._proc is not None and self._attached and not self._broken

    def _usable(self) -> None:
        if self._proc is None or not self._attached:
            raise GdbFailed(f"gdb is not attached to PID {self.pid}")
        if self._broken:
            raise GdbFailed(f"an earlier gdb call in PID {self.pid} was interrupted; no more calls")

    # -- talking to gdb

    def _send(self, command: str) -> int:
        assert self._proc is not None and self._proc.stdin is not None
        self._token += 1
        try:
            self._proc.stdin.write(f"{self._token}{command}\n".encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise GdbFailed(f"gdb exited: {self._last_log()}") from None
        return self._token

    def _command(self, command: str, what: str) -> MiRecord:
        token = self._send(command)
        try:
            rec = self._read_until(token)
            if rec is None:
                rec = self._expire(token, what)
        except KeyboardInterrupt:
            self._interrupt(token)
            raise
        return rec

    def _last_answer(self, token: int) -> MiRecord | None:
        """gdb's answer to ``token`` within INTERRUPT_WAIT, or None (gdb is then stuck)."""
        self.deadline = time.monotonic() + INTERRUPT_WAIT
        try:
            rec = self._read_until(token)
        except (GdbFailed, MalformedInput):
            rec = None
        self._stuck = rec is None
        return rec

    def _expire(self, token: int, what: str) -> MiRecord:
        """The deadline passed while waiting for ``token``: grace a call on the CPU, then interrupt."""
        lwp = self._call_lwp
        if lwp is not None and task_states(self.pid, self.proc_root).get(lwp) in ("R", "D"):
            self.deadline = time.monotonic() + GRACE_ON_CPU
            rec = self._read_until(token)
            if rec is not None:
                return rec
        rec = self._interrupt(token)
        if rec is not None and not self._broken:
            return rec  # it finished just as the deadline passed
        raise GdbTimeout(self.pid, what, self.timeout)

    def _interrupt(self, token: int) -> MiRecord | None:
        """Stop what gdb is doing for ``token``; its result if gdb gives one soon."""
        if self._proc is None:
            return None
        with sigint_deferred():
            self.deadline = time.monotonic()
            rec = self._read_until(token)  # what gdb already said: it may have finished
            if rec is not None:
                return rec
            lwp = self._call_lwp
            if lwp is None:
                self._broken = True
                if not self._attach_sent:  # gdb has not touched the process: it is simply ended
                    self._stuck = True
                    return None
                # gdb is attaching or reading, not running a call. No signal to gdb: it would
                # pass its SIGINT on to the process, which could get it for real after the
                # detach. Let gdb finish what it does, then detach.
                return self._last_answer(token)
            # Only the thread running our call, and only while it runs it (not in a
            # tracing stop): gdb stops it and unwinds the call.
            until = time.monotonic() + INTERRUPT_WAIT
            while time.monotonic() < until:
                state = task_states(self.pid, self.proc_root).get(lwp)
                if state is None:
                    break
                if state != "t":
                    self._broken = True
                    tgkill(self.pid, lwp, signal.SIGINT)
                    self._signaled.add(lwp)
                    self.notes.append(f"interrupted gdb's call on thread {lwp}")
                    break
                self.deadline = time.monotonic() + 0.01
                rec = self._read_until(token)
                if rec is not None:
                    return rec
            if not self._broken:
                self._broken = self._stuck = True  # gdb neither ran the call nor answered
                return None
            rec = self._last_answer(token)
            if rec is not None and rec.cls == "error" and rec.results.get("msg"):
                self.notes.append("gdb: " + str(rec.results["msg"]).splitlines()[0])
            return rec

    def _drain_sigint(self) -> None:
        """A SIGINT of ours that reached a thread just after its call ended is still pending in
        the kernel: at detach it would be delivered for real. Run one harmless call on that
        thread alone, so gdb catches the signal and discards it (SIGINT is not passed)."""
        for lwp in sorted(self._signaled):
            if not sigint_pending(self.pid, lwp, self.proc_root):
                continue
            gid = next((g for g, t in self._threads.items() if t == lwp), None)
            if gid is None:
                continue
            self._cleanup_command("-gdb-set scheduler-locking on")
            self._cleanup_command(f"-thread-select {gid}")
            self._cleanup_command(f"-data-evaluate-expression {mi_quote('(int) getpid()')}")
            if sigint_pending(self.pid, lwp, self.proc_root):
                self.notes.append(f"a SIGINT memgap sent to thread {lwp} may still be pending")

    def _read_until(self, token: int) -> MiRecord | None:
        """The result record for ``token``, or None at the deadline."""
        while True:
            line = self._next_line()
            if line is None:
                return None
            rec = parse_mi_line(line)
            if rec.kind == "result" and rec.token == token:
                return rec
            self._note(rec)

    def _note(self, rec: MiRecord) -> None:
        """What an asynchronous record or a stream says: the process exited, a thread stopped, a message."""
        thread = str(rec.results.get("thread-id", ""))
        if rec.kind == "exec" and rec.cls == "stopped":
            if str(rec.results.get("reason", "")).startswith("exited"):
                self._attached = False
            elif thread:
                self._stopped.add(thread)
        elif rec.kind == "exec" and rec.cls == "running":
            if thread == "all":
                self._stopped.clear()
            self._stopped.discard(thread)
        elif rec.kind in ("console", "log", "target", "other") and rec.text.strip():
            self._log = (self._log + [rec.text.strip()])[-20:]

    def _next_line(self) -> str | None:
        """The next line from gdb; None once the deadline has passed (buffered output is still read)."""
        assert self._proc is not None and self._proc.stdout is not None and self._selector is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = self.deadline - time.monotonic()
            if not self._selector.select(max(0.0, remaining)):
                if remaining <= 0:
                    return None
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise GdbFailed(f"gdb exited: {self._last_log()}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    def _last_log(self) -> str:
        return self._log[-1] if self._log else "no message"


def gdb_seconds(session: GdbSession) -> dict[str, float]:
    """What attaching and holding the process took, for a trim record."""
    return {k: round(v, 4) for k, v in session.timings.items() if k in ("attach", "held")}
