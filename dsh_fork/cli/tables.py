"""Tables laid out by display width: a CJK title takes two cells a character, an accent none.

On a terminal a table fits the window: columns a user copies from (``KEEP_WHOLE``: ids, paths)
stay whole, the others fold; when even the whole columns do not fit, each row becomes a block
(``records``). Piped, a table is one row per line, never wrapped or cut, each column padded
to its widest cell by display width — but no wider than ``PAD_CAP`` cells for a column of
free text, so one long message does not push every other row hundreds of characters right
(that row alone is pushed).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

KEEP_WHOLE = frozenset(
    {"id", "name", "path", "session", "fork child", "source", "copy", "parent", "where", "childId"}
)
"""Table columns a user copies from: never cut or wrapped; the other columns fold instead."""
PAD_CAP = 40
"""The widest a free-text column is padded to in a piped table (in cells)."""
GAP = 2
"""Cells between two columns of a piped table."""
RICH_GAP = 3
"""Cells rich spends on a column's borders and padding."""
FOLD_MIN = 8
"""The narrowest a folding column is worth showing on a terminal."""


def cell_len(text: str) -> int:
    """Cells ``text`` takes on a terminal. Printable ASCII takes one a character, which a
    piped table of ids, counts and digests always is: rich's width tables are loaded only for
    the rest (about 1.5 ms of a run's start-up)."""
    if text.isascii() and text.isprintable():
        return len(text)
    from rich.cells import cell_len as cells

    return cells(text)


def human_size(value: int | None) -> str:
    """Bytes as people read them, in binary units as ``du -h`` counts (``812 B``,
    ``2.5 KiB``, ``299 KiB``, ``1.2 GiB``): one decimal below ten, none above."""
    if value is None:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    if unit == "B":
        return f"{value} B"
    return f"{size:.1f} {unit}" if size < 10 else f"{size:.0f} {unit}"


def numeric(index: int, cells: Sequence[Sequence[str]]) -> bool:
    """A column of numbers and sizes (every shown cell starts with a digit): right-aligned."""
    shown = [row[index] for row in cells if index < len(row) and row[index] not in ("-", "?")]
    return bool(shown) and all(cell[:1].isdigit() for cell in shown)


def plain_lines(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> Iterator[str]:
    """The piped table: the heading, then one line a row."""
    return made_lines(columns, lambda: cells)


def made_lines(
    columns: Sequence[str], make: Callable[[], Iterable[Sequence[str]]]
) -> Iterator[str]:
    """The piped table of rows ``make`` makes, made twice: measured (``plain_layout``) at
    once, then printed row by row as the lines are taken, never held."""
    widths, right = plain_layout(columns, make())
    return (plain_line(row, widths, right) for row in itertools.chain([columns], make()))


def plain_layout(
    columns: Sequence[str], rows: Iterable[Sequence[str]]
) -> tuple[list[int], list[bool]]:
    """Each column's padded width (its widest cell, heading included, by display width; free
    text capped at ``PAD_CAP``) and whether it is ``numeric``, from one pass over the rows,
    none held: a table too long to hold its cells is measured so, then printed row by row."""
    widths = [cell_len(c) for c in columns]
    shown = [False] * len(columns)
    digits = [True] * len(columns)
    for row in rows:
        for i, cell in enumerate(row[: len(widths)]):
            widths[i] = max(widths[i], cell_len(cell))
            if cell not in ("-", "?"):
                shown[i] = True
                digits[i] = digits[i] and cell[:1].isdigit()
    padded = [
        w if column in KEEP_WHOLE else min(w, max(PAD_CAP, cell_len(column)))
        for column, w in zip(columns, widths, strict=True)
    ]
    return padded, [a and b for a, b in zip(shown, digits, strict=True)]


def plain_line(row: Sequence[str], widths: Sequence[int], right: Sequence[bool]) -> str:
    """One line of the piped table: each cell padded to its column's width by display width,
    numbers to the right."""
    parts = [
        " " * (width - cell_len(cell)) + cell if flush else cell + " " * (width - cell_len(cell))
        for cell, width, flush in zip(row, widths, right, strict=False)
    ]
    return (" " * GAP).join(parts).rstrip()


def fits(columns: Sequence[str], cells: Sequence[Sequence[str]], width: int) -> bool:
    """Whether a terminal ``width`` cells wide holds the table with its whole columns whole
    and every other column folded to at most ``FOLD_MIN`` cells."""
    need = 0
    for i, column in enumerate(columns):
        widest = max([cell_len(column), *(cell_len(r[i]) for r in cells if i < len(r))])
        need += (widest if column in KEEP_WHOLE else min(widest, FOLD_MIN)) + RICH_GAP
    return need <= width


def rich_table(title: str | None, columns: Sequence[str], cells: Sequence[Sequence[str]]) -> Any:
    """The terminal's table: whole columns at their widest cell, the others folding."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        if column in KEEP_WHOLE:
            widest = max([cell_len(column), *(cell_len(r[i]) for r in cells if i < len(r))])
            table.add_column(column, no_wrap=True, min_width=widest)
        elif numeric(i, cells):
            table.add_column(column, justify="right", no_wrap=True)
        else:
            table.add_column(column, overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


def record_lines(columns: Sequence[str], row: Sequence[str], width: int) -> Iterator[str]:
    """One row as a block, for a terminal too narrow for its table: ``column: value`` pairs
    (the key column left out: the caller prints it whole) packed into lines of ``width``
    cells that break between pairs."""
    key = key_column(columns)
    line = ""
    for i, (column, value) in enumerate(zip(columns, row, strict=False)):
        if i == key or value == "-":
            continue
        pair = f"{column}: {value}"
        if line and cell_len(line) + 3 + cell_len(pair) > width:
            yield line
            line = pair
        else:
            line = f"{line} · {pair}" if line else pair
    if line:
        yield line


def key_column(columns: Sequence[str]) -> int:
    """The column a block is headed by: the first one a user copies from."""
    return next((i for i, c in enumerate(columns) if c in KEEP_WHOLE), 0)
