"""jemalloc's own statistics through ``mallctl``, in a process where it is malloc."""
from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass
from typing import Any

from memgap.errors import MalformedInput, Unsupported
from memgap.sources.procfs import SmapsEntry

_SIZE_STATS = ("allocated", "active", "resident", "retained", "mapped", "metadata")
MALLCTL_ARENAS_ALL = 4096  # stats.arenas.<this> sums every arena


@dataclass(frozen=True)
class JemallocStats:
    allocated: int  # bytes handed out to the program
    active: int     # bytes in active pages (allocated plus page slack)
    resident: int   # bytes in resident pages the allocator maps (an upper bound)
    retained: int   # virtual bytes kept mapped but not resident (returned via madvise)
    mapped: int
    metadata: int
    narenas: int
    version: str = ""
    muzzy: int = 0  # bytes in muzzy pages (MADV_FREE'd: resident until reclaimed, not in ``resident``)

    @property
    def free_bound(self) -> int:
        """The most jemalloc itself says it holds resident beyond what it handed out: dirty
        pages, page slack, metadata and muzzy pages. A bound, not a measurement: ``resident``
        counts every page jemalloc ever handed to an extent or to metadata, touched or not."""
        return max(0, self.resident + self.muzzy - self.allocated)


def noreserve_flags(smaps: list[SmapsEntry]) -> dict[tuple[int, int], bool]:
    """(start, end) of every private anonymous mapping -> whether it has MAP_NORESERVE ("nr")."""
    return {(e.mapping.start, e.mapping.end): "nr" in e.vmflags for e in smaps
            if not e.mapping.is_file and not e.mapping.path and e.mapping.perms[3] == "p"}


def jemalloc_mappings(smaps: list[SmapsEntry]) -> list[tuple[int, int]]:
    """The mappings jemalloc made, as sorted (start, end): private anonymous ones flagged ``nr``.

    jemalloc (5.x) maps every extent and metadata block with MAP_NORESERVE when the
    kernel overcommits (vm.overcommit_memory 0 or 1), and the kernel shows that flag
    in VmFlags; a mapping without it never merges with one that has it. Measured: in
    a 16-thread Python process their sizes summed to stats.mapped + stats.retained to
    the byte.
    """
    return sorted(r for r, noreserve in noreserve_flags(smaps).items() if noreserve)


class _Mallctl:
    def __init__(self) -> None:
        lib = ctypes.CDLL(None)
        func = getattr(lib, "mallctl", None) or getattr(lib, "je_mallctl", None)
        if func is None:
            raise Unsupported("jemalloc's mallctl is not in this process")
        func.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                         ctypes.c_void_p, ctypes.c_size_t]
        func.restype = ctypes.c_int
        self.func = func

    def read(self, name: str, ctype: type[ctypes._SimpleCData[Any]]) -> Any:  # int, or bytes for c_char_p
        value = ctype()
        size = ctypes.c_size_t(ctypes.sizeof(value))
        rc = self.func(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0)
        if rc:
            raise Unsupported(f"mallctl({name!r}) failed with error {rc}")
        return value.value

    def refresh(self) -> None:
        epoch = ctypes.c_uint64(1)
        size = ctypes.c_size_t(8)
        self.func(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), 8)


def read_jemalloc_stats() -> JemallocStats:
    """Refresh jemalloc's counters and read them (raises Unsupported elsewhere)."""
    ctl = _Mallctl()
    ctl.refresh()
    values = {name: int(ctl.read(f"stats.{name}", ctypes.c_size_t)) for name in _SIZE_STATS}
    narenas = int(ctl.read("arenas.narenas", ctypes.c_uint))
    version = ctl.read("version", ctypes.c_char_p)
    muzzy = int(ctl.read(f"stats.arenas.{MALLCTL_ARENAS_ALL}.pmuzzy", ctypes.c_size_t)) \
        * int(ctl.read("arenas.page", ctypes.c_size_t))
    return JemallocStats(narenas=narenas, version=(version or b"").decode(), muzzy=muzzy, **values)


def parse_jemalloc_stats_json(text: str) -> JemallocStats:
    """Parse the JSON of ``malloc_stats_print(..., "J")``."""
    try:
        data = json.loads(text)["jemalloc"]
        stats = data["stats"]
        merged = data.get("stats.arenas", {}).get("merged", {})
        return JemallocStats(narenas=int(data["arenas"]["narenas"]), version=str(data.get("version", "")),
                             muzzy=int(merged.get("pmuzzy", 0)) * int(data["arenas"].get("page", 4096)),
                             **{name: int(stats[name]) for name in _SIZE_STATS})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MalformedInput("jemalloc stats JSON", str(exc) or type(exc).__name__) from None
