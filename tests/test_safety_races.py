"""A fork that loses a race leaves nothing behind (issue 33 row 17).

A project dir swapped for a link to outside the root while a fork publishes is refused
(SESSION_STALE, nothing written through the link); the child dir the fork made for the new
session, and the lock file it made in it, must then go again, through the dirs the fork holds,
wherever the swap moved them. The swap is made at a chosen step of the writer, so each of the
three moments where the publish can lose is hit every time: before the session dir is made,
after its lock is taken and before the log is written, and between the link and its check.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import run_cli
from relinkkit import CWD, plugin_scenario
from safetykit import count

from dsh_fork import faults
from dsh_fork.errors import DshForkError
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.importer import ImportOptions, import_bundle
from dsh_fork.layout import encode_segment, project_key

PROJECT = project_key(CWD)
SOURCE = "session-P_A"
CHILD = "race-child"


def tree_of(path: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``path``, links not followed: its kind and a file's content."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            full = Path(dirpath, name)
            st = full.lstat()
            data = full.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            out[str(full.relative_to(path))] = (stat.filemode(st.st_mode), data)
    return out


class ProjectSwap:
    """At the first writer step of ``kind``, the project dir is moved aside and a link to
    ``outside`` put in its place; ``undo`` puts it back."""

    def __init__(self, root: Path, outside: Path, kind: str, project: str = PROJECT) -> None:
        self.project = root / project
        self.aside = root / f"{project}.aside"
        self.outside = outside
        self.kind = kind
        self.swapped = False

    def hook(self, real: Callable[[str, Path | str], None]) -> Callable[[str, Path | str], None]:
        def step(kind: str, path: Path | str) -> None:
            if kind == self.kind and not self.swapped:
                os.rename(self.project, self.aside)
                self.project.symlink_to(self.outside)
                self.swapped = True
            real(kind, path)

        return step

    def undo(self) -> None:
        if self.swapped:
            self.project.unlink()
            os.rename(self.aside, self.project)


def fork_into_child(tree: Path) -> None:
    """The fork each race is run against: SOURCE at its end into CHILD, without agents."""
    fork_session(SOURCE, str(tree), ForkOptions(child_id=CHILD, agents=False))


def lost_race(swap: ProjectSwap, action: Callable[[], object]) -> DshForkError:
    """The error ``action`` fails with while ``swap`` races it; the swap is undone after,
    whatever happened."""
    try:
        with pytest.raises(DshForkError) as caught:
            action()
    finally:
        swap.undo()
    return caught.value


@pytest.fixture
def tree(root: Path) -> Iterator[Path]:
    plugin_scenario(root, Clock(), children=1)
    yield root


@pytest.mark.parametrize(
    "step",
    [
        "mkdir",  # the session dir is made in the project dir moved aside
        "create",  # locked and checked, then swapped before the log's first byte
        "link",  # swapped between the check before the link and the one after it
    ],
)
def test_a_fork_that_lost_a_swap_race_leaves_no_child_dir_behind(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    before = tree_of(tree)
    swap = ProjectSwap(tree, outside, step)
    monkeypatch.setattr(faults, "step", swap.hook(faults.step))

    error = lost_race(swap, lambda: fork_into_child(tree))

    assert swap.swapped
    assert error.code == "SESSION_STALE"
    assert error.exit_code == 7
    assert tree_of(outside) == {}
    assert not (tree / PROJECT / encode_segment(CHILD)).exists()
    assert tree_of(tree) == before
    count("swap races: fork that lost, leftovers checked")


def test_a_dir_the_fork_did_not_make_is_left_in_place(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child dir that was there before the fork (empty, made by someone else) is not the
    fork's to remove, even when the fork loses the race in it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    child_dir = tree / PROJECT / encode_segment(CHILD)
    child_dir.mkdir(mode=0o700)
    swap = ProjectSwap(tree, outside, "create")
    monkeypatch.setattr(faults, "step", swap.hook(faults.step))

    error = lost_race(swap, lambda: fork_into_child(tree))

    assert error.code == "SESSION_STALE"
    assert child_dir.is_dir()
    assert tree_of(outside) == {}


def test_an_import_that_lost_a_swap_race_leaves_no_session_dir_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import makes the project dir and the first session dir, then the project dir is
    swapped for a link: the session dir goes again through the project dir held; the project
    dir itself, moved aside when the import fails, is no longer at its name and stays (empty)."""
    source, target = tmp_path / "a" / "sessions", tmp_path / "b" / "sessions"
    top = generate(source, sessions=1, agents=2, depth=1, turns=2, seed=11).top_level[0]
    archive = tmp_path / "family.tar.zst"
    assert run_cli("--root", source, "export", top, "-o", archive).exit_code == 0
    (project,) = (p.name for p in source.iterdir() if p.is_dir())
    target.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    swap = ProjectSwap(target, outside, "create", project)
    monkeypatch.setattr(faults, "step", swap.hook(faults.step))

    error = lost_race(
        swap, lambda: import_bundle(str(archive), str(target), ImportOptions(workspace=False))
    )

    assert swap.swapped
    assert error.code == "SESSION_STALE"
    assert tree_of(outside) == {}
    assert tree_of(target) == {project: ("drwx------", b"")}
