"""How to run gdb for ``inspect --deep`` and ``--trim``: typed once at the CLI's edge, used by
every reader that attaches (``memgap.inside.gdb``, ``memgap.allocators.jemalloc_beside``)."""
from __future__ import annotations

from dataclasses import dataclass

from memgap.sources.gdb_attach import GdbSession
from memgap.sources.gdb_target import DEFAULT_TIMEOUT


@dataclass
class GdbOptions:
    """How to run gdb: typed once at the CLI's edge."""

    timeout: float = DEFAULT_TIMEOUT
    gdb: str = "gdb"
    proc_root: str = "/proc"

    def session(self, pid: int, start_time: int | None, non_stop: bool = False) -> GdbSession:
        """A gdb session on ``pid`` under these options, refusing a process started at another time;
        ``non_stop``: only the thread gdb calls on is held (``GdbSession``)."""
        return GdbSession(pid, timeout=self.timeout, gdb=self.gdb, proc_root=self.proc_root,
                          expected_start_time=start_time, non_stop=non_stop)
