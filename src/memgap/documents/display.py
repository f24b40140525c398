"""How a document shows itself in a notebook (``_repr_html_``): through the renderer registered for
its kind. The documents import no renderer; ``memgap/__init__.py``, which Python runs before any
module of memgap, registers one for each kind, loaded only when a document is first shown."""
from __future__ import annotations

TYPE_CHECKING = False  # typing's own, without importing typing: `memgap --help` needs none of it (5-9 ms)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_HTML: dict[str, Callable[[Any], str]] = {}


def register_html(kind: str, render: Callable[[Any], str]) -> None:
    """``render`` shows documents of ``kind`` ("snapshot", "lab") as self-contained HTML."""
    _HTML[kind] = render


def as_html(kind: str, document: object) -> str:
    """``document`` as HTML, by its kind's renderer."""
    return _HTML[kind](document)
