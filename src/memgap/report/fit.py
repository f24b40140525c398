"""Tables that fit the terminal without cutting a figure.

rich shrinks a table that is too wide by cutting its cells (``16…`` for a PID);
here the widths are chosen before rich sees the table: a figure's column is
never narrower than its longest figure, text wraps at word boundaries, the
columns a table can spare are left out (and named under it), and when even the
essential ones do not fit, each row is printed as ``label: value`` lines.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.text import Text

from memgap.report.drawn import DrawnTable

WHOLE = "whole"  # figures and verdict words: never wrapped, never shortened
WRAP = "wrap"    # text: wrapped at spaces and after , : / =
CUT = "cut"      # a command line or a sparkline: shortened by the column's ``shorten``

BORDER = 3       # each column's two padding spaces and one rule, in rich's default box
HEADER_WORD = 16  # a longer header word is folded rather than widen a column of short figures
TEXT_WORD = 20    # likewise for a word of a text column


def ellipsis(text: str, width: int) -> str:
    return text if cell_len(text) <= width else text[:max(width - 1, 0)] + "…"


@dataclass(frozen=True)
class Col:
    """One column. ``optional``: 0 when the column is always shown; else it may be left out
    when space runs out, the highest numbers first."""

    header: str
    kind: str = WHOLE
    optional: int = 0
    justify: str = ""        # default: right for figures, left for text
    least: int = 8           # CUT: the narrowest it is shortened to
    most: int | None = None  # WRAP and CUT: the widest it grows
    shorten: Callable[[str, int], str] = ellipsis


_PIECES = re.compile(r"[^ ,:/=]*[ ,:/=]*")  # a word and the separators after it: where a line may break


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken after spaces and , : / = (a
    variant spec or a path breaks between its parts); a longer piece is folded."""
    width = max(width, 1)  # a narrower column still advances
    lines = []
    for para in text.split("\n"):
        line = ""
        for piece in filter(None, _PIECES.findall(para)):
            if line.strip() and cell_len((line + piece).rstrip()) > width:
                lines.append(line.rstrip())
                line = ""
            line += piece
            folds = (len(line.rstrip()) - 1) // width  # a long piece: its whole folds cut at once, not
            if folds > 0 and cell_len(line.rstrip()) > width:  # one at a time (each would copy the rest)
                lines.extend(line[k * width:(k + 1) * width] for k in range(folds))
                line = line[folds * width:]
            while cell_len(line.rstrip()) > width:  # wide characters: a cell each is not a character each
                lines.append(line[:width])
                line = line[width:]
        lines.append(line.rstrip())
    return lines


def _longest_piece(text: str) -> int:
    return max((cell_len(p.rstrip()) for p in _PIECES.findall(text)), default=0)


def _bounds(col: Col, cells: list[str]) -> tuple[int, int]:
    """The narrowest and the natural width of a column (without its padding)."""
    header = min(_longest_piece(col.header), HEADER_WORD)
    longest = max([cell_len(line) for c in cells for line in c.split("\n")] or [0])
    natural = max(longest, max(cell_len(line) for line in col.header.split("\n")))
    if col.kind == WHOLE:
        return max(longest, header), natural
    if col.most:
        natural = max(min(natural, col.most), header)
    if col.kind == CUT:
        return min(max(col.least, header), natural), natural
    return min(max([_longest_piece(c) for c in cells] + [header]), TEXT_WORD, natural), natural


def _empty(cells: list[str]) -> bool:
    return all(c in ("", "-") for c in cells)


def _zero(cells: list[str]) -> bool:
    """Only zeros (a layer most processes do not have, shared memory): it tells little, so it gives way
    before the columns with figures in them."""
    return all(c in ("", "-") or c.strip("0.") == "" for c in cells)


def _choose(cols: Sequence[Col], least: list[int], columns: list[list[str]], width: int) -> list[int] | None:
    """The columns shown: the essential ones, then the optional ones by rank while they fit
    (a column with no figure in it first gives way, then one of zeros); None when the essential ones
    do not fit."""
    shown = [i for i, c in enumerate(cols) if not c.optional]
    if sum(least[i] + BORDER for i in shown) + 1 > width:
        return None
    optional = sorted((i for i, c in enumerate(cols) if c.optional),
                      key=lambda i: (_empty(columns[i]), _zero(columns[i]), cols[i].optional))
    for i in optional:
        if sum(least[j] + BORDER for j in shown) + least[i] + BORDER + 1 <= width:
            shown.append(i)
    return sorted(shown)


def _widths(least: list[int], natural: list[int], first: list[bool], width: int) -> list[int]:
    """Natural widths, narrowed one cell at a time where the most room to give is, to fit:
    the ``first`` columns before the others (a figure's header wrapped costs the table a
    line or two; a text column wrapped, a line on many rows)."""
    # none wider than the room: the narrowing below goes a cell at a time, as many times as it is over
    widths = [min(n, max(lo, width)) for n, lo in zip(natural, least, strict=True)]
    for group in ([i for i in range(len(widths)) if first[i]], range(len(widths))):
        while sum(w + BORDER for w in widths) + 1 > width:
            i = max(group, key=lambda j: widths[j] - least[j], default=None)
            if i is None or widths[i] <= least[i]:
                break
            widths[i] -= 1
    return widths


def _cell(col: Col, text: str, width: int) -> str:
    if col.kind == CUT:
        return col.shorten(text, width)
    if col.kind == WRAP:
        return "\n".join(wrap(text, width))
    return text


def fit_table(title: str, cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int,
              styles: Sequence[str | None] = ()) -> RenderableType:
    """A table of ``rows`` (text cells) that fits ``width`` columns; ``styles``: one per row."""
    # a shortened column holds one line: a command's newlines (a `python -c` script) become spaces
    rows = [[c.replace("\n", " ") if col.kind == CUT else c for col, c in zip(cols, row, strict=False)] for row in rows]
    columns = [[row[i] for row in rows] for i in range(len(cols))]
    bounds = [_bounds(c, cells) for c, cells in zip(cols, columns, strict=True)]
    shown = _choose(cols, [b[0] for b in bounds], columns, width)
    if shown is None:
        return vertical(title, cols, rows, width, styles)
    widths = _widths([bounds[i][0] for i in shown], [bounds[i][1] for i in shown],
                     [cols[i].kind == WHOLE for i in shown], width)
    table = DrawnTable(title, [wrap(cols[i].header, w) for i, w in zip(shown, widths, strict=True)],
                       [cols[i].justify or ("right" if cols[i].kind == WHOLE else "left") for i in shown], widths,
                       [[_cell(cols[i], row[i], w).split("\n") for i, w in zip(shown, widths, strict=True)]
                        for row in rows], styles)
    left_out = list(dict.fromkeys(cols[i].header.replace("\n", " ") for i in range(len(cols)) if i not in shown))
    if not left_out:
        return table
    return Group(table, Text(f"(left out at {width} columns: {', '.join(left_out)})", style="dim"))


def _label_lines(label: str, value: str, width: int, indent: str) -> list[str]:
    """``label: value`` in lines of ``width``; a value that does not fit beside its label
    goes on the lines below it (a figure is shorter than any line, so it stays whole)."""
    line = f"{indent}{label}: {value}"
    if cell_len(line) <= width:
        return [line]
    return wrap(f"{indent}{label}:", width) + [f"{indent}  {v}" for v in wrap(value, width - len(indent) - 2)]


def vertical(title: str, cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int,
             styles: Sequence[str | None] = ()) -> RenderableType:
    """The table as lines, for terminals too narrow for it: each row its first cell, then
    one ``label: value`` line per other cell."""
    parts: list[RenderableType] = [Text("\n".join(wrap(title, width)), style="italic")]
    labels = [c.header.replace("\n", " ") for c in cols]
    for n, row in enumerate(rows):
        style = (styles[n] if n < len(styles) else None) or ""
        lines = _label_lines(labels[0], row[0], width, "")
        for label, value in zip(labels[1:], row[1:], strict=False):
            if value:  # an empty cell says nothing; '-' (not measured) does
                lines += _label_lines(label, value, width, "  ")
        parts.append(Text("\n".join(lines), style=style, no_wrap=True))
    return Group(*parts)
