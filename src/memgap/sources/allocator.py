"""Which malloc a process runs: glibc, jemalloc, tcmalloc, mimalloc, musl, or unknown.

From outside, the libraries in /proc/PID/maps tell (a preloaded allocator
replaces glibc's malloc). In-process we ask the dynamic linker which library
``malloc`` resolves to, which also catches an allocator linked into the program.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

from .elf import defines_symbol
from .procfs import Mapping

# basename prefix -> allocator
_LIBRARIES = (
    ("libjemalloc", "jemalloc"),
    ("libtcmalloc", "tcmalloc"),
    ("libmimalloc", "mimalloc"),
    ("ld-musl", "musl"),
    ("libc.musl", "musl"),
)


@dataclass
class AllocatorDetection:
    name: str                   # glibc, jemalloc, tcmalloc, mimalloc, musl, unknown
    library: str = ""           # path of the library that provides malloc
    how: str = ""               # how we know
    others: list[str] = field(default_factory=list)  # further allocator libraries mapped

    @property
    def is_glibc(self) -> bool:
        return self.name == "glibc"


def _kind_of(path: str) -> str | None:
    if "musl" in path:  # musl's libc is named libc.so too (/usr/lib/x86_64-linux-musl/libc.so)
        return "musl"
    base = os.path.basename(path)
    for prefix, kind in _LIBRARIES:
        if base.startswith(prefix):
            return kind
    if base.startswith("libc.so") or base.startswith("libc-2."):
        return "glibc"
    return None


def detect_from_maps(mappings: list[Mapping]) -> AllocatorDetection:
    """Guess the allocator from mapped libraries: a non-glibc allocator wins over libc."""
    seen: dict[str, str] = {}
    for m in mappings:
        if m.path.startswith("/"):
            kind = _kind_of(m.path)
            if kind and kind not in seen:
                seen[kind] = m.path
    for kind in ("jemalloc", "tcmalloc", "mimalloc", "musl"):
        if kind in seen:
            others = [k for k in seen if k not in (kind, "glibc")]
            return AllocatorDetection(kind, seen[kind], "library mapped in the process", others)
    if "glibc" in seen:
        return AllocatorDetection("glibc", seen["glibc"], "libc.so mapped and no other allocator library")
    return AllocatorDetection("unknown", "", "no known allocator library mapped (static binary?)")


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_detected: dict[int, AllocatorDetection] = {}


def detect_in_process(mappings: list[Mapping]) -> AllocatorDetection:
    """Which library this process's ``malloc`` symbol comes from (asked once per process:
    the symbol cannot be rebound after start-up)."""
    pid = os.getpid()
    if pid not in _detected:
        _detected.clear()
        _detected[pid] = _detect_in_process(mappings)
    return _detected[pid]


def _detect_in_process(mappings: list[Mapping]) -> AllocatorDetection:
    from_maps = detect_from_maps(mappings)
    try:
        default = ctypes.CDLL(None)
        address = ctypes.cast(default.malloc, ctypes.c_void_p).value
        info = _DlInfo()
        if not default.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
            return from_maps
        path = info.dli_fname.decode("utf-8", "replace")
    except (OSError, AttributeError):
        return from_maps
    # dladdr names the main program as it was started ("python3", relative): the maps give its path
    mapped = next((m.path for m in mappings if m.start <= (address or 0) < m.end and m.path.startswith("/")), None)
    if mapped is not None:
        path = mapped
    kind = _kind_of(path)
    exe = os.path.realpath("/proc/self/exe")
    if kind is None and os.path.realpath(path) == exe and defines_symbol(exe, "malloc") is False:
        # the program's canonical PLT entry for an imported malloc: the maps say whose it is
        return AllocatorDetection(from_maps.name, from_maps.library,
                                  f"{from_maps.how} (malloc's address is the program's PLT entry: imported)",
                                  from_maps.others)
    if kind is None:
        kind = "unknown"
        how = f"malloc is defined in {path}" + (" (the program itself)" if os.path.realpath(path) == exe else "")
        return AllocatorDetection(kind, path, how, [k for k in [from_maps.name] if k != "unknown"])
    others = [k for k in [from_maps.name, *from_maps.others] if k not in (kind, "glibc", "unknown")]
    return AllocatorDetection(kind, path, "malloc resolves to this library (dladdr)", others)
