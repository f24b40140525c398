"""The in-process API: snapshot, phase, trim, explain."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from types import TracebackType

from memgap.documents.snapshot import Snapshot
from memgap.documents.trim import TrimDetails, TrimRecord, TrimRoute
from memgap.errors import Unsupported
from memgap.explain.snapshot import SnapshotOptions, snapshot_self
from memgap.record.envnames import TRIM_AFTER_ENV, WALK_ENV
from memgap.record.recording import ProcessFile, RecordingWriter
from memgap.sources.procfs import ProcReader, status_int

_phases: list[Snapshot] = []
_phase_file = ProcessFile()  # under `memgap run`: this process's phases go there
_own_phases: set[str] = set()  # phases this program marked itself (memgap.phase): no idle to find if "idle"


def snapshot(walk: bool = False, count: tuple[str, ...] = (), regions: bool = True) -> Snapshot:
    """This process's memory, split into layers that add up to RSS.

    ``walk`` adds a gc walk for large buffers (bytes, bytearray, numpy arrays)
    when tracemalloc is not tracing; ``count`` names classes to count.
    """
    return snapshot_self(options=SnapshotOptions(walk_python=walk, class_names=tuple(count), regions=regions))


def _recording_writer() -> RecordingWriter | None:
    """The writer for this process's phases under `memgap run`, or None."""
    return _phase_file.writer()


def _record(name: str, trim_result: TrimResult | None = None) -> Snapshot | None:
    """Take and keep a phase snapshot. Under `memgap run` it never raises: a
    failure is written to the recording and the observed program goes on."""
    writer = _recording_writer()
    walk = os.environ.get(WALK_ENV, "1") != "0"
    try:
        snap = snapshot_self(phase=name, options=SnapshotOptions(walk_python=walk, regions=False))
    except Exception as exc:  # see the docstring
        if writer is None:
            raise
        writer.write({"type": "error", "pid": os.getpid(), "phase": name, "error": f"{type(exc).__name__}: {exc}"})
        return None
    if trim_result is not None:
        snap.trim = trim_result.record()
    if writer is None:
        # Kept only when nothing records them: under `memgap run` they are in the recording,
        # and kept here they would pin the pymalloc arenas they were allocated in (measured:
        # 1-2 MiB of pymalloc free space after a few bursts, in the process being measured).
        _phases.append(snap)
    else:
        import sys

        snap.cmd = list(sys.argv)
        writer.write({"type": "snapshot", "pid": snap.pid, "snapshot": snap.to_dict(regions=False)})
    if name == os.environ.get(TRIM_AFTER_ENV) and trim_result is None:
        _record("after-trim", trim())
    return snap


class phase:  # noqa: N801 - used like a function
    """Record a snapshot named ``name`` now; as a context manager, also ``name:end`` at exit.

    Under ``memgap run`` the snapshots go to the run's recording, and a
    snapshot that fails is recorded as an error instead of raising into the
    program (``self.snapshot`` is then None).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        _own_phases.add(name)
        self.snapshot = _record(name)

    def __enter__(self) -> phase:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.end_snapshot = _record(f"{self.name}:end")


def metric(name: str, value: float) -> None:
    """Report a figure of the workload (``memgap.metric("req/s", 1530.0)``).

    Under ``memgap run`` and ``memgap lab`` it goes to the recording, where the
    lab reads its throughput from it (``memgap lab --metric req/s``); elsewhere
    it does nothing. The last value reported under a name counts.
    """
    writer = _recording_writer()
    if writer is not None:
        writer.write({"type": "metric", "pid": os.getpid(), "name": str(name), "value": float(value),
                      "time": time.time()})


def phases() -> list[Snapshot]:
    """Snapshots recorded by phase() in this process, oldest first (none under
    `memgap run` or `memgap lab`: those go to the recording instead)."""
    return list(_phases)


@dataclass(repr=False)
class TrimResult(TrimRecord):
    """What ``memgap.trim()`` did: an in-process ``TrimRecord`` (memgap.documents.trim, the record
    every route of a trim returns), with ``pymalloc_released`` in its details. Kept for the programs
    that name it: ``performed``, ``rss_before``, ``rss_after``, ``released``, ``seconds``, ``reason``
    and ``pymalloc_released`` read as before, and it prints as before."""

    @classmethod
    def measured(cls, performed: bool, rss_before: int, rss_after: int, seconds: float, reason: str = "",
                 pymalloc_released: int = 0) -> TrimResult:
        return cls(rss_before, rss_after, TrimRoute.IN_PROCESS, performed, seconds=seconds, reason=reason,
                   details=TrimDetails(pymalloc_released=pymalloc_released))

    @property
    def pymalloc_released(self) -> int:
        """Of ``released``, the pages of pymalloc's empty pools (``trim(pymalloc=True)``)."""
        return self.details.get("pymalloc_released", 0)

    def record(self) -> TrimRecord:
        """The trim as a recording keeps it (a plain in-process trim record)."""
        return TrimRecord(self.rss_before, self.rss_after, self.route, self.performed, self.released,
                          self.seconds, self.reason, self.time, details=TrimDetails(**self.details))

    def __repr__(self) -> str:
        return (f"TrimResult(performed={self.performed!r}, rss_before={self.rss_before!r}, "
                f"rss_after={self.rss_after!r}, seconds={self.seconds!r}, reason={self.reason!r}, "
                f"pymalloc_released={self.pymalloc_released!r})")


def trim(pymalloc: bool | None = None) -> TrimResult:
    """``malloc_trim(0)`` where glibc is the allocator; what it released, measured from VmRSS.

    With ``pymalloc`` (default: the MEMGAP_PYMALLOC_RELEASE=1 environment
    variable) the pages of pymalloc's empty pools go first (see
    release_pymalloc). Where malloc is not glibc's, it does no malloc_trim and
    says why in ``reason``.
    """
    from memgap.allocators.detect import detect_in_process
    from memgap.allocators.registry import reader_for
    from memgap.sources.glibc import glibc_malloc

    reader = ProcReader("self")
    rss_before = status_int(reader.status(), "VmRSS")
    from memgap.inside.pymalloc_release import release_if_asked

    pools_released = release_if_asked(pymalloc)
    detection = detect_in_process(reader.maps())
    if not reader_for(detection.name).libc_calls:
        return TrimResult.measured(bool(pools_released), rss_before, status_int(reader.status(), "VmRSS"), 0.0,
                          f"malloc is {detection.name} ({detection.library or 'unknown library'}), not glibc",
                          pools_released)
    try:
        libc = glibc_malloc()
    except Unsupported as exc:
        return TrimResult.measured(bool(pools_released), rss_before, status_int(reader.status(), "VmRSS"), 0.0,
                                   str(exc), pools_released)
    started = time.perf_counter()
    libc.trim(0)
    seconds = time.perf_counter() - started
    return TrimResult.measured(True, rss_before, status_int(reader.status(), "VmRSS"), seconds, "", pools_released)


def explain(walk: bool = True) -> str:
    """The human explanation of this process's memory, as text."""
    from memgap.report.terminal import render_text

    return render_text(snapshot(walk=walk, regions=False))
