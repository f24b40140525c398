"""A process's identity and its tree, as the commands that read it from outside need them."""
from __future__ import annotations

from .errors import NoSuchProcess
from .sources.procfs import ProcReader


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
