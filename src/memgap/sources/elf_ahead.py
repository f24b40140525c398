"""Many ELF files read at once on several cores: the first look at a process that maps large libraries.

A PyTorch CUDA process maps 66 libraries with about a million dynamic symbols: reading what can name an
allocator in them took 0.9 s of one core of a 16-core machine (the string tables searched at the speed of
the bytes, and 64 MiB of each ``.rodata`` at most). What one run read is kept on disk for the next
(memgap.sources.elf_cache), so this is the first look's cost only.

``read_ahead`` shares the files no earlier read kept among forked children, each reading its share with
``read_elf`` (which keeps what it read on disk, as any read does), while this process reads the largest
share itself; afterwards each ``read_elf`` of them is a hit. It forks only where that is safe and pays:
this process is memgap's own command (memgap.sources.own_process: never a program that imported memgap, whose
fork handlers would run and whose memory a fork would copy), it has no other thread (a fork copies only the
calling thread: a lock another one held would stay held in the child), the cache folder is ours (it
hands the facts over), more than one CPU is usable, and the files hold at least ``PARALLEL_LEAST`` bytes
to search. A child that fails leaves its files to be read by this process afterwards, as before.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from memgap.errors import MalformedInput
from memgap.sources import elf, elf_cache, own_process

PARALLEL_LEAST = 48 << 20   # bytes to search: below, one core reads them sooner than children start (~0.1 s)
WORKERS_MOST = 8            # children and this process: past 8, the largest file decides anyway


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def only_thread() -> bool:
    """Whether this process runs one thread, native ones counted (a library may have started its own)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def shares(sizes: dict[str, int], count: int) -> list[list[str]]:
    """``count`` lists of the paths, their sizes summed as evenly as the largest-first rule makes them,
    the heaviest first."""
    loads: list[tuple[int, list[str]]] = [(0, []) for _ in range(count)]
    for path in sorted(sizes, key=lambda p: (-sizes[p], p)):
        lightest = min(range(count), key=lambda i: loads[i][0])
        total, paths = loads[lightest]
        loads[lightest] = (total + sizes[path], [*paths, path])
    return [paths for _total, paths in sorted(loads, key=lambda load: -load[0]) if paths]


def _unread(paths: Sequence[str], query: elf.SymbolQuery) -> dict[str, int]:
    """The paths no earlier read kept, each with its bytes to search."""
    sizes = {}
    for path in dict.fromkeys(paths):
        try:
            if elf.kept(path, query):
                continue
            sizes[path] = elf.search_size(path, query)
        except (OSError, MalformedInput):
            continue  # read_elf will say so (or skip it) as before
    return sizes


def _read_share(paths: list[str], query: elf.SymbolQuery) -> None:
    for path in paths:
        try:
            elf.read_elf(path, query)
        except (OSError, MalformedInput):
            continue


def read_ahead(paths: Sequence[str], query: elf.SymbolQuery) -> int:
    """Read the ELF files at ``paths`` for ``query`` on several cores where that pays (see the module);
    return how many children read a share (0: nothing was shared out, each file is read when asked)."""
    cpus = usable_cpus()
    if not own_process.is_command() or cpus < 2 or elf_cache.folder() is None or not only_thread():
        return 0
    sizes = _unread(paths, query)
    if len(sizes) < 2 or sum(sizes.values()) < PARALLEL_LEAST:
        return 0
    own, *others = shares(sizes, min(cpus, WORKERS_MOST, len(sizes)))
    children = []
    for share in others:
        pid = os.fork()
        if pid == 0:  # the child: its share read and kept on disk, then gone without running any exit hook
            try:
                _read_share(share, query)
            finally:
                os._exit(0)
        children.append(pid)
    try:
        _read_share(own, query)
    finally:
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass  # reaped already (SIGCHLD ignored): it is gone either way
    return len(children)
