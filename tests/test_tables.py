"""Tables by display width (issue 35): piped, one row per line, padded by display width (CJK
titles align), free text padded to at most ``PAD_CAP`` cells, numbers right-aligned, never
wrapped; sizes as people read them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from rich.cells import cell_len

from dsh_fork.cli.tables import (
    PAD_CAP,
    fits,
    human_size,
    numeric,
    plain_layout,
    plain_line,
    plain_lines,
    record_lines,
)


def test_cjk_cells_align_by_display_width() -> None:
    columns = ["id", "title", "turns"]
    cells = [["a", "日本語のタイトル", "3"], ["bb", "plain", "12"], ["c", "é", "1"]]

    lines = list(plain_lines(columns, cells))

    assert lines == [
        "id  title             turns",
        "a   日本語のタイトル      3",
        "bb  plain                12",
        "c   é                     1",
    ]
    # the turns column ends in the same cell on every row
    assert len({cell_len(line) for line in lines}) == 1


def test_a_table_measured_in_one_pass_prints_as_the_table_held_whole() -> None:
    """A long table is measured from its rows, then printed from them again (``Out.table``
    given a function that makes the rows): the lines are those of the table held whole."""
    columns = ["id", "title", "turns", "size", "cwd"]
    cells = [
        ["a", "日本語のタイトル", "3", "1.2 KiB", "-"],
        ["bb", "x" * 300, "-", "?", "/w"],
        ["c", "é", "12", "812 B", "/elsewhere"],
        ["d", "-", "abc", "-", "/w"],  # a column with a word in it is not numeric
    ]

    widths, right = plain_layout(columns, iter(cells))

    printed = [plain_line(row, widths, right) for row in [columns, *cells]]
    assert printed == list(plain_lines(columns, cells))
    assert right == [False, False, False, True, False]


def test_a_long_free_text_cell_pushes_only_its_own_row() -> None:
    long = "x" * 300
    lines = list(plain_lines(["turn", "agents", "end"], [["1", long, "yes"], ["2", "a", "no"]]))

    assert lines[1] == f"   1  {long}  yes"
    assert lines[2] == "   2  " + "a".ljust(PAD_CAP) + "  no"
    assert all("\n" not in line for line in lines)


def test_id_columns_are_padded_whole() -> None:
    long_id = "session-" + "f" * 60
    lines = list(plain_lines(["id", "kind"], [[long_id, "root"], ["b", "fork"]]))
    assert lines[2] == "b".ljust(len(long_id)) + "  fork"


def test_numbers_and_sizes_are_right_aligned() -> None:
    cells = [["7", "2.5 KiB"], ["12", "-"]]
    assert numeric(0, cells) and numeric(1, cells)
    assert not numeric(0, [["x"], ["1"]])
    assert list(plain_lines(["n", "size"], cells)) == [
        " n     size",
        " 7  2.5 KiB",
        "12        -",
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (2560, "2.5 KiB"),
        (306_368, "299 KiB"),
        (5 * 1024**3 // 2, "2.5 GiB"),
        (3 * 1024**5, "3072 TiB"),
        (None, "?"),
    ],
)
def test_human_sizes(value: int | None, text: str) -> None:
    assert human_size(value) == text


def test_a_terminal_too_narrow_for_the_whole_columns_gets_blocks() -> None:
    long_id = "session-" + "f" * 60
    cells = [[long_id, "a title that folds"]]
    assert fits(["id", "title"], cells, 100)
    assert not fits(["id", "title"], cells, 60)
    assert list(record_lines(["id", "title", "n"], [long_id, "t", "3"], 80)) == ["title: t · n: 3"]


def test_inspect_turns_puts_its_agents_last_and_pads_nothing_to_them(tmp_path: Path) -> None:
    """A turn that spawned 30 agents: their ids end the row, and no other row is padded to
    the width of that cell (issue 35)."""
    root = tmp_path / "sessions"
    made = run_cli("fixture", root, "--sessions", "1", "--agents", "30", "--turns", "2",
                   "--seed", "1", "--json")  # fmt: skip
    top = made.json()["topLevel"][0]

    lines = run_cli("--root", root, "inspect", top, "--turns").stdout.splitlines()

    start = lines.index("Turns: 2")
    heading, *rows = lines[start + 1 : start + 4]
    assert heading.split()[-2:] == ["tools", "agents"]
    spawned = [row for row in rows if "(agent 30)" in row]
    assert len(spawned) == 1 and len(spawned[0]) > 30 * 40
    assert all(len(row) < 200 for row in rows if row not in spawned)
