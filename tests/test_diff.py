"""``diff``: the split of two sessions of a family is where their stored events part."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli, tree_digest
from lineagekit import Family, build_family

from dsh_fork import porcelain
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.porcelain import Context


@pytest.fixture(params=[True, False], ids=["relinked", "not relinked"])
def family(request: pytest.FixtureRequest, root: Path) -> Family:
    return build_family(root, relinked=request.param)


def test_a_fork_and_its_parent_split_at_the_forks_cut(family: Family) -> None:
    pairs = [
        (family.fork_a, family.top),
        (family.fork_b, family.top),
        (family.fork_aa, family.fork_a),
    ]
    for fork, parent in pairs:
        cut = family.cuts[fork] + 1  # the fork's own marker sits right after its boundary
        before = tree_digest(family.root)
        result = run_cli("diff", fork, parent, "--root", family.root, "--json")
        assert result.exit_code == 0, result.stderr
        assert tree_digest(family.root) == before
        data = result.json()
        assert data["relation"] == "A is a fork of B"
        assert data["commonPrefix"] == data["firstDifferingSeq"] == cut == data["a"]["cut"]
        assert data["a"]["splitEventType"] == "session/end-seed"
        assert not data["noCommonPrefix"]


def test_the_parent_side_names_the_turn_the_split_falls_in(family: Family) -> None:
    result = porcelain.diff(Context.of(str(family.root)), family.top, family.fork_a)
    assert result.relation == "B is a fork of A"
    assert result.first_difference == family.cuts[family.fork_a] + 1
    assert result.a.split_event_type == "turn/start"
    assert result.a.split_turn == 3  # the parent goes on with turn 3 …
    assert result.b.split_turn == 2  # … the fork's marker follows the end of turn 2
    assert [t.turn for t in result.a.tail] == [3, 4]
    assert result.a.tail[0].user is not None


def test_sibling_forks_split_where_the_shorter_prefix_ends(family: Family) -> None:
    result = porcelain.diff(Context.of(str(family.root)), family.fork_a, family.fork_b)
    assert result.relation == "siblings (same parent)"
    assert result.common == family.cuts[family.fork_a] + 1
    assert result.a.split_event_type == "session/end-seed"
    assert result.b.split_event_type == "turn/start"
    # The tail of A begins after its turn 2: no user message of the shared part is shown.
    assert [t.turn for t in result.a.tail] == [2]
    assert result.a.tail[0].user is None
    assert [t.turn for t in result.b.tail] == [3]


def test_subagents_are_listed_on_each_side(root: Path) -> None:
    family = build_family(root, relinked=True)
    result = porcelain.diff(Context.of(str(root)), family.fork_a, family.top)
    labels_a = sorted(a["label"] for a in result.to_json()["a"]["subagents"])
    labels_b = sorted(a["label"] for a in result.to_json()["b"]["subagents"])
    assert labels_a == labels_b == ["agent 1", "agent 2"]
    assert all(a.copy_of for a in result.a.subagents)
    assert not any(a.copy_of for a in result.b.subagents)


def test_a_copy_and_its_original_split_at_the_copys_cut(root: Path) -> None:
    family = build_family(root, relinked=True)
    found = porcelain.tree(Context.of(str(root)), None)
    copies = [n for n in found.nodes() if n.kind == "copy"]
    assert copies
    for copy in copies:
        assert copy.copy_of is not None and copy.cut is not None
        result = run_cli("diff", copy.id, copy.copy_of, "--root", root, "--json")
        data = result.json()
        assert data["relation"] == "A is a copy of B"
        assert data["firstDifferingSeq"] == copy.cut
    assert len(copies) == 18 and family.top


def test_unrelated_sessions_have_no_common_prefix(root: Path, clock: Clock) -> None:
    for name, text in (("one", "hello"), ("two", "something else")):
        spec = SessionSpec(id=name, created_at=clock())
        spec.turn(clock, text)
        spec.publish(root)
    result = run_cli("diff", "one", "two", "--root", root)
    assert result.exit_code == 0
    assert "no common prefix: the first events differ" in result.stdout
    data = run_cli("diff", "one", "two", "--root", root, "--json").json()
    assert data["noCommonPrefix"] is True
    assert data["firstDifferingSeq"] == 0
    assert data["relation"] == "no parent relation"


def test_a_session_against_itself_is_identical(root: Path) -> None:
    family = build_family(root, relinked=False)
    result = run_cli("diff", family.fork_b, family.fork_b, "--root", root)
    assert result.exit_code == 0
    assert "identical: both hold the same" in result.stdout


def test_plain_text_names_the_split_and_both_tails(root: Path) -> None:
    family = build_family(root, relinked=False)
    cut = family.cuts[family.fork_a] + 1
    result = run_cli("diff", family.fork_a, family.top, "--root", root)
    lines = result.stdout.splitlines()
    assert lines[2] == "relation: A is a fork of B"
    assert lines[3] == f"common prefix: {cut} events (seqs 0-{cut - 1})"
    assert lines[4] == f"  A at seq {cut}: session/end-seed (turn 2)"
    assert lines[5] == f"  B at seq {cut}: turn/start (turn 3)"
    assert f"A from seq {cut}: 1 turn" in result.stdout
    assert f"B from seq {cut}: 2 turns" in result.stdout


def test_a_missing_session_is_session_not_found(root: Path) -> None:
    family = build_family(root, relinked=False)
    assert run_cli("diff", family.top, "nobody", "--root", root).exit_code == 3


# -- --exit-code (issue 35) -------------------------------------------------------------------


def test_exit_code_is_1_when_either_side_has_a_turn_after_the_prefix(family: Family) -> None:
    """The parent went on after the fork's cut: they differ, whichever side is A."""
    for a, b in ((family.fork_a, family.top), (family.top, family.fork_a)):
        result = run_cli("diff", a, b, "--root", family.root, "--exit-code", "-q")
        document = run_cli("diff", a, b, "--root", family.root, "--exit-code", "--json")
        assert (result.exit_code, result.stdout, result.stderr) == (1, "", "")
        assert document.exit_code == 1 and document.json()["differs"] is True


def test_a_fork_with_nothing_after_its_cut_does_not_differ(root: Path) -> None:
    """A fork of a session's end holds the source's events, then its marker, title and catalog
    facts: no turn after the common prefix on either side."""
    clock = Clock()
    source = SessionSpec(id="session-S", created_at=clock(), cwd="/w")
    source.turn(clock)
    source.turn(clock)
    source.publish(root)
    made = run_cli("--root", root, "fork", "session-S", "--id", "child", "--json")
    assert made.exit_code == 0, made.stderr

    plain = run_cli("--root", root, "diff", "child", "session-S")
    checked = run_cli("--root", root, "diff", "child", "session-S", "--exit-code", "--json")

    assert plain.exit_code == 0
    assert checked.exit_code == 0
    data = checked.json()
    assert data["identical"] is False and data["differs"] is False
    assert data["a"]["splitEventType"] == "session/end-seed"


def test_exit_code_is_0_for_a_session_against_itself(root: Path) -> None:
    clock = Clock()
    spec = SessionSpec(id="session-S", created_at=clock(), cwd="/w")
    spec.turn(clock)
    spec.publish(root)
    result = run_cli("--root", root, "diff", "S", "session-S", "--exit-code")
    assert result.exit_code == 0 and "identical" in result.stdout


def test_without_exit_code_a_difference_exits_0(family: Family) -> None:
    result = run_cli("diff", family.fork_a, family.fork_b, "--root", family.root)
    assert result.exit_code == 0


def test_exit_code_keeps_the_error_codes(root: Path) -> None:
    result = run_cli("--root", root, "diff", "nosuch", "other", "--exit-code")
    assert result.exit_code == 3
