"""``list`` for people (issue 35): by default the conversations (roots, forks, linked), each
with the subagents and copies under it counted, in text and --json alike; a session that
cannot be read, or that no conversation holds, is always a row; ``--all`` or ``--kind`` lists
every session, a subagent titled by its label."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from relinkkit import CWD, fork_of, subagent
from schemakit import check

from dsh_fork.cli.tables import human_size
from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec, write_spec_as
from dsh_fork.generations import dir_bytes


@pytest.fixture
def home(root: Path) -> Path:
    """P with subagent A (which has its own subagent AA), a fork C of P with a copy K of A,
    an orphan subagent O whose parent is gone, and R alone."""
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    parent.title(clock, "the parent")
    a = subagent(clock, "session-A", parent, label="researcher")
    aa = subagent(clock, "session-AA", a, label="deep helper")
    parent.catalog(clock, a, label="researcher")
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    copy = fork_of(a, "session-K", clock(), origin="subagent")
    copy.parent = "session-C"
    orphan = subagent(clock, "session-O", "session-gone", label="lost")
    other = SessionSpec(id="other-R", created_at=clock(), cwd="/srv/elsewhere")
    other.turn(clock)
    for spec in (parent, a, aa, fork, copy, orphan, other):
        spec.publish(root)
    return root


def rows_of(root: Path, *args: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    result = run_cli("--root", root, "list", *args, "--json")
    assert result.exit_code == 0, result.stderr
    document = result.json()
    check("list", document)
    return document, {row["id"]: row for row in document["sessions"]}


def test_by_default_the_conversations_with_their_agents_counted(home: Path) -> None:
    document, rows = rows_of(home)

    assert document["schemaVersion"] == 3
    assert document["all"] is False and document["total"] == 7
    assert set(rows) == {"session-P", "session-C", "other-R", "session-O"}
    counts = {i: (r["kind"], r["subagents"], r["copies"]) for i, r in rows.items()}
    assert counts == {
        "session-P": ("root", 2, 0),  # A and, under it, AA
        "session-C": ("fork", 0, 1),  # the copy K
        "other-R": ("root", 0, 0),
        "session-O": ("subagent", 0, 0),  # its parent is gone: no conversation holds it
    }
    tree = Root(home)
    agents = sum(dir_bytes(tree.find(i))[0] for i in ("session-A", "session-AA"))
    assert rows["session-P"]["bytes"] == dir_bytes(tree.find("session-P"))[0]
    assert rows["session-P"]["agentBytes"] == agents


def test_the_text_says_what_the_default_leaves_out(home: Path) -> None:
    result = run_cli("--root", home, "list")
    exact = run_cli("--root", home, "list", "--bytes")

    assert result.exit_code == exact.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"4 conversations (7 sessions; --all lists every one) in {home}"
    assert lines[1].split() == [
        "id", "kind", "title", "turns", "last", "activity", "forks", "subagents", "copies",
        "size", "cwd",
    ]  # fmt: skip
    _, rows = rows_of(home)
    size = rows["session-P"]["bytes"] + rows["session-P"]["agentBytes"]
    parent = next(line for line in lines if line.startswith("session-P "))
    assert "the parent" in parent and human_size(size) in parent
    parent = next(line for line in exact.stdout.splitlines() if line.startswith("session-P "))
    assert str(size) in parent.split()


def test_all_lists_every_session_and_titles_subagents_by_label(home: Path) -> None:
    document, rows = rows_of(home, "--all")

    assert document["all"] is True
    assert len(rows) == document["total"] == 7
    assert rows["session-A"]["label"] == "researcher"
    assert rows["session-A"]["title"] is None
    text = run_cli("--root", home, "list", "-a").stdout.splitlines()
    line = next(line for line in text if line.startswith("session-AA "))
    assert "deep helper" in line
    assert text[0] == f"7 sessions in {home}"


def test_a_kind_filter_lists_every_session_of_that_kind(home: Path) -> None:
    _, rows = rows_of(home, "--kind", "subagent")
    assert set(rows) == {"session-A", "session-AA", "session-O"}


def test_an_unreadable_session_is_always_a_row(home: Path) -> None:
    future = SessionSpec(id="session-F", created_at=1, cwd=CWD, parent="session-P")
    future.turn(Clock())
    write_spec_as(future, home, 9)

    _, rows = rows_of(home)

    assert rows["session-F"]["kind"] is None
    assert rows["session-F"]["error"]["code"] == "UNSUPPORTED_FORMAT"


def test_a_deep_chain_of_subagents_is_counted_under_its_conversation(root: Path) -> None:
    clock = Clock()
    top = SessionSpec(id="session-T", created_at=clock(), cwd=CWD)
    top.turn(clock)
    specs: list[SessionSpec] = [top]
    for i in range(1_200):  # deeper than Python's recursion limit
        specs.append(subagent(clock, f"session-s{i:04d}", specs[-1].id, turns=0, label=None))
    for spec in specs:
        spec.publish(root)

    _, rows = rows_of(root)

    assert set(rows) == {"session-T"}
    assert rows["session-T"]["subagents"] == 1_200


def test_one_conversation_is_counted_in_the_singular(tmp_path: Path) -> None:
    root = tmp_path / "home" / "sessions"
    made = run_cli("fixture", root, "--sessions", "1", "--agents", "1")
    assert made.exit_code == 0, made.stderr

    result = run_cli("--root", root, "list")

    assert result.exit_code == 0
    first = result.stdout.splitlines()[0]
    assert first == f"1 conversation (2 sessions; --all lists every one) in {root}"
