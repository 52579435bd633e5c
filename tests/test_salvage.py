"""``salvage``: the readable prefix of a log DSH refuses, forked at its last seq outside an open
turn with the branch's subagents; the source never changes; what was left behind is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import log_events, log_lines, run_cli, tree_digest
from schemakit import check

from dsh_fork.discovery import Root
from dsh_fork.fixturedamage import DAMAGES, damage
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import list_generations

LATER = Clock(start=1767300000000)


def damaged(root: Path, kind: str) -> tuple[str, Path, int, int]:
    """A tree (two subagents spawned in turn 2 of 3) whose top log got ``kind``: the top's
    id, its log, the events DSH would read and the log's size before the damage."""
    summary = generate(root, sessions=1, agents=2, turns=3, tools=True, seed=3)
    top = summary.top_level[0]
    entry = Root(root).entry(top)
    assert entry is not None and entry.generation is not None
    log = entry.generation.path
    size = log.stat().st_size
    return top, log, damage(log, kind, LATER), size


@pytest.mark.parametrize("kind", DAMAGES)
def test_a_refused_log_is_forked_up_to_its_last_closed_turn(root: Path, kind: str) -> None:
    top, log, readable, size = damaged(root, kind)
    source_before = tree_digest(log.parent)
    assert run_cli("fork", "--root", root, top).exit_code == 9  # what salvage is for
    result = run_cli("salvage", "--root", root, top, "--id", "session-saved", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    check("salvage", data)
    left = data["leftBehind"]
    assert left["keptEvents"] == readable
    assert left["reason"]
    source_lines = log_lines(log)[1:] if kind != "bad-frame" else []
    assert data["child"]["boundary"] == left["fromSeq"] - 1
    child = list_generations(root / log.parent.parent.name / "session-saved")[-1].path
    child_lines = log_lines(child)[1:]
    boundary = data["child"]["boundary"]
    if source_lines:  # copied byte for byte (a frame that does not decode has no lines)
        assert child_lines[: boundary + 1] == source_lines[: boundary + 1]
    assert log_events(child)[boundary]["type"] == "turn/end"
    marker = log_events(child)[boundary + 1]
    assert marker["type"] == "session/end-seed" and marker["data"] == {"inherited": True}
    if kind == "open-turn":
        assert left["droppedOpenTurnEvents"] == 2
        assert left["fromByte"] > size
    else:
        assert left["fromByte"] == size  # the defect's frame is the first one appended
    assert data["agents"]["copied"] and len(data["agents"]["copied"]) == 2
    assert tree_digest(log.parent) == source_before  # the source never changes


def test_the_frame_holding_the_defect_gives_its_good_lines(root: Path, clock: Clock) -> None:
    """A defect after a whole turn in one frame: the turn is kept (its lines in a frame of
    their own, byte for byte), the bad line and what follows are not."""
    spec = SessionSpec(id="session-mixed", created_at=clock())
    spec.turn(clock, "first")
    spec.flush()
    spec.turn(clock, "second, in the frame of the defect")
    good = spec.seq
    spec.add_raw(b'{"type":"turn/start","seq":%d,"time":1,"data":{"turn":3}}' % (good + 5))
    spec.turn(clock, "after the gap")
    spec.flush()
    spec.publish(root)
    result = run_cli("salvage", "--root", root, "session-mixed", "--id", "session-kept", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert data["child"]["boundary"] == good - 1
    assert data["leftBehind"]["keptEvents"] == good
    child = list_generations(root / "--fixture-project--" / "session-kept")[-1].path
    assert log_lines(child)[1 : good + 1] == [line.rstrip(b"\n") for line in spec.lines[:good]]


def test_a_log_fork_accepts_is_not_salvaged(root: Path) -> None:
    summary = generate(root, sessions=1, agents=1, turns=2)
    before = tree_digest(root)
    result = run_cli("salvage", "--root", root, summary.top_level[0])
    assert result.exit_code == 2
    assert "use `dsh-fork fork`" in result.stderr
    assert tree_digest(root) == before


def test_a_dry_run_writes_nothing(root: Path) -> None:
    top, _, readable, _ = damaged(root, "gap")
    before = tree_digest(root)
    result = run_cli("salvage", "--root", root, top, "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["leftBehind"]["keptEvents"] == readable
    assert result.json()["dryRun"] is True
    assert tree_digest(root) == before


def test_nothing_outside_an_open_turn_is_nothing_to_salvage(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="session-open", created_at=clock())
    spec.open_turn(clock, "never closed")
    spec.add_raw(b'{"type":"turn/end","seq":9,"time":1,"data":{"turn":1}}')
    spec.publish(root)
    result = run_cli("salvage", "--root", root, "session-open")
    assert result.exit_code == 9
    assert "nothing to salvage" in result.stderr


def test_a_log_larger_than_salvage_reads_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_fork import salvage

    top, log, _, _ = damaged(root, "gap")
    monkeypatch.setattr(salvage, "MAX_SALVAGE_BYTES", log.stat().st_size - 1)
    before = tree_digest(root)
    result = run_cli("salvage", "--root", root, top)
    assert result.exit_code == 2
    assert "more than salvage reads" in result.stderr
    assert tree_digest(root) == before


@pytest.mark.parametrize("kind", ["open-turn", "tear", "bad-line"])
def test_close_turn_keeps_every_readable_event_and_closes_the_turn(root: Path, kind: str) -> None:
    """The defects that leave a turn open: with --close-turn the child holds every event DSH
    would read (the good lines of the defect's frame in a frame made anew), then the closers
    of fork --close-turn after the marker."""
    top, log, readable, _ = damaged(root, kind)
    source_before = tree_digest(log.parent)
    result = run_cli(
        "salvage", "--root", root, top, "--close-turn", "--id", "session-closed", "--json"
    )
    assert result.exit_code == 0, result.stderr
    data = result.json()
    check("salvage", data)
    assert data["child"]["boundary"] == readable - 1
    assert data["leftBehind"] == {**data["leftBehind"], "fromSeq": readable, "keptEvents": readable}
    assert data["leftBehind"]["droppedOpenTurnEvents"] == 0
    child = list_generations(root / log.parent.parent.name / "session-closed")[-1].path
    events = log_events(child)
    assert events[readable]["type"] == "session/end-seed"
    ends = [e for e in events[readable + 1 :] if e["type"] == "turn/end"]
    assert [e["data"]["reason"] for e in ends] == [{"kind": "forked"}]
    assert log_lines(child)[1 : readable + 1] == log_lines_until(log, readable)
    assert tree_digest(log.parent) == source_before


def log_lines_until(log: Path, count: int) -> list[bytes]:
    """The first ``count`` event lines of a damaged log, read frame by frame up to the
    defect (the whole log does not decode as one text)."""
    from dsh_fork import frames as zframes

    data = log.read_bytes()
    lines: list[bytes] = []
    pending = b""
    for k, frame in enumerate(zframes.scan(data).frames[1:], 1):
        pending += zframes.decode(data, frame, k)
        *whole, pending = pending.split(b"\n")
        lines += whole
        if len(lines) >= count:
            break
    return lines[:count]
