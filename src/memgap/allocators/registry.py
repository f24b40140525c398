"""The allocators' readers, by name: the only place outside each reader's own module that knows them.

Each reader is one module of memgap.allocators (``glibc.py``, ``jemalloc.py``, ``tcmalloc.py``,
``mimalloc.py``, ``pymalloc.py``; what each gives: memgap.allocators.base), imported on first use. An
allocator detection names that has no reader (musl, unknown) gets the base reader, which reads nothing
and says so.
"""
from __future__ import annotations

import importlib

from memgap.allocators.base import AllocatorReader, OwnFigures

# the order they are asked in where figures, not a name, decide (glibc's heaps walked before counters)
MODULES = ("glibc", "jemalloc", "tcmalloc", "mimalloc", "pymalloc")
C_ALLOCATORS = MODULES[:4]  # those that serve malloc; pymalloc sits on top of one
_READERS: dict[str, AllocatorReader] = {}


def all_readers() -> dict[str, AllocatorReader]:
    """Every allocator's reader, by name, in MODULES' order."""
    if not _READERS:
        for module in MODULES:
            reader: AllocatorReader = importlib.import_module(f"memgap.allocators.{module}").READER
            _READERS[reader.name] = reader
    return _READERS


def reader_for(name: str | None) -> AllocatorReader:
    """The reader of the allocator detection names ``name``; the base one (reads nothing) for one without."""
    found = all_readers().get(name or "")
    if found is not None:
        return found
    unknown = AllocatorReader()
    unknown.name = name or "unknown"
    return unknown


def c_readers() -> list[AllocatorReader]:
    """The readers of the allocators that serve malloc, in the order their figures are tried."""
    readers = all_readers()
    return [readers[name] for name in C_ALLOCATORS]


def counting(figures: OwnFigures) -> AllocatorReader | None:
    """The reader whose own counters ``figures`` (the agent's) hold, if any."""
    return next((r for r in c_readers() if r.counts(figures)), None)
