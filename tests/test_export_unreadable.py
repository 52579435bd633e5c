"""export never drops a family member in silence, never packs what a link leads to.

Scenarios: a family of seven (a top, two subagents, four grandchildren) in which one subagent
cannot be read — its log a FIFO, its log a symbolic link, its session dir a symbolic link to a
dir outside the root. export refuses, naming the member and its two children, and writes
nothing; with ``--skip-unreadable`` it writes the other four, exits 10 (PARTIAL) and names the
three it left out, in text and JSON; the archive it wrote imports into a clean root.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import log_header, run_cli
from schemakit import check

from dsh_fork.fixtureroot import generate
from dsh_fork.generations import CURRENT_NAME

PROJECT = "--fixture-project-0--"


def family(root: Path) -> tuple[str, str, list[str]]:
    """The top id, the first subagent's id and its children's ids."""
    made = generate(root, sessions=1, agents=2, depth=2, turns=2, seed=5)
    top = made.top_level[0]
    by_parent: dict[str | None, list[str]] = {}
    for log in root.glob(f"*/*/{CURRENT_NAME}"):
        header = log_header(log)
        by_parent.setdefault(header.get("parentSession"), []).append(header["id"])
    agent = sorted(by_parent[top])[0]
    return top, agent, sorted(by_parent[agent])


def fifo_log(session_dir: Path, outside: Path) -> None:
    log = session_dir / CURRENT_NAME
    log.unlink()
    os.mkfifo(log)


def linked_log(session_dir: Path, outside: Path) -> None:
    log = session_dir / CURRENT_NAME
    moved = outside / "moved.zstd"
    shutil.move(log, moved)
    log.symlink_to(moved)


def linked_dir(session_dir: Path, outside: Path) -> None:
    moved = outside / session_dir.name
    shutil.move(session_dir, moved)
    session_dir.symlink_to(moved, target_is_directory=True)


BREAKS: dict[str, Callable[[Path, Path], None]] = {
    "log is a FIFO": fifo_log,
    "log is a symbolic link": linked_log,
    "session dir links outside the root": linked_dir,
}


@pytest.fixture(params=list(BREAKS))
def broken(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str, list[str]]:
    root = tmp_path / "a" / "sessions"
    top, agent, children = family(root)
    outside = tmp_path / "outside"
    outside.mkdir()
    BREAKS[request.param](root / PROJECT / agent, outside)
    return root, top, [agent, *children]


def test_export_refuses_and_names_every_member_it_cannot_read(
    broken: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    root, top, left_out = broken
    archive = tmp_path / "f.tar.zst"

    result = run_cli("--root", root, "export", top, "-o", archive)

    assert result.exit_code == 11, result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "3 sessions of the family cannot be read" in result.stderr
    assert "--skip-unreadable" in result.stderr
    for session in left_out:
        assert session in result.stderr
    assert not archive.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "outside"]


def test_skip_unreadable_writes_the_rest_and_exits_partial(
    broken: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    root, top, left_out = broken
    archive = tmp_path / "f.tar.zst"

    result = run_cli("--root", root, "export", top, "-o", archive, "--skip-unreadable", "--json")

    assert result.exit_code == 10, result.stderr
    document = result.json()
    check("export", document)
    assert len(document["manifest"]["sessions"]) == 4
    assert sorted(item["id"] for item in document["leftOut"]) == sorted(left_out)
    codes = {item["id"]: item["code"] for item in document["leftOut"]}
    assert codes[left_out[0]] == "IO_ERROR"
    assert {codes[child] for child in left_out[1:]} == {"SKIPPED"}
    assert document["error"]["code"] == "PARTIAL"
    target = tmp_path / "b" / "sessions"
    imported = run_cli("--root", target, "import", archive)
    assert imported.exit_code == 0, imported.stderr
    names = sorted(p.name for p in (target / PROJECT).iterdir())
    assert len(names) == 4 and not set(names) & set(left_out)


def test_skip_unreadable_names_what_it_left_out_in_text(
    broken: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    root, top, left_out = broken

    result = run_cli(
        "--root", root, "export", top, "-o", tmp_path / "f.tar.zst", "--skip-unreadable"
    )

    assert result.exit_code == 10
    assert "Exported" in result.stdout
    for session in left_out:
        assert session in result.stderr
