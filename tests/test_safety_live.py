"""Live writers (issue 5, guarantee 3; format §11): a session whose ``session.lock`` another
process holds with ``flock`` is never written, on every write path, and everything that only
reads still works; two relinks of one fork child at once never duplicate anything.

(That only ``flock`` is used — never ``lockf`` or ``F_SETLK`` — is asserted over the whole
package by ``test_locking.test_the_source_never_uses_posix_record_locks``.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, tree_digest
from relinkkit import CWD, plugin_scenario, repair_tree, run
from safetykit import (
    canonical_tree,
    count,
    crash_state_problems,
    files_under,
    original_lines,
    snapshot,
)

from dsh_fork import faults
from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock
from dsh_fork.layout import project_key
from dsh_fork.locking import probe

DEEP = os.environ.get("DSH_FORK_FUZZ") == "deep"
PROJECT = project_key(CWD)


def session_dir(root: Path, session_id: str) -> Path:
    return Root(root).find(session_id)


def digest_of(root: Path, session_id: str) -> dict[str, str]:
    base = session_dir(root, session_id)
    return {k: v for k, v in tree_digest(root).items() if (root / k).parent == base}


# -- every write path refuses a locked session ---------------------------------------------------


def test_relink_of_a_locked_fork_child_writes_nothing(root: Path, hold_lock: Any) -> None:
    repair_tree(root)
    before = tree_digest(root)
    hold_lock(session_dir(root, "session-C"))

    result = run_cli("--root", root, "relink", "session-C")
    as_json = run_cli("--root", root, "relink", "session-C", "--json")

    assert result.exit_code == 6
    assert result.stderr == (
        "Error: session-C is in use: its session.lock is held by a live process; rerun later\n"
    )
    assert as_json.json()["error"]["code"] == "SESSION_LOCKED"
    assert as_json.json()["error"]["lockPath"] == str(
        session_dir(root, "session-C") / "session.lock"
    )
    assert tree_digest(root) == before


def test_a_locked_copy_needing_its_descriptor_is_skipped_untouched(
    root: Path, hold_lock: Any
) -> None:
    """legacy-c3 lacks its own descriptor: relink would append one under its lock."""
    repair_tree(root)
    legacy = digest_of(root, "legacy-c3")
    holder = hold_lock(session_dir(root, "legacy-c3"))

    result = run_cli("--root", root, "relink", "session-C", "--json")

    assert result.exit_code == 0, result.stdout
    assert {"id": "legacy-c3", "reason": "running"} in result.json()["skipped"]
    assert "legacy-c3" not in result.json()["descriptorsRepaired"]
    assert digest_of(root, "legacy-c3") == legacy
    holder.release()
    again = run_cli("--root", root, "relink", "session-C", "--json")
    assert again.json()["descriptorsRepaired"] == ["legacy-c3"]


def test_a_locked_copy_whose_child_needs_a_catalog_fact_is_left_for_later(
    root: Path, hold_lock: Any
) -> None:
    """A run died right after publishing g1's copy under c1's copy, before c1's copy got the
    catalog fact for it. c1's copy is now live: the rerun must not append to it."""
    repair_tree(root)
    with faults.install("crash", 0) as plan:
        run(root, "session-C")
    shutil.rmtree(root)
    repair_tree(root)
    links = [k for k, (kind, _) in enumerate(plan.log, 1) if kind == "link"]
    appends = [k for k, (kind, _) in enumerate(plan.log, 1) if kind == "append"]
    # The first append is the fact in c1's copy for g1's copy, the last copy linked before it
    # (the copies of one level are published together, then each one's subtree); the ids are
    # drawn in the same order on every run, so c1's copy is the dir of that append.
    g1_link = max(k for k in links if k < appends[0])
    crash_at = g1_link + 1
    c1_copy_dir = Path(plan.log[appends[0] - 1][1]).parent.name
    assert g1_link != links[0] and c1_copy_dir.startswith("session-") and c1_copy_dir != "session-C"
    with pytest.raises(faults.InjectedCrash), faults.install("crash", crash_at):
        run(root, "session-C")
    copy_of_c1 = next(
        e for e in Root(root).children_of("session-C") if e.session_dir.name == c1_copy_dir
    )
    assert [e.id for e in Root(root).children_of(copy_of_c1.id or "")] != []
    frozen = digest_of(root, copy_of_c1.id or "")
    holder = hold_lock(copy_of_c1.session_dir)

    result = run_cli("--root", root, "relink", "session-C", "--json")

    assert result.exit_code == 0, result.stdout
    assert {"id": copy_of_c1.id, "reason": "running"} in result.json()["skipped"]
    assert digest_of(root, copy_of_c1.id or "") == frozen
    holder.release()
    finished = run_cli("--root", root, "relink", "session-C", "--json")
    assert finished.exit_code == 0
    assert [c["source"] for c in finished.json()["copied"]] == []


def test_a_fork_into_a_dir_whose_lock_is_held_writes_nothing(root: Path, hold_lock: Any) -> None:
    plugin_scenario(root, Clock(), children=3)
    target = root / PROJECT / "session-mine"
    target.mkdir(mode=0o700)
    hold_lock(target)
    before = tree_digest(root)

    result = run_cli("--root", root, "fork", "session-P_A", "--id", "session-mine")

    assert result.exit_code == 6, result.stderr
    assert result.stderr.startswith("Error: session-mine is in use")
    assert tree_digest(root) == before
    assert sorted(p.name for p in target.iterdir()) == ["session.lock"]


def test_a_repair_of_a_torn_fork_child_waits_for_its_lock(root: Path, hold_lock: Any) -> None:
    """Cutting a torn tail is a write too: never done under someone else's lock."""
    repair_tree(root)
    log = session_dir(root, "session-C") / "session.v4.jsonl.zstd"
    log.write_bytes(log.read_bytes() + b"\x28\xb5\x2f\xfd\x04\x00")  # a torn frame header
    before = log.read_bytes()
    hold_lock(log.parent)

    assert run_cli("--root", root, "relink", "session-C").exit_code == 6
    assert log.read_bytes() == before


# -- reading a live session still works ----------------------------------------------------------


def test_everything_that_only_reads_works_on_live_sessions(root: Path, hold_lock: Any) -> None:
    s = plugin_scenario(root, Clock(), children=3)
    for session_id in ("session-P_A", "a-child-01", "session-C_A"):
        hold_lock(session_dir(root, session_id))

    inspected = run_cli("--root", root, "inspect", "session-P_A", "--json")
    listed = run_cli("--root", root, "list-agents", "session-P_A", "--json")
    doctored = run_cli("--root", root, "doctor", "--json")
    forked = run_cli("--root", root, "fork", "session-P_A", "--id", "session-F", "--json")
    planned = run_cli("--root", root, "relink", "session-C_A", "--dry-run")

    assert inspected.exit_code == 0 and inspected.json()["lock"] == "held"
    assert listed.exit_code == 0
    status = {child["id"]: child["status"] for child in listed.json()["children"]}
    assert status["a-child-01"] == "running" and status["a-child-02"] == "idle"
    assert doctored.exit_code == 0
    held = {f["session"] for f in doctored.json()["findings"] if f["code"] == "LOCK_HELD"}
    assert held == {"session-P_A", "a-child-01", "session-C_A"}
    assert forked.exit_code == 0, forked.stdout
    skipped = forked.json()["agents"]["skipped"]
    assert {"id": "a-child-01", "reason": "running"} in skipped
    assert Root(root).exists("session-F")
    assert planned.exit_code == 6  # a dry run still refuses a fork child that is live
    assert s.fork.id == "session-C_A"


def test_a_lock_file_that_cannot_be_probed_counts_as_held(root: Path, tmp_path: Path) -> None:
    """A ``session.lock`` the probe cannot open (here a symbolic link, refused by O_NOFOLLOW)
    is ``unknown``: shown as such, treated as running, never written through."""
    plugin_scenario(root, Clock(), children=3)
    child = session_dir(root, "a-child-02")
    outside = tmp_path / "elsewhere.lock"
    outside.write_bytes(b"")
    (child / "session.lock").unlink()
    (child / "session.lock").symlink_to(outside)

    assert probe(child) == "unknown"
    inspected = run_cli("--root", root, "inspect", "a-child-02", "--json")
    listed = run_cli("--root", root, "list-agents", "session-P_A", "--json")
    relinked = run_cli("--root", root, "relink", "session-C_A", "--json")

    assert inspected.json()["lock"] == "unknown"
    status = {c["id"]: c["status"] for c in listed.json()["children"]}
    assert status["a-child-02"] == "running"
    assert {"id": "a-child-02", "reason": "running"} in relinked.json()["skipped"]
    assert outside.read_bytes() == b""


# -- two relinks at once ------------------------------------------------------------------------

RACES = 30 if DEEP else 5


def test_two_relinks_of_one_fork_child_at_once_never_duplicate(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine" / "sessions"
    plugin_scenario(pristine, Clock(), children=3)
    originals = original_lines(pristine)
    files = snapshot(pristine)
    reference = tmp_path / "reference" / "sessions"
    shutil.copytree(pristine, reference)
    run(reference, "session-C_A")
    expected = canonical_tree(reference, originals)
    env = {k: v for k, v in os.environ.items() if k != "DSH_HOME"}
    outcomes: list[tuple[int, int]] = []
    for race in range(RACES):
        root = tmp_path / f"race-{race}" / "sessions"
        shutil.copytree(pristine, root)
        argv = [sys.executable, "-m", "dsh_fork", "--root", str(root), "relink", "session-C_A"]
        first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        second = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        codes = (first.wait(timeout=60), second.wait(timeout=60))
        for proc in (first, second):
            assert proc.stderr is not None and proc.stdout is not None
            proc.stdout.close()
            proc.stderr.close()
        outcomes.append(codes)
        assert set(codes) <= {0, 6} and 0 in codes, codes
        problems = crash_state_problems(
            root, files, [], files_under(pristine), torn_ok=False, own_temps_ok=False
        )
        assert problems == [], problems
        assert canonical_tree(root, originals) == expected, race
    count("concurrent relink pairs", RACES)
