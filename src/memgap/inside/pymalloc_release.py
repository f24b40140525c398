"""Give back the resident pages of pymalloc's empty pools (this process, CPython).

    result = memgap.release_pymalloc()      # result.released: bytes of RSS given back

pymalloc returns memory to the system a whole 1 MiB arena at a time. After a
burst, arenas that still hold a few live objects keep every page their pools
ever touched, including the pools that are now empty. The C side (native/pools.c)
runs with the GIL held for the whole call, checks each pool header against
pymalloc's invariants, marks an empty pool as never used, so that its next user
sets it up afresh, and drops its pages after the header with MADV_DONTNEED.
The same goes for the one wholly empty arena pymalloc keeps for reuse.
What stays: pools with any live block, and each pool's first page.
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
import time
from dataclasses import dataclass

from memgap.errors import MemgapError, Unsupported
from memgap.record.envnames import PYMALLOC_RELEASE_ENV
from memgap.sources.procfs import ProcReader, status_int

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
def _release_function() -> ctypes._NamedFuncPointer:
    from memgap.native.installed import library

    lib = ctypes.PyDLL(library("pools"))  # PyDLL: the call keeps the GIL
    func = lib.memgap_release_empty_pools
    func.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    func.restype = ctypes.c_size_t
    return func


class _ArenaAllocator(ctypes.Structure):  # PyObjectArenaAllocator
    _fields_ = [("ctx", ctypes.c_void_p), ("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]


def check_arena_allocator() -> None:
    """Raise Unsupported unless pymalloc's arenas come from its own mmap/munmap functions.

    The release trusts that every pool header still mapped belongs to a live
    arena. That holds when a freed arena is unmapped; an arena allocator set with
    PyObject_SetArenaAllocator (malloc-based, say) could leave a freed arena's
    headers in memory that now belongs to someone else.
    """
    arena = _ArenaAllocator()
    get = ctypes.pythonapi.PyObject_GetArenaAllocator
    get.argtypes, get.restype = [ctypes.POINTER(_ArenaAllocator)], None
    get(ctypes.byref(arena))
    own = ctypes.cast(get, ctypes.c_void_p).value or 0
    paths = {}
    for m in ProcReader("self").maps():
        for name, address in (("own", own), ("alloc", arena.alloc or 0), ("free", arena.free or 0)):
            if m.start <= address < m.end:
                paths[name] = m.path
    if arena.ctx or not paths.get("own") or paths.get("alloc") != paths["own"] or paths.get("free") != paths["own"]:
        raise Unsupported("pymalloc's arenas come from an allocator set with PyObject_SetArenaAllocator, "
                          "not the interpreter's own: releasing pools is not safe there")


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

    Raises Unsupported on another Python, where pymalloc is not the object
    allocator (PYTHONMALLOC=malloc), or where its arenas come from an arena
    allocator other than the interpreter's own. With isolated subinterpreters that have a
    GIL of their own (3.12+), do not use it: their pools are not guarded by this one.
    """
    from memgap.sources.pymalloc import capture_debugmallocstats, parse_debugmallocstats

    check_supported()
    check_arena_allocator()
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


def release_if_asked(asked: bool | None = None) -> int:
    """release_pymalloc() when ``asked`` (default: MEMGAP_PYMALLOC_RELEASE=1 in the environment);
    the bytes it gave back, 0 where it cannot run (another Python, pymalloc off, no compiler),
    so that the trim it goes with still runs."""
    if not (os.environ.get(PYMALLOC_RELEASE_ENV) == "1" if asked is None else asked):
        return 0
    try:
        return release_pymalloc().released
    except MemgapError:
        return 0
