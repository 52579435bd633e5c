"""``du``: inherited + own bytes are each log's size; sessions, families and projects add up."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest
from lineagekit import FOREIGN_ROOTS, Family, build_family, foreign_roots, generate_oddities

from dsh_fork import frames as zframes
from dsh_fork import porcelain
from dsh_fork.cli.tables import human_size
from dsh_fork.discovery import Root
from dsh_fork.du import inherited_bytes
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import list_generations
from dsh_fork.porcelain import Context
from dsh_fork.reader import open_log


def files_under(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture(params=[True, False], ids=["relinked", "not relinked"])
def family(request: pytest.FixtureRequest, root: Path) -> Family:
    return build_family(root, relinked=request.param)


def test_inherited_and_own_bytes_add_up_to_each_log_and_the_root(family: Family) -> None:
    before = tree_digest(family.root)
    result = run_cli("du", "--root", family.root, "--json")
    assert result.exit_code == 0, result.stderr
    assert tree_digest(family.root) == before
    data = result.json()
    sessions = data["sessions"]
    assert len(sessions) == len([d for d in family.root.glob("*/*") if d.is_dir()])
    for usage in sessions:
        session_dir = family.root / usage["path"]
        log = list_generations(session_dir)[-1].path
        assert (
            usage["inheritedBytes"] + usage["ownBytes"] == usage["logBytes"] == log.stat().st_size
        )
        assert usage["bytes"] == files_under(session_dir)
        assert usage["otherBytes"] == usage["bytes"] - usage["logBytes"]
        seeded = usage["kind"] in ("fork", "copy")
        assert (usage["inheritedBytes"] > 0) == seeded
        assert usage["shareable"] == usage["inheritedBytes"]  # every source is in the root
    assert data["total"]["bytes"] == files_under(family.root)
    assert data["total"]["inheritedBytes"] == sum(u["inheritedBytes"] for u in sessions)
    assert data["total"]["shareable"] == data["total"]["inheritedBytes"]
    assert [f["name"] for f in data["families"]] == [family.top]
    assert data["families"][0]["bytes"] == data["projects"][0]["bytes"] == data["total"]["bytes"]


def test_the_frame_holding_the_cut_is_shared_in_proportion(root: Path, clock: Clock) -> None:
    """Frames wholly below the cut count whole; the cut's frame by its plaintext share."""
    parent = SessionSpec(id="parent", created_at=clock())
    parent.turn(clock, "one")
    parent.flush()
    parent.turn(clock, "two")
    parent.publish(root)
    fork = SessionSpec(id="fork", created_at=clock(), parent="parent", is_seeded=True)
    fork.lines = list(parent.lines[:6])  # turn 1 (6 events) in a frame of its own …
    fork.flush()
    fork.lines += parent.lines[6:]  # … turn 2 in the next frame, which also holds the marker
    fork.end_seed(clock())
    fork.turn(clock, "own")
    fork.publish(root)
    path = list_generations(Root(root).find("fork"))[-1].path
    data = path.read_bytes()
    header, first, second = zframes.scan(data).frames
    plain = zframes.decode(data, second)
    below = plain[: plain.index(b'"session/end-seed"')]
    below = below[: below.rindex(b"\n") + 1]
    expected = first.size + second.size * len(below) // len(plain)
    log = open_log(list_generations(path.parent)[-1])
    assert inherited_bytes(log, 12) == expected
    usage = porcelain.du(Context.of(str(root)), "fork", top=None)
    mine = next(u for u in usage.sessions if u.id == "fork")
    assert mine.inherited == expected
    assert mine.own == len(data) - expected
    assert header.size < mine.own


def test_an_orphan_forks_prefix_is_not_shareable(root: Path) -> None:
    family = build_family(root, relinked=False)
    shutil.rmtree(Root(root).find(family.top))
    for sub in [d for d in root.glob("*/*") if d.name.startswith("session-")]:
        shutil.rmtree(sub)  # the top and its subagents are gone; the forks remain
    usage = porcelain.du(Context.of(str(root)), None, top=None)
    by_id = {u.id: u for u in usage.sessions}
    assert by_id[family.fork_a].inherited and by_id[family.fork_a].saving == 0
    assert by_id[family.fork_aa].saving == by_id[family.fork_aa].inherited  # its parent is here
    assert usage.total.shareable == by_id[family.fork_aa].inherited


def test_top_limits_the_rows_but_not_the_totals(root: Path) -> None:
    build_family(root, relinked=True)
    data = run_cli("du", "--root", root, "--top", "2", "--json").json()
    assert len(data["sessions"]) == 2
    assert data["sessions"][0]["bytes"] >= data["sessions"][1]["bytes"]
    assert data["total"]["sessions"] == 28
    assert data["total"]["bytes"] == files_under(root)
    text = run_cli("du", "--root", root, "--top", "3").stdout
    assert "Sessions (largest 3 of 28)" in text
    assert run_cli("du", "--root", root, "--top", "0").exit_code == 2


def test_a_session_argument_measures_its_family_only(root: Path, clock: Clock) -> None:
    family = build_family(root, relinked=False)
    other = SessionSpec(id="lonely", created_at=clock(), cwd="/elsewhere")
    other.turn(clock, "unrelated")
    other.publish(root)
    whole = porcelain.du(Context.of(str(root)), None, top=None)
    one = porcelain.du(Context.of(str(root)), family.fork_b, top=None)
    assert whole.total.sessions == one.total.sessions + 1
    assert [f.name for f in one.families] == [family.top]
    assert "lonely" not in {u.id for u in one.sessions}


def test_plain_text_states_the_saving(root: Path) -> None:
    build_family(root, relinked=True)
    data = run_cli("du", "--root", root, "--json").json()
    text = run_cli("du", "--root", root, "--bytes").stdout
    total = data["total"]
    assert f"28 sessions, {total['bytes']} bytes" in text.splitlines()[0]
    assert f"sharing them would save {total['shareable']} bytes" in text.splitlines()[0]


def test_sizes_are_human_unless_bytes_is_given(root: Path) -> None:
    """du's tables show what people read (issue 35); ``-h`` asks for that, as in du(1), and
    prints no help; ``--bytes`` the exact numbers; JSON is exact either way."""
    build_family(root, relinked=True)
    data = run_cli("du", "--root", root, "--json", "-h").json()
    human = run_cli("du", "--root", root)
    dash_h = run_cli("du", "-h", "--root", root)
    exact = run_cli("du", "--root", root, "-b")

    assert human.exit_code == dash_h.exit_code == exact.exit_code == 0
    assert dash_h.stdout == human.stdout
    assert "Usage" not in dash_h.stdout
    total = data["total"]
    assert isinstance(total["bytes"], int) and total["bytes"] > 1024
    first = human.stdout.splitlines()[0]
    assert f"28 sessions, {human_size(total['bytes'])}; inherited prefixes" in first
    assert "KiB" in first and str(total["bytes"]) not in first
    top = data["sessions"][0]
    row = next(line for line in exact.stdout.splitlines() if line.startswith(top["id"] + " "))
    assert str(top["bytes"]) in row.split()
    row = next(line for line in human.stdout.splitlines() if line.startswith(top["id"] + " "))
    assert human_size(top["bytes"]) in row


def test_an_unreadable_session_is_named_and_still_measured(root: Path, clock: Clock) -> None:
    build_family(root, relinked=False)
    bad = root / "--fixture-project-0--" / "broken"
    bad.mkdir()
    (bad / "session.v4.jsonl.zstd").write_bytes(b"not zstd at all")
    result = run_cli("du", "--root", root, "--json")
    assert result.exit_code == 0
    broken = next(u for u in result.json()["sessions"] if u["id"] == "broken")
    assert broken["kind"] == "unreadable" and broken["inheritedBytes"] is None
    assert broken["bytes"] == broken["logBytes"] == len(b"not zstd at all")
    assert "unreadable session" in result.stderr


def test_an_unreadable_header_or_log_is_flagged_and_shares_nothing(root: Path) -> None:
    """A session whose header cannot be read is ``unreadable``; a fork whose header reads but
    whose log does not keeps its kind, with the reason as a flag: neither has inherited bytes
    to measure, so neither counts toward the saving, and both are named on stderr."""
    family = build_family(root, relinked=False)
    bad = root / "--fixture-project-0--" / "broken"
    bad.mkdir()
    (bad / "session.v4.jsonl.zstd").write_bytes(b"not zstd at all")
    fork_log = list_generations(Root(root).find(family.fork_a))[-1].path
    with fork_log.open("ab") as out:
        out.write(b"garbage, no frame magic")
    result = run_cli("du", "--root", root, "--json")
    assert result.exit_code == 0, result.stderr
    by_id = {u["id"]: u for u in result.json()["sessions"]}
    assert by_id["broken"]["flags"] == ["unreadable"]
    assert by_id["broken"]["shareable"] == 0 and by_id["broken"]["sourcePresent"] is False
    fork = by_id[family.fork_a]
    assert fork["kind"] == "fork" and fork["inheritedBytes"] is None
    assert len(fork["flags"]) == 1 and fork["flags"][0].startswith("unreadable log: ")
    assert "frame magic" in fork["flags"][0]
    assert fork["sourcePresent"] is False and fork["shareable"] == 0
    assert fork["ownBytes"] == fork["logBytes"] == fork_log.stat().st_size
    healthy = by_id[family.fork_b]
    assert healthy["flags"] == [] and healthy["sourcePresent"] is True
    assert healthy["shareable"] == healthy["inheritedBytes"] > 0
    assert "unreadable log: " in result.stderr and "broken" in result.stderr


@pytest.mark.parametrize("name", FOREIGN_ROOTS)
def test_foreign_roots_add_up(name: str) -> None:
    source = foreign_roots(name)
    usage = porcelain.du(Context.of(str(source)), None, top=None)
    for item in usage.sessions:
        session_dir = source / item.path
        generation = list_generations(session_dir)
        if item.inherited is not None and generation:
            assert item.inherited + item.own == os.path.getsize(generation[-1].path)
        assert item.bytes == files_under(session_dir)


def test_a_generated_root_with_every_oddity_adds_up(root: Path) -> None:
    """Chains of forks (relinked), legacy copies, open turns, torn tails and v3 trees."""
    generate_oddities(root)
    usage = porcelain.du(Context.of(str(root)), None, top=None)
    assert usage.total.bytes == files_under(root)
    for item in usage.sessions:
        assert item.inherited is not None
        log = list_generations(root / item.path)[-1].path
        assert item.inherited + item.own == log.stat().st_size
        assert (item.inherited > 0) == (item.kind in ("fork", "copy", "seeded-subagent"))
