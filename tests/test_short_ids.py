"""Short ids (issue 35): a SESSION is any unique prefix of an id or of its short form (the id
without DSH's ``session-``); an exact id wins; an ambiguous prefix lists its candidates one per
line, at most ten, then how many more."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.lookup import completions, names_prefixes, short_id

CWD = "/work/project"


def publish(root: Path, *ids: str) -> None:
    clock = Clock()
    for session_id in ids:
        spec = SessionSpec(id=session_id, created_at=clock(), cwd=CWD)
        spec.turn(clock)
        spec.publish(root)


def test_the_distinctive_part_of_an_id_names_it(root: Path) -> None:
    publish(root, "session-db5b1f00", "session-a7c20000", "db5b-plain")

    result = run_cli("--root", root, "inspect", "a7c", "--json")

    assert result.exit_code == 0, result.stderr
    assert result.json()["session"] == "session-a7c20000"


def test_a_short_prefix_matching_an_id_and_a_short_id_is_ambiguous(root: Path) -> None:
    publish(root, "session-db5b1f00", "db5b-plain")

    result = run_cli("--root", root, "inspect", "db5b")

    assert result.exit_code == 3
    assert result.stderr == (
        "Error: ambiguous id prefix 'db5b': 2 sessions match; give more characters\n"
        "  db5b-plain\n"
        "  session-db5b1f00\n"
    )


def test_an_exact_id_wins_over_a_short_form_it_prefixes(root: Path) -> None:
    publish(root, "session-ab", "ab", "abc")

    assert run_cli("--root", root, "inspect", "ab", "--json").json()["session"] == "ab"
    assert run_cli("--root", root, "inspect", "session-a", "--json").json()["session"] == (
        "session-ab"
    )


def test_an_ambiguous_prefix_lists_ten_candidates_then_the_count_of_the_rest(root: Path) -> None:
    publish(root, *(f"session-f{i:02d}" for i in range(13)))

    human = run_cli("--root", root, "fork", "f")
    document = run_cli("--root", root, "inspect", "f", "--json")

    assert human.exit_code == document.exit_code == 3
    lines = human.stderr.splitlines()
    assert lines[0] == "Error: ambiguous id prefix 'f': 13 sessions match; give more characters"
    assert lines[1:] == [f"  session-f{i:02d}" for i in range(10)] + ["  ... and 3 more"]
    error = document.json()["error"]
    assert error["candidates"] == [f"session-f{i:02d}" for i in range(10)]
    assert error["matches"] == 13


def test_a_prefix_matching_nothing_is_not_found(root: Path) -> None:
    publish(root, "session-aa")
    result = run_cli("--root", root, "inspect", "zz")
    assert result.exit_code == 3
    assert result.stderr == f"Error: no session 'zz' in {root}\n"


@pytest.mark.parametrize(
    ("session_id", "short"),
    [("session-x1", "x1"), ("session-", "session-"), ("other", "other"), ("sess", "sess")],
)
def test_the_short_form_leaves_out_only_a_leading_session_prefix(
    session_id: str, short: str
) -> None:
    assert short_id(session_id) == short


def test_the_prefix_rule_names_encoded_dir_prefixes() -> None:
    assert names_prefixes("db5") == ("db5", "session-db5")
    assert names_prefixes("session-d") == ("session-d",)
    assert names_prefixes("") == ()
    assert names_prefixes("é") == ("~00E9", "session-~00E9")


def test_completion_offers_ids_and_short_ids(root: Path) -> None:
    publish(root, "session-db5b", "session-a7c2", "dbx")

    assert completions(root, "db") == ["db5b", "dbx"]
    assert completions(root, "session-d") == ["session-db5b"]
    assert completions(root, "") == ["a7c2", "db5b", "dbx", "session-a7c2", "session-db5b"]


def test_a_fixture_id_is_found_by_its_first_hex_digits(root: Path) -> None:
    """The README's first example, ``dsh-fork inspect 68a2``, on a fixture home."""
    made = run_cli("fixture", root, "--sessions", "1", "--turns", "1", "--seed", "7", "--json")
    top = made.json()["topLevel"][0]
    digits = top.removeprefix("session-")[:4]

    result = run_cli("--root", root, "inspect", digits, "--json")

    assert result.exit_code == 0, result.stderr
    assert result.json()["session"] == top
