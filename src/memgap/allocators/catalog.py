"""The allocators memgap knows: their libraries, packages, option variables, and preloading.

One entry per allocator (glibc, jemalloc, tcmalloc, mimalloc): the shared library a
program preloads to run under it, the Debian/Ubuntu package that installs that library,
and the environment variables that carry its options. Below the lab, the remedies and
the agent: each of them puts a library in LD_PRELOAD through ``preloaded``, and finds an
allocator's library through ``find_library``.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from memgap.allocators.ld_preload import preloaded as preloaded  # re-exported: callers name it here
from memgap.record.envnames import ALLOCATOR_DIRS_ENV


@dataclass(frozen=True)
class Allocator:
    """One allocator: where its library is and how its options are given."""

    name: str
    library: str   # the shared library's file name ("" for glibc: malloc is libc's own)
    package: str   # the Debian/Ubuntu package that installs it
    options: str   # the environment variables that carry its options, as the docs name them

    @property
    def install_hint(self) -> str:
        """The command that installs the library (Debian, Ubuntu)."""
        return f"apt-get install {self.package}"


CATALOGUE = {a.name: a for a in (
    Allocator("glibc", "", "libc6", "MALLOC_ARENA_MAX, MALLOC_*_ and GLIBC_TUNABLES"),
    Allocator("jemalloc", "libjemalloc.so.2", "libjemalloc2", "MALLOC_CONF"),
    Allocator("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4", "TCMALLOC_*"),
    Allocator("mimalloc", "libmimalloc.so.2", "libmimalloc2.0", "MIMALLOC_*"),
)}
ALLOCATORS = tuple(CATALOGUE)
PRELOADABLE = tuple(name for name, a in CATALOGUE.items() if a.library)  # those run by preloading a library

# glibc's tunables by their short names, each set through its MALLOC_*_ variable; any tunable
# named in full (TUNABLE_PREFIX...) goes through GLIBC_TUNABLES
GLIBC_TUNABLES = {
    "arena_max": "MALLOC_ARENA_MAX",
    "mmap_threshold": "MALLOC_MMAP_THRESHOLD_",
    "trim_threshold": "MALLOC_TRIM_THRESHOLD_",
    "top_pad": "MALLOC_TOP_PAD_",
    "mmap_max": "MALLOC_MMAP_MAX_",
}
TUNABLE_PREFIX = "glibc."
OPTION_PREFIXES = {"tcmalloc": "TCMALLOC_", "mimalloc": "MIMALLOC_"}  # release_rate -> TCMALLOC_RELEASE_RATE

# where Debian, Ubuntu and others put shared libraries, searched after MEMGAP_ALLOCATOR_DIRS
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                "/usr/local/lib", "/lib/x86_64-linux-gnu")


def option_env(allocator: str, options: dict[str, str], tunables: str = "") -> dict[str, str]:
    """The environment variables that give ``allocator`` its ``options``.

    glibc's short tunable names become their MALLOC_*_ variables and full names
    (``glibc.malloc.tcache_count``) join GLIBC_TUNABLES after ``tunables``, the
    user's own (a later entry wins); jemalloc's options become MALLOC_CONF; tcmalloc's
    and mimalloc's their TCMALLOC_* and MIMALLOC_* variables.
    """
    env: dict[str, str] = {}
    if allocator == "glibc":
        env.update({GLIBC_TUNABLES[k]: v for k, v in options.items() if k in GLIBC_TUNABLES})
        full = [f"{k}={v}" for k, v in options.items() if k.startswith(TUNABLE_PREFIX)]
        if full:
            env["GLIBC_TUNABLES"] = ":".join(filter(None, [tunables, *full]))
    elif allocator == "jemalloc":
        if options:
            env["MALLOC_CONF"] = ",".join(f"{k}:{v}" for k, v in options.items())
    else:
        env.update({OPTION_PREFIXES[allocator] + k.upper(): v for k, v in options.items()})
    return env


def find_library(allocator: str) -> str | None:
    """The allocator's shared library on this machine (folders in MEMGAP_ALLOCATOR_DIRS first), or None
    (not found, or glibc)."""
    filename = CATALOGUE[allocator].library
    if not filename:
        return None  # glibc: nothing to preload
    extra = [d for d in os.environ.get(ALLOCATOR_DIRS_ENV, "").split(os.pathsep) if d]
    for directory in (*extra, *LIBRARY_DIRS):  # the user's folders first
        path = os.path.join(directory, filename)
        if os.path.exists(path):
            return path
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if line.strip().startswith(filename) and "=>" in line:
            return line.split("=>", 1)[1].strip()
    return None


def install_hint(allocator: str) -> str:
    """The command that installs ``allocator``'s library (Debian, Ubuntu)."""
    return CATALOGUE[allocator].install_hint
