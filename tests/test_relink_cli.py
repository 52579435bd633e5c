"""``dsh-fork relink``: exit codes, one JSON document, one error line, the operation log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import run_cli, tree_listing
from relinkkit import CWD, fork_of, oplog_lines, subagent

from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec, write_spec_as

SUMMARY_KEYS = [
    "forkChild",
    "source",
    "copied",
    "skipped",
    "unrelated",
    "uncatalogable",
    "catalogued",
    "descriptorsRepaired",
    "failed",
    "unresumable",
    "dryRun",
    "warnings",
]


def scenario(root: Path, clock: Clock, *, bad: bool = False) -> SessionSpec:
    """P with two catalogued children (one without a label when ``bad``); C = fork of P."""
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    first = subagent(clock, "first", parent, label="first")
    second = subagent(clock, "second", parent, label=None if bad else "second")
    parent.catalog(clock, first, label="first")
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, first, second, fork):
        spec.publish(root)
    return fork


def top_level(clock: Clock, session_id: str) -> SessionSpec:
    spec = SessionSpec(id=session_id, created_at=clock(), cwd=CWD)
    spec.turn(clock)
    return spec


def test_json_output_is_the_summary(root: Path, clock: Clock) -> None:
    scenario(root, clock)

    result = run_cli("relink", "session-C", "--root", root, "--json")

    assert result.exit_code == 0
    assert result.stderr == ""
    summary = result.json()
    assert list(summary) == ["schemaVersion", *SUMMARY_KEYS]
    assert summary["forkChild"] == "session-C" and summary["source"] == "session-P"
    assert [c["source"] for c in summary["copied"]] == ["first", "second"]
    assert summary["dryRun"] is False


def test_a_partial_run_exits_10_naming_each_item(root: Path, clock: Clock) -> None:
    scenario(root, clock, bad=True)

    as_json = run_cli("--root", root, "relink", "session-C", "--dry-run", "--json")
    human = run_cli("--root", root, "relink", "session-C")

    assert as_json.exit_code == 10
    error = as_json.json()["error"]
    assert error["code"] == "PARTIAL"
    assert error["message"] == "1 of 2 items failed"
    assert error["failed"] == [
        {
            "id": "second",
            "code": "UNCATALOGABLE",
            "message": "no catalog fact can be made: continuable descriptor without label",
        }
    ]
    document = as_json.json()
    assert document["dryRun"] is True and list(document) == [
        "schemaVersion",
        *SUMMARY_KEYS,
        "error",
    ]
    assert human.exit_code == 10
    assert len(Root(root).children_of("session-C")) == 1  # nothing written for "second"
    assert human.stderr.splitlines() == [
        "Error: 1 of 2 items failed",
        "  failed: second (UNCATALOGABLE): no catalog fact can be made: continuable descriptor "
        "without label",
    ]
    assert "copied: 1" in human.stdout
    assert "uncatalogable: second: continuable descriptor without label" in human.stdout


def test_precondition_errors_have_their_codes(root: Path, clock: Clock, hold_lock: Any) -> None:
    fork = scenario(root, clock)
    old = fork_of(top_level(clock, "p3"), "old-fork", clock())
    write_spec_as(old, root, 3)

    not_fork = run_cli("relink", "session-P", "--root", root)
    missing = run_cli("relink", "nobody", "--root", root)
    below = run_cli("relink", "old-fork", "--root", root, "--json")
    neither = run_cli("relink", "--root", root)
    both = run_cli("relink", "session-C", "--all", "--root", root)
    hold_lock(Root(root).find(fork.id))
    before = tree_listing(root)
    locked = run_cli("relink", "session-C", "--root", root, "--json")

    assert not_fork.exit_code == 2
    assert not_fork.stderr == (
        "Error: session-P is not a fork child (a fork child is seeded, has a parentSession "
        "and no origin)\n"
    )
    assert missing.exit_code == 3 and missing.stderr.startswith("Error: no session 'nobody'")
    assert below.exit_code == 8
    assert below.json()["error"]["code"] == "UNSUPPORTED_FORMAT"
    assert below.json()["error"]["hint"] == "open the session once in DSH, which migrates it to v4"
    assert neither.exit_code == both.exit_code == 2
    assert neither.stderr == "Error: give either FORK_CHILD or --all\n"
    assert locked.exit_code == 6
    assert locked.json()["error"]["code"] == "SESSION_LOCKED"
    assert tree_listing(root) == before


def test_dry_run_through_the_cli_leaves_the_root_alone(root: Path, clock: Clock) -> None:
    scenario(root, clock)
    before = tree_listing(root)

    result = run_cli("relink", "session-C", "--dry-run", "--root", root)

    assert result.exit_code == 0
    assert tree_listing(root) == before
    assert "(dry run: nothing written)" in result.stdout
    assert "planned copies: 2" in result.stdout


def test_the_operation_log_lives_beside_the_root_or_in_dsh_home(
    root: Path, clock: Clock, tmp_path: Path
) -> None:
    scenario(root, clock)
    home = tmp_path / "dsh-home"

    dry = run_cli("relink", "session-C", "--root", root, "--dry-run", env={"DSH_HOME": ""})
    real = run_cli("relink", "session-C", "--root", root, env={"DSH_HOME": str(home)})

    assert dry.exit_code == real.exit_code == 0
    beside = oplog_lines(root.parent / "dsh-fork-relink.log")
    assert [line["message"] for line in beside] == ["copying subagent tree", "copied subagent tree"]
    assert all(line["data"]["dryRun"] is True for line in beside)
    in_home = oplog_lines(home / "dsh-fork-relink.log")
    assert in_home[-1]["message"] == "copied subagent tree"
    assert in_home[-1]["data"]["dryRun"] is False


def test_an_unwritable_operation_log_is_a_warning(root: Path, clock: Clock, tmp_path: Path) -> None:
    scenario(root, clock)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")

    result = run_cli("relink", "session-C", "--root", root, env={"DSH_HOME": str(blocker)})

    assert result.exit_code == 0
    assert result.stderr.startswith(f"Warning: cannot write the operation log {blocker}/")
    assert len(Root(root).children_of("session-C")) == 2


def test_relink_all_reports_every_fork_child(root: Path, clock: Clock, hold_lock: Any) -> None:
    fork = scenario(root, clock)
    other = fork_of(top_level(clock, "session-Q"), "fork-Q", clock())
    other.publish(root)  # its parent is not published: a warning, not an error

    as_json = run_cli("relink", "--all", "--root", root, "--dry-run", "--json")
    assert as_json.exit_code == 0
    data = as_json.json()
    assert list(data) == ["schemaVersion", "results", "failed", "skipped"]
    assert [r["forkChild"] for r in data["results"]] == ["session-C", "fork-Q"]
    assert data["failed"] == []

    hold_lock(Root(root).find(fork.id))
    human = run_cli("relink", "--all", "--root", root)
    assert human.exit_code == 10
    assert human.stderr.splitlines() == [
        "Warning: fork-Q: the parent session-Q is missing; branch membership uses fork-Q's "
        "inherited prefix and createdAt only",
        "Error: 1 item failed in 1 of 2 fork children",
        "  failed: session-C (SESSION_LOCKED): is in use: its session.lock is held by a live "
        "process; rerun later",
        "Next: run `dsh-fork relink --all`",
    ]
    # One row per fork child with something to report; the others are one count.
    assert human.stdout.splitlines() == [
        "relink --all",
        "fork child  copied  catalog repaired  skipped  failed",
        "session-C        0                 0        0       1",
        "1 fork child had nothing to copy or repair",
        "total: 2 fork children; copied 0, catalog repaired 0, skipped 0, failed 1",
    ]


def test_help_shows_an_example() -> None:
    result = run_cli("relink", "--help")
    assert result.exit_code == 0
    assert "  dsh-fork relink " in result.stdout
    assert "--all" in result.stdout and "--dry-run" in result.stdout
