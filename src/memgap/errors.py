"""memgap's own errors, and `translate_os_error`, which turns an OSError met while reading
a process into one of them (the readers of /proc and of process memory call it).

Each error carries the exit code the CLI returns for it, so scripts can tell
"the process is gone" from "you may not read it" without parsing text.
"""
from __future__ import annotations

import errno
import os


class MemgapError(Exception):
    """Base class; ``exit_code`` is what ``memgap`` exits with."""

    exit_code = 1


class UsageError(MemgapError):
    exit_code = 2


class NoSuchProcess(MemgapError):
    """The PID does not exist, or exited while memgap was reading it."""

    exit_code = 3

    def __init__(self, pid: int, detail: str = "") -> None:
        self.pid = pid
        msg = f"no process with PID {pid}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class NoMatchingProcess(MemgapError):
    """No process's command line matches the pattern asked for (exit code 3, as no process)."""

    exit_code = 3

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        super().__init__(f"no process matches {pattern!r} (memgap's own command line is not matched)")


class AccessDenied(MemgapError):
    """The kernel refused to show us this process's memory."""

    exit_code = 4

    def __init__(self, pid: int, what: str) -> None:
        self.pid = pid
        super().__init__(
            f"permission denied reading {what} of PID {pid}: run as the process's "
            "owner or as root (reading another user's memory needs ptrace access; "
            "see /proc/sys/kernel/yama/ptrace_scope)"
        )


class Unsupported(MemgapError):
    """The platform or allocator does not offer what was asked for."""

    exit_code = 5


class MalformedInput(MemgapError):
    """A /proc file, XML or recording did not parse."""

    exit_code = 6

    def __init__(self, source: str, detail: str) -> None:
        self.source = source
        super().__init__(f"malformed {source}: {detail}")


class InputTooLarge(MalformedInput):
    """A recording or document with a line or a string beyond what memgap ever writes (the limits are
    in memgap.record.recording and memgap.documents.fields): refused where it is met, never taken for a line cut
    short."""


class PidReused(NoSuchProcess):
    """The PID now names another process than the one memgap was following."""

    exit_code = 7

    def __init__(self, pid: int, detail: str = "") -> None:
        NoSuchProcess.__init__(self, pid)
        MemgapError.__init__(self, f"PID {pid} was reused by another process"
                             + (f" ({detail})" if detail else ""))


class PtraceDisallowed(MemgapError):
    """The kernel refused to let memgap attach a debugger (ptrace) to the process."""

    exit_code = 8

    def __init__(self, pid: int, detail: str) -> None:
        self.pid = pid
        super().__init__(f"ptrace attach to PID {pid} is not allowed: {detail}")


class ToolMissing(MemgapError):
    """A program or build tool memgap needs for this request is not installed."""

    exit_code = 9

    def __init__(self, tool: str, needed_for: str, install: str, missing: str = "is not installed") -> None:
        self.tool = tool
        super().__init__(f"{tool} {missing} (needed for {needed_for}): {install}")


class ProcessExeced(MemgapError):
    """The process ran another program (exec) while memgap attached to it: same PID and start time,
    another executable; what memgap read of it before is of the program it no longer runs."""

    exit_code = 10

    def __init__(self, pid: int, before: str, after: str) -> None:
        self.pid = pid
        super().__init__(f"PID {pid} ran another program while gdb attached ({before} before, {after} now): "
                         "run memgap again to read the new one")


class StoppedBySignal(MemgapError):
    """``memgap run`` got SIGTERM or SIGHUP: it passed it on, ended its command's tree and kept the
    recording. The exit code is 128 + the signal's number, as a shell tells a process ended by it
    (143 for SIGTERM, 129 for SIGHUP)."""

    exit_code = 143

    def __init__(self, signum: int, detail: str) -> None:
        super().__init__(detail)
        self.exit_code = 128 + signum


def pid_exists(pid: int, proc_root: str = "/proc") -> bool:
    return os.path.exists(f"{proc_root}/{pid}")


def translate_os_error(exc: OSError, pid: int, what: str, proc_root: str = "/proc") -> MemgapError:
    """Turn an OSError raised while reading ``what`` of ``pid`` into a MemgapError.

    "Gone" is only said after re-checking that the process directory is absent:
    a read can fail with ESRCH or ENOENT for a zombie too.
    """
    if exc.errno in (errno.EACCES, errno.EPERM):
        return AccessDenied(pid, what)
    if exc.errno in (errno.ENOENT, errno.ESRCH) or not pid_exists(pid, proc_root):
        if pid_exists(pid, proc_root):
            return NoSuchProcess(pid, f"{what} is unreadable: the process is a zombie or exiting")
        return NoSuchProcess(pid, f"it exited while memgap read {what}")
    return MemgapError(f"reading {what} of PID {pid} failed: {exc.strerror or exc}")
