"""DSH's workspace registry (dsh-world §1): the sessions dsh-fork writes join their workspace.

Scenarios of the spec's rules for an offline writer (§1.4): a fork joins the workspace that
lists its source and no other; a ``--cwd`` fork and an import join the one whose path is their
``realpath(cwd)``; subagent copies never join; unknown keys survive byte for byte; every
refusal writes nothing and says why; two writers never lose each other's edit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from dsh_fork import registry
from dsh_fork.discovery import Root
from dsh_fork.export import export_session
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import FIXTURE_EPOCH_MS
from dsh_fork.times import iso_ms

NOW = FIXTURE_EPOCH_MS + 86_400_000


def home_with_registry(tmp_path: Path, **options: Any) -> tuple[Path, list[str]]:
    """A fixture home (``fixture --workspaces``): two projects, a workspace each."""
    root = tmp_path / "home" / "sessions"
    summary = generate(root, sessions=2, agents=1, depth=1, turns=2, workspaces=True, **options)
    return root, summary.top_level


def reg_file(root: Path) -> Path:
    return root.parent / "storages" / "workspace.json"


def doc_of(root: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(reg_file(root).read_bytes())
    return value


def records(root: Path) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = doc_of(root)["tables"]["workspaces"]
    return table


def record_of(root: Path, title: str) -> dict[str, Any]:
    return next(r for r in records(root).values() if r["title"] == title)


def listed(root: Path) -> dict[str, str]:
    """Session id -> the title of the record that lists it."""
    return {s: r["title"] for r in records(root).values() for s in r["sessionIds"]}


def write_doc(root: Path, doc: Any) -> bytes:
    data = registry.dumps(doc)
    reg_file(root).write_bytes(data)
    return data


def fork_json(root: Path, *args: str) -> dict[str, Any]:
    result = run_cli("--root", root, "fork", *args, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    value: dict[str, Any] = result.json()
    return value


# -- fork --------------------------------------------------------------------------------------


def test_a_fork_joins_the_sources_workspace_and_no_other(tmp_path: Path) -> None:
    root, (top, other) = home_with_registry(tmp_path)
    before = records(root)

    out = fork_json(root, top, "--id", "branch")

    assert out["workspace"]["status"] == "joined"
    assert out["workspace"]["title"] == "project-0"
    after = records(root)
    project0 = next(k for k, r in before.items() if r["title"] == "project-0")
    assert after[project0]["sessionIds"] == ["branch", top]  # prepended: newest first
    assert after[project0]["updatedAt"] != before[project0]["updatedAt"]
    unchanged = {k: r for k, r in after.items() if k != project0}
    assert unchanged == {k: r for k, r in before.items() if k != project0}
    assert listed(root) == {"branch": "project-0", top: "project-0", other: "project-1"}


def test_subagent_copies_never_join(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)

    fork_json(root, top, "--id", "branch")

    copies = [e.id for e in Root(root).children_of("branch")]
    assert len(copies) == 1
    assert copies[0] not in listed(root)


def test_a_fork_of_a_subagent_joins_its_nearest_listed_ancestors_workspace(
    tmp_path: Path,
) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    (agent,) = [str(e.id) for e in Root(root).children_of(top)]

    out = fork_json(root, agent, "--id", "from-agent", "--no-agents")

    assert out["workspace"]["status"] == "joined"
    assert listed(root)["from-agent"] == "project-0"


def test_a_fork_of_a_deep_subagent_walks_up_to_the_listed_top(tmp_path: Path) -> None:
    root = tmp_path / "home" / "sessions"
    (top,) = generate(root, sessions=1, agents=1, depth=2, workspaces=True).top_level
    (agent,) = Root(root).children_of(top)
    (grandchild,) = Root(root).children_of(str(agent.id))

    out = fork_json(root, str(grandchild.id), "--id", "deep", "--no-agents")

    assert out["workspace"]["status"] == "joined"
    assert listed(root) == {top: "project-0", "deep": "project-0"}


def test_a_fork_whose_source_no_workspace_lists_stays_ungrouped(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    doc = doc_of(root)
    for record in doc["tables"]["workspaces"].values():
        record["sessionIds"] = [s for s in record["sessionIds"] if s != top]
    before = write_doc(root, doc)

    out = fork_json(root, top, "--id", "loose", "--no-agents")

    assert out["workspace"]["status"] == "none"
    assert out["workspace"]["reason"] == "no workspace lists the source"
    assert reg_file(root).read_bytes() == before


def test_a_fork_whose_cwd_is_not_the_listing_workspaces_path_stays_ungrouped(
    tmp_path: Path,
) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    doc = doc_of(root)
    record = next(r for r in doc["tables"]["workspaces"].values() if r["title"] == "project-0")
    record["path"] = str(tmp_path / "elsewhere")
    before = write_doc(root, doc)

    out = fork_json(root, top, "--id", "moved-away", "--no-agents")

    assert out["workspace"]["status"] == "none"
    assert "DSH's attach would fail too" in out["workspace"]["reason"]
    assert reg_file(root).read_bytes() == before


def test_a_cwd_fork_joins_the_workspace_whose_path_matches(tmp_path: Path) -> None:
    root, (top, other) = home_with_registry(tmp_path)
    target = record_of(root, "project-1")["path"]

    out = fork_json(root, top, "--id", "moved", "--cwd", target, "--no-agents")

    assert out["workspace"]["status"] == "joined"
    assert listed(root) == {top: "project-0", other: "project-1", "moved": "project-1"}


def test_a_cwd_fork_through_a_symlink_joins_by_the_real_path(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    link = tmp_path / "link-to-1"
    link.symlink_to(record_of(root, "project-1")["path"])

    out = fork_json(root, top, "--id", "linked", "--cwd", str(link), "--no-agents")

    assert out["workspace"]["status"] == "joined"
    assert listed(root)["linked"] == "project-1"


def test_a_cwd_fork_with_no_matching_workspace_creates_none(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    before = reg_file(root).read_bytes()
    (tmp_path / "new-project").mkdir()

    out = fork_json(root, top, "--id", "x", "--cwd", str(tmp_path / "new-project"), "--no-agents")

    assert out["workspace"]["status"] == "none"
    assert out["workspace"]["reason"] == f"no workspace has the path {tmp_path / 'new-project'}"
    assert reg_file(root).read_bytes() == before


def test_dry_run_says_which_workspace_and_writes_nothing(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    before = reg_file(root).read_bytes()

    result = run_cli("--root", root, "fork", top, "--dry-run")

    assert result.exit_code == 0
    path = record_of(root, "project-0")["path"]
    assert f"  workspace: would join 'project-0' ({path})" in result.stdout.splitlines()
    assert reg_file(root).read_bytes() == before


def test_no_workspace_leaves_the_registry_alone(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    before = reg_file(root).read_bytes()

    out = fork_json(root, top, "--id", "quiet", "--no-workspace")

    assert out["workspace"]["status"] == "skipped"
    assert out["workspace"]["reason"] == "--no-workspace"
    assert reg_file(root).read_bytes() == before


def test_the_registry_is_the_roots_own_home_not_dsh_home(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    elsewhere = tmp_path / "other-home"
    (elsewhere / "storages").mkdir(parents=True)
    (elsewhere / "storages" / "workspace.json").write_bytes(reg_file(root).read_bytes())
    untouched = (elsewhere / "storages" / "workspace.json").read_bytes()

    result = run_cli(
        "--root", root, "fork", top, "--id", "b", "--json", env={"DSH_HOME": str(elsewhere)}
    )

    assert result.exit_code == 0, result.stderr
    assert listed(root)["b"] == "project-0"
    assert (elsewhere / "storages" / "workspace.json").read_bytes() == untouched


def test_a_running_dsh_is_warned_about(tmp_path: Path, hold_lock: Any) -> None:
    root, (top, other) = home_with_registry(tmp_path)
    hold_lock(Root(root).dirs_of(other)[0])

    result = run_cli("--root", root, "fork", top, "--id", "b", "--no-agents")

    assert result.exit_code == 0
    assert "a running DSH keeps its own copy of the workspace registry" in result.stderr
    assert listed(root)["b"] == "project-0"


# -- what an edit keeps ---------------------------------------------------------------------------


def test_unknown_keys_and_key_order_survive_byte_for_byte(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    doc = doc_of(root)
    doc = {"zeta": {"ü": [1, 2, {"x": None}]}, **doc, "extra": "naïve → ✓"}
    doc["global"]["futureFlag"] = {"nested": True}
    for record in doc["tables"]["workspaces"].values():
        record["color"] = "#fff"
        record["path"], record["title"] = record.pop("path"), record.pop("title")  # reordered
    write_doc(root, doc)

    fork_json(root, top, "--id", "kept", "--no-agents")

    after = reg_file(root).read_bytes()
    changed = json.loads(after)
    key = next(k for k, r in changed["tables"]["workspaces"].items() if r["title"] == "project-0")
    doc["tables"]["workspaces"][key]["sessionIds"].insert(0, "kept")
    doc["tables"]["workspaces"][key]["updatedAt"] = changed["tables"]["workspaces"][key][
        "updatedAt"
    ]
    assert after == registry.dumps(doc)  # everything else, key order included, as it was


def test_an_attach_removes_the_id_from_every_other_record_and_stamps_them(tmp_path: Path) -> None:
    root, (top, other) = home_with_registry(tmp_path)
    doc = doc_of(root)
    p0, p1 = list(doc["tables"]["workspaces"])

    edit = registry.edit(root.parent, lambda _: [registry.Change(top, p1)], NOW)

    assert edit.written
    assert edit.changed == [p0, p1]
    after = records(root)
    assert after[p0]["sessionIds"] == []
    assert after[p1]["sessionIds"] == [top, other]
    assert after[p0]["updatedAt"] == after[p1]["updatedAt"] == iso_ms(NOW)


def test_mode_and_owner_are_kept(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    path = reg_file(root)
    path.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(path, 4321, 4321)

    fork_json(root, top, "--id", "b", "--no-agents")

    st = path.stat()
    assert st.st_mode & 0o7777 == 0o640
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (4321, 4321)
    assert [p.name for p in path.parent.iterdir()] == ["workspace.json"]  # no temp left


# -- what is refused ------------------------------------------------------------------------------


def _two_records_one_path(doc: dict[str, Any]) -> None:
    a, b = doc["tables"]["workspaces"].values()
    b["path"] = a["path"]


def _listed_twice(doc: dict[str, Any]) -> None:
    a, b = doc["tables"]["workspaces"].values()
    b["sessionIds"].append(a["sessionIds"][0])


def _pending(doc: dict[str, Any]) -> None:
    doc["global"]["pendingMutation"] = {"operation": "create", "workspaceId": "new"}


REFUSALS: dict[str, tuple[Any, str]] = {
    "unit-name": (lambda d: d["unit"].update(name="workspaces"), "its unit is 'workspaces'"),
    "unit-version": (lambda d: d["unit"].update(version=3), "its unit version is 3, not 2"),
    "pending": (_pending, "it holds a pendingMutation"),
    "listed-twice": (_listed_twice, "DSH would refuse it: session "),
    "one-path": (_two_records_one_path, "DSH would refuse it: two workspaces"),
    "ids-repeat": (
        lambda d: d["global"]["workspaceIds"].append(d["global"]["workspaceIds"][0]),
        "DSH would refuse it: workspaceIds repeats",
    ),
    "ids-name-missing": (
        lambda d: d["global"]["workspaceIds"].append("gone"),
        "DSH would refuse it: workspaceIds names gone, which no workspace record has",
    ),
    "record-not-in-ids": (
        lambda d: d["global"]["workspaceIds"].pop(),
        "is missing from workspaceIds",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_registry_dsh_would_refuse_is_left_alone_with_a_warning(
    tmp_path: Path, case: str
) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    doc = doc_of(root)
    breaks, why = REFUSALS[case]
    breaks(doc)
    before = write_doc(root, doc)

    result = run_cli("--root", root, "fork", top, "--id", "b", "--no-agents", "--json")

    assert result.exit_code == 0  # the fork itself is done: the child is published
    assert result.json()["workspace"]["status"] == "refused"
    assert why in result.json()["workspace"]["reason"]
    assert f"Warning: the workspace registry {reg_file(root)} was not changed:" in result.stderr
    assert why in result.stderr
    assert reg_file(root).read_bytes() == before


UNREPRODUCIBLE: dict[str, Callable[[bytes], bytes]] = {
    "float": lambda data: data.replace(b'"version": 2', b'"version": 2.0'),
    "escape": lambda data: data.replace(b'"project-0"', b'"project\\u002d0"'),
    "compact": lambda data: json.dumps(json.loads(data)).encode(),
    "no-final-newline": lambda data: data.rstrip(b"\n"),
    "duplicate-key": lambda data: data.replace(
        b'"global": {', b'"global": {\n    "a": 1,\n    "a": 2,'
    ),
}


@pytest.mark.parametrize("case", sorted(UNREPRODUCIBLE))
def test_a_file_our_writer_cannot_reproduce_is_refused(tmp_path: Path, case: str) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    data = UNREPRODUCIBLE[case](reg_file(root).read_bytes())
    reg_file(root).write_bytes(data)

    out = fork_json(root, top, "--id", "b", "--no-agents")

    assert out["workspace"]["status"] == "refused"
    assert reg_file(root).read_bytes() == data


def test_numbers_are_kept_only_in_the_spelling_both_writers_share(tmp_path: Path) -> None:
    root, _ = home_with_registry(tmp_path)
    doc = doc_of(root)
    doc["global"]["half"] = 0.5
    data = write_doc(root, doc)
    assert registry.load(root.parent).ready
    for spelling in (b"5e-1", b"0.50", b"1.0", b"1e-07"):
        reg_file(root).write_bytes(data.replace(b"0.5", spelling))
        assert "DSH's writer would spell otherwise" in str(registry.load(root.parent).reason)


@pytest.mark.parametrize("state", ["missing", "uninitialised"])
def test_no_registry_or_an_uninitialised_one_is_left_to_dsh(tmp_path: Path, state: str) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    before = None
    if state == "missing":
        reg_file(root).unlink()
    else:
        doc = doc_of(root)
        doc["global"]["initialized"] = False
        before = write_doc(root, doc)

    result = run_cli("--root", root, "fork", top, "--id", "b", "--no-agents", "--json")

    assert result.exit_code == 0
    assert result.json()["workspace"]["status"] == "skipped"
    assert result.stderr == ""  # DSH sorts sessions itself on its first start: no warning
    if before is None:
        assert not reg_file(root).exists()
    else:
        assert reg_file(root).read_bytes() == before


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "too-large", "not-json"])
def test_a_registry_that_is_no_plain_file_is_refused_unread(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    path = reg_file(root)
    real = tmp_path / "real.json"
    real.write_bytes(path.read_bytes())
    path.unlink()
    if kind == "symlink":
        path.symlink_to(real)
    elif kind == "fifo":
        os.mkfifo(path)  # opened without blocking, then refused
    elif kind == "directory":
        path.mkdir()
    elif kind == "too-large":
        path.write_bytes(real.read_bytes())
        monkeypatch.setattr(registry, "MAX_BYTES", 100)
    else:
        path.write_bytes(b"{not json")

    result = run_cli("--root", root, "fork", top, "--id", "b", "--no-agents", "--json")

    assert result.exit_code == 0
    assert result.json()["workspace"]["status"] == "refused"
    assert "was not changed" in result.stderr
    assert real.read_bytes() == registry.dumps(json.loads(real.read_bytes()))


def test_a_storages_dir_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    storages = root.parent / "storages"
    moved = tmp_path / "elsewhere"
    storages.rename(moved)
    storages.symlink_to(moved)
    before = (moved / "workspace.json").read_bytes()

    out = fork_json(root, top, "--id", "b", "--no-agents")

    assert out["workspace"]["status"] == "refused"
    assert (moved / "workspace.json").read_bytes() == before


# -- two writers -----------------------------------------------------------------------------------


def test_two_writers_never_lose_each_others_edit(tmp_path: Path) -> None:
    root, _ = home_with_registry(tmp_path)
    target = next(iter(records(root)))
    names = [f"s-{i}" for i in range(12)]
    start = threading.Barrier(len(names))
    outcomes: list[bool] = []

    def attach(name: str) -> None:
        start.wait()
        edit = registry.edit(root.parent, lambda _: [registry.Change(name, target)], NOW)
        outcomes.append(edit.written)

    threads = [threading.Thread(target=attach, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes == [True] * len(names)
    assert set(names) <= set(records(root)[target]["sessionIds"])


WRITER = """
import sys, time
from pathlib import Path
from dsh_fork import registry

def decide(reg):
    time.sleep(0.2)  # read, then dawdle: without the lock the runs would overlap
    return [registry.Change(sys.argv[2], sys.argv[3])]

edit = registry.edit(Path(sys.argv[1]), decide, 1_800_000_000_000)
print(edit.written, edit.reason)
"""


def test_two_processes_never_lose_each_others_edit(tmp_path: Path) -> None:
    root, _ = home_with_registry(tmp_path)
    target = next(iter(records(root)))
    names = [f"p-{i}" for i in range(4)]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root.parent), name, target],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]

    outputs = [run.communicate(timeout=60)[0] for run in runs]

    assert outputs == ["True None\n"] * len(names)
    assert set(names) <= set(records(root)[target]["sessionIds"])


def test_a_file_changed_between_read_and_rename_is_not_overwritten(tmp_path: Path) -> None:
    root, _ = home_with_registry(tmp_path)
    target = next(iter(records(root)))
    theirs = doc_of(root)
    theirs["global"]["archivedSessionIds"] = ["changed-by-dsh"]

    def decide(_: registry.Registry) -> list[registry.Change]:
        write_doc(root, theirs)  # DSH takes no lock: it may write at any moment
        return [registry.Change("mine", target)]

    edit = registry.edit(root.parent, decide, NOW)

    assert not edit.written
    assert edit.reason == "it changed while it was being edited (rerun to apply the edit)"
    assert doc_of(root) == theirs
    assert [p.name for p in reg_file(root).parent.iterdir()] == ["workspace.json"]


# -- import ---------------------------------------------------------------------------------------


def test_import_joins_the_workspace_whose_path_matches_its_cwd(tmp_path: Path) -> None:
    root, (top, other) = home_with_registry(tmp_path)
    bundle = tmp_path / "family.tar"
    export_session(top, str(bundle), str(root))
    target = record_of(root, "project-1")["path"]

    result = run_cli("--root", root, "import", str(bundle), "--new-ids", "--cwd", target, "--json")

    assert result.exit_code == 0, result.stderr
    sessions = result.json()["sessions"]
    top_item = next(s for s in sessions if s["role"] == "top")
    agent_item = next(s for s in sessions if s["role"] == "subagent")
    assert top_item["workspace"]["status"] == "joined"
    assert agent_item["workspace"]["status"] == "skipped"
    assert listed(root) == {top: "project-0", other: "project-1", top_item["id"]: "project-1"}


def test_a_reimport_moves_the_session_out_of_its_old_workspace(tmp_path: Path) -> None:
    root, (top, other) = home_with_registry(tmp_path)
    bundle = tmp_path / "family.tar"
    export_session(top, str(bundle), str(root))
    home2 = tmp_path / "home2" / "sessions"
    home2.mkdir(parents=True)
    (home2.parent / "storages").mkdir()
    doc = doc_of(root)
    p0, p1 = doc["tables"]["workspaces"].values()
    p1["sessionIds"].insert(0, top)  # listed under project-1, its cwd is project-0's
    p0["sessionIds"].remove(top)
    (home2.parent / "storages" / "workspace.json").write_bytes(registry.dumps(doc))

    result = run_cli("--root", home2, "import", str(bundle), "--json")

    assert result.exit_code == 0, result.stderr
    after = json.loads((home2.parent / "storages" / "workspace.json").read_bytes())
    by_title = {r["title"]: r["sessionIds"] for r in after["tables"]["workspaces"].values()}
    assert by_title == {"project-0": [top], "project-1": [other]}


def test_import_dry_run_says_which_workspace_and_writes_nothing(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    bundle = tmp_path / "family.tar"
    export_session(top, str(bundle), str(root))
    before = reg_file(root).read_bytes()
    target = record_of(root, "project-1")["path"]

    result = run_cli(
        "--root", root, "import", str(bundle), "--new-ids", "--cwd", target, "--dry-run"
    )

    assert result.exit_code == 0, result.stderr
    assert any("would join 'project-1'" in line for line in result.stdout.splitlines())
    assert reg_file(root).read_bytes() == before


# -- fixture --workspaces -------------------------------------------------------------------------


def test_fixture_workspaces_writes_a_registry_whose_members_hold(tmp_path: Path) -> None:
    root = tmp_path / "home" / "sessions"

    result = run_cli("fixture", str(root), "--sessions", "2", "--forks", "1", "--workspaces")

    assert result.exit_code == 0, result.stderr
    reg = registry.load(root.parent)
    assert reg.ready
    assert [r.title for r in reg.records] == ["project-0", "project-1"]
    entries = [e for e in Root(root).entries() if e.header is not None]
    top_level = [e for e in entries if e.header is not None and e.header.parent_session is None]
    forks = [e for e in entries if e.header is not None and e.header.is_fork_child]
    assert len(top_level) == 2 and len(forks) == 2
    for entry in top_level + forks:
        assert entry.header is not None
        assert reg.is_member(str(entry.id), entry.header.cwd)
        assert Path(str(entry.header.cwd)).is_dir()
        assert Path(str(entry.header.cwd)).parent == root.parent / "projects"
    subagents = [e for e in entries if e.header is not None and e.header.is_subagent]
    assert subagents and all(reg.listing(str(e.id)) is None for e in subagents)


def test_fixture_without_workspaces_is_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "home" / "sessions"

    summary = generate(root, sessions=1)

    assert summary.registry is None
    assert "registry" not in summary.to_json()
    assert sorted(p.name for p in root.parent.iterdir()) == ["sessions"]
    assert [p.name for p in root.iterdir()] == ["--fixture-project-0--"]


# -- list and tree ------------------------------------------------------------------------------


def test_list_shows_each_sessions_workspace_and_filters_by_it(tmp_path: Path) -> None:
    root, (top, other) = home_with_registry(tmp_path)
    doc = doc_of(root)
    doc["global"]["archivedSessionIds"] = [other]
    doc["global"]["pinnedSessionIds"] = [top]
    write_doc(root, doc)

    listing = run_cli("--root", root, "list", "--all", "--json")
    text = run_cli("--root", root, "list")
    only = run_cli("--root", root, "list", "--workspace", "project-1", "--json")
    by_path = run_cli(
        "--root", root, "list", "--workspace", record_of(root, "project-1")["path"], "--json"
    )

    rows = {row["id"]: row for row in listing.json()["sessions"]}
    assert rows[top]["workspace"]["title"] == "project-0"
    assert rows[top]["workspace"]["member"] is True
    assert (rows[top]["pinned"], rows[top]["archived"]) == (True, False)
    assert (rows[other]["pinned"], rows[other]["archived"]) == (False, True)
    agents = [row for row in rows.values() if row["kind"] == "subagent"]
    assert agents and all(row["workspace"] is None for row in agents)
    header = text.stdout.splitlines()[1].split()
    assert header[:4] == ["id", "kind", "title", "workspace"]
    assert any(top in line and "project-0 [pinned]" in line for line in text.stdout.splitlines())
    assert [row["id"] for row in only.json()["sessions"]] == [other]
    assert only.json()["filters"]["workspace"] == "project-1"
    assert by_path.json()["sessions"] == only.json()["sessions"]


def test_list_marks_a_session_whose_cwd_left_its_workspace(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    doc = doc_of(root)
    record = next(r for r in doc["tables"]["workspaces"].values() if r["title"] == "project-0")
    record["path"] = str(tmp_path)
    write_doc(root, doc)

    text = run_cli("--root", root, "list")

    assert any(top in line and "project-0 (moved)" in line for line in text.stdout.splitlines())


def test_list_of_an_unknown_workspace_is_usage(tmp_path: Path) -> None:
    root, _ = home_with_registry(tmp_path)

    result = run_cli("--root", root, "list", "--workspace", "nope")

    assert result.exit_code == 2
    assert result.stderr == (
        "Error: no workspace is titled 'nope' or has that path; titles: project-0, project-1\n"
    )


def test_list_without_a_registry_has_no_workspace_column(tmp_path: Path) -> None:
    root = tmp_path / "home" / "sessions"
    generate(root, sessions=1)

    text = run_cli("--root", root, "list")
    listing = run_cli("--root", root, "list", "--json")

    assert "workspace" not in text.stdout.splitlines()[1]
    assert all(row["workspace"] is None for row in listing.json()["sessions"])


def test_tree_shows_each_sessions_workspace(tmp_path: Path) -> None:
    root, (top, _) = home_with_registry(tmp_path)
    doc = doc_of(root)
    doc["global"]["archivedSessionIds"] = [top]
    write_doc(root, doc)

    text = run_cli("--root", root, "tree")
    document = run_cli("--root", root, "tree", "--json").json()

    (line,) = [line for line in text.stdout.splitlines() if line.startswith(top)]
    assert line.endswith("2 turns  workspace 'project-0'  archived")
    node = next(n for n in document["nodes"] if n["id"] == top)
    assert (node["workspace"]["title"], node["archived"], node["pinned"]) == (
        "project-0",
        True,
        False,
    )


# -- doctor ---------------------------------------------------------------------------------------


def findings(root: Path) -> tuple[int, list[dict[str, Any]]]:
    result = run_cli("--root", root, "doctor", "--json")
    found: list[dict[str, Any]] = result.json()["findings"]
    return result.exit_code, found


def test_doctor_names_ungrouped_sessions_until_attach_runs(tmp_path: Path) -> None:
    root, (top, other) = home_with_registry(tmp_path)
    fork_json(root, top, "--id", "loose", "--no-workspace")
    doc = doc_of(root)
    record = next(r for r in doc["tables"]["workspaces"].values() if r["title"] == "project-1")
    record["sessionIds"] = []
    write_doc(root, doc)

    code, before = findings(root)
    assert run_cli("--root", root, "attach", "--all").exit_code == 0
    _, after = findings(root)

    assert code == 0
    ungrouped = {f["session"]: f for f in before if f["code"] == "UNGROUPED"}
    assert sorted(ungrouped) == sorted(["loose", other])
    assert ungrouped["loose"]["severity"] == "info"
    assert "run `dsh-fork attach loose`" in ungrouped["loose"]["message"]
    assert [f for f in after if f["code"] == "UNGROUPED"] == []


def test_doctor_errs_on_a_registry_dsh_would_refuse_naming_the_rule(tmp_path: Path) -> None:
    root, _ = home_with_registry(tmp_path)
    doc = doc_of(root)
    REFUSALS["listed-twice"][0](doc)
    write_doc(root, doc)

    code, found = findings(root)

    assert code == 10
    (finding,) = [f for f in found if f["code"].startswith("WORKSPACE_REGISTRY")]
    assert (finding["severity"], finding["scope"], finding["code"]) == (
        "error",
        "root",
        "WORKSPACE_REGISTRY_INVALID",
    )
    assert "is listed by two workspaces" in finding["message"]
    assert finding["path"] == str(reg_file(root))


def test_doctor_warns_of_a_registry_dsh_fork_will_not_edit(tmp_path: Path) -> None:
    root, _ = home_with_registry(tmp_path)
    data = reg_file(root).read_bytes()
    reg_file(root).write_bytes(json.dumps(json.loads(data)).encode())

    code, found = findings(root)

    assert code == 0
    (finding,) = [f for f in found if f["code"].startswith("WORKSPACE_REGISTRY")]
    assert (finding["severity"], finding["code"]) == ("warning", "WORKSPACE_REGISTRY_UNEDITABLE")
