"""``fork --close-turn`` (dsh-world §3): a boundary inside an open turn forks there, and the
child closes the turn as late-v4 DSH does, right after its end-seed marker.

Every source starts with one whole turn (seqs 0..5) and the title "Plan" (6); its second turn
is left open by ``SessionSpec.unfinished_turn``: turn/start 7, user/message 8, request/header 9,
step/start 10, then the assistant message advertising the calls (11) and each started call's
tool/call (and result, when settled).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import log_events, log_lines, run_cli, tree_digest
from schemakit import check

from dsh_fork.closers import NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT
from dsh_fork.errors import OpenTurn
from dsh_fork.fixtures import Clock, Ids, SessionSpec
from dsh_fork.fork import ForkOptions, ForkResult, fork_session
from dsh_fork.validation import validate_dir

SRC = "session-source"
CWD = "/home/u/proj"
NOW = 1_800_000_000_000


def source(clock: Clock, **unfinished: Any) -> SessionSpec:
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD)
    spec.turn(clock)
    spec.title(clock, "Plan")
    spec.flush()
    spec.unfinished_turn(clock, **unfinished)
    spec.flush()
    return spec


def fork(root: Path, session: str = SRC, *, turn: int | None = None, **options: Any) -> ForkResult:
    choices = ForkOptions(**{"child_id": "child", "agents": False, "close_turn": True, **options})
    return fork_session(session, str(root), choices, turn=turn, clock=lambda: NOW, new_id=Ids(5))


def time_of(spec: SessionSpec, seq: int) -> int:
    time: int = orjson.loads(spec.lines[seq])["time"]
    return time


def marker(seq: int, time: int) -> dict[str, Any]:
    return {"type": "session/end-seed", "seq": seq, "time": time, "data": {"inherited": True}}


def result_event(
    seq: int, time: int, call_id: str, *, call_seq: int | None, turn: int = 2
) -> dict[str, Any]:
    """DSH's closer of one pending call (format §10.2)."""
    started = call_seq is not None
    event: dict[str, Any] = {
        "type": "tool/result",
        "seq": seq,
        "time": time,
        "data": {
            "turn": turn,
            "step": 1,
            "message": {
                "id": f"forked-tool-result-{call_id}-{seq}",
                "role": "tool",
                "toolCallId": call_id,
                "isError": True,
                "source": {"kind": "tool", "callId": call_id},
                "content": [
                    {"type": "text", "text": OUTCOME_UNKNOWN_TEXT if started else NOT_STARTED_TEXT}
                ],
            },
            "error": {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
            if started
            else {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"},
        },
        "surfaceOp": "append",
    }
    if started:
        event["sourceEventSeqs"] = [call_seq]
    return event


def step_end(seq: int, time: int, turn: int = 2) -> dict[str, Any]:
    return {"type": "step/end", "seq": seq, "time": time, "data": {"turn": turn, "step": 1}}


def turn_end(seq: int, time: int, turn: int = 2) -> dict[str, Any]:
    data = {"turn": turn, "reason": {"kind": "forked"}}
    return {"type": "turn/end", "seq": seq, "time": time, "data": data}


def title(seq: int, text: str) -> dict[str, Any]:
    data = {"title": text, "messageSeqs": [], "source": {"kind": "user"}}
    return {"type": "session/title", "seq": seq, "time": NOW, "data": data}


def errors_of(result: ForkResult) -> list[str]:
    assert result.path is not None
    return [
        f"{f.code}: {f.message}" for f in validate_dir(result.path.parent) if f.severity == "error"
    ]


def tail(result: ForkResult) -> list[dict[str, Any]]:
    assert result.path is not None and result.child.boundary is not None
    return log_events(result.path)[result.child.boundary + 1 :]


# -- every kind of in-turn boundary -------------------------------------------------------------


def test_a_started_call_is_closed_as_outcome_unknown(root: Path, clock: Clock) -> None:
    spec = source(clock, calls=1, started=1)
    spec.publish(root)

    result = fork(root)

    assert result.child.boundary == 12  # the tool/call, the source's last event
    t = time_of(spec, 12)
    assert tail(result) == [
        marker(13, t),
        result_event(14, t, "call_0002_0000", call_seq=12),
        step_end(15, t),
        turn_end(16, t),
        title(17, "Plan (1)"),
    ]
    assert result.path is not None
    source_lines = [line.rstrip(b"\n") for line in spec.lines]
    assert log_lines(result.path)[1:14] == source_lines  # the prefix, byte for byte
    assert errors_of(result) == []


def test_a_call_never_started_is_closed_as_not_started(root: Path, clock: Clock) -> None:
    spec = source(clock, calls=1)
    spec.publish(root)

    result = fork(root)

    t = time_of(spec, 11)
    assert tail(result) == [
        marker(12, t),
        result_event(13, t, "call_0002_0000", call_seq=None),
        step_end(14, t),
        turn_end(15, t),
        title(16, "Plan (1)"),
    ]
    assert "sourceEventSeqs" not in tail(result)[1]
    assert errors_of(result) == []


def test_an_open_step_without_calls_is_ended_then_the_turn(root: Path, clock: Clock) -> None:
    spec = source(clock)
    spec.publish(root)

    result = fork(root)

    t = time_of(spec, 10)
    assert tail(result) == [marker(11, t), step_end(12, t), turn_end(13, t), title(14, "Plan (1)")]
    assert errors_of(result) == []


def test_a_turn_with_no_open_step_only_ends(root: Path, clock: Clock) -> None:
    spec = source(clock, step=False)  # step 1 finished (10..12), none open
    spec.publish(root)

    result = fork(root)

    t = time_of(spec, 12)
    assert tail(result) == [marker(13, t), turn_end(14, t), title(15, "Plan (1)")]
    assert errors_of(result) == []


def test_a_boundary_on_the_turn_start_closes_an_empty_turn(root: Path, clock: Clock) -> None:
    spec = source(clock, calls=2, started=2)
    spec.publish(root)

    result = fork(root, at=7)

    t = time_of(spec, 7)
    assert tail(result) == [marker(8, t), turn_end(9, t), title(10, "Plan (1)")]
    assert errors_of(result) == []


def test_pending_calls_are_closed_in_the_order_they_became_pending(
    root: Path, clock: Clock
) -> None:
    # call 0 started (12) and settled (13); call 1 started (14); call 2 never started
    spec = source(clock, calls=3, started=2, settled=1)
    spec.publish(root)

    result = fork(root)

    t = time_of(spec, 14)
    assert tail(result) == [
        marker(15, t),
        result_event(16, t, "call_0002_0001", call_seq=14),
        result_event(17, t, "call_0002_0002", call_seq=None),
        step_end(18, t),
        turn_end(19, t),
        title(20, "Plan (1)"),
    ]
    assert errors_of(result) == []


def test_a_call_cut_before_its_start_is_not_started_in_the_child(root: Path, clock: Clock) -> None:
    spec = source(clock, calls=2, started=2)  # tool/calls at 12 and 13
    spec.publish(root)

    result = fork(root, at=12)

    t = time_of(spec, 12)
    assert tail(result)[1:3] == [
        result_event(14, t, "call_0002_0000", call_seq=12),
        result_event(15, t, "call_0002_0001", call_seq=None),
    ]
    assert errors_of(result) == []


def test_at_inside_an_earlier_closed_turn_closes_it_there(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD)
    for _ in range(3):
        spec.turn(clock)  # turn 2 is 6..11: its step/start is 9
    spec.publish(root)

    result = fork(root, at=9)

    t = time_of(spec, 9)
    assert tail(result) == [marker(10, t), step_end(11, t), turn_end(12, t)]
    assert errors_of(result) == []


def test_turn_n_close_turn_forks_at_the_open_turn_s_last_event(root: Path, clock: Clock) -> None:
    source(clock, calls=1, started=1).publish(root)

    by_turn = fork(root, turn=2, child_id="by-turn")
    by_seq = fork(root, at=12, child_id="by-seq")

    assert by_turn.child.boundary == by_seq.child.boundary == 12
    assert tail(by_turn) == tail(by_seq)


def test_close_turn_at_a_boundary_between_turns_closes_nothing(root: Path, clock: Clock) -> None:
    spec = source(clock)
    spec.publish(root)

    result = fork(root, at=5)

    assert [e["type"] for e in tail(result)] == ["session/end-seed", "session/title"]
    assert result.closed_turn is None
    assert result.to_json()["child"]["closedTurn"] is None


# -- without the flag ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [[], ["--at", "11"], ["--turn", "2"]],
    ids=["source-end", "at", "turn"],
)
def test_without_the_flag_the_refusal_stays_and_names_close_turn(
    root: Path, clock: Clock, args: list[str]
) -> None:
    source(clock, calls=1, started=1).publish(root)
    before = tree_digest(root)

    result = run_cli("fork", SRC, "--root", root, "--no-agents", *args)

    assert result.exit_code == 4
    assert result.stderr.startswith("Error: ")
    assert result.stderr.endswith("; give --close-turn to fork there and close the turn\n")
    assert result.stderr.count("\n") == 1
    assert tree_digest(root) == before


def test_the_library_refusal_is_open_turn(root: Path, clock: Clock) -> None:
    source(clock).publish(root)

    with pytest.raises(OpenTurn):
        fork(root, close_turn=False)


# -- what the command reports ----------------------------------------------------------------


def test_dry_run_reports_the_closers_and_the_warning_and_writes_nothing(
    root: Path, clock: Clock
) -> None:
    source(clock, calls=2, started=1).publish(root)
    before = tree_digest(root)

    text = run_cli("fork", SRC, "--root", root, "--no-agents", "--close-turn", "--dry-run")
    document = run_cli(
        "fork", SRC, "--root", root, "--no-agents", "--close-turn", "--dry-run", "--json"
    )

    assert text.exit_code == document.exit_code == 0
    assert tree_digest(root) == before
    lines = text.stdout.splitlines()
    at = lines.index(
        "  closed turn: turn 2 (started at seq 7) by seqs 14..17: 2 tool results, step/end, "
        "turn/end (forked)"
    )
    assert lines[at + 1 : at + 3] == [
        "  result for call_0002_0000: TOOL_OUTCOME_UNKNOWN (it started at seq 12)",
        "  result for call_0002_0001: TOOL_NOT_STARTED",
    ]
    warning = (
        "1 tool call (call_0002_0000) had started at the boundary: the child records its "
        f"outcome as unknown, but it may still complete in the source {SRC}"
    )
    assert warning in text.stderr
    check("fork", orjson.loads(document.stdout))
    assert orjson.loads(document.stdout)["child"]["closedTurn"] == {
        "turn": 2,
        "startSeq": 7,
        "toolResults": [
            {
                "callId": "call_0002_0000",
                "step": 1,
                "resultSeq": 14,
                "code": "TOOL_OUTCOME_UNKNOWN",
                "callSeq": 12,
            },
            {
                "callId": "call_0002_0001",
                "step": 1,
                "resultSeq": 15,
                "code": "TOOL_NOT_STARTED",
                "callSeq": None,
            },
        ],
        "stepEndSeq": 16,
        "turnEndSeq": 17,
        "events": 4,
    }


def test_a_fork_of_a_closed_child_works_and_closes_nothing_more(root: Path, clock: Clock) -> None:
    source(clock, calls=2, started=1).publish(root)
    child = fork(root)

    again = fork(root, "child", child_id="grandchild", close_turn=False)

    assert again.child.boundary == 18  # the child's title, after its closers: between turns
    assert again.path is not None and child.path is not None
    assert log_lines(again.path)[1:20] == log_lines(child.path)[1:20]
    assert [e["type"] for e in tail(again)] == ["session/end-seed", "session/title"]
    assert tail(again)[1]["data"]["title"] == "Plan (2)"
    assert errors_of(again) == []


# -- subagents: the same branch rule as any fork at that boundary ------------------------------


def test_the_agents_spawned_before_the_boundary_are_copied(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD)
    spec.turn(clock)
    children: list[SessionSpec] = []
    facts: list[int] = []

    def spawn(k: int) -> None:
        child = SessionSpec(
            id=f"agent-{k}",
            created_at=clock(),
            cwd=CWD,
            parent=SRC,
            origin="subagent",
            depth=1,
        )
        child.descriptor(clock, f"helper {k}")
        child.turn(clock)
        children.append(child)
        facts.append(spec.catalog(clock, child, label=f"helper {k}"))

    spec.unfinished_turn(clock, tool="agent", calls=2, started=2, on_call=spawn)
    spec.publish(root)
    for child in children:
        child.publish(root)

    result = fork(root, at=facts[0], agents=True)  # agent-0's catalog fact, before agent-1's

    assert result.agents is not None
    summary = result.agents.to_json()
    assert [item["source"] for item in summary["copied"]] == ["agent-0"]
    assert summary["unrelated"] == ["agent-1"]
    assert [e["type"] for e in tail(result)] == [
        "session/end-seed",
        "tool/result",
        "tool/result",
        "step/end",
        "turn/end",
        "subagent/catalog",
    ]
    codes = [e["data"]["error"]["code"] for e in tail(result)[1:3]]
    assert codes == ["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"]
    assert errors_of(result) == []
