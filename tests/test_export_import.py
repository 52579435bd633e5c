"""export and import: a family of sessions moved between roots in one verified archive.

Scenarios: a round trip into an empty root reproduces every log byte for byte (every
compression); the same root refuses a second import under the same ids and takes one under
new ids (a valid second family, catalogued); a truncated, tampered or malformed archive is
refused before anything is written; a crash at any durable step of an import, then a rerun,
gives the tree of an uninterrupted import; export reads live and torn logs as a stable read saw
them.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import cli_launcher
import orjson
import pytest
from conftest import log_events, log_header, log_lines, run_cli, tree_digest
from relinkkit import CWD, fork_of, subagent
from safetykit import snapshot
from schemakit import check

from dsh_fork import bundle, faults, reader, tarstream
from dsh_fork import frames as zframes
from dsh_fork.archivedocs import BundleFile
from dsh_fork.discovery import Root
from dsh_fork.errors import (
    CorruptLog,
    SessionAlreadyExists,
    UnsupportedFormat,
    UsageError,
)
from dsh_fork.export import export_session
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec, write_spec_as
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.importer import ImportOptions, ImportResult, import_bundle
from dsh_fork.layout import project_dir_name

NOW = 1_800_000_000_000
COMPRESSIONS = ("tar", "tar.gz", "tgz", "tar.xz", "tar.bz2", "tar.zst")


def family(root: Path, *, agents: int = 2, depth: int = 2) -> str:
    """A top session with a subagent tree (fixture generator), returns the top id."""
    return generate(root, sessions=1, agents=agents, depth=depth, turns=2, seed=11).top_level[0]


def logs(root: Path) -> dict[str, str]:
    """sha256 of every generation file, by path relative to the root."""
    return {k: v for k, v in tree_digest(root).items() if k.endswith(CURRENT_NAME)}


def export(root: Path, session: str, out: Path, *forks: str) -> Path:
    result = run_cli("--root", root, "export", session, "-o", out, *forks)
    assert result.exit_code == 0, result.stderr
    return out


def import_(root: Path, archive: Path, *args: str) -> ImportResult:
    options = ImportOptions(new_ids="--new-ids" in args, dry_run="--dry-run" in args)
    return import_bundle(str(archive), str(root), options, clock=lambda: NOW)


def doctor_ok(root: Path) -> None:
    result = run_cli("--root", root, "doctor")
    assert result.exit_code == 0, result.stdout + result.stderr


def panel(root: Path, session: str) -> list[dict[str, Any]]:
    result = run_cli("--root", root, "list-agents", session, "--recursive", "--json")
    assert result.exit_code == 0, result.stderr
    children: list[dict[str, Any]] = result.json()["children"]
    return children


def flat(rows: list[dict[str, Any]]) -> list[tuple[str, bool, bool, str | None]]:
    out: list[tuple[str, bool, bool, str | None]] = []
    for row in rows:
        out.append((row["id"], row["onDisk"], row["inPanel"], row["label"]))
        out += flat(row["children"])
    return out


# -- round trip -----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", COMPRESSIONS)
def test_a_round_trip_into_an_empty_root_reproduces_every_log(tmp_path: Path, suffix: str) -> None:
    home_a, home_b = tmp_path / "a" / "sessions", tmp_path / "b" / "sessions"
    top = family(home_a)
    archive = export(home_a, top, tmp_path / f"family.{suffix}")

    result = run_cli("--root", home_b, "import", archive, "--json")

    assert result.exit_code == 0, result.stderr
    check("import", result.json())
    assert [s["status"] for s in result.json()["sessions"]] == ["created"] * 7
    assert logs(home_b) == logs(home_a)
    assert flat(panel(home_b, top)) == flat(panel(home_a, top))
    assert all(on_disk and in_panel for _, on_disk, in_panel, _ in flat(panel(home_b, top)))
    doctor_ok(home_b)


def test_the_manifest_describes_every_log(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    top = family(root, agents=1, depth=1)

    result = run_cli("--root", root, "export", top, "-o", tmp_path / "f.tar.zst", "--json")

    assert result.exit_code == 0
    check("export", result.json())
    manifest = result.json()["manifest"]
    assert manifest["schemaVersion"] == 1
    assert manifest["kind"] == "dsh-fork-bundle"
    assert manifest["formatVersion"] == 4
    assert manifest["dshForkVersion"] == "0.1.0"
    assert manifest["top"] == top
    first, child = manifest["sessions"]
    path = root / "--fixture-project-0--" / top / CURRENT_NAME
    data = path.read_bytes()
    assert first == {
        "id": top,
        "role": "top",
        "parentSession": None,
        "origin": None,
        "cwd": "/fixture/project-0",
        "projectDir": "--fixture-project-0--",
        "sessionDir": top,
        "generation": 4,
        "createdAt": log_header(path)["createdAt"],
        "isSeeded": False,
        "delegationDepth": 0,
        "events": len(log_events(path)),
        "cut": 0,
        "lockHeld": False,
        "file": {
            "path": f"sessions/--fixture-project-0--/{top}/{CURRENT_NAME}",
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        },
    }
    assert (child["role"], child["parentSession"], child["origin"]) == ("subagent", top, "subagent")
    names = member_names(tmp_path / "f.tar.zst")
    assert names == ["manifest.json", first["file"]["path"], child["file"]["path"]]


def member_names(path: Path) -> list[str]:
    """The member names of an archive, in order (zstd archives read by the bundle reader)."""
    with tarstream.open_source(str(path), path) as source:
        tar = tarstream.TarReader(tarstream.decompressing(source.raw(), None), str(path))
        names = []
        while (entry := tar.next()) is not None:
            names.append(entry.name)
        return names


def test_forks_adds_the_fork_children_and_their_trees(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    top = family(root, agents=1, depth=1)
    assert run_cli("--root", root, "fork", top, "--id", "branch").exit_code == 0

    plain = run_cli("--root", root, "export", top, "-o", tmp_path / "p.tar", "--json").json()
    with_forks = run_cli(
        "--root", root, "export", top, "-o", tmp_path / "f.tar", "--forks", "--json"
    ).json()

    assert [s["role"] for s in plain["manifest"]["sessions"]] == ["top", "subagent"]
    roles = [(s["role"], s["id"] == "branch") for s in with_forks["manifest"]["sessions"]]
    assert roles == [("top", False), ("subagent", False), ("fork", True), ("subagent", False)]
    home_b = tmp_path / "b" / "sessions"
    assert run_cli("--root", home_b, "import", tmp_path / "f.tar").exit_code == 0
    assert logs(home_b) == logs(root)
    doctor_ok(home_b)


# -- the same root --------------------------------------------------------------------------------


def test_the_same_root_refuses_the_same_ids_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    top = family(root)
    archive = export(root, top, tmp_path / "f.tar.gz")
    before = tree_digest(root)

    result = run_cli("--root", root, "import", archive)

    assert result.exit_code == 5
    assert result.stderr.startswith("Error: every session of the bundle (7) already exists")
    assert len(result.stderr.splitlines()) == 1
    assert tree_digest(root) == before


def test_one_existing_id_elsewhere_is_refused_by_name(tmp_path: Path, clock: Clock) -> None:
    home_a, home_b = tmp_path / "a" / "sessions", tmp_path / "b" / "sessions"
    top = family(home_a, agents=1, depth=1)
    archive = export(home_a, top, tmp_path / "f.tar")
    child = run_cli("--root", home_a, "list-agents", top, "--json").json()["children"][0]["id"]
    SessionSpec(id=child, created_at=clock(), cwd="/elsewhere").publish(home_b)
    before = tree_digest(home_b)

    result = run_cli("--root", home_b, "import", archive, "--json")

    assert result.exit_code == 5
    error = result.json()["error"]
    assert (error["code"], error["session"]) == ("SESSION_ALREADY_EXISTS", child)
    assert "--elsewhere--" in error["message"]
    assert tree_digest(home_b) == before


def test_new_ids_make_a_valid_second_family(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    top = family(root)
    originals = logs(root)
    archive = export(root, top, tmp_path / "f.tar.zst")

    result = run_cli("--root", root, "import", archive, "--new-ids", "--json")

    assert result.exit_code == 0, result.stderr
    check("import", result.json())
    sessions = result.json()["sessions"]
    new_top = result.json()["top"]
    assert {s["id"] for s in sessions}.isdisjoint({s["source"] for s in sessions})
    assert all(logs(root)[k] == v for k, v in originals.items())  # originals untouched
    assert len(logs(root)) == 14
    doctor_ok(root)
    rows = flat(panel(root, new_top))
    assert len(rows) == 6
    assert all(on_disk and in_panel for _, on_disk, in_panel, _ in rows)
    assert sorted(label or "" for *_, label in rows) == sorted(
        label or "" for *_, label in flat(panel(root, top))
    )


def test_a_new_id_copy_inherits_the_log_byte_for_byte(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    top = family(root, agents=1, depth=1)
    archive = export(root, top, tmp_path / "f.tar")
    home_b = tmp_path / "b" / "sessions"

    result = import_(home_b, archive, "--new-ids")

    top_item, child_item = result.document.sessions
    project = root / "--fixture-project-0--"
    original_top = log_lines(project / top / CURRENT_NAME)
    copy_top = log_lines(Path(top_item.path))
    assert copy_top[1 : len(original_top)] == original_top[1:]
    header = log_header(Path(top_item.path))
    assert header == {
        "type": "session",
        "version": 4,
        "id": top_item.id,
        "createdAt": NOW,
        "cwd": "/fixture/project-0",
        "parentSession": top,
        "isSeeded": True,
        "delegationDepth": 0,
    }
    own = log_events(Path(top_item.path))[len(original_top) - 1 :]
    assert [e["type"] for e in own] == ["session/end-seed", "subagent/catalog"]
    assert own[0]["data"] == {"inherited": True}
    assert own[1]["data"] == {
        "version": 0,
        "childId": child_item.id,
        "childCreatedAt": NOW,
        "mode": "continuable",
        "label": "agent 1",
    }
    original_child = log_lines(project / child_item.source / CURRENT_NAME)
    copy_child = log_lines(Path(child_item.path))
    assert copy_child[1 : len(original_child)] == original_child[1:]
    assert log_header(Path(child_item.path))["parentSession"] == top_item.id
    assert log_header(Path(child_item.path))["origin"] == "subagent"
    assert log_header(Path(child_item.path))["delegationDepth"] == 1
    child_own = log_events(Path(child_item.path))[len(original_child) - 1 :]
    assert [e["type"] for e in child_own] == ["session/end-seed", "subagent/descriptor"]
    doctor_ok(home_b)


def test_a_rerun_of_a_finished_new_id_import_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root), tmp_path / "f.tar")
    home_b = tmp_path / "b" / "sessions"
    import_(home_b, archive, "--new-ids")
    before = tree_digest(home_b)

    again = import_(home_b, archive, "--new-ids")

    assert {item.status for item in again.document.sessions} == {"present"}
    assert tree_digest(home_b) == before


def test_a_dry_run_verifies_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root), tmp_path / "f.tar.xz")
    home_b = tmp_path / "b" / "sessions"

    result = run_cli("--root", home_b, "import", archive, "--dry-run", "--new-ids")

    assert result.exit_code == 0, result.stderr
    assert "Nothing was written." in result.stdout
    assert result.stdout.count("planned") == 7
    assert not home_b.exists()


# -- damaged archives -------------------------------------------------------------------------


def _member_offset(archive: Path, index: int) -> tuple[int, int]:
    with tarfile.open(archive) as tar:
        member = tar.getmembers()[index]
        return member.offset_data, member.size


@pytest.mark.parametrize("where", ["header", "manifest", "first log", "last log"])
def test_a_truncated_archive_is_refused_before_any_write(tmp_path: Path, where: str) -> None:
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root), tmp_path / "f.tar")
    data = archive.read_bytes()
    cut = {
        "header": 100,
        "manifest": _member_offset(archive, 0)[0] + 50,
        "first log": sum(_member_offset(archive, 1)) - 10,
        "last log": _member_offset(archive, 7)[0] + 10,
    }[where]
    archive.write_bytes(data[:cut])
    home_b = tmp_path / "b" / "sessions"

    result = run_cli("--root", home_b, "import", archive)

    assert result.exit_code == 9, result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not home_b.exists()


@pytest.mark.parametrize("suffix", ["tar.gz", "tar.zst", "tar.bz2", "tar.xz"])
def test_a_truncated_compressed_archive_is_refused(tmp_path: Path, suffix: str) -> None:
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root), tmp_path / f"f.{suffix}")
    data = archive.read_bytes()
    for cut in (len(data) // 2, len(data) - 8):
        archive.write_bytes(data[:cut])
        home_b = tmp_path / "b" / "sessions"
        result = run_cli("--root", home_b, "import", archive)
        assert result.exit_code == 9, (cut, result.stderr)
        assert not home_b.exists()


def test_a_tampered_log_is_refused_before_any_write(tmp_path: Path) -> None:
    """A byte changed in the last log: the first six logs are fine, and still none is written."""
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root), tmp_path / "f.tar")
    offset, size = _member_offset(archive, 7)
    data = bytearray(archive.read_bytes())
    data[offset + size // 2] ^= 0x01
    archive.write_bytes(bytes(data))
    home_b = tmp_path / "b" / "sessions"

    result = run_cli("--root", home_b, "import", archive, "--json")

    assert result.exit_code == 9
    assert "sha256 differs from the manifest" in result.json()["error"]["message"]
    assert not home_b.exists()


def _rewrite(archive: Path, edit: Any) -> None:
    """Rebuild a plain archive, letting ``edit(name, data)`` change or drop members."""
    with tarfile.open(archive) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    out = io.BytesIO()
    writer = tarstream.TarWriter(out, "none")
    for name, data in members:
        for new_name, new_data in edit(name, data):
            writer.add(new_name, new_data, 0)
    writer.close()
    archive.write_bytes(out.getvalue())


def _manifest_edit(change: Any) -> Any:
    def edit(name: str, data: bytes) -> list[tuple[str, bytes]]:
        if name != bundle.MANIFEST_NAME:
            return [(name, data)]
        value = orjson.loads(data)
        change(value)
        return [(name, orjson.dumps(value))]

    return edit


def test_a_log_matching_a_forged_manifest_is_still_held_to_its_header(tmp_path: Path) -> None:
    """The manifest's checksum is made to fit a log of another session: the header check
    (id, cwd, parent) catches the swap."""
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root, agents=2, depth=1), tmp_path / "f.tar")
    logs_by_name: dict[str, bytes] = {}
    with tarfile.open(archive) as tar:
        for m in tar.getmembers()[1:]:
            logs_by_name[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
    first, second = list(logs_by_name)[1:]

    def swap(name: str, data: bytes) -> list[tuple[str, bytes]]:
        if name == bundle.MANIFEST_NAME:
            value = orjson.loads(data)
            entry = value["sessions"][1]["file"]
            entry["sha256"] = hashlib.sha256(logs_by_name[second]).hexdigest()
            entry["size"] = len(logs_by_name[second])
            return [(name, orjson.dumps(value))]
        return [(name, logs_by_name[second] if name == first else data)]

    _rewrite(archive, swap)
    home_b = tmp_path / "b" / "sessions"

    with pytest.raises(CorruptLog, match="header does not match the manifest"):
        import_(home_b, archive)
    assert not home_b.exists()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda v: v.update(schemaVersion=2), UnsupportedFormat),
        (lambda v: v.update(kind="something-else"), CorruptLog),
        (lambda v: v["sessions"].reverse(), CorruptLog),
        (lambda v: v["sessions"][1].update(projectDir="--elsewhere--"), CorruptLog),
        (lambda v: v["sessions"][1]["file"].update(path="sessions/../../evil"), CorruptLog),
        (lambda v: v["sessions"].pop(), CorruptLog),
        (lambda v: v["sessions"][1].update(role="fork"), CorruptLog),
    ],
    ids=[
        "newer schema",
        "not a bundle",
        "children first",
        "wrong dir",
        "escape",
        "unlisted",
        "wrong role",
    ],
)
def test_a_bad_manifest_is_refused(tmp_path: Path, change: Any, error: type[Exception]) -> None:
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root, agents=1, depth=1), tmp_path / "f.tar")
    _rewrite(archive, _manifest_edit(change))
    home_b = tmp_path / "b" / "sessions"

    with pytest.raises(error):
        import_(home_b, archive)
    assert not home_b.exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE])
def test_a_member_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: bytes) -> None:
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root, agents=1, depth=1), tmp_path / "f.tar")
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers()]
    with tarfile.open(archive, "a") as tar:  # a second entry under a listed name
        info = tarfile.TarInfo(names[2])
        info.type = kind
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    home_b = tmp_path / "b" / "sessions"

    result = run_cli("--root", home_b, "import", archive)

    assert result.exit_code == 9
    assert not home_b.exists()


def test_a_file_that_is_not_an_archive(tmp_path: Path) -> None:
    home_b = tmp_path / "b" / "sessions"
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar archive at all" * 100)

    assert run_cli("--root", home_b, "import", junk).exit_code == 9
    assert run_cli("--root", home_b, "import", tmp_path / "missing.tar").exit_code == 2
    assert not home_b.exists()


# -- crashes --------------------------------------------------------------------------------------


def _steps(archive: Path, target: Path, *args: str) -> list[tuple[str, str]]:
    with faults.install("crash", 0) as plan:
        import_(target, archive, *args)
    shutil.rmtree(target)
    return plan.log


@pytest.mark.parametrize("mode", ["same ids", "new ids"])
def test_a_crash_at_any_step_then_a_rerun_gives_the_same_tree(tmp_path: Path, mode: str) -> None:
    source = tmp_path / "a" / "sessions"
    archive = export(source, family(source, agents=1, depth=2), tmp_path / "f.tar")
    args = ("--new-ids",) if mode == "new ids" else ()
    reference = tmp_path / "reference" / "sessions"
    import_(reference, archive, *args)
    expected = snapshot(reference)
    steps = _steps(archive, tmp_path / "measure" / "sessions", *args)
    kinds = [kind for kind, _ in steps]
    assert kinds.count("link") == 3
    assert kinds.count("append") == (2 if args else 0)

    for k in range(1, len(steps) + 1):
        target = tmp_path / f"crash-{k}" / "sessions"
        with faults.install("crash", k), pytest.raises(faults.InjectedCrash):
            import_(target, archive, *args)
        try:
            import_(target, archive, *args)
        except SessionAlreadyExists:  # same ids, crashed after the last link: all there
            assert not args and k >= kinds.index("link", len(kinds) - 4)
        assert snapshot(target) == expected, f"crash at step {k}: {steps[k - 1]}"
        assert Root(target).unreadable() == []


def test_a_killed_import_is_finished_by_a_rerun(tmp_path: Path) -> None:
    source = tmp_path / "a" / "sessions"
    archive = export(source, family(source, agents=1, depth=2), tmp_path / "f.tar")
    target = tmp_path / "b" / "sessions"
    steps = _steps(archive, tmp_path / "measure" / "sessions", "--new-ids")
    second_link = [i for i, (kind, _) in enumerate(steps) if kind == "link"][1] + 1
    argv = cli_launcher.argv("--root", str(target), "import", str(archive))
    env = {**os.environ, faults.ENV_VAR: f"kill:{second_link}"}

    killed = subprocess.run([*argv, "--new-ids"], env=env, capture_output=True, check=False)

    assert killed.returncode == -9
    assert len(logs(target)) == 2
    rerun = subprocess.run([*argv, "--new-ids", "--json"], capture_output=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    statuses = [s["status"] for s in orjson.loads(rerun.stdout)["sessions"]]
    assert statuses == ["present", "present", "created"]
    assert len(logs(target)) == 3
    doctor_ok(target)


# -- export ---------------------------------------------------------------------------------------


def test_a_running_session_is_exported_as_of_a_stable_read(tmp_path: Path, hold_lock: Any) -> None:
    root = tmp_path / "a" / "sessions"
    top = family(root, agents=1, depth=1)
    hold_lock(root / "--fixture-project-0--" / top)

    result = run_cli("--root", root, "export", top, "-o", tmp_path / "f.tar", "--json")

    assert result.exit_code == 0
    assert result.stderr.startswith(f"Warning: {top} is running (its lock is held)")
    assert [s["lockHeld"] for s in result.json()["manifest"]["sessions"]] == [True, False]
    home_b = tmp_path / "b" / "sessions"
    imported = run_cli("--root", home_b, "import", tmp_path / "f.tar")
    assert imported.exit_code == 0
    assert "was running when it was exported" in imported.stderr
    assert logs(home_b) == logs(root)


def test_a_torn_tail_is_left_out_and_named(tmp_path: Path, clock: Clock) -> None:
    root = tmp_path / "a" / "sessions"
    spec = SessionSpec(id="torn", created_at=clock(), cwd="/w")
    spec.turn(clock)
    path = spec.publish(root) / CURRENT_NAME
    committed = path.read_bytes()
    frame = zframes.encode(b'{"type":"turn/start","seq":6,"time":1,"data":{"turn":2}}\n')
    path.write_bytes(committed + frame[: len(frame) // 2])

    result = run_cli("--root", root, "export", "torn", "-o", tmp_path / "f.tar", "--json")

    assert result.exit_code == 0
    assert "torn tail" in result.stderr
    assert result.json()["manifest"]["sessions"][0]["file"]["size"] == len(committed)
    home_b = tmp_path / "b" / "sessions"
    assert run_cli("--root", home_b, "import", tmp_path / "f.tar").exit_code == 0
    assert (home_b / project_dir_name("/w") / "torn" / CURRENT_NAME).read_bytes() == committed


@pytest.mark.parametrize(
    ("name", "setup"),
    [("f.zip", None), ("exists.tar", "file"), ("inside.tar", "root")],
)
def test_export_refuses_a_bad_output(tmp_path: Path, name: str, setup: str | None) -> None:
    root = tmp_path / "a" / "sessions"
    top = family(root, agents=1, depth=1)
    out = tmp_path / name
    if setup == "file":
        out.write_bytes(b"keep me")
    if setup == "root":
        out = root / name

    with pytest.raises(UsageError):
        export_session(top, str(out), str(root))
    assert setup != "file" or out.read_bytes() == b"keep me"
    assert setup != "root" or not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# -- what new ids cannot copy -------------------------------------------------------------------


def test_a_subagent_without_a_descriptor_is_left_out_of_new_ids_by_name(
    tmp_path: Path, clock: Clock
) -> None:
    """A copy the panel could never list is not written (the relink rule); its subtree goes
    with it, the rest is imported, and the run ends PARTIAL naming it."""
    root = tmp_path / "a" / "sessions"
    top = SessionSpec(id="top", created_at=clock(), cwd="/w")
    good = SessionSpec(id="good", created_at=clock(), cwd="/w", parent="top", origin="subagent")
    bare = SessionSpec(id="bare", created_at=clock(), cwd="/w", parent="top", origin="subagent")
    under = SessionSpec(id="under", created_at=clock(), cwd="/w", parent="bare", origin="subagent")
    good.descriptor(clock, "good")
    under.descriptor(clock, "under")
    for spec in (top, good, bare, under):
        spec.turn(clock)
        spec.publish(root)
    archive = export(root, "top", tmp_path / "f.tar")
    home_b = tmp_path / "b" / "sessions"

    result = run_cli("--root", home_b, "import", archive, "--new-ids", "--json")

    assert result.exit_code == 10
    check("import", result.json())
    error = result.json()["error"]
    assert [(f["id"], f["code"]) for f in error["failed"]] == [
        ("bare", "UNCATALOGABLE"),
        ("under", "UNCATALOGABLE"),
    ]
    statuses = {s["source"]: s["status"] for s in result.json()["sessions"]}
    assert statuses == {"top": "created", "good": "created", "bare": "skipped", "under": "skipped"}
    assert len(logs(home_b)) == 2
    doctor_ok(home_b)


def test_a_plain_root_is_not_written(tmp_path: Path, clock: Clock) -> None:
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root, agents=1, depth=1), tmp_path / "f.tar")
    home_b = tmp_path / "b" / "sessions"
    spec = SessionSpec(id="plain", created_at=clock(), cwd="/p")
    write_spec_as(spec, home_b, 4, encoding="plain")
    before = tree_digest(home_b)

    assert run_cli("--root", home_b, "import", archive).exit_code == 8
    assert tree_digest(home_b) == before


def test_an_id_too_long_for_a_directory_is_refused_before_any_write(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root, agents=1, depth=1), tmp_path / "f.tar")

    def long_id(value: dict[str, Any]) -> None:
        entry = value["sessions"][1]
        entry["id"] = "x" * 300
        entry["file"]["path"] = bundle.member_name(entry["projectDir"], entry["id"])

    _rewrite(archive, _manifest_edit(long_id))
    home_b = tmp_path / "b" / "sessions"

    with pytest.raises(CorruptLog, match="too long"):
        import_(home_b, archive)
    assert not home_b.exists()


def _replace_log(archive: Path, index: int, data: bytes) -> None:
    """Put other bytes in the ``index``-th log and make the manifest agree with them."""
    with tarfile.open(archive) as tar:
        name = tar.getmembers()[index + 1].name

    def edit(member: str, old: bytes) -> list[tuple[str, bytes]]:
        if member == bundle.MANIFEST_NAME:
            value = orjson.loads(old)
            entry = value["sessions"][index]["file"]
            entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
            return [(member, orjson.dumps(value))]
        return [(member, data if member == name else old)]

    _rewrite(archive, edit)


def test_a_damaged_log_with_a_matching_checksum_is_still_refused(tmp_path: Path) -> None:
    """The checksums only say the archive is what its writer wrote; each log is read too."""
    root = tmp_path / "a" / "sessions"
    top = family(root, agents=1, depth=1)
    archive = export(root, top, tmp_path / "f.tar")
    path = root / "--fixture-project-0--" / top / CURRENT_NAME
    lines = log_lines(path)
    lines[3] = lines[3].replace(b'"seq":2', b'"seq":7')
    bad = b"".join(zframes.encode(line + b"\n") for line in lines)
    _replace_log(archive, 0, bad)
    home_b = tmp_path / "b" / "sessions"

    with pytest.raises(CorruptLog, match="seqs must be dense"):
        import_(home_b, archive)
    assert not home_b.exists()


def test_a_record_continued_in_the_next_frame_is_read_as_dsh_reads_it(tmp_path: Path) -> None:
    root = tmp_path / "a" / "sessions"
    top = family(root, agents=1, depth=1)
    archive = export(root, top, tmp_path / "f.tar")
    path = root / "--fixture-project-0--" / top / CURRENT_NAME
    header, *events = log_lines(path)
    body = b"".join(line + b"\n" for line in events)
    split = body.index(b"\n", len(body) // 2) - 5
    data = b"".join(zframes.encode(p) for p in (header + b"\n", body[:split], body[split:]))
    _replace_log(archive, 0, data)
    home_b = tmp_path / "b" / "sessions"

    result = import_(home_b, archive)

    assert result.document.sessions[0].status == "created"
    assert Path(result.document.sessions[0].path).read_bytes() == data


def test_a_decompression_bomb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """20 MiB of zeros compress to almost nothing; logs (zstd data) never do."""
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root, agents=1, depth=1), tmp_path / "f.tar.zst")
    zeros = bytes(20 * 1024 * 1024)
    names = member_names(archive)
    bomb = tmp_path / "bomb.tar.zst"
    with open(bomb, "wb") as handle, tarstream.open_source(str(archive), archive) as source:
        tar = tarstream.TarWriter(handle, "zst")
        manifest = orjson.loads(bundle.encoded(bundle.read_manifest(source)))
        manifest["sessions"][0]["file"].update(
            size=len(zeros), sha256=hashlib.sha256(zeros).hexdigest()
        )
        tar.add(bundle.MANIFEST_NAME, orjson.dumps(manifest), 0)
        tar.add(names[1], zeros, 0)
        tar.close()
    assert bomb.stat().st_size < 100_000
    home_b = tmp_path / "b" / "sessions"

    with pytest.raises(CorruptLog, match="more than an archive of"):
        import_(home_b, bomb)
    assert not home_b.exists()


# -- export under change --------------------------------------------------------------------------


def test_each_log_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bytes described in the manifest are the bytes archived: one read of each log."""
    root = tmp_path / "a" / "sessions"
    top = family(root, agents=2, depth=2)
    opened: list[Path] = []
    real = reader.open_fd

    def counted(file: Path) -> int:
        opened.append(Path(file))
        return real(file)

    monkeypatch.setattr(reader, "open_fd", counted)

    result = export_session(top, str(tmp_path / "f.tar.zst"), str(root))

    logs = sorted(root.glob(f"*/*/{CURRENT_NAME}"))
    assert len(result.manifest.sessions) == len(logs) == 7
    assert sorted(opened) == logs


def test_a_session_below_v4_is_not_exported(tmp_path: Path, clock: Clock) -> None:
    root = tmp_path / "a" / "sessions"
    spec = SessionSpec(id="old", created_at=clock(), cwd="/w")
    spec.turn(clock)
    write_spec_as(spec, root, 3)

    result = run_cli("--root", root, "export", "old", "-o", tmp_path / "f.tar")

    assert result.exit_code == 8
    assert "open the session once in DSH" in result.stderr
    assert not (tmp_path / "f.tar").exists()


# -- delegation children without origin (dsh-world §4) -----------------------------------------


def delegation_family(root: Path, clock: Clock) -> dict[str, SessionSpec]:
    """P with a subagent by its header, two children without ``origin`` that the logs make
    delegation children (one its parent catalogues, one holding its own descriptor), and a
    user fork (neither); the user fork has a subagent of its own."""
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock, "delegate")
    helper = subagent(clock, "helper-1", parent)
    parent.catalog(clock, helper, label="helper 1")
    parent.flush()
    catalogued = fork_of(parent, "delegated-catalogued", clock())
    catalogued.turns = parent.turns  # its turns go on from the inherited ones
    catalogued.turn(clock, "work of the catalogued child")
    catalogued.flush()
    parent.catalog(clock, catalogued, label="delegated reviewer")
    parent.flush()
    described = fork_of(parent, "delegated-described", clock())
    described.turns = parent.turns  # its turns go on from the inherited ones
    described.descriptor(clock, "delegated writer")
    described.turn(clock, "work of the described child")
    described.flush()
    user_fork = fork_of(parent, "session-user-fork", clock())
    user_fork.turns = parent.turns  # its turns go on from the inherited ones
    user_fork.turn(clock, "the user's branch")
    user_fork.flush()
    fork_helper = subagent(clock, "helper-of-fork", user_fork)
    user_fork.catalog(clock, fork_helper, label="helper of the fork")
    user_fork.flush()
    specs = [parent, helper, catalogued, described, user_fork, fork_helper]
    for spec in specs:
        spec.publish(root)
    return {spec.id: spec for spec in specs}


def roles_of(document: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(s["id"], s["role"], s["origin"]) for s in document["manifest"]["sessions"]]


def test_a_delegation_child_without_origin_goes_with_its_parent(
    tmp_path: Path, clock: Clock
) -> None:
    """Without --forks the family is the session and its delegation children, whatever their
    headers lack: a child its parent catalogues, or that holds its own descriptor, is a
    subagent; a user fork stays out (with --forks it comes, as a fork, with its own tree)."""
    root = tmp_path / "a" / "sessions"
    delegation_family(root, clock)

    plain = run_cli("--root", root, "export", "session-P", "-o", tmp_path / "p.tar", "--json")
    with_forks = run_cli(
        "--root", root, "export", "session-P", "-o", tmp_path / "f.tar", "--forks", "--json"
    )

    assert plain.exit_code == 0, plain.stderr
    assert roles_of(plain.json()) == [
        ("session-P", "top", None),
        ("helper-1", "subagent", "subagent"),
        ("delegated-catalogued", "subagent", None),
        ("delegated-described", "subagent", None),
    ]
    assert with_forks.exit_code == 0, with_forks.stderr
    assert roles_of(with_forks.json()) == [
        *roles_of(plain.json()),
        ("session-user-fork", "fork", None),
        ("helper-of-fork", "subagent", "subagent"),
    ]
    for archive in ("p.tar", "f.tar"):
        home_b = tmp_path / f"into-{archive}" / "sessions"
        imported = run_cli("--root", home_b, "import", tmp_path / archive)
        assert imported.exit_code == 0, imported.stderr
        assert logs(home_b) == {k: v for k, v in logs(root).items() if k in logs(home_b)}
        doctor_ok(home_b)
    assert len(logs(tmp_path / "into-p.tar" / "sessions")) == 4
    assert logs(tmp_path / "into-f.tar" / "sessions") == logs(root)


def test_a_user_fork_listed_as_a_subagent_is_refused(tmp_path: Path, clock: Clock) -> None:
    """The importer holds a subagent without origin to the rule: a manifest that lists a user
    fork as a subagent is refused before anything is written."""
    root = tmp_path / "a" / "sessions"
    delegation_family(root, clock)
    archive = export(root, "session-P", tmp_path / "f.tar", "--forks")

    def as_subagent(value: dict[str, Any]) -> None:
        for session in value["sessions"]:
            if session["id"] == "session-user-fork":
                session["role"] = "subagent"

    _rewrite(archive, _manifest_edit(as_subagent))
    home_b = tmp_path / "b" / "sessions"
    result = run_cli("--root", home_b, "import", archive, "--new-ids")

    assert result.exit_code == 9, result.stderr
    assert "listed as a subagent without origin" in result.stderr
    assert not home_b.exists()


def test_a_fork_child_that_cannot_be_read_is_named_not_dropped(
    tmp_path: Path, clock: Clock
) -> None:
    """Whether a fork child by its header is a delegation child is in its log: one that cannot
    be read may belong to the family, so the export names it instead of leaving it out."""
    root = tmp_path / "a" / "sessions"
    specs = delegation_family(root, clock)
    log = root / project_dir_name(CWD) / "session-user-fork" / CURRENT_NAME
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2] + b"\x00" * 16 + data[len(data) // 2 + 16 :])
    assert "session-user-fork" in specs

    refused = run_cli("--root", root, "export", "session-P", "-o", tmp_path / "p.tar")
    skipped = run_cli(
        "--root",
        root,
        "export",
        "session-P",
        "-o",
        tmp_path / "s.tar",
        "--skip-unreadable",
        "--json",
    )

    assert refused.exit_code == 9, refused.stderr
    assert "session-user-fork" in refused.stderr
    assert "cannot be told whether it is a subagent" in refused.stderr
    assert not (tmp_path / "p.tar").exists()
    assert skipped.exit_code == 10, skipped.stderr
    assert [s["id"] for s in skipped.json()["manifest"]["sessions"]][-1] == "delegated-described"


# -- a bundled log is read as every command reads one -------------------------------------------


def _bundled(frames: list[bytes]) -> bundle.Member:
    header = (
        b'{"type":"session","version":4,"id":"s1","createdAt":1,"cwd":"/w",'
        b'"isSeeded":false,"delegationDepth":0}\n'
    )
    data = zframes.encode(header) + b"".join(zframes.encode(f) for f in frames)
    entry = bundle.BundleSession(
        id="s1",
        role="top",
        parent_session=None,
        origin=None,
        cwd="/w",
        project_dir=project_dir_name("/w"),
        session_dir="s1",
        generation=4,
        created_at=1,
        is_seeded=False,
        delegation_depth=0,
        events=2,
        cut=0,
        lock_held=False,
        file=BundleFile(
            bundle.member_name(project_dir_name("/w"), "s1"), len(data), bundle.digest_of(data)
        ),
    )
    return bundle.Member(entry, data)


def _event(seq: int) -> bytes:
    return b'{"type":"note","seq":%d,"time":%d,"data":{}}' % (seq, 10 + seq)


@pytest.mark.parametrize(
    ("frames", "defect"),
    [
        ([_event(0) + b"\n" + _event(1) + b"\n"], None),
        ([_event(0) + b"\n" + _event(1)[:20], _event(1)[20:] + b"\n"], None),
        ([_event(0) + b"\n" + _event(1)[:20]], "complete"),
        ([_event(0) + b"\n\n" + _event(1) + b"\n"], "seq"),
        ([_event(0) + b"\n" + _event(2) + b"\n"], "seq"),
        ([_event(0) + b"\n" + b'{"type":"note","seq":1,"time":11,"data":{]}\n'], "JSON"),
    ],
    ids=["whole", "continued", "unfinished", "empty line", "seq gap", "bad json"],
)
def test_a_bundled_log_is_held_to_what_dsh_reads(frames: list[bytes], defect: str | None) -> None:
    member = _bundled(frames)
    if defect is None:
        checked = bundle.check_log(member, "a.tar")
        assert (checked.event_count, checked.last_time) == (2, 11)
        return
    with pytest.raises(CorruptLog) as caught:
        bundle.check_log(member, "a.tar")
    assert caught.value.message.startswith("a.tar: ")


@pytest.mark.parametrize(
    "options",
    [{}, {"new_ids": True}, {"cwd": "/srv/moved"}, {"new_ids": True, "cwd": "/srv/moved"}],
    ids=["same ids", "new ids", "moved", "new ids moved"],
)
def test_a_log_spooled_to_a_file_imports_as_a_log_held_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    """A large bundled log is held in an unnamed spool file, not in memory
    (``bundle.HELD_BYTES``): with every log spooled the import writes the same tree."""
    root = tmp_path / "a" / "sessions"
    archive = export(root, family(root), tmp_path / "f.tar.zst")
    held, spooled = tmp_path / "held" / "sessions", tmp_path / "spooled" / "sessions"

    import_bundle(str(archive), str(held), ImportOptions(**options), clock=lambda: NOW)
    monkeypatch.setattr(bundle, "HELD_BYTES", 0)
    import_bundle(str(archive), str(spooled), ImportOptions(**options), clock=lambda: NOW)

    assert tree_digest(spooled) == tree_digest(held)
    assert len(logs(spooled)) == 7
    doctor_ok(spooled)
