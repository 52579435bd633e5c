"""``attach``: sessions into the workspace their cwd belongs to (dsh-world §1.2, §1.4).

Scenarios: ``--all`` leaves no visible session Ungrouped that a workspace's path matches, moves
a session listed under a workspace that is no longer its cwd's, never touches subagents, blank
or archived sessions, writes once for the batch, and a second run changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from schemakit import check

from dsh_fork import registry, storage
from dsh_fork.attach import attach_all
from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec


def reg_file(root: Path) -> Path:
    return root.parent / "storages" / "workspace.json"


def doc_of(root: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(reg_file(root).read_bytes())
    return value


def listed(root: Path) -> dict[str, str]:
    table = doc_of(root)["tables"]["workspaces"]
    return {s: r["title"] for r in table.values() for s in r["sessionIds"]}


def scattered_home(tmp_path: Path) -> tuple[Path, list[str], str]:
    """Three projects: project-0's session Ungrouped, project-2's listed under project-1
    (moved), a blank session and a fork in project-0; returns root, tops, blank id."""
    root = tmp_path / "home" / "sessions"
    summary = generate(root, sessions=3, agents=1, depth=1, turns=2, workspaces=True)
    doc = doc_of(root)
    p0, p1, p2 = doc["tables"]["workspaces"].values()
    p0["sessionIds"] = []
    p1["sessionIds"] = p2["sessionIds"] + p1["sessionIds"]
    p2["sessionIds"] = []
    reg_file(root).write_bytes(registry.dumps(doc))
    blank = SessionSpec(id="blank", created_at=1_800_000_000_000, cwd=p0["path"])
    blank.publish(root)
    return root, summary.top_level, "blank"


def members(root: Path) -> dict[str, bool]:
    """Every visible session with a turn: whether it is a member of a workspace."""
    reg = registry.load(root.parent)
    out: dict[str, bool] = {}
    for entry in Root(root).entries():
        header = entry.header
        assert header is not None
        if header.origin != "subagent" and entry.id != "blank":
            out[header.id] = reg.is_member(header.id, header.cwd)
    return out


def test_attach_all_leaves_no_matchable_visible_session_ungrouped(tmp_path: Path) -> None:
    root, (t0, t1, t2), blank = scattered_home(tmp_path)
    assert members(root) == {t0: False, t1: True, t2: False}

    result = run_cli("--root", root, "attach", "--all", "--json")

    assert result.exit_code == 0, result.stderr
    check("attach", result.json())
    placed = {s["session"]: (s["status"], s["title"], s["was"]) for s in result.json()["sessions"]}
    assert placed == {
        t0: ("joined", "project-0", None),
        t2: ("joined", "project-2", "project-1"),
    }
    assert result.json()["members"] == 1
    assert members(root) == {t0: True, t1: True, t2: True}
    assert blank not in listed(root)  # blank sessions are not visible: left alone
    subagents = [e.id for e in Root(root).entries() if e.header and e.header.is_subagent]
    assert subagents and not set(subagents) & set(listed(root))


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    root, _, _ = scattered_home(tmp_path)
    assert run_cli("--root", root, "attach", "--all").exit_code == 0
    before = reg_file(root).read_bytes()

    result = run_cli("--root", root, "attach", "--all")

    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"Nothing to attach in {reg_file(root)}",
        "  3 visible sessions are already in their workspace",
    ]
    assert reg_file(root).read_bytes() == before


def test_one_write_for_the_whole_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _, _ = scattered_home(tmp_path)
    writes: list[bytes] = []
    replace = storage.replace

    def counted(held: Any, name: str, data: Any, was: Any) -> None:
        writes.append(b"".join(data))
        replace(held, name, [writes[-1]], was)

    monkeypatch.setattr(storage, "replace", counted)

    result = attach_all(Root(root), dry_run=False, clock=lambda: 1_800_000_000_000)

    assert result.count("joined") == 2
    assert len(writes) == 1
    stamps = {r["updatedAt"] for r in doc_of(root)["tables"]["workspaces"].values()}
    assert "2027-01-15T08:00:00.000Z" in stamps


def test_dry_run_shows_the_changes_and_writes_nothing(tmp_path: Path) -> None:
    root, (t0, _, t2), _ = scattered_home(tmp_path)
    before = reg_file(root).read_bytes()

    result = run_cli("--root", root, "attach", "--all", "--dry-run")

    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"Dry run: would attach 2 sessions to their workspaces in {reg_file(root)}"
    assert lines[1] == "  1 visible session is already in its workspace"
    assert lines[2].split() == ["status", "id", "workspace", "was"]
    assert sorted(line.split() for line in lines[3:5]) == sorted(
        [["would-join", t0, "project-0", "-"], ["would-join", t2, "project-2", "project-1"]]
    )
    assert lines[-1] == "Nothing was written."
    assert reg_file(root).read_bytes() == before


def test_archived_sessions_stay_out_of_all_but_a_named_one_is_attached_and_said_so(
    tmp_path: Path,
) -> None:
    root, (t0, _, _), _ = scattered_home(tmp_path)
    doc = doc_of(root)
    doc["global"]["archivedSessionIds"] = [t0]
    reg_file(root).write_bytes(registry.dumps(doc))

    everything = run_cli("--root", root, "attach", "--all", "--json")
    named = run_cli("--root", root, "attach", t0, "--json")

    assert t0 not in [s["session"] for s in everything.json()["sessions"]]
    (item,) = named.json()["sessions"]
    assert (item["status"], item["archived"]) == ("joined", True)
    assert doc_of(root)["global"]["archivedSessionIds"] == [t0]  # left alone


def test_a_named_subagent_is_never_attached(tmp_path: Path) -> None:
    root, (t0, _, _), _ = scattered_home(tmp_path)
    (agent,) = [e.id for e in Root(root).children_of(t0)]
    before = reg_file(root).read_bytes()

    result = run_cli("--root", root, "attach", str(agent), "--json")

    assert result.exit_code == 0
    (item,) = result.json()["sessions"]
    assert item["status"] == "skipped"
    assert reg_file(root).read_bytes() == before


def test_a_session_no_workspace_matches_is_named_and_stays_ungrouped(tmp_path: Path) -> None:
    root, _, _ = scattered_home(tmp_path)
    clock = Clock()
    loose = SessionSpec(id="loose", created_at=clock(), cwd=str(tmp_path))
    loose.turn(clock, "hello")
    loose.flush()
    loose.publish(root)

    result = run_cli("--root", root, "attach", "--all", "--json")

    item = next(s for s in result.json()["sessions"] if s["session"] == "loose")
    assert item["status"] == "none"
    assert item["reason"] == f"no workspace has the path {tmp_path}"
    assert "loose" not in listed(root)


def test_a_refused_registry_is_partial_and_untouched(tmp_path: Path) -> None:
    root, _, _ = scattered_home(tmp_path)
    doc = doc_of(root)
    doc["global"]["pendingMutation"] = {"operation": "delete", "workspaceId": "gone"}
    before = registry.dumps(doc)
    reg_file(root).write_bytes(before)

    result = run_cli("--root", root, "attach", "--all")

    assert result.exit_code == 10
    assert "it holds a pendingMutation" in result.stderr
    assert reg_file(root).read_bytes() == before


def test_without_a_registry_there_is_nothing_to_attach(tmp_path: Path) -> None:
    root = tmp_path / "home" / "sessions"
    generate(root, sessions=1)

    result = run_cli("--root", root, "attach", "--all")

    assert result.exit_code == 0
    assert result.stdout.splitlines()[1].startswith("  the registry is missing: there is none")
    assert not (root.parent / "storages").exists()


@pytest.mark.parametrize("args", [[], ["x", "--all"]])
def test_sessions_or_all_exactly_one(tmp_path: Path, args: list[str]) -> None:
    root, _, _ = scattered_home(tmp_path)

    result = run_cli("--root", root, "attach", *args)

    assert result.exit_code == 2
    assert result.stderr == "Error: give SESSION ids or --all, not both and not neither\n"
