"""Give back the resident pages of pymalloc's empty pools (this process, CPython).

    result = memgap.release_pymalloc()      # result.released: bytes of RSS given back

pymalloc returns memory to the system a whole 1 MiB arena at a time. After a
burst, arenas that still hold a few live objects keep every page their pools
ever touched, including the pools that are now empty. The C side (native/pools.c)
runs with the GIL held for the whole call, checks each pool header against
pymalloc's invariants, marks an empty pool as never used, so that its next user
sets it up afresh, and drops its pages after the header with MADV_DONTNEED.
What stays: pools with any live block, and each pool's first page.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import time
from dataclasses import dataclass

from .errors import Unsupported
from .sources.procfs import ProcReader, status_int

#: CPython versions whose pool header layout this was checked against, by test
SUPPORTED = ((3, 10), (3, 11), (3, 12), (3, 13))


@dataclass(frozen=True)
class PoolRelease:
    released: int      # resident bytes the dropped pages held (mincore before the drop)
    pools: int         # empty pools released
    arenas: int        # pymalloc's arenas, as it counts them
    rss_before: int
    rss_after: int
    seconds: float


@functools.cache
def _release_function():  # type: ignore[no-untyped-def]
    from .native import library

    lib = ctypes.PyDLL(library("pools"))  # PyDLL: the call keeps the GIL
    func = lib.memgap_release_empty_pools
    func.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    func.restype = ctypes.c_size_t
    return func


def check_supported() -> None:
    """Raise Unsupported where the pool layout is not known to be the one native/pools.c reads."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in SUPPORTED:
        raise Unsupported(f"releasing pymalloc pools is checked on CPython {SUPPORTED[0][0]}.{SUPPORTED[0][1]}"
                          f"-{SUPPORTED[-1][0]}.{SUPPORTED[-1][1]} only; this is {sys.implementation.name} "
                          f"{sys.version.split()[0]}")
    import sysconfig  # here, not at import: `import memgap` runs in every observed process

    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        raise Unsupported("a free-threaded CPython allocates with mimalloc, not pymalloc")
    if sys.byteorder != "little" or ctypes.sizeof(ctypes.c_void_p) != 8:
        raise Unsupported("releasing pymalloc pools is done on 64-bit little-endian machines only")


def release_pymalloc() -> PoolRelease:
    """Drop the resident pages of pymalloc's empty pools; what that gave back, measured.

    Raises Unsupported on another Python, or where pymalloc is not the object
    allocator (PYTHONMALLOC=malloc). With isolated subinterpreters that have a
    GIL of their own (3.12+), do not use it: their pools are not guarded by this one.
    """
    from .sources.pymalloc import capture_debugmallocstats, parse_debugmallocstats

    check_supported()
    release = _release_function()  # built or loaded before anything is measured
    stats = parse_debugmallocstats(capture_debugmallocstats())
    if stats is None:
        raise Unsupported("pymalloc is not this process's object allocator (PYTHONMALLOC?)")
    pools = ctypes.c_size_t(0)
    reader = ProcReader("self")
    rss_before = status_int(reader.status(), "VmRSS")
    started = time.perf_counter()
    released = release(stats.pool_size, stats.arena_size, ctypes.byref(pools))
    seconds = time.perf_counter() - started
    return PoolRelease(int(released), int(pools.value), stats.arenas_current, rss_before,
                       status_int(reader.status(), "VmRSS"), seconds)
