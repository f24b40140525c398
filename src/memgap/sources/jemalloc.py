"""jemalloc's own statistics through ``mallctl``, in a process where it is malloc."""
from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass

from ..errors import MalformedInput, Unsupported

_SIZE_STATS = ("allocated", "active", "resident", "retained", "mapped", "metadata")


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

    @property
    def free_resident(self) -> int:
        """Resident bytes not handed out: dirty pages, page slack and metadata."""
        return max(0, self.resident - self.allocated)


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

    def read(self, name: str, ctype: type) -> object:
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
    return JemallocStats(narenas=narenas, version=(version or b"").decode(), **values)


def parse_jemalloc_stats_json(text: str) -> JemallocStats:
    """Parse the JSON of ``malloc_stats_print(..., "J")``."""
    try:
        data = json.loads(text)["jemalloc"]
        stats = data["stats"]
        return JemallocStats(narenas=int(data["arenas"]["narenas"]), version=str(data.get("version", "")),
                             **{name: int(stats[name]) for name in _SIZE_STATS})
    except (ValueError, KeyError, TypeError) as exc:
        raise MalformedInput("jemalloc stats JSON", str(exc) or type(exc).__name__) from None
