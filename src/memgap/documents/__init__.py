"""Documents: the typed records memgap writes and reads, and their JSON Schemas.

``snapshot`` (a snapshot's layers, regions and findings), ``trim`` (the trim record every route
returns), ``records`` (a run and its processes, a lab's result and its runs), ``lab_summary`` (a
lab's summaries and verdict),
``recorded`` (a recording's JSON shapes, as TypedDicts), ``json_value`` (``JsonValue``: any JSON),
``fields`` (how each class reads its fields from JSON, with the checks) and ``schema`` (the
schemas in docs/schemas/, made from the same type hints). The names of ``records`` are
importable from here too (``memgap.documents.RunDocument``), loaded on first use.
"""
from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing's own, without importing typing: `memgap --help` needs none of it (5-9 ms)
if TYPE_CHECKING:
    from typing import Any


def __getattr__(name: str) -> Any:
    records = importlib.import_module("memgap.documents.records")
    try:
        value = getattr(records, name)
    except AttributeError:
        raise AttributeError(f"module 'memgap.documents' has no attribute {name!r}") from None
    globals()[name] = value
    return value
