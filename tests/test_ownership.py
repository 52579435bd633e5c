"""A run as root in a user's DSH home leaves everything it makes to that user.

DSH runs as the user: a session dir, log or lock, a project dir or an operation log that a
``sudo dsh-fork`` left owned by root is one DSH cannot lock, append to or remove.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_cli

USER = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown a home to a user")


def owners(top: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``top`` (itself included) with its owner and group."""
    out = {".": (top.lstat().st_uid, top.lstat().st_gid)}
    for path in top.rglob("*"):
        st = path.lstat()
        out[str(path.relative_to(top))] = (st.st_uid, st.st_gid)
    return out


def give(top: Path, uid: int) -> None:
    os.chown(top, uid, uid)
    for path in top.rglob("*"):
        os.chown(path, uid, uid, follow_symlinks=False)


def test_a_fork_with_agents_by_root_belongs_to_the_homes_user(tmp_path: Path) -> None:
    home = tmp_path / "home"
    root = home / "sessions"
    made = run_cli("fixture", root, "--sessions", "1", "--agents", "2", "--depth", "2")
    assert made.exit_code == 0, made.stderr
    give(home, USER)
    before = owners(home)
    source = next(p.name for p in root.glob("*/session-*"))

    forked = run_cli("--root", root, "fork", source, "--id", "session-branch")

    assert forked.exit_code == 0, forked.stderr
    after = owners(home)
    new = sorted(set(after) - set(before))
    assert any(name.endswith("session-branch") for name in new)
    assert "dsh-fork-relink.log" in new  # the operation log, made by this run
    assert after == {name: (USER, USER) for name in after}


def test_a_root_made_by_root_under_a_users_home_is_the_users(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    give(home, USER)

    made = run_cli("fixture", home / "sessions", "--sessions", "1", "--agents", "1")

    assert made.exit_code == 0, made.stderr
    assert set(owners(home).values()) == {(USER, USER)}
