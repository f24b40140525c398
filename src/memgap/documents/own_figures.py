"""An allocator's own figures read through gdb (``inspect --deep``), laid out by its reader as rows:
what memgap.report.attach renders without knowing which allocator they are from."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FigureRow:
    figure: str          # what the figure is, in a word or two
    bytes: int | None
    source: str          # where it came from: the mallctl name, the property, the field
    meaning: str         # what it means here (which layer it goes to)


@dataclass(frozen=True)
class OwnFiguresTable:
    """One allocator's own figures: a titled table of rows, and the lines said above and below it."""

    title: str
    source: str                       # the heading of the rows' ``source`` column ("mallctl", "property")
    rows: tuple[FigureRow, ...]
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
