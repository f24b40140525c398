"""The allocators' readers, by name: the only place outside each reader's own module that knows them.

Each reader is one module of memgap.allocators (``glibc.py``, ``jemalloc.py``, ``tcmalloc.py``,
``mimalloc.py``, ``pymalloc.py``, ``musl.py``; what each gives: memgap.allocators.base), imported on first
use; each declares what tells it apart in a process (its ``signs``: memgap.allocators.detect). A name
detection gives that has no reader (unknown) gets the base reader, which reads nothing and says so.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator

from memgap.allocators.base import AllocatorReader, OwnFigures

# the order they are asked in where figures, not a name, decide (glibc's heaps walked before counters), and
# where detection weighs their signs (a library's file name: the first reader's whose name it bears)
MODULES = ("glibc", "jemalloc", "tcmalloc", "mimalloc", "pymalloc", "musl")
C_ALLOCATORS = MODULES[:4]  # those that serve malloc; pymalloc sits on top of one
_READERS: dict[str, AllocatorReader] = {}


def _load(module: str) -> AllocatorReader:
    """One reader, its module imported on first use only: a process that snapshots itself loads only
    the readers it asks (each module loaded is memory in the process measured)."""
    if module not in _READERS:
        _READERS[module] = importlib.import_module(f"memgap.allocators.{module}").READER
    return _READERS[module]


def all_readers() -> dict[str, AllocatorReader]:
    """Every allocator's reader, by name, in MODULES' order."""
    return {name: _load(name) for name in MODULES}


def reader_for(name: str | None) -> AllocatorReader:
    """The reader of the allocator detection names ``name``; the base one (reads nothing) for one without."""
    if name in MODULES:
        return _load(name)
    unknown = AllocatorReader()
    unknown.name = name or "unknown"
    return unknown


def c_readers() -> Iterator[AllocatorReader]:
    """The readers of the allocators that serve malloc, in the order their figures are tried (each loaded
    when it is reached)."""
    return (_load(name) for name in C_ALLOCATORS)


def counting(figures: OwnFigures) -> AllocatorReader | None:
    """The reader whose own counters ``figures`` (the agent's) hold, if any."""
    return next((r for r in c_readers() if r.counts(figures)), None)
