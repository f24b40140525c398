"""Runtimes that keep a heap of their own (Go, the JVM, V8), read from outside.

Each runtime is one module here (``go.py``, ``jvm.py``, ``v8.py``) with the same two functions:

- ``detect(process: ProcessView) -> RuntimeInfo | None``: is this process that runtime's (its
  program, its libraries, its symbols), and which version; from files and /proc only;
- ``read(process: ProcessView, info: RuntimeInfo) -> RuntimeHeap``: the runtime's own figures
  and the address ranges it owns, without stopping the process wherever the runtime allows,
  saying how it read them (``RuntimeHeap.route``) and what it could not (``notes``).

The registry (``READERS``, ``detect_runtimes``) is the only place that knows their names.
"""
from __future__ import annotations

from typing import Any

from .base import ProcessView, RuntimeHeap, RuntimeInfo, RuntimeReader

READERS: dict[str, RuntimeReader] = {}


def register(name: str, reader: RuntimeReader) -> None:
    """Add a runtime's reader to the registry (each runtime module calls it once, at import)."""
    READERS[name] = reader


def all_readers() -> dict[str, RuntimeReader]:
    """Every runtime's reader, by name (each module imported once, so each has registered)."""
    _load_all()
    return dict(READERS)


def detect_runtimes(process: ProcessView) -> list[RuntimeInfo]:
    """Every runtime found in the process (a JVM loading a native library beside glibc is one runtime;
    several runtimes in one process are each listed)."""
    _load_all()
    found = []
    for reader in READERS.values():
        info = reader.detect(process)
        if info is not None:
            found.append(info)
    return found


def remedy(name: str, heap: dict[str, Any]) -> str:
    """What brings a runtime's retained heap back, as its reader words it (``remedy(heap_detail)``
    on the reader, where it has one), else the lab's line."""
    _load_all()
    words = getattr(READERS.get(name), "remedy", None)
    told = words(heap) if callable(words) else ""
    return told or f"measure the {name} runtime's own settings with `memgap lab` (its variants are in the default set)"


def _load_all() -> None:
    """Import every runtime module once, so each registers its reader."""
    import importlib

    for name in ("go", "jvm", "v8"):
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":  # a runtime module not written yet is no error; a broken one is
                raise


__all__ = ["READERS", "ProcessView", "RuntimeHeap", "RuntimeInfo", "RuntimeReader", "all_readers", "detect_runtimes",
           "register", "remedy"]
