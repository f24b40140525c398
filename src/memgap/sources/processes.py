"""A process's identity and its tree, as the commands that read it from outside need them."""
from __future__ import annotations

import os
from dataclasses import dataclass

from memgap.errors import NoSuchProcess, PidReused, Unsupported, pid_exists
from memgap.sources.procfs import ProcReader

WHILE_READ = "its start time changed while memgap read it"


def descendants(pid: int) -> list[int]:
    """The PIDs of every process below ``pid`` (children, their children, ...)."""
    import psutil  # here, not at the top: inspect and top import this module, few of their runs walk a tree

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        raise NoSuchProcess(pid) from None


def start_time(pid: int, proc_root: str = "/proc") -> int:
    """When the process started (clock ticks after boot): with the PID, it names one process."""
    return ProcReader(pid, proc_root).stat().start_time


PF_KTHREAD = 0x00200000  # /proc/PID/stat's flags (the 9th field): a kernel thread


def kernel_thread(pid: int, proc_root: str = "/proc") -> bool:
    """Whether the PID is a kernel thread (kthreadd and its children)."""
    text = ProcReader(pid, proc_root).read_text("stat")
    fields = text[text.rfind(")") + 2:].split()
    return len(fields) > 6 and fields[6].isdigit() and bool(int(fields[6]) & PF_KTHREAD)


@dataclass(frozen=True)
class ProcessIdentity:
    """One process: its PID and its start time (a PID alone may name another process later)."""

    pid: int
    start_time: int

    @classmethod
    def of(cls, pid: int, proc_root: str = "/proc") -> ProcessIdentity:
        """The process that has ``pid`` now."""
        return cls(pid, start_time(pid, proc_root))

    @classmethod
    def asked_for(cls, pid: int, proc_root: str = "/proc") -> ProcessIdentity:
        """The process a user named: "no process" plainly where there is none (not "it exited while
        memgap read it", which is for one seen before), and Unsupported for a kernel thread, which has no
        memory of its own to read (its status shows none, and it would read as a process that exited)."""
        if not pid_exists(pid, proc_root):
            raise NoSuchProcess(pid)
        identity = cls.of(pid, proc_root)
        if kernel_thread(pid, proc_root):
            raise Unsupported(f"PID {pid} is a kernel thread ({ProcReader(pid, proc_root).stat().comm}): it has no "
                              "user memory to read")
        return identity

    def check(self, detail: str = WHILE_READ, proc_root: str = "/proc", now: int | None = None) -> None:
        """Raise PidReused (saying ``detail``) where the PID now names another process: its start
        time (``now``, one just read by the caller, or read here) is not this one's."""
        if (start_time(self.pid, proc_root) if now is None else now) != self.start_time:
            raise PidReused(self.pid, detail)


def tree_pids(root: int) -> list[int]:
    """The process and its descendants, from /proc/PID/task/TID/children.

    That costs a few reads per process; psutil's children() reads every
    process on the machine, which at 10 Hz is the sampler's main cost.
    """
    pids, queue = [], [root]
    while queue:
        pid = queue.pop()
        pids.append(pid)
        try:
            queue.extend(ProcReader(pid).children_pids())
        except Exception:  # noqa: BLE001 - exited meanwhile
            continue
    if len(pids) == 1 and not os.path.exists(f"/proc/{root}/task/{root}/children"):
        import psutil  # only here: a kernel without CONFIG_PROC_CHILDREN

        try:
            return [root, *(c.pid for c in psutil.Process(root).children(recursive=True))]
        except psutil.NoSuchProcess:
            return []
    return pids
