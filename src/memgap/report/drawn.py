"""A fitted table drawn as rich's ``Table`` draws it, line by line.

rich lays out every cell through its whole rendering machinery (a run's report spent about 30 of
its 40 ms there); memgap's tables come fitted (memgap.report.fit: each column's width chosen, each
cell's lines already within it), so what is left is drawing: the default heavy-headed box, a space
of padding on each side of a cell, the title above in the theme's ``table.title`` style, the header
in ``table.header`` and aligned to its bottom line, each row's cells to their top line. A table that
does not fit where it is printed, or a cell line wider than its column, is left to rich's ``Table``
(which crops). tests/unit/test_drawn.py holds the two equal, character by character and style by
style.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

# rich's box.HEAVY_HEAD: (left, line, joint, right) of its top, header rule, body and bottom
TOP = ("┏", "━", "┳", "┓")
HEAD_RULE = ("┡", "━", "╇", "┩")
BOTTOM = ("└", "─", "┴", "┘")
HEAD_EDGE = "┃"
BODY_EDGE = "│"


def justified(line: str, width: int, justify: str) -> str:
    """One line of a cell within ``width`` cells, as rich justifies a line of text (right and centre
    drop its trailing spaces first)."""
    if justify == "left":
        return line + " " * (width - cell_len(line))
    line = line.rstrip()
    room = width - cell_len(line)
    if justify == "right":
        return " " * room + line
    return " " * (room // 2) + line + " " * (room - room // 2)


class DrawnTable:
    """``rows`` of cells (each a cell's lines) under ``headers`` (each a header's lines), columns of
    ``widths`` cells justified by ``justify`` (left, right or center), each row in its style
    (``styles``, a theme's name or None), under ``title``."""

    def __init__(self, title: str, headers: Sequence[Sequence[str]], justify: Sequence[str],
                 widths: Sequence[int], rows: Sequence[Sequence[Sequence[str]]],
                 styles: Sequence[str | None]) -> None:
        self.title, self.headers, self.justify, self.widths = title, headers, justify, widths
        self.rows, self.styles = rows, styles
        self.width = sum(w + 3 for w in widths) + 1  # a space each side of a cell and a rule after it, one before

    def as_rich(self) -> Table:
        """The same table as rich's ``Table``: where this one cannot be drawn as it stands."""
        table = Table(title=self.title, title_justify="left")
        for header, w, justify in zip(self.headers, self.widths, self.justify, strict=True):
            table.add_column("\n".join(header), justify=justify, width=w, no_wrap=True)  # type: ignore[arg-type]
        for n, row in enumerate(self.rows):
            table.add_row(*("\n".join(cell) for cell in row), style=self.styles[n] if n < len(self.styles) else None)
        return table

    def _fits(self, max_width: int) -> bool:
        return self.width <= max_width and all(
            cell_len(line) <= w for row in [*self.rows, self.headers] for cell, w in zip(row, self.widths, strict=True)
            for line in cell)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width, self.width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment | Table]:
        if not self._fits(options.max_width):
            yield self.as_rich()
            return
        within = options.update(width=self.width, highlight=False, height=None)
        if self.title:
            yield from console.render(Text(self.title, style="table.title"), within.update(justify="left"))
        line = Segment.line()
        yield Segment(self._rule(TOP))
        yield line
        yield from self._row(self.headers, console.get_style("table.header"), HEAD_EDGE, bottom=True)
        yield Segment(self._rule(HEAD_RULE))
        yield line
        for n, row in enumerate(self.rows):
            style = self.styles[n] if n < len(self.styles) else None
            yield from self._row(row, console.get_style(style) if style else Style.null(), BODY_EDGE, bottom=False)
        yield Segment(self._rule(BOTTOM))
        yield line

    def _rule(self, parts: tuple[str, str, str, str]) -> str:
        left, fill, joint, right = parts
        return left + joint.join(fill * (w + 2) for w in self.widths) + right

    def _row(self, cells: Sequence[Sequence[str]], style: Style, edge: str, bottom: bool) -> Iterator[Segment]:
        height = max([len(cell) for cell in cells] + [1])
        blank = [""] * height
        shaped = [[*blank[:height - len(c)], *c] if bottom else [*c, *blank[:height - len(c)]] for c in cells]
        rule = Segment(edge)
        for k in range(height):
            yield rule
            for cell, w, justify in zip(shaped, self.widths, self.justify, strict=True):
                yield Segment(f" {justified(cell[k], w, justify)} ", style)
                yield rule
            yield Segment.line()
