"""relink's summaries add up (issue 35): counts and plurals right, "Next:" only when a rerun
can help, and a damaged session outside every fork's tree is a warning, not a PARTIAL run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_cli
from relinkkit import CWD, fork_of, subagent
from test_safety_attacks import PROJECT, _can_switch_user, shared_tree
from userkit import NOBODY, cli_as

from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.relink import relink_all
from dsh_fork.relinkresult import RelinkAllResult, RelinkSummary, rerun_helps

NO_HOME = {"DSH_HOME": ""}
__all__ = ["shared_tree"]  # the fixture: a root any user can reach, owned by nobody


def family(root: Path, clock: Clock, parent_id: str = "session-P") -> SessionSpec:
    parent = SessionSpec(id=parent_id, created_at=clock(), cwd=CWD)
    parent.turn(clock)
    helper = subagent(clock, f"{parent_id}-helper", parent)
    parent.catalog(clock, helper, label="helper")
    parent.turn(clock)
    parent.flush()
    for spec in (parent, helper):
        spec.publish(root)
    return parent


def broken_session(root: Path, name: str = "session-broken") -> Path:
    """A session dir whose log has no readable header: nothing says what it was."""
    session_dir = root / "-home-u-proj" / name
    session_dir.mkdir(parents=True)
    (session_dir / "session.v4.jsonl.zstd").write_bytes(b"not a zstd frame at all")
    return session_dir


def test_a_corrupt_session_in_a_root_without_forks_is_a_warning_not_partial(root: Path) -> None:
    """The issue's "1 items failed in 1 of 0 fork children", then "Next: relink --all"."""
    family(root, Clock())
    broken_session(root)

    result = run_cli("relink", "--all", "--root", root, env=NO_HOME)

    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "relink --all",
        "total: 0 fork children; copied 0, catalog repaired 0, skipped 0, failed 0",
    ]
    assert result.stderr.splitlines() == [
        "Warning: session-broken cannot be read (bad frame magic at byte 0 (frame 1)); no "
        "fork's tree names it, so relink leaves it out (`dsh-fork doctor` says more)"
    ]


def test_a_corrupt_session_outside_the_tree_does_not_fail_a_fork(root: Path) -> None:
    clock = Clock()
    parent = family(root, clock)
    fork_of(parent, "session-C", clock()).publish(root)
    broken_session(root)

    result = run_cli("relink", "--all", "--root", root, env=NO_HOME)

    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "total: 1 fork child; copied 1, catalog repaired 0, skipped 0, failed 0"
    )
    named = run_cli("relink", "session-C", "--root", root, "--json", env=NO_HOME)
    assert named.exit_code == 0
    assert named.json()["failed"] == []
    assert [w.split(" cannot")[0] for w in named.json()["warnings"]] == ["session-broken"]


def test_a_corrupt_subagent_of_the_tree_is_partial_without_next(root: Path) -> None:
    """No rerun can read a corrupt log: the error says what failed and offers no "Next:"."""
    clock = Clock()
    parent = family(root, clock)
    fork_of(parent, "session-C", clock()).publish(root)
    helper = Root(root).entry("session-P-helper")
    assert helper is not None
    (helper.session_dir / "session.v4.jsonl.zstd").write_bytes(b"not a zstd frame at all")

    result = run_cli("relink", "--all", "--root", root, env=NO_HOME)

    assert result.exit_code == 10
    lines = result.stderr.splitlines()
    assert lines[0] == "Error: 1 item failed in 1 of 1 fork child"
    assert not any(line.startswith("Next:") for line in lines)
    single = run_cli("relink", "session-C", "--root", root, env=NO_HOME)
    assert single.exit_code == 10
    assert single.stderr.splitlines()[0] == "Error: 1 of 1 item failed"
    assert not any(line.startswith("Next:") for line in single.stderr.splitlines())


def test_a_locked_fork_child_offers_the_rerun(root: Path, hold_lock: object) -> None:
    clock = Clock()
    parent = family(root, clock)
    fork_of(parent, "session-C", clock()).publish(root)
    fork_of(parent, "session-C2", clock()).publish(root)
    hold_lock(Root(root).find("session-C"))  # type: ignore[operator]

    result = run_cli("relink", "--all", "--root", root, env=NO_HOME)

    assert result.exit_code == 10
    lines = result.stderr.splitlines()
    assert lines[0] == "Error: 1 item failed in 1 of 2 fork children"
    assert "Next: run `dsh-fork relink --all`" in lines


def test_the_messages_count_and_place_every_failed_item() -> None:
    def item(fork: str | None, code: str = "CORRUPT_LOG") -> dict[str, object]:
        return {"id": "x", "code": code, "message": "m", "forkChild": fork}

    def message(failed: list[dict[str, object]], forks: int) -> tuple[str, str | None]:
        partial = RelinkAllResult([], failed, forks).partial()
        assert partial is not None
        return partial.message, partial.next_command

    assert message([item("a")], 2) == ("1 item failed in 1 of 2 fork children", None)
    assert message([item("a"), item("b")], 2) == ("2 items failed in 2 of 2 fork children", None)
    assert message([item(None, "IO_ERROR")], 0) == (
        "1 item failed outside any fork child",
        "dsh-fork relink --all",
    )
    assert message([item("a"), item(None, "IO_ERROR"), item(None, "IO_ERROR")], 1) == (
        "3 items failed: 1 in 1 of 1 fork child, 2 outside any fork child",
        "dsh-fork relink --all",
    )
    dry = RelinkAllResult([], [item("a", "SESSION_LOCKED")], 1, dry_run=True).partial()
    assert dry is not None and dry.next_command is None

    summary = RelinkSummary("session-C", "session-P", False)
    summary.failed.append({"id": "s", "code": "UNSUPPORTED_FORMAT", "message": "m"})
    partial = summary.partial()
    assert partial is not None
    assert (partial.message, partial.next_command) == ("1 of 1 item failed", None)
    summary.failed.append({"id": "t", "code": "SESSION_STALE", "message": "m"})
    partial = summary.partial()
    assert partial is not None
    assert partial.message == "2 of 2 items failed"
    assert partial.next_command == "dsh-fork relink session-C"
    assert rerun_helps([{"code": "UNCATALOGABLE"}]) is False


def test_relink_all_counts_a_fork_child_whose_header_is_refused(root: Path) -> None:
    """A fork child is in the count it fails in: never "of 0 fork children"."""
    clock = Clock()
    parent = family(root, clock)
    bad = fork_of(parent, "session-C", clock())
    bad.depth = -1  # a header DSH refuses: its raw fields still say a fork child
    bad.publish(root)

    result = relink_all(Root(root))

    assert result.forks == 1
    assert [(f["id"], f["forkChild"]) for f in result.failed] == [("session-C", "session-C")]
    partial = result.partial()
    assert partial is not None
    assert partial.message == "1 item failed in 1 of 1 fork child"


@pytest.mark.skipif(not _can_switch_user(), reason="needs root to run commands as another user")
def test_dirs_another_user_cannot_read_are_placed_where_they_fail(shared_tree: Path) -> None:
    """Run as uid 65534: a subagent dir of the fork's tree it may not read is that fork's
    failed item, named once; a project dir it may not list is outside any fork child, with
    the rerun offered (a rerun reads it once the permissions allow)."""
    root = shared_tree
    hidden = root / PROJECT / "a-child-02"
    os.chown(hidden, 0, 0)
    hidden.chmod(0o700)

    code, _, err = cli_as(NOBODY, "--root", root, "relink", "--all", "--dry-run")

    assert code == 10
    assert err.splitlines() == [
        "Error: 1 item failed in 1 of 1 fork child",
        f"  failed: a-child-02 (IO_ERROR): cannot read the session directory {hidden}: "
        "Permission denied",
    ]

    project = root / PROJECT
    os.chown(project, 0, 0)
    project.chmod(0o700)

    code, out, err = cli_as(NOBODY, "--root", root, "relink", "--all")

    assert code == 10
    table_row, total = out.splitlines()[2:]
    assert table_row.split() == ["(outside", "any", "fork)", "0", "0", "0", "1"]
    assert total == "total: 0 fork children; copied 0, catalog repaired 0, skipped 0, failed 1"
    assert err.splitlines() == [
        "Error: 1 item failed outside any fork child",
        f"  failed: {PROJECT} (IO_ERROR): cannot read the project directory {project}: "
        "Permission denied",
        "Next: run `dsh-fork relink --all`",
    ]


@pytest.mark.skipif(not _can_switch_user(), reason="needs root to run commands as another user")
def test_a_root_another_user_cannot_enter_is_named_itself(shared_tree: Path) -> None:
    """relink --all on a root the user may not enter: IO_ERROR (11) naming the root, not a
    path below it that was never asked for."""
    root = shared_tree
    os.chown(root, 0, 0)
    root.chmod(0o700)

    code, out, err = cli_as(NOBODY, "--root", root, "relink", "--all")

    assert (code, out) == (11, "")
    assert err == f"Error: cannot enter the sessions root {root}: Permission denied\n"
