"""``--cwd DIR`` on fork and import: the new sessions live in DIR's project dir with cwd DIR in
their headers, their inherited events byte for byte, found by inspect and list-agents, valid.

Decisions under test: a moved workspace takes along every session whose cwd is the top's or
lies inside it (keeping its relative place); a session working elsewhere stays. On import the
top is the bundle's top session; on fork it is the source, and the subagent copies follow the
child, whether fork or a later relink makes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import log_header, log_lines, run_cli

from dsh_fork.errors import UsageError
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.importer import ImportOptions, import_bundle
from dsh_fork.layout import project_dir_name
from dsh_fork.validation import validate_dir
from dsh_fork.workspace import rebase_cwd

MOVED = "/srv/elsewhere"
MOVED_DIR = "--srv-elsewhere--"


def errors(session_dir: Path) -> list[str]:
    return [f.message for f in validate_dir(session_dir) if f.severity == "error"]


def top_of(root: Path) -> str:
    return generate(root, sessions=1, agents=2, depth=1, turns=2, seed=21).top_level[0]


def agents(root: Path, session: str) -> dict[str, Any]:
    result = run_cli("--root", root, "list-agents", session, "--recursive", "--json")
    assert result.exit_code == 0, result.stderr
    value: dict[str, Any] = result.json()
    return value


def doctor_ok(root: Path) -> None:
    result = run_cli("--root", root, "doctor")
    assert result.exit_code == 0, result.stdout


# -- fork --------------------------------------------------------------------------------------


def test_fork_cwd_puts_the_child_in_the_new_workspace(root: Path) -> None:
    top = top_of(root)
    source = root / "--fixture-project-0--" / top / CURRENT_NAME

    result = run_cli("--root", root, "fork", top, "--id", "moved", "--cwd", MOVED, "--json")

    assert result.exit_code == 0, result.stderr
    child = result.json()["child"]
    assert child["cwd"] == MOVED
    path = root / MOVED_DIR / "moved" / CURRENT_NAME
    assert child["path"] == str(path)
    assert log_header(path)["cwd"] == MOVED
    inherited = log_lines(source)[1:]
    assert log_lines(path)[1 : len(inherited) + 1] == inherited
    assert errors(path.parent) == []
    inspected = run_cli("--root", root, "inspect", "moved", "--json")
    assert inspected.exit_code == 0
    assert inspected.json()["header"]["cwd"] == MOVED
    rows = agents(root, "moved")["children"]
    assert len(rows) == 2
    assert all(row["onDisk"] and row["inPanel"] for row in rows)
    doctor_ok(root)


def test_fork_cwd_takes_the_subagent_copies_along(root: Path) -> None:
    top = top_of(root)

    result = fork_session(
        top,
        str(root),
        ForkOptions(child_id="moved", cwd=MOVED),
    )

    assert result.agents is not None
    copies = [item["copy"] for item in result.agents.to_json()["copied"]]
    assert len(copies) == 2
    for copy in copies:
        path = root / MOVED_DIR / copy / CURRENT_NAME
        assert log_header(path)["cwd"] == MOVED
        assert log_header(path)["parentSession"] == "moved"
        assert errors(path.parent) == []
    assert not any((root / "--fixture-project-0--").glob(f"{copies[0]}*"))
    doctor_ok(root)


def test_a_later_relink_puts_the_copies_where_fork_would_have(root: Path, clock: Clock) -> None:
    """Copies follow the moved child whoever makes them; a copy whose source works elsewhere
    keeps its cwd, and one inside the workspace keeps its place below it."""
    specs = workspace_family(root, clock)
    forked = run_cli("--root", root, "fork", "top", "--id", "moved", "--cwd", MOVED, "--no-agents")
    assert forked.exit_code == 0
    before = agents(root, "moved")["children"]

    result = run_cli("--root", root, "relink", "moved", "--json")

    assert result.exit_code == 0, result.stdout
    assert before == []
    copied = {c["source"]: c["copy"] for c in result.json()["copied"]}
    assert set(copied) == set(specs) - {"top"}
    inside = log_header(root / project_dir_name(f"{MOVED}/sub") / copied["inside"] / CURRENT_NAME)
    assert inside["cwd"] == f"{MOVED}/sub"
    outside = root / project_dir_name("/tmp/scratch") / copied["outside"] / CURRENT_NAME
    assert log_header(outside)["cwd"] == "/tmp/scratch"
    rows = agents(root, "moved")["children"]
    assert sorted((r["onDisk"], r["inPanel"]) for r in rows) == [(True, True), (True, True)]
    doctor_ok(root)


def test_an_unmoved_fork_copies_into_the_sources_workspace(root: Path) -> None:
    top = top_of(root)

    result = run_cli("--root", root, "fork", top, "--id", "here", "--json")

    copies = [c["copy"] for c in result.json()["agents"]["copied"]]
    for copy in copies:
        path = root / "--fixture-project-0--" / copy / CURRENT_NAME
        assert log_header(path)["cwd"] == "/fixture/project-0"


def test_a_relative_cwd_is_made_absolute(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = top_of(root)
    monkeypatch.chdir(tmp_path)

    result = run_cli("--root", root, "fork", top, "--id", "here", "--cwd", "ws", "--no-agents")

    assert result.exit_code == 0, result.stderr
    path = root / project_dir_name(str(tmp_path / "ws")) / "here" / CURRENT_NAME
    assert log_header(path)["cwd"] == str(tmp_path / "ws")


@pytest.mark.parametrize("cwd", ["relative/dir", ""])
def test_the_library_refuses_a_cwd_that_is_not_absolute(root: Path, cwd: str) -> None:
    top = top_of(root)

    with pytest.raises(UsageError):
        fork_session(top, str(root), ForkOptions(child_id="x", agents=False, cwd=cwd))
    assert not (root / project_dir_name("/x")).exists()


# -- import -------------------------------------------------------------------------------------


def workspace_family(root: Path, clock: Clock) -> dict[str, SessionSpec]:
    """A top in /w/proj with a subagent in /w/proj/sub and one in /tmp/scratch."""
    top = SessionSpec(id="top", created_at=clock(), cwd="/w/proj")
    kids = {
        "inside": SessionSpec(
            id="inside", created_at=clock(), cwd="/w/proj/sub", parent="top", origin="subagent"
        ),
        "outside": SessionSpec(
            id="outside", created_at=clock(), cwd="/tmp/scratch", parent="top", origin="subagent"
        ),
    }
    top.turn(clock)
    for name, kid in kids.items():
        kid.depth = 1
        kid.descriptor(clock, name)
        kid.turn(clock)
        top.catalog(clock, kid, label=name)
    for spec in (top, *kids.values()):
        spec.publish(root)
    return {"top": top, **kids}


def test_import_cwd_moves_the_workspace_and_what_lies_inside_it(
    tmp_path: Path, clock: Clock
) -> None:
    home_a, home_b = tmp_path / "a" / "sessions", tmp_path / "b" / "sessions"
    specs = workspace_family(home_a, clock)
    archive = tmp_path / "f.tar"
    assert run_cli("--root", home_a, "export", "top", "-o", archive).exit_code == 0

    result = run_cli("--root", home_b, "import", archive, "--cwd", MOVED, "--json")

    assert result.exit_code == 0, result.stderr
    cwds = {s["id"]: s["cwd"] for s in result.json()["sessions"]}
    assert cwds == {"top": MOVED, "inside": f"{MOVED}/sub", "outside": "/tmp/scratch"}
    for session_id, cwd in cwds.items():
        path = home_b / project_dir_name(cwd) / session_id / CURRENT_NAME
        original = home_a / project_dir_name(specs[session_id].cwd) / session_id / CURRENT_NAME
        assert log_header(path)["cwd"] == cwd
        assert log_lines(path)[1:] == log_lines(original)[1:]
        assert errors(path.parent) == []
    rows = agents(home_b, "top")["children"]
    assert {(r["id"], r["onDisk"], r["inPanel"]) for r in rows} == {
        ("inside", True, True),
        ("outside", True, True),
    }
    assert run_cli("--root", home_b, "inspect", "inside").exit_code == 0
    doctor_ok(home_b)


def test_import_cwd_with_new_ids_into_the_same_root(tmp_path: Path, clock: Clock) -> None:
    root = tmp_path / "a" / "sessions"
    workspace_family(root, clock)
    archive = tmp_path / "f.tar.zst"
    assert run_cli("--root", root, "export", "top", "-o", archive).exit_code == 0

    result = import_bundle(str(archive), str(root), ImportOptions(new_ids=True, cwd=MOVED))

    top, inside, outside = result.document.sessions
    assert Path(top.path).parent.parent.name == MOVED_DIR
    assert Path(inside.path).parent.parent.name == project_dir_name(f"{MOVED}/sub")
    assert Path(outside.path).parent.parent.name == project_dir_name("/tmp/scratch")
    rows = agents(root, top.id)["children"]
    assert sorted((r["id"], r["inPanel"]) for r in rows) == sorted(
        [(inside.id, True), (outside.id, True)]
    )
    doctor_ok(root)


def test_another_cwd_gives_another_family(tmp_path: Path, clock: Clock) -> None:
    """New ids derive from the bundle, the cwd and the old id: a second workspace is a second
    family, not a rerun of the first."""
    root = tmp_path / "a" / "sessions"
    workspace_family(root, clock)
    archive = tmp_path / "f.tar"
    assert run_cli("--root", root, "export", "top", "-o", archive).exit_code == 0

    first = import_bundle(str(archive), str(root), ImportOptions(new_ids=True, cwd="/one"))
    second = import_bundle(str(archive), str(root), ImportOptions(new_ids=True, cwd="/two"))

    assert {i.id for i in first.document.sessions}.isdisjoint(
        {i.id for i in second.document.sessions}
    )
    assert {i.status for i in second.document.sessions} == {"created"}
    doctor_ok(root)


# -- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cwd", "old", "expected"),
    [
        ("/w/proj", "/w/proj", "/new"),
        ("/w/proj/sub/deeper", "/w/proj", "/new/sub/deeper"),
        ("/w/proj/sub", "/w/proj/", "/new/sub"),
        ("/w/project", "/w/proj", "/w/project"),  # a sibling sharing a prefix is elsewhere
        ("/tmp/x", "/w/proj", "/tmp/x"),
        ("C:\\w\\proj\\sub", "C:\\w\\proj", "/new\\sub"),
        (None, None, "/new"),  # both without cwd: the same (_no-cwd) workspace
        (None, "/w/proj", None),
        ("/w/proj", None, "/w/proj"),
    ],
)
def test_rebase_cwd(cwd: str | None, old: str | None, expected: str | None) -> None:
    assert rebase_cwd(cwd, old, "/new") == expected


# -- tree and --turn ------------------------------------------------------------------------------


def tree_nodes(root: Path, session: str) -> dict[str, dict[str, Any]]:
    result = run_cli("--root", root, "tree", session, "--json")
    assert result.exit_code == 0, result.stderr
    return {node["path"]: node for node in result.json()["nodes"]}


def test_tree_finds_a_moved_fork_and_its_copies_in_the_new_workspace(root: Path) -> None:
    top = top_of(root)
    assert run_cli("--root", root, "fork", top, "--id", "moved", "--cwd", MOVED).exit_code == 0

    nodes = tree_nodes(root, "moved")

    child = nodes[f"{MOVED_DIR}/moved"]
    assert (child["kind"], child["parentSession"], child["flags"]) == ("fork", top, [])
    copies = [nodes[path] for path in child["children"]]
    assert len(copies) == 2
    assert all(path.startswith(f"{MOVED_DIR}/") for path in child["children"])
    assert {c["kind"] for c in copies} == {"copy"}


def test_tree_finds_an_imported_family_under_new_ids(tmp_path: Path, clock: Clock) -> None:
    root = tmp_path / "a" / "sessions"
    workspace_family(root, clock)
    archive = tmp_path / "f.tar"
    assert run_cli("--root", root, "export", "top", "-o", archive).exit_code == 0
    result = import_bundle(str(archive), str(root), ImportOptions(new_ids=True, cwd=MOVED))
    top = result.document.sessions[0]

    nodes = tree_nodes(root, top.id)

    node = nodes[f"{MOVED_DIR}/{top.id}"]
    assert node["kind"] == "fork"
    assert node["flags"] == []
    kids = {nodes[path]["id"] for path in node["children"]}
    assert kids == {item.id for item in result.document.sessions[1:]}


def test_fork_turn_takes_cwd_and_drop_inherited_inbox(root: Path) -> None:
    top = top_of(root)

    result = run_cli(
        "--root", root, "fork", top, "--turn", "1", "--id", "early", "--cwd", MOVED,
        "--drop-inherited-inbox", "--no-agents", "--json",
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    child = result.json()["child"]
    assert (child["cwd"], child["inboxCanceled"]) == (MOVED, {})
    assert log_header(root / MOVED_DIR / "early" / CURRENT_NAME)["cwd"] == MOVED
