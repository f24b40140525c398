"""What the readers' gdb routes share: an allocator's own release call with VmRSS read around it (tcmalloc's
ReleaseFreeMemory, mimalloc's mi_collect), and glibc's malloc_trim(0). Loaded by a reader's ``release`` only:
none of it in a process that snapshots itself.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from memgap.allocators.base import DeepFigures
    from memgap.documents.snapshot import Snapshot
    from memgap.documents.trim import TrimDetails, TrimRecord
    from memgap.sources.gdb_attach import GdbSession
    from memgap.sources.gdb_options import GdbOptions


class ReleaseModule(Protocol):
    """A memgap.sources ``*_gdb`` module with a release call (tcmalloc_gdb, mimalloc_gdb)."""

    CALL: str
    ROUTE: str

    def read_figures(self, session: GdbSession) -> Any: ...

    def release(self, session: GdbSession) -> None: ...


def release_own(name: str, module: ReleaseModule, pid: int, before: Snapshot, start_time: int | None,
                options: GdbOptions) -> TrimRecord:
    """An allocator's own release call (the one memgap's native agent makes), VmRSS around it, and the
    allocator's figures just before (the estimate, where it counts one) and just after."""
    from memgap.documents.trim import TrimDetails, TrimRecord, TrimRoute
    from memgap.errors import MalformedInput, Unsupported
    from memgap.sources.gdb_attach import gdb_seconds
    from memgap.sources.gdb_errors import CallFailed
    from memgap.sources.procfs import ProcReader, status_int

    reader, notes = ProcReader(pid, options.proc_root), []
    session = options.session(pid, start_time)
    own_after: DeepFigures | None = None
    with session:
        own_before = module.read_figures(session)
        rss_before = status_int(reader.status(), "VmRSS")
        module.release(session)
        rss_after = status_int(reader.status(), "VmRSS")
        try:
            own_after = module.read_figures(session)
        except (CallFailed, MalformedInput, Unsupported) as exc:  # the release happened: report it all the same
            notes.append(f"{name} after the release: {exc}")
    return TrimRecord(rss_before, rss_after, TrimRoute.GDB, seconds=session.timings.get(module.CALL, 0.0),
                      details=TrimDetails(
                          call=module.CALL, returned=None,
                          estimate=own_before.releasable, estimate_complete=own_before.releasable is not None,
                          estimate_route=module.ROUTE, estimate_rss=before.rss,
                          own_before=own_before.to_dict(), own_after=own_after.to_dict() if own_after else None,
                          gdb_seconds=gdb_seconds(session), notes=notes + list(session.notes)))


def outside_estimate(before: Snapshot) -> TrimDetails:
    """What the outside snapshot ``before`` said a trim would release, for the trim's record."""
    from memgap.documents.trim import TrimDetails

    detail = before.layers["allocator_free"].detail if "allocator_free" in before.layers else {}
    return TrimDetails(estimate=detail.get("trim_releasable"), estimate_complete=detail.get("trim_estimate_complete"),
                       estimate_route="outside", estimate_rss=before.rss)


def malloc_trim(pid: int, before: Snapshot, start_time: int | None, options: GdbOptions) -> TrimRecord:
    """glibc's ``malloc_trim(0)`` through gdb, VmRSS around it, beside the outside estimate."""
    estimate = outside_estimate(before)
    from memgap.documents.trim import TrimDetails, TrimRecord, TrimRoute
    from memgap.sources.gdb_attach import gdb_seconds
    from memgap.sources.procfs import ProcReader, is_python, status_int

    reader = ProcReader(pid, options.proc_root)
    session = options.session(pid, start_time, non_stop=is_python(reader.maps()))  # as deep's, for the GIL
    with session:
        rss_before = status_int(reader.status(), "VmRSS")
        returned = session.call_int("(int) malloc_trim(0)", "malloc_trim")
        rss_after = status_int(reader.status(), "VmRSS")
    return TrimRecord(rss_before, rss_after, TrimRoute.GDB, seconds=session.timings.get("malloc_trim", 0.0),
                      details=TrimDetails(returned=returned, **estimate, gdb_seconds=gdb_seconds(session),
                                          notes=list(session.notes)))
