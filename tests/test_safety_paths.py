"""Hostile ids and paths (issue 5, guarantee 5; format §2.4, §11, §14.1).

Session ids and ``--id`` values are path-encoded by encodeSegment or refused before anything is
written; no id leads out of the root. A session dir, project dir or log that is a symbolic
link is never written through (USAGE, or a failed item naming the child). Directories that
dsh-fork creates are 0700 and files 0600 even under umask 0, as DSH makes them.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis_profiles  # noqa: F401  (registers and loads the Hypothesis profile)
import pytest
from conftest import log_header, log_lines, run_cli, tree_digest
from hypothesis import given
from hypothesis import strategies as st
from relinkkit import CWD, plugin_scenario, repair_tree, subagent
from safetykit import count

from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import decode_segment, encode_segment, project_key

PROJECT = project_key(CWD)
SOURCE = "session-P_A"


@pytest.fixture
def tree(root: Path) -> Path:
    plugin_scenario(root, Clock(), children=2)
    return root


def inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


# -- ids ----------------------------------------------------------------------------------------

HOSTILE_IDS = [
    "a/b",
    "../../../escape",
    "..",
    ".",
    "/etc/passwd",
    "a\\b\\..\\c",
    "\u202ertl",
    "😀" * 25,
    "~user",
    "x" * 255,
    "é" * 51,
]
TOO_LONG = ["x" * 256, "a" * 300, "é" * 52, "😀" * 26, "/" * 60]


@pytest.mark.parametrize("child_id", HOSTILE_IDS, ids=repr)
def test_a_hostile_child_id_is_encoded_into_one_dir_inside_the_root(
    tree: Path, child_id: str
) -> None:
    result = run_cli("--root", tree, "fork", SOURCE, "--id", child_id, "--json")

    assert result.exit_code == 0, result.stdout
    child_dir = tree / PROJECT / encode_segment(child_id)
    output = json.loads(result.stdout)  # lone surrogates come as \udXXX escapes
    assert Path(output["child"]["path"]) == child_dir / CURRENT_NAME
    assert inside(child_dir, tree) and child_dir.parent == tree / PROJECT
    assert decode_segment(child_dir.name) == child_id
    header = log_lines(child_dir / CURRENT_NAME)[0]  # strict UTF-8: surrogates are escaped
    assert json.loads(header.decode("utf-8"))["id"] == child_id
    assert Root(tree).find(child_id) == child_dir
    again = run_cli("--root", tree, "fork", SOURCE, "--id", child_id)
    assert again.exit_code == 5, again.stderr
    assert again.stderr.startswith("Error: a session ") and again.stderr.count("\n") == 1
    human_id = "h" + child_id[1:]  # same length, same hostility, printed as text this time
    human = run_cli("--root", tree, "fork", SOURCE, "--id", human_id)
    assert human.exit_code == 0 and human.stdout.startswith(f"Forked {SOURCE} at seq ")


REFUSED_IDS = [
    "nul\x00byte",
    "ctrl\x01\x1b[31m\ttab\nline",
    "a\nb",
    "lone \ud800 surrogate",
    "\udfff",
]


@pytest.mark.parametrize("child_id", REFUSED_IDS, ids=repr)
def test_a_child_id_with_a_control_character_or_a_lone_surrogate_is_refused(
    tree: Path, child_id: str
) -> None:
    before = tree_digest(tree)

    result = run_cli("--root", tree, "fork", SOURCE, "--id", child_id)

    assert result.exit_code == 2
    assert result.stderr.startswith("Error: the child id holds ")
    assert result.stderr.count("\n") == 1
    assert tree_digest(tree) == before


@pytest.mark.parametrize("child_id", TOO_LONG, ids=lambda i: f"{len(i)}x{i[0]!r}")
def test_an_id_too_long_for_a_dir_name_is_refused_before_any_write(
    tree: Path, child_id: str
) -> None:
    before = tree_digest(tree)
    dirs = sorted(p.name for p in (tree / PROJECT).iterdir())

    result = run_cli("--root", tree, "fork", SOURCE, "--id", child_id)

    assert result.exit_code == 2
    assert result.stderr == (
        "Error: the child id is too long for a directory name (255 bytes once encoded)\n"
    )
    assert tree_digest(tree) == before
    assert sorted(p.name for p in (tree / PROJECT).iterdir()) == dirs


def test_an_empty_id_is_refused(tree: Path) -> None:
    result = run_cli("--root", tree, "fork", SOURCE, "--id", "")
    assert result.exit_code == 2 and result.stderr == "Error: the child id must not be empty\n"


@given(session_id=st.text(min_size=1, max_size=80))
def test_encode_segment_always_names_one_dir_below_its_parent(session_id: str) -> None:
    """Any id, lone surrogates and control characters included, is one safe name that
    decodes back to it."""
    count("fuzz: encodeSegment ids")
    name = encode_segment(session_id)
    assert name not in ("", ".", "..")
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert name.isascii() and name.isprintable()
    assert decode_segment(name) == session_id
    base = Path("/srv/project")
    assert (base / name).parent == base


def test_hostile_ids_on_disk_are_copied_under_fresh_ids(root: Path) -> None:
    """Children whose header ids are hostile are found through encodeSegment; their copies
    get ``session-<uuid4>`` ids, so nothing of theirs ever names a path."""
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    kids = [
        subagent(clock, kid, parent, label=f"kid {k}")
        for k, kid in enumerate(["../../x", "a/b", "\x00", "😀"])
    ]
    for kid in kids:
        parent.catalog(clock, kid, label=kid.id)
    parent.turn(clock)
    from relinkkit import fork_of

    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, *kids, fork):
        spec.publish(root)

    result = run_cli("--root", root, "relink", "session-C", "--json")

    assert result.exit_code == 0, result.stdout
    copied = result.json()["copied"]
    assert sorted(c["source"] for c in copied) == sorted(k.id for k in kids)
    for item in copied:
        assert item["copy"].startswith("session-")
        copy_dir = Root(root).find(item["copy"])
        assert inside(copy_dir, root) and copy_dir.parent == root / PROJECT


def test_a_session_path_outside_the_root_is_refused(tree: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "p" / "s"
    elsewhere.mkdir(parents=True)
    result = run_cli("--root", tree, "fork", elsewhere, "--id", "x")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {elsewhere} lies outside the root")
    assert not Root(tree).exists("x")


# -- symbolic links ---------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every root."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


def test_a_fork_child_dir_that_is_a_link_out_of_the_root(tree: Path, outside: Path) -> None:
    (tree / PROJECT / "session-X").symlink_to(outside, target_is_directory=True)

    result = run_cli("--root", tree, "fork", SOURCE, "--id", "session-X")

    assert result.exit_code == 11
    assert list(outside.iterdir()) == []
    link = tree / PROJECT / "session-X"
    assert result.stderr == f"Error: refusing to write through the symbolic link {link}\n"


def test_a_project_dir_that_is_a_link_out_of_the_root(root: Path, tmp_path: Path) -> None:
    """The source lives behind a linked project dir: it is neither read nor written through
    the link (a link may lead out of the root), and the refusal names the link."""
    real = tmp_path / "real-project"
    staging = tmp_path / "staging" / "sessions"
    plugin_scenario(staging, Clock(), children=2)
    (staging / PROJECT).rename(real)
    root.mkdir(parents=True)
    (root / PROJECT).symlink_to(real, target_is_directory=True)
    before = tree_digest(real)

    inspected = run_cli("--root", root, "inspect", SOURCE)
    forked = run_cli("--root", root, "fork", SOURCE, "--id", "session-X")

    refusal = f"refusing to read the project directory {root / PROJECT}: it is a symbolic link"
    assert inspected.exit_code == 11 and refusal in inspected.stderr, inspected.stderr
    assert forked.exit_code == 11 and refusal in forked.stderr, forked.stderr
    assert tree_digest(real) == before


def test_a_linked_project_dir_gets_one_answer_read_or_written(
    tree: Path, outside: Path, tmp_path: Path
) -> None:
    """A project dir that is a symbolic link is refused the same way whoever meets it: a
    command that would read through it and one that would write through it both end with
    IO_ERROR (exit 11) naming the link, and nothing lands at its end."""
    other = tree / project_key("/srv/other")
    other.symlink_to(outside, target_is_directory=True)
    archive = tmp_path / "family.tar"
    assert run_cli("--root", tree, "export", SOURCE, "-o", archive).exit_code == 0
    imported_root = tmp_path / "b" / "sessions"
    imported_root.mkdir(parents=True)
    (imported_root / PROJECT).symlink_to(outside, target_is_directory=True)

    listed = run_cli("--root", tree, "list", "--all", "--json")
    forked = run_cli("--root", tree, "fork", SOURCE, "--cwd", "/srv/other", "--json")
    imported = run_cli("--root", imported_root, "import", archive, "--json")

    rows = {row["id"]: row for row in listed.json()["sessions"]}
    assert rows[other.name]["error"]["code"] == "IO_ERROR"
    for result in (forked, imported):
        assert result.exit_code == 11, result.stdout
        error = result.json()["error"]
        assert error["code"] == "IO_ERROR" and "symbolic link" in error["message"]
    assert list(outside.iterdir()) == []


def test_a_copy_whose_project_dir_is_a_link_fails_as_an_item(root: Path, outside: Path) -> None:
    """c2 lives in ``--srv-other--``; that project dir is a link out of the root: its copy
    is a failed item naming c2, the other copies are made, nothing lands outside."""
    repair_tree(root)
    other = root / project_key("/srv/other")
    for path in other.iterdir():
        path.rename(outside / path.name)
    other.rmdir()
    other.symlink_to(outside, target_is_directory=True)
    before = tree_digest(outside)

    result = run_cli("--root", root, "relink", "session-C", "--json")

    assert result.exit_code == 10, result.stdout
    failed = result.json()["error"]["failed"]
    # the linked project dir is named as unreadable, and c2's copy that belongs in it fails
    assert [(f["id"], f["code"]) for f in failed] == [
        ("--srv-other--", "IO_ERROR"),
        ("c2", "IO_ERROR"),
    ]
    assert "symbolic link (never followed)" in failed[0]["message"]
    assert "refusing to write through the symbolic link" in failed[1]["message"]
    copied = result.json()["copied"]
    assert sorted(c["source"] for c in copied) == ["c1", "g1"]
    assert tree_digest(outside) == before


@pytest.mark.parametrize("what", ["session dir", "log file"])
def test_a_fork_child_reached_through_a_link_is_not_written(
    root: Path, tmp_path: Path, what: str
) -> None:
    """relink appends to the fork child: not when its dir, or its log, is a link (a log is
    never even opened through one)."""
    repair_tree(root)
    session_dir = Root(root).find("session-C")
    moved = tmp_path / "moved-C"
    if what == "session dir":
        session_dir.rename(moved)
        session_dir.symlink_to(moved, target_is_directory=True)
        target = session_dir
    else:
        moved.mkdir()
        (session_dir / CURRENT_NAME).rename(moved / CURRENT_NAME)
        (session_dir / CURRENT_NAME).symlink_to(moved / CURRENT_NAME)
        target = session_dir / CURRENT_NAME
    before = tree_digest(moved)

    result = run_cli("--root", root, "relink", "session-C")

    if what == "session dir":  # not even read through a link
        assert result.exit_code == 11, result.stderr
        assert result.stderr == (
            f"Error: refusing to read the session directory {target}: it is a symbolic link "
            "(never followed)\n"
        )
    else:  # a log is not even read through a link
        assert result.exit_code == 11, result.stderr
        assert result.stderr == (
            f"Error: refusing to open {target}: it is a symbolic link, not a regular file\n"
        )
    assert tree_digest(moved) == before
    assert Root(root).children_of("session-C")[0].id == "legacy-c3"
    assert len(Root(root).children_of("session-C")) == 1


# -- modes --------------------------------------------------------------------------------------


@pytest.fixture
def no_umask() -> Iterator[None]:
    """umask 0: any mode not passed explicitly would show up as 0777 / 0666."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def assert_private(created: list[Path]) -> None:
    assert created, "nothing was created"
    for path in created:
        expected = 0o700 if path.is_dir() else 0o600
        assert mode(path) == expected, f"{path}: {oct(mode(path))}"


def everything(base: Path) -> set[Path]:
    return {base, *base.rglob("*")} if base.exists() else set()


def test_the_fixture_command_creates_every_dir_0700_and_file_0600(
    tmp_path: Path, no_umask: None
) -> None:
    out = tmp_path / "new" / "home" / "sessions"
    result = run_cli("fixture", out, "--sessions", "2", "--agents", "1")
    assert result.exit_code == 0, result.stderr
    assert_private(sorted(everything(tmp_path / "new")))


def test_fork_and_relink_create_private_dirs_and_files(tmp_path: Path, no_umask: None) -> None:
    """Under umask 0: the fork child's dir, log and lock, every copy's dir, log and lock, and
    the operation log beside the root (with its dir) are 0700 / 0600."""
    home = tmp_path / "home"
    root = home / "sessions"
    os.umask(0o022)
    repair_tree(root)
    os.umask(0)
    before = everything(tmp_path)
    env: dict[str, Any] = {"DSH_HOME": str(tmp_path / "fresh-home")}

    forked = run_cli("--root", root, "fork", "session-P", "--id", "session-F", env=env)
    relinked = run_cli("--root", root, "relink", "session-C", env=env)

    assert forked.exit_code == 0, forked.stderr
    assert relinked.exit_code == 0, relinked.stderr
    created = sorted(everything(tmp_path) - before)
    names = {p.name for p in created}
    assert {"session-F", CURRENT_NAME, "session.lock", "dsh-fork-relink.log"} <= names
    assert tmp_path / "fresh-home" in created
    assert_private(created)
    assert log_header(Root(root).find("session-F") / CURRENT_NAME)["id"] == "session-F"
