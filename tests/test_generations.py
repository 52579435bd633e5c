"""Generation files (format §3): canonical names, what is ignored, selection of the highest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh_fork.generations import (
    MAX_SAFE_INTEGER,
    canonical_name,
    dir_bytes,
    is_temp_name,
    list_generations,
    non_canonical_files,
    parse_name,
    scan_names,
    scan_sized,
    select,
)

# Format §3.2, row by row, plus the pitfalls of §3.1.
IGNORED = [
    "session.v0.jsonl.zstd",
    "session.v0.jsonl",
    "session.v04.jsonl.zstd",
    "session.V4.jsonl.zstd",
    "Session.v4.jsonl.zstd",
    "SESSION.JSONL",
    "session.v4.jsonl.zst",
    "session.v4.jsonl.txt",
    "session.v4.jsonl.zstd.tmp",
    "session.v4.jsonl.zstd.tmp-1234",
    "session.v4.jsonl.zstd.repair",
    "session.v4.jsonl.zstd.bak",
    "session.v4.jsonl.zstd.bak.1",
    "session.v4.jsonl.zstd.3f9a0c1b2d4e.tmp",
    "session.migration.0123456789abcdef.jsonl.zstd.tmp",
    "session.lock",
    "session.v99999999999999999999.jsonl",
    f"session.v{MAX_SAFE_INTEGER + 1}.jsonl.zstd",
    "session.v\u0664.jsonl.zstd",  # ARABIC-INDIC DIGIT FOUR: `\d` would match it
    "session.v4\uff10.jsonl.zstd",  # FULLWIDTH DIGIT ZERO
    "session.v.jsonl.zstd",
    "session.v-4.jsonl.zstd",
    "session.v4.jsonl.zstd.zstd",
    "session.v4.jsonl\n",
    " session.v4.jsonl.zstd",
    "session.jsonl.zstd.tmp",
    "session.v4.json.zstd",
    "x.session.v4.jsonl.zstd",
]

CANONICAL = [
    ("session.jsonl.zstd", 0, "zstd"),
    ("session.jsonl", 0, "plain"),
    ("session.v1.jsonl.zstd", 1, "zstd"),
    ("session.v3.jsonl", 3, "plain"),
    ("session.v4.jsonl.zstd", 4, "zstd"),
    ("session.v10.jsonl.zstd", 10, "zstd"),
    (f"session.v{MAX_SAFE_INTEGER}.jsonl.zstd", MAX_SAFE_INTEGER, "zstd"),
]


@pytest.mark.parametrize("name", IGNORED)
def test_ignored_names_are_never_generations(name: str) -> None:
    assert parse_name(name) is None


@pytest.mark.parametrize(("name", "version", "encoding"), CANONICAL)
def test_canonical_names(name: str, version: int, encoding: str) -> None:
    assert parse_name(name) == (version, encoding)
    assert canonical_name(version, encoding) == name  # type: ignore[arg-type]


def test_temp_names() -> None:
    for name in (
        "session.v4.jsonl.zstd.3f9a0c1b2d4e.tmp",
        "session.migration.0123456789abcdef.jsonl.zstd.tmp",
        "x.tmp-1234",
        "session.v4.jsonl.zstd.repair",
        "session.v3.jsonl.zstd.bak",
    ):
        assert is_temp_name(name), name
    for name in ("session.v4.jsonl.zstd", "session.lock", "notes.txt", "tmp"):
        assert not is_temp_name(name), name


def make_files(session_dir: Path, names: list[str]) -> None:
    session_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        (session_dir / name).write_bytes(b"not read by listing")


def test_a_dir_of_ignored_names_has_no_generation(tmp_path: Path) -> None:
    names = [n for n in IGNORED if "\n" not in n]
    make_files(tmp_path / "s", names)
    assert list_generations(tmp_path / "s") == []
    assert select(list_generations(tmp_path / "s")) is None
    assert non_canonical_files(tmp_path / "s") == sorted(n for n in names if n != "session.lock")


def test_the_numerically_highest_version_is_selected(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    make_files(
        session_dir,
        [
            "session.jsonl.zstd",
            "session.v3.jsonl.zstd",
            "session.v10.jsonl.zstd",
            "session.v9.jsonl.zstd",
            "session.v4.jsonl.zstd",
            "session.v11.jsonl.zstd.tmp",
            "session.lock",
        ],
    )
    found = list_generations(session_dir)
    assert [g.version for g in found] == [0, 3, 4, 9, 10]
    chosen = select(found)
    assert chosen is not None
    assert (chosen.name, chosen.version, chosen.encoding) == ("session.v10.jsonl.zstd", 10, "zstd")
    assert chosen.path == session_dir / "session.v10.jsonl.zstd"


def test_a_v3_and_v4_pair_selects_v4_whatever_the_mtimes(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    make_files(session_dir, ["session.v3.jsonl.zstd", "session.v4.jsonl.zstd"])
    os.utime(session_dir / "session.v4.jsonl.zstd", (1, 1))
    chosen = select(list_generations(session_dir))
    assert chosen is not None and chosen.version == 4


def test_at_equal_version_the_zstd_file_wins(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    make_files(session_dir, ["session.v4.jsonl.zstd", "session.v4.jsonl", "session.v3.jsonl"])
    found = list_generations(session_dir)
    assert [(g.version, g.encoding) for g in found] == [(3, "plain"), (4, "plain"), (4, "zstd")]
    chosen = select(found)
    assert chosen is not None and chosen.name == "session.v4.jsonl.zstd"


def test_a_directory_with_a_canonical_name_is_not_a_generation(tmp_path: Path) -> None:
    session_dir = tmp_path / "s"
    (session_dir / "session.v5.jsonl.zstd").mkdir(parents=True)
    make_files(session_dir, ["session.v4.jsonl.zstd"])
    assert [g.version for g in list_generations(session_dir)] == [4]


def test_missing_or_non_directory_session_dirs_have_no_generations(tmp_path: Path) -> None:
    assert list_generations(tmp_path / "missing") == []
    (tmp_path / "file").write_text("x")
    assert list_generations(tmp_path / "file") == []
    assert non_canonical_files(tmp_path / "missing") == []


def test_one_listing_gives_the_names_and_the_sizes_the_two_scans_give(tmp_path: Path) -> None:
    """du of a whole root lists each dir once: the names are those of ``scan_names`` (a link
    to a file counts as a generation, as DSH lists it) and the sizes those of ``dir_bytes``
    (links and FIFOs are not followed, the chosen log is the highest regular generation)."""
    session_dir = tmp_path / "s"
    session_dir.mkdir()
    (session_dir / "session.v3.jsonl.zstd").write_bytes(b"x" * 30)
    (session_dir / "session.v4.jsonl").write_bytes(b"y" * 40)
    (session_dir / "session.lock").write_bytes(b"")
    (session_dir / "notes.txt").write_bytes(b"z" * 5)
    (tmp_path / "outside").write_bytes(b"w" * 1000)
    os.symlink(tmp_path / "outside", session_dir / "session.v4.jsonl.zstd")
    os.mkfifo(session_dir / "session.v2.jsonl")
    (session_dir / "session.v5.jsonl.zstd").mkdir()
    names, sizes = scan_sized(session_dir)
    assert names == scan_names(session_dir)
    assert [n for _, _, n in names] == [
        "session.v3.jsonl.zstd",
        "session.v4.jsonl",
        "session.v4.jsonl.zstd",
    ]
    assert sizes == dir_bytes(session_dir) == (30 + 40 + 5, 40)


def test_a_missing_dir_has_no_names_and_no_bytes(tmp_path: Path) -> None:
    assert scan_sized(tmp_path / "missing") == ((), (0, 0))
    assert dir_bytes(tmp_path / "missing") == (0, 0)
