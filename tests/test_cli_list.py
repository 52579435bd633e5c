"""``dsh-fork list``, id prefixes and completion (issue 12): finding a session without ``ls``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from relinkkit import CWD, fork_of, subagent
from schemakit import check

from dsh_fork.cli.base import complete_session
from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec, write_spec_as
from dsh_fork.layout import project_key
from dsh_fork.listing import parse_since


@pytest.fixture
def family(root: Path) -> Path:
    """P (titled, two turns) with one subagent A, a fork C of P, and R elsewhere."""
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    parent.title(clock, "the parent")
    child = subagent(clock, "session-A", parent, label="a")
    parent.catalog(clock, child, label="a")
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    other = SessionSpec(id="other-R", created_at=clock(), cwd="/srv/elsewhere")
    other.turn(clock)
    for spec in (parent, child, fork, other):
        spec.publish(root)
    return root


def listed(root: Path, *args: str) -> dict[str, dict[str, Any]]:
    result = run_cli("--root", root, "list", "--all", *args, "--json")
    assert result.exit_code == 0, result.stderr
    document = result.json()
    check("list", document)
    return {row["id"]: row for row in document["sessions"]}


def test_list_shows_every_session_with_its_kind_title_turns_and_family(family: Path) -> None:
    rows = listed(family)

    assert {i: r["kind"] for i, r in rows.items()} == {
        "session-P": "root",
        "session-A": "subagent",
        "session-C": "fork",
        "other-R": "root",
    }
    parent = rows["session-P"]
    assert parent["title"] == "the parent"
    assert parent["turns"] == 2
    assert (parent["forks"], parent["agents"]) == (1, 1)
    assert parent["cwd"] == CWD and parent["project"] == project_key(CWD)
    assert parent["path"] == str(Root(family).find("session-P"))
    assert rows["session-C"]["parentSession"] == "session-P"
    assert rows["session-C"]["turns"] == 2  # inherited turns count
    assert parent["lastActivityIso"].endswith("Z")


def test_a_relink_copy_is_listed_as_a_copy(family: Path) -> None:
    assert run_cli("--root", family, "relink", "session-C").exit_code == 0

    rows = listed(family, "--kind", "copy")

    assert len(rows) == 1
    (copy,) = rows.values()
    assert copy["parentSession"] == "session-C"
    assert listed(family)["session-C"]["agents"] == 1


def test_filters_by_project_kind_and_since(family: Path) -> None:
    assert set(listed(family, "--project", "/srv/elsewhere")) == {"other-R"}
    assert set(listed(family, "--project", project_key(CWD))) == {
        "session-P",
        "session-A",
        "session-C",
    }
    assert set(listed(family, "--kind", "fork", "--kind", "subagent")) == {
        "session-C",
        "session-A",
    }
    assert len(listed(family, "--since", "1d")) == 4  # just written
    assert listed(family, "--since", "2999-01-01") == {}
    bad = run_cli("--root", family, "list", "--kind", "weird")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: unknown kind 'weird'")
    late = run_cli("--root", family, "list", "--since", "yesterday-ish")
    assert late.exit_code == 2 and late.stderr.startswith("Error: --since 'yesterday-ish'")


def test_since_takes_ages_dates_and_epoch_ms() -> None:
    now = 1_800_000_000_000
    assert parse_since("2h", now) == now - 7_200_000
    assert parse_since("7d", now) == now - 7 * 86_400_000
    assert parse_since("1700000000000", now) == 1_700_000_000_000
    assert parse_since("2026-01-01", now) == 1_767_225_600_000
    assert parse_since("2026-01-01T01:00:00+01:00", now) == 1_767_225_600_000


def test_an_unreadable_session_is_a_row_with_its_error(family: Path) -> None:
    future = SessionSpec(id="session-F", created_at=1, cwd=CWD)
    future.turn(Clock())
    write_spec_as(future, family, 9)

    result = run_cli("--root", family, "list", "--json")

    assert result.exit_code == 0
    rows = {row["id"]: row for row in result.json()["sessions"]}
    assert rows["session-F"]["error"]["code"] == "UNSUPPORTED_FORMAT"
    assert result.stderr.startswith("Warning: 1 sessions could not be read")


def test_human_list_keeps_whole_ids(family: Path) -> None:
    result = run_cli("--root", family, "list", "--all")

    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"4 sessions in {family}"
    assert lines[1].split()[:3] == ["id", "kind", "title"]
    assert {line.split()[0] for line in lines[2:]} == {
        "session-P",
        "session-A",
        "session-C",
        "other-R",
    }


def test_an_empty_root_lists_nothing(root: Path) -> None:
    root.mkdir(parents=True)
    result = run_cli("--root", root, "list")
    every = run_cli("--root", root, "list", "--all")
    assert result.exit_code == every.exit_code == 0
    assert result.stdout == f"{root}: no conversations\n"
    assert every.stdout == f"{root}: no sessions\n"


# -- prefixes ----------------------------------------------------------------------------------


def test_a_unique_prefix_names_the_session_everywhere(family: Path) -> None:
    assert run_cli("--root", family, "inspect", "other", "--json").json()["session"] == "other-R"
    assert run_cli("--root", family, "list-agents", "session-P", "--json").exit_code == 0
    forked = run_cli("--root", family, "fork", "oth", "--id", "kid", "--json")
    assert forked.exit_code == 0 and forked.json()["child"]["parentSession"] == "other-R"
    assert run_cli("--root", family, "relink", "session-C", "--dry-run").exit_code == 0
    assert run_cli("--root", family, "doctor", "other").exit_code == 0


def test_an_exact_id_wins_over_a_longer_id_it_prefixes(family: Path) -> None:
    clock = Clock()
    longer = SessionSpec(id="session-PX", created_at=clock(), cwd=CWD)
    longer.turn(clock)
    longer.publish(family)

    result = run_cli("--root", family, "inspect", "session-P", "--json")

    assert result.json()["session"] == "session-P"


def test_an_ambiguous_prefix_lists_the_candidates(family: Path) -> None:
    result = run_cli("--root", family, "inspect", "session-", "--json")
    human = run_cli("--root", family, "fork", "session-")

    assert result.exit_code == human.exit_code == 3
    error = result.json()["error"]
    check("error", result.json())
    assert error["candidates"] == ["session-A", "session-C", "session-P"]
    assert error["matches"] == 3
    assert (
        error["message"] == "ambiguous id prefix 'session-': 3 sessions match; give more characters"
    )
    assert human.stderr == (f"Error: {error['message']}\n  session-A\n  session-C\n  session-P\n")


def test_a_prefix_matching_nothing_is_not_found(family: Path) -> None:
    result = run_cli("--root", family, "inspect", "zzz")
    assert result.exit_code == 3 and result.stderr == f"Error: no session 'zzz' in {family}\n"


def test_completion_offers_the_ids_of_the_root(family: Path) -> None:
    import typer

    from dsh_fork.cli.base import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    ctx.params["root"] = str(family)

    assert complete_session(ctx, "session-") == ["session-A", "session-C", "session-P"]
    assert complete_session(ctx, "oth") == ["other-R"]
    assert complete_session(ctx, "") == [
        "A",
        "C",
        "P",
        "other-R",
        "session-A",
        "session-C",
        "session-P",
    ]
    ctx.params["root"] = str(family / "nowhere")
    assert complete_session(ctx, "") == []


# -- kinds ------------------------------------------------------------------------------------


def test_list_and_tree_name_every_kind_by_the_one_header_rule(family: Path) -> None:
    """The two cases the two commands once named differently: a session that names a parent
    without being seeded or a subagent is ``linked`` (no fork: it inherits nothing); a subagent
    that names no parent is a ``root`` (no parent can list it as a child)."""
    clock = Clock()
    linked = SessionSpec(id="session-L", created_at=clock(), cwd=CWD, parent="session-P")
    linked.turn(clock)
    orphan = SessionSpec(id="session-O", created_at=clock(), cwd=CWD, origin="subagent", depth=1)
    orphan.turn(clock)
    for spec in (linked, orphan):
        spec.publish(family)

    rows = listed(family)
    tree = run_cli("--root", family, "tree", "--json")

    expected = {
        "session-P": "root",
        "session-A": "subagent",
        "session-C": "fork",
        "other-R": "root",
        "session-L": "linked",
        "session-O": "root",
    }
    assert {i: r["kind"] for i, r in rows.items()} == expected
    assert tree.exit_code == 0, tree.stderr
    assert {n["id"]: n["kind"] for n in tree.json()["nodes"]} == expected
    assert set(listed(family, "--kind", "linked")) == {"session-L"}
    assert set(listed(family, "--kind", "fork")) == {"session-C"}


def test_a_session_whose_header_cannot_be_read_has_no_kind(family: Path) -> None:
    future = SessionSpec(id="session-F", created_at=1, cwd=CWD)
    future.turn(Clock())
    write_spec_as(future, family, 9)

    result = run_cli("--root", family, "list", "--json")

    document = result.json()
    check("list", document)
    assert document["schemaVersion"] == 3
    row = next(r for r in document["sessions"] if r["id"] == "session-F")
    assert (row["kind"], row["error"]["code"]) == (None, "UNSUPPORTED_FORMAT")
    assert "session-F" not in listed(family, "--kind", "root")


@pytest.mark.parametrize("filtered", [False, True], ids=["whole read", "--since"])
def test_rows_come_newest_activity_first_then_by_id(family: Path, filtered: bool) -> None:
    """Last activity is the log's mtime: the newest first, and equal times by id, whether
    the row's facts came from the listing's own read or from the filtered path."""
    times = {"session-P": 5_000, "session-A": 9_000, "session-C": 5_000, "other-R": 7_000}
    for session_id, seconds in times.items():
        log = next(Root(family).find(session_id).glob("session.v*.jsonl.zstd"))
        os.utime(log, (seconds, seconds))
    args = ("--since", "0") if filtered else ()
    result = run_cli("--root", family, "list", "--all", *args, "--json")
    assert result.exit_code == 0, result.stderr
    order = [(row["id"], row["lastActivity"]) for row in result.json()["sessions"]]
    assert order == [
        ("session-A", 9_000_000),
        ("other-R", 7_000_000),
        ("session-C", 5_000_000),
        ("session-P", 5_000_000),
    ]


def test_iso_times_are_those_of_the_calendar_on_either_path() -> None:
    """``iso_ms`` formats 1970..9999 from ``time.gmtime`` (a list formats two per row) and
    other times from ``datetime``: the same text as ``datetime`` on both sides of every edge
    and at 20,000 random times, None where no calendar holds."""
    import random
    from datetime import UTC, datetime

    from dsh_fork.times import iso_ms

    def reference(ms: int) -> str | None:
        try:
            moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
        return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"

    end = 253_402_300_800_000
    edges = [0, 1, 999, 1000, -1, -1000, -1001, end - 1, end, end + 1, 1 << 62, -(1 << 62)]
    edges += [1_767_225_600_000 + k * 86_399_999 for k in range(-400, 400)]
    edges += [951_782_400_000 + k for k in (-1, 0, 86_400_000)]  # 2000-02-29
    edges += [1_767_225_600_000 + k for k in (1, 9, 10, 59_000, 59_999, 60_000, 3_599_999)]
    draw = random.Random(7)
    edges += [draw.randrange(0, end) for _ in range(20_000)]
    for ms in edges:
        assert iso_ms(ms) == reference(ms), ms
    assert iso_ms(None) is None
    assert iso_ms(1_767_225_600_123) == "2026-01-01T00:00:00.123Z"
