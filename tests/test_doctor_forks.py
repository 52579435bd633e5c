"""doctor sees what relink repairs (issue 32): a fork without its subagent tree, a fork made
without one on purpose, and copies an earlier relink wrongly made under a delegation child."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from relinkkit import CWD, fork_of, legacy_copy, subagent

from dsh_fork import kinds, relinkplan
from dsh_fork.discovery import Root
from dsh_fork.doctor import doctor
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import Generation
from dsh_fork.kinds import KindRule
from dsh_fork.reader import open_log
from dsh_fork.relink import relink
from dsh_fork.sessionentry import SessionEntry
from dsh_fork.sessionlog import SessionLog

NO_HOME = {"DSH_HOME": ""}


def fork_findings(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    codes = ("FORK_TREE_MISSING", "FORK_WITHOUT_AGENTS", "MISPLACED_COPIES")
    return [
        (f["severity"], f["code"], f["session"]) for f in report["findings"] if f["code"] in codes
    ]


def message_of(report: dict[str, Any], code: str) -> str:
    (message,) = [f["message"] for f in report["findings"] if f["code"] == code]
    assert isinstance(message, str)
    return message


def test_an_unrelinked_fork_lacks_exactly_what_relink_dry_run_copies(root: Path) -> None:
    summary = generate(root, sessions=1, agents=2, depth=2, turns=2, forks=1, seed=3)
    (fork,) = summary.forks
    plan = relink(Root(root), Root(root).find(fork), dry_run=True)
    assert len(plan.copied) == 6  # 2 agents, each with 2 of its own

    before = run_cli("doctor", "--root", root, "--json", env=NO_HOME)

    assert before.exit_code == 0
    assert fork_findings(before.json()) == [("warning", "FORK_TREE_MISSING", fork)]
    assert message_of(before.json(), "FORK_TREE_MISSING") == (
        f"lacks 6 subagents (2 direct, 4 below them) of its branch: `dsh-fork relink {fork}` "
        "copies them (`--dry-run` lists them)"
    )

    done = run_cli("relink", fork, "--root", root, env=NO_HOME)
    assert done.exit_code == 0, done.stderr
    after = run_cli("doctor", "--root", root, "--json", env=NO_HOME)

    assert after.exit_code == 0
    assert fork_findings(after.json()) == []
    assert after.json()["counts"] == {"error": 0, "warning": 0, "info": 0}


def test_a_partly_relinked_fork_lacks_only_the_rest(root: Path) -> None:
    summary = generate(root, sessions=1, agents=3, depth=1, turns=2, forks=1, seed=4)
    (fork,) = summary.forks
    relink(Root(root), Root(root).find(fork))
    copies = Root(root).children_of(fork)
    assert len(copies) == 3
    doomed = copies[-1].session_dir
    for item in doomed.iterdir():
        item.unlink()
    doomed.rmdir()

    report = doctor(Root(root)).to_json()

    assert fork_findings(report) == [("warning", "FORK_TREE_MISSING", fork)]
    assert message_of(report, "FORK_TREE_MISSING").startswith("lacks 1 subagent of its branch")
    assert len(relink(Root(root), Root(root).find(fork), dry_run=True).copied) == 1


def test_a_no_agents_fork_is_info_unless_named(root: Path) -> None:
    summary = generate(root, sessions=1, agents=2, depth=1, turns=2, seed=5)
    top = summary.top_level[0]
    made = run_cli("fork", top, "--no-agents", "--id", "session-N", "--root", root, env=NO_HOME)
    assert made.exit_code == 0, made.stderr

    whole = run_cli("doctor", "--root", root, "--json", env=NO_HOME)

    assert whole.exit_code == 0
    assert fork_findings(whole.json()) == [("info", "FORK_WITHOUT_AGENTS", "session-N")]
    assert message_of(whole.json(), "FORK_WITHOUT_AGENTS") == (
        "forked with --no-agents (the operation log says so): left without its subagent tree "
        "on purpose; `dsh-fork relink session-N` copies it"
    )

    named = run_cli("doctor", "session-N", "--root", root, "--json", env=NO_HOME)

    assert named.exit_code == 0
    assert fork_findings(named.json()) == [("warning", "FORK_TREE_MISSING", "session-N")]


def test_copies_a_relink_made_under_a_delegation_child_are_named(root: Path) -> None:
    """What relink --all did before the rule: P's subagents copied under D, a seeded child
    without origin that P catalogues (and that has its own descriptor)."""
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    helpers = [subagent(clock, f"helper-{k}", parent, label=f"helper {k}") for k in (1, 2)]
    for helper in helpers:
        parent.catalog(clock, helper, label=helper.id)
    parent.turn(clock)
    parent.flush()
    child = fork_of(parent, "session-D", clock())
    child.descriptor(clock, "delegated")
    child.turn(clock)
    child.flush()
    parent.catalog(clock, child, label="delegated")
    parent.flush()
    wrong = [
        legacy_copy(helper, f"copy-{k}", child, clock()) for k, helper in enumerate(helpers, 1)
    ]
    own = subagent(clock, "own-helper", child, label="its own")  # D's own subagent: not named
    for spec in (parent, *helpers, child, *wrong, own):
        spec.publish(root)

    report = doctor(Root(root)).to_json()

    assert fork_findings(report) == [("warning", "MISPLACED_COPIES", "session-D")]
    assert message_of(report, "MISPLACED_COPIES") == (
        "2 copies of its parent's subagents under this delegation child (its parent's log "
        "catalogues it), made by a relink that took it for a fork: copy-1 (copy of helper-1), "
        "copy-2 (copy of helper-2). They duplicate the parent's subagents; delete them once no "
        "one uses them"
    )
    not_fork = run_cli("relink", "--all", "--root", root, "--json", env=NO_HOME)
    assert not_fork.exit_code == 0
    assert not_fork.json()["results"] == []


def test_the_kind_rule_reads_no_log_that_doctor_validates(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delegation child without origin (its parent catalogues it) and a user fork, both
    without the parent's subagent: the rule settles both from the logs doctor validates (no
    log is read for it a second time), and only the user fork lacks a tree."""
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    helper = subagent(clock, "helper-1", parent, label="helper")
    parent.catalog(clock, helper, label=helper.id)
    parent.turn(clock)
    parent.flush()
    delegated = fork_of(parent, "session-D", clock())
    delegated.turn(clock)
    delegated.flush()
    parent.catalog(clock, delegated, label="delegated")
    parent.turn(clock)
    parent.flush()
    user_fork = fork_of(parent, "session-F", clock())
    user_fork.turn(clock)
    user_fork.flush()
    for spec in (parent, helper, delegated, user_fork):
        spec.publish(root)
    reads: list[str] = []
    real = open_log  # what the rule reads a log with (``kinds.read_evidence``)

    def counted(generation: Generation, **options: Any) -> SessionLog:
        reads.append(generation.path.parent.name)
        return real(generation, **options)

    monkeypatch.setattr(kinds, "open_log", counted)
    rule = KindRule(Root(root))
    assert [e.id for e in rule.fork_children()] == ["session-F"]  # the rule reads on its own
    assert reads

    reads.clear()
    report = doctor(Root(root)).to_json()

    assert reads == []
    assert fork_findings(report) == [("warning", "FORK_TREE_MISSING", "session-F")]


def test_the_forks_of_one_parent_read_its_subagents_once(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two unrelinked forks of one parent lack the same subagents: doctor's dry-run plans
    share the candidates' logs, and each fork is still told what it lacks."""
    summary = generate(root, sessions=1, agents=2, depth=1, turns=2, forks=2, seed=5)
    first, second = summary.forks
    opened: list[str] = []
    real = relinkplan._open

    def counted(entry: SessionEntry) -> Any:
        opened.append(entry.dir_text)
        return real(entry)

    monkeypatch.setattr(relinkplan, "_open", counted)

    report = doctor(Root(root)).to_json()

    assert sorted(fork_findings(report)) == sorted(
        [("warning", "FORK_TREE_MISSING", first), ("warning", "FORK_TREE_MISSING", second)]
    )
    assert len(opened) == 2  # the parent's two subagents, once each
    assert len(set(opened)) == 2
