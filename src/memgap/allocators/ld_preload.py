"""LD_PRELOAD's value with a library put in front: apart from the catalogue (memgap.allocators.catalog
re-exports it) so that `memgap run` preloads its agent before its command starts without loading the
catalogue's dataclasses (dataclasses imports inspect: 14 ms)."""
from __future__ import annotations


def preloaded(library: str, preload: str = "") -> str:
    """LD_PRELOAD with ``library`` in front of ``preload`` (the value already there), once.

    ld.so takes the first library that defines a symbol: in front, an allocator's
    malloc wins over one the user preloads. An entry equal to ``library`` further on
    is dropped; entries are separated by spaces (ld.so also reads colons).
    """
    rest = [entry for entry in preload.replace(":", " ").split() if entry != library]
    return " ".join([library, *rest])
