"""``trash`` and ``restore``: a family out of the root and back, byte for byte, by renames;
each session in exactly one place whatever step a crash stops at."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import cli_launcher
import pytest
from conftest import run_cli, tree_digest
from schemakit import check

from dsh_fork import faults, registry
from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import generate
from dsh_fork.trash import restore, trash
from dsh_fork.trashentry import TRASH_DIR

KEY = "session-"


def home_digest(home: Path) -> dict[str, str]:
    """Every file of the sessions root and of the registry (the trash left out)."""
    digest = {f"sessions/{k}": v for k, v in tree_digest(home / "sessions").items()}
    reg = home / "storages" / "workspace.json"
    if reg.exists():
        digest["registry"] = json.dumps(membership(home), sort_keys=True)
    return digest


def membership(home: Path) -> dict[str, Any]:
    """The workspace registry's membership: who is listed where, archived and pinned (the
    ``updatedAt`` stamps an edit moves are left out)."""
    doc = json.loads((home / "storages" / "workspace.json").read_text())
    glob = doc["global"]
    return {
        "records": {k: sorted(v["sessionIds"]) for k, v in doc["tables"]["workspaces"].items()},
        "archived": sorted(glob["archivedSessionIds"]),
        "pinned": sorted(glob["pinnedSessionIds"]),
    }


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home with two trees (two subagents each, a relinked fork each) and DSH's registry;
    the first tree's fork archived and its top pinned."""
    root = tmp_path / "home" / "sessions"
    generate(root, sessions=2, agents=2, turns=2, forks=1, relinked=True, workspaces=True)
    home = root.parent
    path = registry.registry_path(home)
    doc = json.loads(path.read_text())
    top, fork = tops_and_forks(root)[0]
    doc["global"]["archivedSessionIds"] = [fork]
    doc["global"]["pinnedSessionIds"] = [top]
    path.write_bytes(registry.dumps(doc))
    return home


def tops_and_forks(root: Path) -> list[tuple[str, str]]:
    listed = Root(root)
    tops = sorted((e for e in listed.entries() if e.parent is None), key=lambda e: e.created_at)
    out = []
    for top in tops:
        assert top.id is not None
        (fork,) = listed.forks_of(top.id)
        assert fork.id is not None
        out.append((top.id, fork.id))
    return out


def places(home: Path) -> dict[str, list[str]]:
    """Each session dir name → where it is: ``root`` and/or the trash entries holding it."""
    found: dict[str, list[str]] = {}
    for d in (home / "sessions").glob("*/*"):
        found.setdefault(d.name, []).append("root")
    for d in (home / TRASH_DIR).glob("*/*/*"):
        if d.is_dir():
            found.setdefault(d.name, []).append(d.parent.parent.name)
    return found


def test_trash_then_restore_gives_back_the_same_tree_and_membership(home: Path) -> None:
    root = home / "sessions"
    before, members = home_digest(home), membership(home)
    top, fork = tops_and_forks(root)[0]
    result = run_cli("trash", "--root", root, top, "--with-forks", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    check("trash", data)
    moved = {s["id"] for s in data["sessions"]}
    assert len(moved) == 6 and {top, fork} <= moved  # top, 2 agents, fork, 2 copies
    assert all(s["where"] == "trash" for s in data["sessions"])
    assert data["state"] == "trashed" and data["registry"]["written"] is True
    after = membership(home)
    assert not moved & {i for ids in after["records"].values() for i in ids}
    assert after["archived"] == [] and after["pinned"] == []
    assert not any(d.name in {s["dir"] for s in data["sessions"]} for d in root.glob("*/*"))
    listing = run_cli("trash", "--root", root, "--list", "--json").json()
    check("trash-list", listing)
    assert [e["entry"] for e in listing["entries"]] == [data["entry"]]
    restored = run_cli("restore", "--root", root, top.removeprefix(KEY)[:8], "--json")
    assert restored.exit_code == 0, restored.stderr
    check("restore", restored.json())
    assert home_digest(home) == before
    assert membership(home) == members
    assert list((home / TRASH_DIR).iterdir()) == []


def test_a_subagent_alone_a_locked_session_and_a_dry_run_move_nothing(
    home: Path, hold_lock: Any
) -> None:
    root = home / "sessions"
    before = tree_digest(home)
    top, fork = tops_and_forks(root)[0]
    agent = Root(root).children_of(top)[0]
    alone = run_cli("trash", "--root", root, agent.id or "")
    assert alone.exit_code == 2 and "--force" in alone.stderr
    dry = run_cli("trash", "--root", root, top, "--dry-run", "--json")
    assert dry.exit_code == 0 and dry.json()["dryRun"] is True
    assert dry.json()["forksLeft"] == [fork]
    assert "1 fork stays in the root" in dry.stderr
    hold_lock(agent.session_dir)
    locked = run_cli("trash", "--root", root, top)
    assert locked.exit_code == 6
    assert tree_digest(home) == before
    forced = run_cli("trash", "--root", root, Root(root).children_of(top)[1].id or "", "--force")
    assert forced.exit_code == 0, forced.stderr
    assert "without its parent" in forced.stderr


def test_restore_refuses_an_id_that_exists_again(home: Path) -> None:
    root = home / "sessions"
    _, fork = tops_and_forks(root)[0]
    result = trash(root, [fork], root_option=str(root), env={})
    (copy_dir,) = [root / s.project / s.dir for s in result.entry.doc.sessions if s.id == fork]
    trashed = Path(result.entry.doc.path) / copy_dir.parent.name / copy_dir.name
    os.makedirs(copy_dir.parent, exist_ok=True)
    subprocess.run(["cp", "-a", str(trashed), str(copy_dir)], check=True)
    before = tree_digest(home)
    refused = run_cli("restore", "--root", root, result.entry.doc.entry)
    assert refused.exit_code == 5
    assert "exists in the root again" in refused.stderr
    assert tree_digest(home) == before


def test_empty_asks_refuses_off_a_terminal_and_deletes_with_yes(home: Path) -> None:
    root = home / "sessions"
    (top, _), (other, _) = tops_and_forks(root)
    trash(root, [top], root_option=str(root), env={}, clock=lambda: 1_000)
    trash(root, [other], root_option=str(root), env={})
    refused = run_cli("trash", "--root", root, "--empty")
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    old = run_cli("trash", "--root", root, "--empty", "--older-than", "1d", "--yes", "--json")
    assert old.exit_code == 0, old.stderr
    check("trash-empty", old.json())
    assert len(old.json()["removed"]) == 1 and old.json()["kept"] == 1
    assert len(list((home / TRASH_DIR).iterdir())) == 1
    assert run_cli("trash", "--root", root, "--empty", "--yes").exit_code == 0
    assert list((home / TRASH_DIR).iterdir()) == []


def _steps(action: Any) -> int:
    with faults.install("kill", 0) as plan:
        action()
    return plan.count


def test_a_kill_at_any_step_leaves_every_session_in_exactly_one_place(
    home: Path, tmp_path: Path
) -> None:
    """SIGKILL after each durable step of trash, then of restore: every session dir is in
    the root or in the trash, never both, never half; the next run finishes the move, and the
    tree ends as it began."""
    root = home / "sessions"
    pristine = tmp_path / "pristine"
    subprocess.run(["cp", "-a", str(home), str(pristine)], check=True)
    top, _ = tops_and_forks(root)[0]
    trash_steps = _steps(lambda: trash(root, [top], root_option=str(root), env={}))
    entry = next((home / TRASH_DIR).iterdir()).name
    restore_steps = _steps(lambda: restore(root, entry))
    assert trash_steps > 8 and restore_steps > 6
    names = set(places(home))
    before = home_digest(home)
    env = {k: v for k, v in os.environ.items() if k not in ("DSH_HOME", faults.ENV_VAR)}
    runs = [("trash", [top], trash_steps), ("restore", [top], restore_steps)]
    for command, args, steps in runs:
        for k in range(1, steps + 1):
            subprocess.run(["rm", "-rf", str(home)], check=True)
            subprocess.run(["cp", "-a", str(pristine), str(home)], check=True)
            if command == "restore":
                trash(root, [top], root_option=str(root), env={})
            proc = subprocess.run(
                cli_launcher.argv(command, "--root", str(root), *args),
                env={**env, faults.ENV_VAR: f"kill:{k}"},
                capture_output=True,
                check=False,
            )
            what = f"{command}: SIGKILL after step {k}"
            assert proc.returncode == -signal.SIGKILL, f"{what}: {proc.stderr!r}"
            where = places(home)
            assert set(where) == names, what
            assert all(len(p) == 1 for p in where.values()), f"{what}: {where}"
            listed = run_cli("trash", "--root", root, "--list", "--json")  # settles
            assert listed.exit_code == 0, f"{what}: {listed.stderr}"
            entries = listed.json()["entries"]
            if entries:
                assert all(e["state"] == "trashed" for e in entries), what
                assert run_cli("restore", "--root", root, top).exit_code == 0, what
            assert home_digest(home) == before, what
            assert [p for p in (home / TRASH_DIR).iterdir()] == [], what
