"""Is what an agent said credible? Every figure of a reply against what the process and the
machine allow, before any of it is used (``memgap.agent.client`` asks, this module judges).

Pure: a parsed reply and the ``Limits`` read beside it in, an ``AgentRefused`` naming the
first figure out of range out. The bounds are what no honest agent can exceed: nothing is
negative or not finite; nothing resident exceeds the machine's memory, nothing mapped the
process's address space (VmSize, the larger of two reads around the question); parts are
within their wholes (glibc's in-use and free bytes within its arenas, jemalloc's allocated
within active within mapped, tcmalloc's allocated within its heap). What a lying agent can
still do within those bounds is move bytes between the allocator layers of its own process.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memgap.errors import MemgapError
from memgap.sources.procfs import status_int

if TYPE_CHECKING:
    from memgap.agent.reply import AgentReport
    from memgap.documents.trim import TrimRecord

ALLOCATORS = ("glibc", "jemalloc", "tcmalloc", "mimalloc", "other")  # agent.c's allocator_names
TRIMMER_MODES = ("off", "idle", "every")
PATH_MAX = 4096
MIN_CHUNK = 16  # no allocator hands out less: a count of chunks is at most the bytes over this


class AgentRefused(MemgapError):
    """memgap would not talk to this agent, or will not use what it said: one line, why."""


@dataclass(frozen=True)
class Limits:
    """What bounds an honest agent's figures in process ``pid``."""

    pid: int
    memory: int          # the machine's physical memory: nothing resident exceeds it
    address_space: int   # the process's VmSize: nothing it maps exceeds it


def machine_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def limits_of(pid: int, *statuses: dict[str, int | str]) -> Limits:
    """The limits from /proc/PID/status read before and after the question (the larger VmSize:
    the process may have mapped more while its agent answered)."""
    return Limits(pid, machine_memory(), max(status_int(s, "VmSize") for s in statuses))


def _refuse(limits: Limits, what: str) -> AgentRefused:
    return AgentRefused(f"memgap's agent in PID {limits.pid} said {what}")


def _bytes(limits: Limits, figures: Iterable[tuple[str, float]], high: int, bound: str) -> None:
    for name, value in figures:
        if not (isinstance(value, (int, float)) and math.isfinite(value)) or value < 0:
            raise _refuse(limits, f"{name} {value!r}, not a count of bytes (negative or not a number)")
        if value > high:
            raise _refuse(limits, f"{name} {value}, above {bound} ({high} bytes)")


def _part(limits: Limits, part: str, value: int, whole: str, total: int) -> None:
    if value > total:
        raise _refuse(limits, f"{part} {value} above {whole} {total}")


def check_report(report: AgentReport, limits: Limits) -> None:
    """Raise AgentRefused unless every figure of a ``stats`` reply is within bounds."""
    if report.pid != limits.pid:
        raise _refuse(limits, f"it is PID {report.pid}")
    if report.allocator not in ALLOCATORS:
        raise _refuse(limits, f"allocator {report.allocator[:40]!r}, none that the agent knows")
    if len(report.malloc_from) > PATH_MAX or not report.malloc_from.isprintable():
        raise _refuse(limits, f"malloc comes from {report.malloc_from[:40]!r}, not a library's path")
    space = limits.address_space
    if report.rss != -1:  # -1: the agent could not read its statm
        _bytes(limits, [("rss", report.rss)], min(limits.memory, space),
               "the machine's memory and the process's VmSize")
    if report.trimmer.get("mode", "off") not in TRIMMER_MODES:
        raise _refuse(limits, f"trimmer mode {str(report.trimmer.get('mode'))[:20]!r}")
    _bytes(limits, [(f"trimmer {k}", v) for k, v in report.trimmer.items() if not isinstance(v, str)], 2 ** 63, "2^63")
    if report.mallinfo is not None:
        mi = report.mallinfo
        _bytes(limits, [(f"mallinfo2 {k}", v) for k, v in sorted(mi.__dict__.items())], space, "the process's VmSize")
        _part(limits, "mallinfo2 arena + hblkhd", mi.arena + mi.hblkhd, "VmSize", space)
        _part(limits, "mallinfo2 uordblks", mi.uordblks, "arena", mi.arena)
        _part(limits, "mallinfo2 fordblks", mi.fordblks, "arena", mi.arena)
        _part(limits, "mallinfo2 ordblks + smblks", mi.ordblks + mi.smblks, "arena / 16", mi.arena // MIN_CHUNK + 1)
    if report.malloc_info is not None:
        _check_malloc_info(report, limits)
    if report.jemalloc is not None:
        je = report.jemalloc
        _bytes(limits, [(f"jemalloc {k}", v) for k, v in sorted(je.__dict__.items()) if k != "version"],
               space, "the process's VmSize")
        _part(limits, "jemalloc allocated", je.allocated, "active", je.active)
        _part(limits, "jemalloc active", je.active, "mapped", je.mapped)
    if report.tcmalloc:
        _bytes(limits, [(f"tcmalloc {k}", v) for k, v in sorted(report.tcmalloc.items())], space,
               "the process's VmSize")
        heap = report.tcmalloc.get("generic.heap_size")
        if heap is not None:
            _part(limits, "tcmalloc allocated", report.tcmalloc.get("generic.current_allocated_bytes", 0),
                  "heap_size", heap)


def _check_malloc_info(report: AgentReport, limits: Limits) -> None:
    info, space = report.malloc_info, limits.address_space
    assert info is not None
    _bytes(limits, [("malloc_info mmap", info.mmap_bytes), ("malloc_info mmap count", info.mmap_count),
                    ("malloc_info system", info.system), ("malloc_info system max", info.system_max)],
           2 ** 63, "2^63")
    _part(limits, "malloc_info mmap bytes", info.mmap_bytes, "VmSize", space)
    for a in info.arenas:
        figures = [(f"arena {a.nr} {k}", v) for k, v in sorted(a.__dict__.items())
                   if isinstance(v, int) and k != "nr"]
        _bytes(limits, figures, space, "the process's VmSize")
        _part(limits, f"arena {a.nr} free bytes", a.fast_bytes + a.rest_bytes, "its system bytes", a.system)
    _part(limits, "the arenas' system bytes", sum(a.system for a in info.arenas), "VmSize", space)


def check_trim(pid: int, result: TrimRecord, limits: Limits) -> None:
    """Raise AgentRefused unless a ``trim`` reply (the PID it names, its record) is within bounds."""
    if pid != limits.pid:
        raise _refuse(limits, f"it is PID {pid}")
    _bytes(limits, [("rss before", result.rss_before), ("rss after", result.rss_after)], limits.memory,
           "the machine's memory")
    _bytes(limits, [("trim seconds", result.seconds or 0.0), ("released", result.released or 0)], limits.memory,
           "the machine's memory")
