"""``inspect --turns`` and ``fork --turn N``: turns as a user counts them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import log_events, log_header, run_cli, tree_digest

from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import project_dir_name

SOURCE = "session-turns"


def _tool_turn(spec: SessionSpec, clock: Clock, text: str, tools: list[str]) -> int:
    """A completed turn with one step that calls ``tools`` (advertised, started, resolved)."""
    spec.turns += 1
    number = spec.turns
    spec.add("turn/start", clock(), {"turn": number})
    spec.user_message(clock, text)
    spec.add("step/start", clock(), {"turn": number, "step": 1})
    calls = [
        {"type": "tool-call", "id": f"c{number}-{i}", "name": name, "arguments": "{}"}
        for i, name in enumerate(tools)
    ]
    message = {"id": f"a{number}", "role": "assistant", "content": calls}
    spec.add("assistant/message", clock(), {"message": message}, surfaceOp="append")
    for call in calls:
        data = {"turn": number, "step": 1, "callId": call["id"], "name": call["name"]}
        spec.add("tool/call", clock(), {**data, "arguments": "{}"})
        result = {
            "id": f"r-{call['id']}",
            "role": "tool",
            "toolCallId": call["id"],
            "source": {"kind": "tool", "callId": call["id"]},
            "content": [{"type": "text", "text": "ok"}],
        }
        spec.add("tool/result", clock(), {"message": result}, surfaceOp="append")
    spec.add("step/end", clock(), {"turn": number, "step": 1})
    return spec.add("turn/end", clock(), {"turn": number, "reason": {"kind": "completed"}})


def build(root: Path, clock: Clock, *, open_last: bool = False) -> tuple[SessionSpec, list[int]]:
    """Three turns: plain; two tools and a spawned agent; one tool (then maybe an open one)."""
    spec = SessionSpec(id=SOURCE, created_at=clock())
    ends = [spec.turn(clock, "first question\nwith a second line")]
    ends.append(_tool_turn(spec, clock, "  \n  run the tests", ["bash", "read_file", "bash"]))
    helper = SessionSpec(id="helper", created_at=clock(), parent=SOURCE, origin="subagent")
    spec.catalog(clock, helper, label="the helper")
    spec.title(clock, "a title between turns")
    ends.append(_tool_turn(spec, clock, "x" * 200, ["grep"]))
    if open_last:
        spec.open_turn(clock, "still running")
    spec.flush()
    spec.publish(root)
    return spec, ends


def turn_list(root: Path) -> list[dict[str, Any]]:
    result = run_cli("inspect", SOURCE, "--root", root, "--turns", "--json")
    assert result.exit_code == 0, result.stderr
    turns: list[dict[str, Any]] = result.json()["turnList"]
    return turns


def test_inspect_turns_lists_each_turn_with_its_seqs_message_tools_and_agents(
    root: Path, clock: Clock
) -> None:
    spec, ends = build(root, clock, open_last=True)
    turns = turn_list(root)
    assert [t["turn"] for t in turns] == [1, 2, 3, 4]
    assert [t["endSeq"] for t in turns] == [*ends, None]
    assert [t["startSeq"] for t in turns] == [0, ends[0] + 1, ends[1] + 3, ends[2] + 1]
    assert [t["user"] for t in turns] == [
        "first question",
        "run the tests",
        "x" * 79 + "…",
        "still running",
    ]
    assert [t["tools"] for t in turns] == [[], ["bash", "read_file"], ["grep"], []]
    assert [t["agents"] for t in turns] == [[], ["helper (the helper)"], [], []]
    assert [t["validBoundary"] for t in turns] == [True, True, True, False]
    assert turns[1]["lastSeq"] == ends[1] + 2  # the catalog fact and title follow its end
    time = orjson.loads(spec.lines[ends[0]])["time"]
    assert turns[0]["endTime"] == time
    assert turns[3]["endTime"] is None


def test_inspect_turns_in_plain_text(root: Path, clock: Clock) -> None:
    _, ends = build(root, clock)
    result = run_cli("inspect", SOURCE, "--root", root, "--turns")
    assert result.exit_code == 0
    text = result.stdout[result.stdout.index("Turns: 3") :]
    rows = text.splitlines()[2:]
    assert rows[1].split()[:2] == ["2", f"{ends[0] + 1}-{ends[1]}"]
    assert "bash, read_file" in rows[1] and "helper (the helper)" in rows[1]


def test_inherited_turns_are_marked(root: Path, clock: Clock) -> None:
    _, ends = build(root, clock)
    assert run_cli("fork", SOURCE, "--root", root, "--turn", "2", "--id", "kid").exit_code == 0
    result = run_cli("inspect", "kid", "--root", root, "--turns", "--json")
    turns = result.json()["turnList"]
    assert [t["inherited"] for t in turns] == [True, True]
    assert turns[-1]["lastSeq"] == ends[1] + 2  # its marker and title belong to the last turn


def _child(root: Path, child: str) -> Path:
    return root / project_dir_name("/fixture/project") / child / CURRENT_NAME


@pytest.mark.parametrize("turn", [1, 2, 3, -1, -2])
def test_fork_turn_n_equals_fork_at_the_end_seq_of_turn_n(
    root: Path, clock: Clock, turn: int
) -> None:
    _, ends = build(root, clock, open_last=True)
    at = ends[turn - 1] if turn > 0 else ends[turn]  # -1: the last *completed* turn
    by_turn = run_cli("fork", SOURCE, "--root", root, "--turn", str(turn), "--id", "by-turn")
    by_seq = run_cli("fork", SOURCE, "--root", root, "--at", str(at), "--id", "by-seq")
    assert by_turn.exit_code == by_seq.exit_code == 0, by_turn.stderr
    a, b = log_events(_child(root, "by-turn")), log_events(_child(root, "by-seq"))
    for events in (a, b):  # the fork's title, stamped with the time each fork was made
        assert events[-1]["type"] == "session/title"
        events[-1].pop("time")
    assert a == b
    assert a[-2] == {
        "type": "session/end-seed",
        "seq": at + 1,
        "time": a[at]["time"],
        "data": {"inherited": True},
    }
    ha, hb = log_header(_child(root, "by-turn")), log_header(_child(root, "by-seq"))
    for header in (ha, hb):
        header.pop("id")
        header.pop("createdAt")
    assert ha == hb


def test_fork_turn_json_is_the_fork_result(root: Path, clock: Clock) -> None:
    _, ends = build(root, clock)
    result = run_cli("fork", SOURCE, "--root", root, "--turn", "1", "--id", "k", "--json")
    assert result.exit_code == 0
    assert result.json()["child"]["boundary"] == ends[0]


@pytest.mark.parametrize(
    ("turn", "code"),
    [
        ("0", "INVALID_BOUNDARY"),
        ("5", "INVALID_BOUNDARY"),
        ("-4", "INVALID_BOUNDARY"),
        ("4", "OPEN_TURN"),
    ],
)
def test_a_turn_that_does_not_exist_or_is_open_exits_4_and_writes_nothing(
    root: Path, clock: Clock, turn: str, code: str
) -> None:
    build(root, clock, open_last=True)
    before = tree_digest(root)
    result = run_cli("fork", SOURCE, "--root", root, "--turn", turn, "--json")
    assert result.exit_code == 4
    assert result.json()["error"]["code"] == code
    assert tree_digest(root) == before


def test_at_and_turn_together_are_a_usage_error(root: Path, clock: Clock) -> None:
    build(root, clock)
    before = tree_digest(root)
    result = run_cli("fork", SOURCE, "--root", root, "--turn", "1", "--at", "3")
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: give either --at SEQ or --turn N, not both"
    assert tree_digest(root) == before


def test_a_session_without_turns_has_no_turn_to_fork_at(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id=SOURCE, created_at=clock())
    spec.title(clock, "only a title")
    spec.publish(root)
    result = run_cli("fork", SOURCE, "--root", root, "--turn", "-1")
    assert result.exit_code == 4
    assert "turn -1 does not exist: the session has no turns" in result.stderr
    assert turn_list(root) == []
