"""memgap.report.drawn draws a fitted table as rich's Table does: the same characters in the same styles,
on a terminal's console (colours and bold) and on a plain one, for tables made at random the way
memgap.report.fit makes them (lines within their columns; headers and cells of several lines; every
justification; row styles; titles longer than the table), and for fit_table's own tables."""
from __future__ import annotations

import io
import random

import pytest
from rich.console import Console, Group
from rich.segment import Segment
from rich.style import Style

from memgap.report.drawn import DrawnTable
from memgap.report.fit import WRAP, Col, fit_table

WORDS = ["0.0", "12.5", "1,024.0", "glibc", "arena", "Python objects", "-", "", "PSS", "measured from", "x", "é",
         "日本"]


def _styled(renderable: object, width: int, terminal: bool) -> list[list[tuple[str, Style]]]:
    """What a console draws: each line a list of (character, its style)."""
    console = Console(file=io.StringIO(), width=width, force_terminal=terminal, color_system="truecolor" if terminal
                      else None, highlight=False, markup=False, emoji=False)
    lines: list[list[tuple[str, Style]]] = [[]]
    for seg in console.render(renderable, console.options):
        if seg.control:
            continue
        for ch in seg.text:
            if ch == "\n":
                lines.append([])
            else:
                lines[-1].append((ch, seg.style or Style.null()))
    return lines


def _random_table(rng: random.Random) -> DrawnTable:
    columns = rng.randint(1, 6)
    widths = [rng.randint(1, 14) for _ in range(columns)]

    def lines(w: int, most: int) -> list[str]:
        out = []
        for _ in range(rng.randint(1, most)):
            word = rng.choice(WORDS)
            while len(word) > w or (word == "日本" and w < 2):
                word = word[:-1]
            out.append(word + (" " if rng.random() < 0.2 and len(word) < w else ""))
        return out

    headers = [lines(w, 3) for w in widths]
    rows = [[lines(w, 3) for w in widths] for _ in range(rng.randint(0, 5))]
    styles = [rng.choice([None, "bold", "italic", "dim"]) for _ in rows]
    title = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30)))
    return DrawnTable(title, headers, [rng.choice(["left", "right", "center"]) for _ in widths], widths, rows, styles)


@pytest.mark.parametrize("seed", range(60))
def test_a_random_table_is_drawn_as_rich_draws_it(seed):
    rng = random.Random(seed)
    table = _random_table(rng)
    for terminal in (True, False):
        width = table.width + rng.randint(0, 20)
        assert _styled(table, width, terminal) == _styled(table.as_rich(), width, terminal), (seed, terminal)


def test_fit_tables_are_drawn_as_rich_draws_them_and_narrow_ones_fall_back():
    cols = [Col("layer", WRAP), Col("resident MiB"), Col("of RSS", optional=1), Col("measured from", WRAP, most=40)]
    rows = [["Python objects", "2.4", "22%", "pymalloc pool headers"],
            ["files (code, libraries, mapped files)", "5.9", "55%", "pagemap"],
            ["total", "10.7", "100%", "/proc/PID/status, smaps_rollup (USS, PSS)"]]
    for width in (120, 60, 44):
        table = fit_table("PID 1 at exit: RSS 10.7 MiB (outside, allocator glibc)", cols, rows, width,
                          [None, None, "bold"])
        if isinstance(table, Group):  # a column left out: the table, then a line that names it
            drawn, note = table.renderables
            assert isinstance(drawn, DrawnTable) and width < 120
            as_rich: object = Group(drawn.as_rich(), note)
        else:
            assert isinstance(table, DrawnTable)
            as_rich = table.as_rich()
        for terminal in (True, False):
            assert _styled(table, width, terminal) == _styled(as_rich, width, terminal), (width, terminal)
    squeezed = fit_table("t", cols, rows, 120)
    assert isinstance(squeezed, DrawnTable)
    assert [s for s in squeezed.__rich_console__(Console(width=30), Console(width=30).options)
            if not isinstance(s, Segment)], "a table wider than where it is printed is left to rich's Table"
