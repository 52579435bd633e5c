"""The operation log as the plugin's users know it (docs/oplog.md): the plugin's records with
their meaning, and the resumability check made by reading every written copy back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from relinkkit import CWD, fork_of, legacy_copy, oplog_lines, plugin_scenario, run, subagent

from dsh_fork import relinkwalk
from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.resumable import unresumable


def test_a_clean_run_logs_the_plugins_records_and_an_empty_unresumable(root: Path) -> None:
    s = plugin_scenario(root, Clock())
    oplog = root.parent / "relink.log"

    summary = run(root, s.fork.id, oplog_path=oplog)

    lines = oplog_lines(oplog)
    assert [line["message"] for line in lines] == [
        "copying subagent tree",
        "copy progress",
        "copied subagent tree",
    ]
    assert summary.unresumable == []
    assert lines[-1]["data"]["unresumable"] == []
    assert lines[-1]["data"] == summary.to_json()


def test_a_running_child_is_skipped_and_logged(root: Path, hold_lock: Any) -> None:
    s = plugin_scenario(root, Clock(), children=3)
    oplog = root.parent / "relink.log"
    hold_lock(Root(root).find("a-child-02"))

    summary = run(root, s.fork.id, oplog_path=oplog)

    assert {"id": "a-child-02", "reason": "running"} in summary.skipped
    skipped = [line for line in oplog_lines(oplog) if line["message"] == "skipped running child"]
    assert [line["data"] for line in skipped] == [
        {"forkChild": s.fork.id, "childId": "a-child-02", "reason": "running"}
    ]
    assert summary.ok  # a running child is a normal outcome: a later run copies it


def test_copies_whose_catalog_fact_never_came_are_listed_unresumable(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is real: with the catalog append knocked out, every copy fails it, the run
    is PARTIAL, and the log names each copy (the plugin's check always passed)."""
    s = plugin_scenario(root, Clock(), children=2)
    oplog = root.parent / "relink.log"
    monkeypatch.setattr(relinkwalk._Walker, "_append_to_parent", lambda *args: None)

    summary = run(root, s.fork.id, oplog_path=oplog)

    copies = [row["copy"] for row in summary.copied]
    assert len(copies) == 3  # two children and the grandchild
    assert [item["id"] for item in summary.unresumable] == copies
    assert all("has no catalog fact naming it" in item["message"] for item in summary.unresumable)
    partial = summary.partial()
    assert partial is not None and partial.exit_code == 10
    assert [item["code"] for item in partial.failed] == ["UNRESUMABLE"] * 3
    assert partial.next_command == f"dsh-fork relink {s.fork.id}"  # a rerun catalogues them
    records = [line for line in oplog_lines(oplog) if line["message"] == "copy is not resumable"]
    assert [line["data"]["copyId"] for line in records] == copies
    assert oplog_lines(oplog)[-1]["data"]["unresumable"] == copies

    monkeypatch.undo()
    rerun = run(root, s.fork.id)
    assert rerun.copied == [] and sorted(rerun.catalogued) == sorted(copies)
    assert rerun.unresumable == [] and rerun.ok


def test_the_check_names_each_thing_a_copy_lacks(root: Path, hold_lock: Any) -> None:
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    helper = subagent(clock, "helper", parent)
    parent.turn(clock)
    parent.flush()
    fork = fork_of(parent, "session-C", clock())
    good = legacy_copy(helper, "copy-good", fork, clock())
    bare = legacy_copy(helper, "copy-bare", fork, clock(), own_descriptor=False)
    open_copy = legacy_copy(helper, "copy-open", fork, clock())
    open_start = open_copy.seq  # the turn/start of the open turn
    open_copy.open_turn(clock)
    held = legacy_copy(helper, "copy-held", fork, clock())
    for copy in (good, bare, open_copy, held):
        fork.catalog(clock, copy, label="helper")
    lost = legacy_copy(helper, "copy-lost", fork, clock())  # never catalogued
    fork.flush()
    for spec in (parent, helper, fork, good, bare, open_copy, held, lost):
        spec.publish(root)
    hold_lock(Root(root).find("copy-held"))
    rows = [
        {"copy": copy, "parent": "session-C"}
        for copy in ("copy-good", "copy-bare", "copy-open", "copy-held", "copy-lost")
    ]

    failed = unresumable(Root(root), [*rows, {"copy": None, "parent": None}])

    assert failed == [
        {"id": "copy-bare", "message": "copy-bare: it has no own subagent/descriptor"},
        {
            "id": "copy-open",
            "message": f"copy-open: it holds an open turn (started at seq {open_start})",
        },
        {"id": "copy-held", "message": "copy-held: its session.lock is held"},
        {
            "id": "copy-lost",
            "message": "copy-lost: its parent session-C has no catalog fact naming it",
        },
    ]
    gone = unresumable(Root(root), [{"copy": "copy-gone", "parent": "session-gone"}])
    assert gone == [
        {
            "id": "copy-gone",
            "message": "copy-gone: it is not on disk; its parent session-gone cannot be read: "
            "it is not on disk",
        }
    ]
