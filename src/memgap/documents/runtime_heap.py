"""A runtime's heap as the documents carry it: one runtime's figures in the ``runtime_heap`` layer's
detail (``HeapDetail``), and what its own deep route told (``DeepRead``, ``inspect --deep``). The
runtimes' readers (``memgap.runtimes``) fill them; the renderers read them without importing a reader.
"""
from __future__ import annotations

from typing import TypedDict


class _Heap(TypedDict):
    route: str
    in_use: int | None
    retained: int | None
    released: int | None
    committed: int | None
    limit: int | None
    settings: dict[str, str]
    notes: list[str]


class HeapDetail(_Heap):
    """One runtime's heap in the runtime_heap layer's detail (``{"runtimes": [...]}``, memgap.runtimes.layers):
    its figures, the resident bytes of its ranges, and what of them it holds in use and retained."""

    runtime: str
    version: str
    resident: int
    in_use_told: int | None     # its own count (``in_use`` is the resident pages it covers)
    retained_told: int | None


class DeepRead(TypedDict, total=False):
    """What a runtime's own deep route told (``inspect --deep``: memgap.runtimes.read_deep): its figures,
    or a note saying why there are none."""

    runtime: str
    note: str
    version: str
    route: str
    in_use: int | None
    retained: int | None
    released: int | None
    committed: int | None
    limit: int | None
    metadata: dict[str, int]
    settings: dict[str, str]
    notes: list[str]
