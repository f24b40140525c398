"""What ``inspect --trim`` calls where a library bundles its own allocator beside glibc's malloc and that
allocator was found keeping memory (the snapshot's library_allocators layer: pyarrow's mimalloc pool).

The library's own release call first (its prefixed ``mi_collect(true)``, what pyarrow's
``default_memory_pool().release_unused()`` calls), then glibc's ``malloc_trim(0)``: one gdb session,
VmRSS read before, between and after, so each call's release is measured apart. Measured on pyarrow
26.0.1: the pool's collect took a resting process from 452 to 201 MiB, malloc_trim after it 0.04 MiB more.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from memgap.allocators.registry import reader_for
from memgap.documents.trim import TrimDetails, TrimPart, TrimRecord, TrimRoute
from memgap.sources.allocator import allocator_label, process_root
from memgap.sources.procfs import ProcReader, is_python, status_int

if TYPE_CHECKING:
    from memgap.documents.snapshot import Snapshot
    from memgap.sources.gdb_options import GdbOptions

LAYER = "library_allocators"


def library_releases(pid: int, before: Snapshot, proc_root: str = "/proc") -> list[tuple[str, str]]:
    """(label, gdb call) of each library's own allocator whose memory ``before`` found (its library_allocators
    layer) and whose release call gdb can make: one per library, its prefixed copy first."""
    layer = before.layers.get(LAYER)
    if layer is None or not layer.resident:
        return []
    root = process_root(f"{proc_root}/{pid}")
    calls: list[tuple[str, str]] = []
    seen: set[str] = set()
    for found in sorted(before.allocator.beside, key=lambda f: f.prefix == ""):
        if found.library in seen:
            continue
        call = reader_for(found.name).library_release(found, root)
        if call is not None:
            seen.add(found.library)
            calls.append((allocator_label(found), call))
    return calls


def trim_libraries_and_glibc(pid: int, before: Snapshot, start_time: int | None, options: GdbOptions,
                             calls: list[tuple[str, str]]) -> TrimRecord:
    """Each library allocator's release call, then ``malloc_trim(0)``, VmRSS read around each; the estimates
    beside them: none for a library's allocator (it counts no free bytes memgap reads), the outside walk's
    for glibc."""
    detail = before.layers["allocator_free"].detail if "allocator_free" in before.layers else {}
    reader = ProcReader(pid, options.proc_root)
    session = options.session(pid, start_time, non_stop=is_python(reader.maps()))  # as malloc_trim's, for the GIL
    parts: dict[str, TrimPart] = {}
    with session:
        rss_before = rss = status_int(reader.status(), "VmRSS")
        for label, call in calls:
            session.call(call, label)
            rss_now = status_int(reader.status(), "VmRSS")
            parts[label] = TrimPart(call=call.removeprefix("(void) "), returned=None, released=max(0, rss - rss_now),
                                    estimate=None, estimate_route="none: it counts no free bytes memgap reads")
            rss = rss_now
        returned = session.call_int("(int) malloc_trim(0)", "malloc_trim")
        rss_after = status_int(reader.status(), "VmRSS")
    glibc_estimate = detail.get("trim_releasable")
    parts["glibc"] = TrimPart(call="malloc_trim(0)", returned=returned, released=max(0, rss - rss_after),
                              estimate=glibc_estimate, estimate_route="outside")
    seconds = sum(session.timings.get(label, 0.0) for label, _ in calls) + session.timings.get("malloc_trim", 0.0)
    return TrimRecord(rss_before, rss_after, TrimRoute.GDB, seconds=seconds, details=TrimDetails(
        call=", then ".join(part["call"] for part in parts.values()), returned=None,
        estimate=glibc_estimate, estimate_complete=False, estimate_route="outside (glibc); none for "
        + ", ".join(label for label, _ in calls), estimate_rss=before.rss, parts=parts,
        gdb_seconds={k: round(v, 4) for k, v in session.timings.items() if k in ("attach", "held")},
        notes=list(session.notes)))
