"""The process gdb attaches to, read and signalled without gdb (``gdb_attach`` drives gdb).

Before attaching: is it alive, still the process memgap read, and may it be traced.
While a call runs: each thread's state, a SIGINT sent to one thread, a SIGINT still
pending. After gdb let go: a stop memgap caused is undone, one that was there is left.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

from memgap.errors import MalformedInput, MemgapError, NoSuchProcess, PidReused, ProcessExeced, PtraceDisallowed
from memgap.sources.processes import ProcessIdentity
from memgap.sources.procfs import ProcReader, parse_stat, status_int
from memgap.sources.ptrace_access import has_cap_sys_ptrace, ptrace_refusal, read_yama_scope

DEFAULT_TIMEOUT = 20.0  # s: for everything gdb does in one --deep or --trim, attach to last call


def task_states(pid: int, proc_root: str = "/proc") -> dict[int, str]:
    """TID -> state letter (R, S, D, T, t, Z...) of every thread; empty when the process is gone."""
    out: dict[int, str] = {}
    try:
        tids = os.listdir(f"{proc_root}/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{proc_root}/{pid}/task/{tid}/stat", "rb") as fh:
                out[int(tid)] = parse_stat(fh.read().decode("utf-8", "replace")).state
        except (OSError, ValueError, MalformedInput):
            continue
    return out


def tgkill(tgid: int, tid: int, sig: int) -> bool:
    """Send ``sig`` to one thread of another process (thread-directed, unlike kill)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "tgkill", None)
    if fn is not None:
        return bool(fn(tgid, tid, sig) == 0)
    return bool(libc.syscall(234, tgid, tid, sig) == 0)  # SYS_tgkill on x86_64, for a glibc before 2.30


def sigint_pending(pid: int, tid: int, proc_root: str = "/proc") -> bool:
    """Whether SIGINT is pending for one thread (SigPnd) or its process (ShdPnd)."""
    try:
        with open(f"{proc_root}/{pid}/task/{tid}/status") as fh:
            text = fh.read()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) >> (signal.SIGINT - 1) & 1:
            return True
    return False


def comm(pid: int, proc_root: str) -> str:
    """A process's command name ("" for PID 0 or one gone): to name a tracer in a refusal."""
    if not pid:
        return ""
    try:
        with open(f"{proc_root}/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def check_attachable(pid: int, proc_root: str, expected_start_time: int | None) -> None:
    """Raise before gdb starts: the process is a zombie, another one has its PID, or ptrace is refused."""
    reader = ProcReader(pid, proc_root)
    stat = reader.stat()
    if stat.state in "ZX":
        raise NoSuchProcess(pid, "it is a zombie: it has exited")
    check_start_time(pid, proc_root, expected_start_time, "since memgap read it from outside", stat.start_time)
    tracer = status_int(reader.status(), "TracerPid")
    reason = ptrace_refusal(read_yama_scope(), has_cap_sys_ptrace(), tracer, comm(tracer, proc_root))
    if reason:
        raise PtraceDisallowed(pid, reason)


def executable(pid: int, proc_root: str = "/proc") -> str:
    """The program a process runs (/proc/PID/exe), "" where it cannot be read (a zombie, a kernel thread)."""
    try:
        return os.readlink(f"{proc_root}/{pid}/exe")
    except OSError:
        return ""


def attach_race(before: ProcessIdentity, exe_before: str, proc_root: str = "/proc") -> MemgapError | None:
    """After an attach failed: the error to raise where the process changed under it (exited, a
    zombie, its PID taken by another, another program run), else None: the same process as before,
    so the refusal was ptrace's own. The kernel refuses to attach to a zombie with EPERM, as it
    refuses a security module's veto: the process is looked at first."""
    pid = before.pid
    try:
        stat = ProcReader(pid, proc_root).stat()
    except NoSuchProcess:
        return NoSuchProcess(pid, "it exited while gdb attached")
    except MemgapError:
        return None
    if stat.state in "ZX":
        return NoSuchProcess(pid, "it exited while gdb attached (a zombie now)")
    try:
        before.check("its start time changed while gdb attached", proc_root, stat.start_time)
    except PidReused as exc:
        return exc
    exe = executable(pid, proc_root)
    if exe_before and exe and exe != exe_before:
        return ProcessExeced(pid, exe_before, exe)
    return None


def check_start_time(pid: int, proc_root: str, expected: int | None, when: str,
                     start_time: int | None = None) -> None:
    """PidReused where the PID's start time is not the one memgap read (``expected``; None: not checked)."""
    if expected is not None:
        ProcessIdentity(pid, expected).check(f"its start time changed {when}", proc_root, start_time)


def continue_if_left_stopped(pid: int, proc_root: str, states_before: dict[int, str]) -> str:
    """Once gdb is gone: a stop memgap caused (SIGSTOP of an attach cut short) is undone with
    SIGCONT, one found before attaching (``states_before``) is left. Returns the note to tell, or ""."""
    deadline = time.monotonic() + 0.5
    while True:
        states = task_states(pid, proc_root)
        stopped = {tid: s for tid, s in states.items() if s in "tT"}
        if not stopped or time.monotonic() > deadline:
            break
        if all(s == "T" for s in stopped.values()):
            break
        time.sleep(0.02)  # 't' while the kernel finishes detaching from a tracer that just exited
    if not stopped:
        return ""
    if any(s in "tT" for s in states_before.values()):
        return f"PID {pid} was stopped before memgap attached, and is left so"
    os.kill(pid, signal.SIGCONT)
    return (f"PID {pid} was left stopped ({''.join(sorted(set(stopped.values())))}) "
            "after gdb let go; memgap sent it SIGCONT")
