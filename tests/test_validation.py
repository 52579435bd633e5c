"""The v4 validity checklist (format §15; semantics §10.2) as findings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from dsh_fork import frames as zframes
from dsh_fork.findings import FINDINGS_PER_CODE, Finding, counts
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file, write_spec_as
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.validation import check_dir, validate_dir
from dsh_fork.vocabulary import KNOWN_V4_TYPES

PARENT = "session-parent"


def spec_of(**kwargs: Any) -> SessionSpec:
    return SessionSpec(id=kwargs.pop("id", "session-s"), created_at=1, **kwargs)


def found(spec: SessionSpec, root: Path) -> list[tuple[str, str, int | None]]:
    """(severity, code, seq) of every finding of a published spec."""
    return [(f.severity, f.code, f.seq) for f in validate_dir(spec.publish(root))]


def only(spec: SessionSpec, root: Path) -> list[Finding]:
    return validate_dir(spec.publish(root))


def start_turn(spec: SessionSpec, clock: Clock) -> int:
    spec.turns += 1
    return spec.add("turn/start", clock(), {"turn": spec.turns})


def end_turn(spec: SessionSpec, clock: Clock) -> int:
    return spec.add("turn/end", clock(), {"turn": spec.turns, "reason": {"kind": "completed"}})


def step(spec: SessionSpec, clock: Clock, kind: str, number: int = 1) -> int:
    return spec.add(f"step/{kind}", clock(), {"turn": spec.turns, "step": number})


def assistant(spec: SessionSpec, clock: Clock, *calls: str, number: int = 1) -> int:
    content: list[dict[str, Any]] = [{"type": "text", "text": "on it"}]
    content += [
        {"type": "tool-call", "id": call, "name": "bash", "arguments": '{"command":"ls"}'}
        for call in calls
    ]
    data = {
        "turn": spec.turns,
        "step": number,
        "message": {"id": f"a-{spec.seq}", "role": "assistant", "content": content},
    }
    return spec.add("assistant/message", clock(), data, surfaceOp="append")


def tool_call(spec: SessionSpec, clock: Clock, call: str, args: str = '{"command":"ls"}') -> int:
    data = {"turn": spec.turns, "step": 1, "callId": call, "name": "bash", "arguments": args}
    return spec.add("tool/call", clock(), data)


def tool_result(
    spec: SessionSpec, clock: Clock, call: str, message_id: str = "r", **message: Any
) -> int:
    body = {
        "id": message_id,
        "role": "tool",
        "toolCallId": call,
        "source": {"kind": "tool", "callId": call},
        "content": [{"type": "text", "text": "done"}],
        **message,
    }
    data = {"turn": spec.turns, "step": 1, "message": body}
    return spec.add("tool/result", clock(), data, surfaceOp="append")


# -- clean logs -------------------------------------------------------------------------------


def test_the_v4_vocabulary_has_59_types() -> None:
    assert len(KNOWN_V4_TYPES) == 59
    assert "subagent/catalog" in KNOWN_V4_TYPES
    assert "assistant/chunk" not in KNOWN_V4_TYPES


def test_a_generated_root_has_no_findings(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    generate(root, sessions=2, agents=2, depth=2, turns=3)
    dirs = sorted(root.glob("*/*"))
    assert len(dirs) == 2 * (1 + 2 + 4)
    for session_dir in dirs:
        assert validate_dir(session_dir) == [], session_dir


def test_the_foreign_samples_have_only_the_blog_open_turn(samples_root: Path) -> None:
    by_dir = {d.name: validate_dir(d) for d in samples_root.glob("*/*")}
    blog = by_dir.pop("session-41279f7e-cbd2-4124-8b98-f51118f00bc9")
    assert [f.to_json() for f in blog] == [
        {
            "severity": "info",
            "code": "OPEN_TURN",
            "message": "turn 2 is open (started at seq 7); step 1 is open",
            "seq": 7,
        }
    ]
    assert all(findings == [] for findings in by_dir.values())


def test_a_complete_tool_call_round_trip_is_clean(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    spec.user_message(clock, "go")
    step(spec, clock, "start")
    assistant(spec, clock, "call-1")
    tool_call(spec, clock, "call-1")
    tool_result(spec, clock, "call-1")
    step(spec, clock, "end")
    step(spec, clock, "start", 2)
    assistant(spec, clock, number=2)
    step(spec, clock, "end", 2)
    end_turn(spec, clock)
    assert found(spec, root) == []


# -- types and envelope -----------------------------------------------------------------------


def test_unknown_type_without_ignorable_is_an_error(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    seq = spec.add("plugin/thing", clock(), {"x": 1})
    findings = only(spec, root)
    assert [(f.severity, f.code, f.seq) for f in findings] == [("error", "UNKNOWN_EVENT", seq)]
    assert "'plugin/thing'" in findings[0].message


def test_unknown_ignorable_event_is_legal_anywhere(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    step(spec, clock, "start")
    spec.add("plugin/thing", clock(), [1, 2], ignorable=True, surfaceOp={"weird": True})
    spec.add("plugin/other", clock(), None, ignorable=True, sourceEventSeqs=[[0, 1]])
    step(spec, clock, "end")
    end_turn(spec, clock)
    spec.add("plugin/thing", clock(), "between turns", ignorable=True)
    assert found(spec, root) == []


def test_ranges_are_decoded_on_unknown_ignorable_events(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    seq = spec.add("plugin/thing", clock(), {}, ignorable=True, sourceEventSeqs=[[3, 1]])
    assert found(spec, root) == [("error", "SURFACE", seq)]


def test_envelope_rules(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    extra = spec.add("session/title", clock(), {"title": "t", "messageSeqs": [], "source": {}})
    spec.lines[extra] = spec.lines[extra].replace(b'"data"', b'"owner":"x","data"')
    fraction = spec.add_raw(
        b'{"type":"agent-preset/selected","seq":%d,"time":1.5,"data":{}}' % spec.seq
    )
    no_data = spec.add_raw(b'{"type":"agent-preset/selected","seq":%d,"time":5}' % spec.seq)
    not_true = spec.add("agent-preset/selected", clock(), {}, ignorable=False)
    result = found(spec, root)
    envelope = [(s, c, q) for s, c, q in result if c == "ENVELOPE"]
    assert envelope == [
        ("error", "ENVELOPE", extra),
        ("error", "ENVELOPE", fraction),
        ("error", "ENVELOPE", no_data),
        ("error", "ENVELOPE", not_true),
    ]


def test_invalid_utf8_is_a_warning_and_kept(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    seq = spec.add_raw(
        b'{"type":"agent-preset/selected","seq":%d,"time":5,"data":{"agentPreset":"\xff"}}'
        % spec.seq
    )
    assert found(spec, root) == [("warning", "LINE_ENCODING", seq)]


def test_findings_per_code_are_capped(root: Path, clock: Clock) -> None:
    spec = spec_of()
    for _ in range(FINDINGS_PER_CODE + 7):
        spec.add("plugin/thing", clock(), {})
    findings = only(spec, root)
    assert len(findings) == FINDINGS_PER_CODE + 1
    assert findings[-1].message == "7 more UNKNOWN_EVENT findings not shown"
    assert counts(findings) == {"error": FINDINGS_PER_CODE + 1, "warning": 0, "info": 0}


# -- surface ----------------------------------------------------------------------------------


def test_surface_op_rules(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    missing = spec.add(
        "user/message", clock(), {"id": "u", "role": "user", "source": {"kind": "user"}}
    )
    misplaced = spec.add("request/header", clock(), {"header": {}}, surfaceOp="append")
    step(spec, clock, "start")
    replace = {"op": "replace", "startSeq": 1, "endSeq": 1}
    spec.add("system/message", clock(), {"turn": 1, "step": 1}, surfaceOp=replace)
    bad = spec.add("system/message", clock(), {"turn": 1, "step": 1}, surfaceOp={"op": "x"})
    cites = spec.add(
        "system/message", clock(), {"turn": 1}, surfaceOp="append", sourceEventSeqs=[[0, 2]]
    )
    later = spec.add("system/message", clock(), {}, surfaceOp="append", sourceEventSeqs=[cites + 5])
    empty = spec.add("system/message", clock(), {}, surfaceOp="append", sourceEventSeqs=[])
    on_assistant = spec.add(
        "assistant/message", clock(), {"message": {}}, surfaceOp="append", sourceEventSeqs=[0]
    )
    step(spec, clock, "end")
    end_turn(spec, clock)
    assert found(spec, root) == [
        ("error", "SURFACE", missing),
        ("error", "SURFACE", misplaced),
        ("error", "SURFACE", bad),
        ("error", "SURFACE", later),
        ("error", "SURFACE", empty),
        ("error", "SURFACE", on_assistant),
    ]


# -- inheritance ------------------------------------------------------------------------------


def test_seeded_header_needs_a_tagged_marker(root: Path, clock: Clock) -> None:
    spec = spec_of(parent=PARENT, is_seeded=True)
    spec.turn(clock)
    spec.end_seed(clock(), inherited=False)
    findings = only(spec, root)
    assert [(f.code, f.seq) for f in findings] == [("SEEDED_MISMATCH", None)]
    assert findings[0].message.startswith("header isSeeded is true but no session/end-seed")


def test_unseeded_header_forbids_tagged_markers(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    seq = spec.end_seed(clock())
    assert found(spec, root) == [("error", "SEEDED_MISMATCH", seq)]


def test_end_seed_data_must_be_an_object(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    seq = spec.add("session/end-seed", clock(), True)
    assert found(spec, root) == [("error", "EVENT_DATA", seq)]


def test_a_fork_of_a_fork_validates(root: Path, clock: Clock) -> None:
    spec = spec_of(parent=PARENT, is_seeded=True)
    spec.turn(clock)
    spec.end_seed(clock())
    spec.turn(clock)
    spec.end_seed(clock())
    spec.turn(clock)
    assert found(spec, root) == []


# -- lifecycle --------------------------------------------------------------------------------


def test_turn_numbering_and_nesting(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    skipped = spec.add("turn/start", clock(), {"turn": 3})
    nested = spec.add("turn/start", clock(), {"turn": 4})
    wrong_end = spec.add("turn/end", clock(), {"turn": 9, "reason": {"kind": "completed"}})
    lone_end = spec.add("turn/end", clock(), {"turn": 5, "reason": {"kind": "completed"}})
    assert found(spec, root) == [
        ("error", "LIFECYCLE", skipped),
        ("error", "LIFECYCLE", nested),
        ("error", "LIFECYCLE", wrong_end),
        ("error", "LIFECYCLE", lone_end),
    ]


def test_step_rules(root: Path, clock: Clock) -> None:
    spec = spec_of()
    outside = spec.add("step/start", clock(), {"turn": 1, "step": 1})
    start_turn(spec, clock)
    misnumbered = step(spec, clock, "start", 2)
    overlap = step(spec, clock, "start", 3)
    step(spec, clock, "end", 3)
    mismatched_end = step(spec, clock, "end", 7)
    open_at_end = step(spec, clock, "start", 4)
    end = end_turn(spec, clock)
    assert found(spec, root) == [
        ("error", "LIFECYCLE", outside),
        ("error", "LIFECYCLE", misnumbered),
        ("error", "LIFECYCLE", overlap),
        ("error", "LIFECYCLE", mismatched_end),
        ("error", "LIFECYCLE", end),
    ]
    assert open_at_end == end - 1


def test_bound_events_need_their_turn_and_step(root: Path, clock: Clock) -> None:
    spec = spec_of()
    no_turn = spec.add("request/header", clock(), {"header": {}, "reason": "initial"})
    start_turn(spec, clock)
    spec.add("request/context", clock(), {"provider": "p", "model": "m"})
    no_step = spec.add("assistant/attempt", clock(), {"turn": 1, "step": 1})
    step(spec, clock, "start")
    wrong_turn = spec.add("assistant/attempt", clock(), {"turn": 2, "step": 1})
    step(spec, clock, "end")
    end_turn(spec, clock)
    assert found(spec, root) == [
        ("error", "LIFECYCLE", no_turn),
        ("error", "LIFECYCLE", no_step),
        ("error", "LIFECYCLE", wrong_turn),
    ]


def test_log_only_events_sit_between_turns(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    spec.title(clock, "between")
    spec.add("agent-preset/selected", clock(), {"agentPreset": "code"})
    spec.end_seed(clock(), inherited=False)
    spec.turn(clock)
    assert found(spec, root) == []


def test_tool_call_rules(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    step(spec, clock, "start")
    assistant(spec, clock, "c1", "c2", "c3")
    unknown = tool_call(spec, clock, "nope")
    tool_call(spec, clock, "c1")
    twice = tool_call(spec, clock, "c1")
    differs = tool_call(spec, clock, "c2", args='{"command":"rm"}')
    tool_result(spec, clock, "c1")
    again = tool_result(spec, clock, "c1", "r2")
    not_started = tool_result(spec, clock, "c3", "plain")
    step_end = step(spec, clock, "end")
    turn_end = end_turn(spec, clock)
    findings = only(spec, root)
    assert [(f.code, f.seq) for f in findings] == [
        ("LIFECYCLE", unknown),
        ("LIFECYCLE", twice),
        ("LIFECYCLE", differs),
        ("LIFECYCLE", again),
        ("LIFECYCLE", not_started),
        ("LIFECYCLE", step_end),  # c2 started but never resolved
        ("LIFECYCLE", turn_end),
    ]
    assert [f.message for f in findings[:5]] == [
        "tool/call 'nope' was not advertised in this turn",
        "tool/call c1 started twice",
        "tool/call c2 name or arguments differ from its advertisement",
        "tool/result for call c1, which is already resolved",
        "tool/result for call c3, which was never started, is not a TOOL_NOT_STARTED repair",
    ]


def test_turn_end_with_an_unresolved_call(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    step(spec, clock, "start")
    assistant(spec, clock, "c1")
    tool_call(spec, clock, "c1")
    step_end = step(spec, clock, "end")
    turn_end = end_turn(spec, clock)
    findings = only(spec, root)
    assert [(f.code, f.seq) for f in findings] == [
        ("LIFECYCLE", step_end),
        ("LIFECYCLE", turn_end),
    ]
    assert findings[1].message == "turn/end with unresolved tool calls: c1"


def test_tool_not_started_repairs(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    step(spec, clock, "start")
    assistant(spec, clock, "c1", "c2", "c3")
    tool_result(spec, clock, "c1", "interrupted-tool-result-c1-0", isError=True)
    closer = spec.seq
    tool_result(spec, clock, "c2", f"forked-tool-result-c2-{closer}", isError=True)
    bad = spec.seq
    tool_result(spec, clock, "c3", f"forked-tool-result-c3-{bad - 1}", isError=True)
    step(spec, clock, "end")
    spec.add("turn/end", clock(), {"turn": 1, "reason": {"kind": "forked"}})
    findings = only(spec, root)
    assert [(f.code, f.seq) for f in findings] == [("LIFECYCLE", bad)]
    assert "not its own seq" in findings[0].message


def test_a_replacing_tool_result_needs_only_a_turn(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    first = spec.user_message(clock, "x")
    replace = {"op": "replace", "startSeq": first, "endSeq": first}
    spec.add("tool/result", clock(), {"message": {}}, surfaceOp=replace, sourceEventSeqs=[first])
    end_turn(spec, clock)
    assert found(spec, root) == []


def test_compaction_must_not_cross_a_turn(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    spec.add("compaction/start", clock(), {})
    crossing = end_turn(spec, clock)
    spec.add("compaction/start", clock(), {})
    spec.end_seed(clock(), inherited=False)  # expires the open bracket
    spec.turn(clock)
    assert found(spec, root) == [("error", "LIFECYCLE", crossing)]


def test_command_done_follows_its_run(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.add("command/run", clock(), {"commandId": "k1"})
    spec.add("command/done", clock(), {"commandId": "k1"})
    orphan = spec.add("command/done", clock(), {"commandId": "k2"})
    reused = spec.add("command/run", clock(), {"commandId": "k1"})
    assert found(spec, root) == [("error", "LIFECYCLE", orphan), ("error", "LIFECYCLE", reused)]


def test_open_last_turn_is_info(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    start = start_turn(spec, clock)
    step(spec, clock, "start")
    assistant(spec, clock, "c9")
    findings = only(spec, root)
    assert [f.to_json() for f in findings] == [
        {
            "severity": "info",
            "code": "OPEN_TURN",
            "message": f"turn 2 is open (started at seq {start}); step 1 is open; "
            "unresolved tool calls: c9",
            "seq": start,
        }
    ]


# -- titles, catalog, descriptors, delivery markers -------------------------------------------


def test_title_message_seqs(root: Path, clock: Clock) -> None:
    spec = spec_of()
    start_turn(spec, clock)
    human = spec.user_message(clock, "hi")
    machine = spec.add(
        "user/message",
        clock(),
        {"id": "m", "role": "user", "source": {"kind": "plugin"}, "content": []},
        surfaceOp="append",
    )
    end_turn(spec, clock)
    provider = {"kind": "provider", "provider": "p"}
    spec.add("session/title", clock(), {"title": "a", "messageSeqs": [human], "source": provider})
    user_cites = spec.add(
        "session/title", clock(), {"title": "b", "messageSeqs": [human], "source": {"kind": "user"}}
    )
    cites_machine = spec.add(
        "session/title", clock(), {"title": "c", "messageSeqs": [machine], "source": provider}
    )
    cites_nothing = spec.add(
        "session/title", clock(), {"title": "d", "messageSeqs": [], "source": provider}
    )
    assert found(spec, root) == [
        ("error", "TITLE", user_cites),
        ("error", "TITLE", cites_machine),
        ("error", "TITLE", cites_nothing),
    ]


def test_own_range_catalog_schema_and_uniqueness(root: Path, clock: Clock) -> None:
    child = spec_of(id="session-child")
    spec = spec_of(parent=PARENT, is_seeded=True)
    spec.turn(clock)
    spec.add("subagent/catalog", clock(), {"version": 0, "childId": 5})  # inherited: unchecked
    spec.catalog(clock, child, label="inherited copy")
    spec.end_seed(clock())
    spec.catalog(clock, child, label="own")  # duplicates an inherited one: fine
    duplicate = spec.catalog(clock, child, label="own again")
    invalid = spec.add(
        "subagent/catalog",
        clock(),
        {"version": 0, "childId": "x", "childCreatedAt": 1, "mode": "continuable", "callId": "c"},
    )
    findings = only(spec, root)
    assert [(f.code, f.seq) for f in findings] == [
        ("CATALOG_DUPLICATE", duplicate),
        ("CATALOG_INVALID", invalid),
    ]
    assert findings[0].message.startswith("duplicate own-range catalog childId session-child")
    assert findings[1].message == "catalog fact has keys not allowed: callId"


def test_subagent_descriptor_count_is_informative(root: Path, clock: Clock) -> None:
    none = spec_of(id="session-a", parent=PARENT, origin="subagent", depth=1)
    none.turn(clock)
    two = spec_of(id="session-b", parent=PARENT, origin="subagent", depth=1)
    two.descriptor(clock, "x")
    two.descriptor(clock, "y")
    one = spec_of(id="session-c", parent=PARENT, origin="subagent", depth=1)
    one.descriptor(clock, "z")
    bad = spec_of(id="session-d", parent=PARENT, origin="subagent", depth=1)
    seq = bad.descriptor(clock, None)
    assert [f.to_json() for f in only(none, root)] == [
        {
            "severity": "warning",
            "code": "DESCRIPTOR",
            "message": "subagent child has no own-range descriptor",
        }
    ]
    assert found(two, root) == [("warning", "DESCRIPTOR", None)]
    assert found(one, root) == []
    assert found(bad, root) == [("warning", "DESCRIPTOR", seq), ("warning", "DESCRIPTOR", None)]


def marker(session_id: str, through: int, version: Any = 4) -> dict[str, Any]:
    return {"sessionId": session_id, "sessionFormatVersion": version, "throughSeq": through}


def test_delivery_markers(root: Path, clock: Clock) -> None:
    delivery = "session-log-deepseek/delivery-accepted"
    spec = spec_of(parent=PARENT, is_seeded=True)
    spec.turn(clock)
    spec.add(delivery, clock(), marker(PARENT, 3))  # inherited, parent's id: fine
    spec.end_seed(clock())
    own_foreign = spec.add(delivery, clock(), marker(PARENT, 3))
    spec.add(delivery, clock(), marker(spec.id, 2))
    ahead = spec.add(delivery, clock(), marker(spec.id, spec.seq + 5))
    spec.add(delivery, clock(), marker("someone-else", 1, version=3))  # other generation
    spec.add(delivery, clock(), {"sessionId": "legacy", "throughSeq": 1})  # version 0
    bad_version = spec.add(delivery, clock(), marker(spec.id, 1, version=-1))
    not_object = spec.add(delivery, clock(), "accepted")
    empty_id = spec.add(delivery, clock(), marker("", 1))
    assert found(spec, root) == [
        ("error", "DELIVERY_MARKER", ahead),
        ("error", "DELIVERY_MARKER", bad_version),
        ("error", "DELIVERY_MARKER", not_object),
        ("error", "DELIVERY_MARKER", empty_id),
        ("error", "DELIVERY_MARKER", own_foreign),
    ]


def test_inherited_foreign_marker_without_parent_session_is_an_error(
    root: Path, clock: Clock
) -> None:
    spec = spec_of()
    spec.turn(clock)
    seq = spec.add("session-log-deepseek/delivery-accepted", clock(), marker("other", 1))
    assert found(spec, root) == [("error", "DELIVERY_MARKER", seq)]


# -- files and generations --------------------------------------------------------------------


def published(root: Path, clock: Clock, **kwargs: Any) -> Path:
    spec = spec_of(**kwargs)
    spec.turn(clock)
    spec.flush()
    spec.turn(clock)
    spec.flush()
    spec.turn(clock)
    return spec.publish(root)


def test_bit_flip_in_a_middle_frame_is_corrupt(root: Path, clock: Clock) -> None:
    session_dir = published(root, clock)
    path = session_dir / CURRENT_NAME
    data = bytearray(path.read_bytes())
    frame = zframes.scan(bytes(data)).frames[2]
    data[(frame.start + frame.end) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    findings = validate_dir(session_dir)
    assert [(f.severity, f.code) for f in findings] == [("error", "CORRUPT_LOG")]
    assert str(path) in findings[0].message


def test_torn_tail_is_a_warning(root: Path, clock: Clock) -> None:
    session_dir = published(root, clock)
    path = session_dir / CURRENT_NAME
    frame = zframes.encode(b'{"type":"agent-preset/selected","seq":18,"time":1,"data":{}}\n')
    size = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(frame[: len(frame) - 3])
    findings = validate_dir(session_dir)
    assert [f.to_json() for f in findings] == [
        {
            "severity": "warning",
            "code": "TORN_TAIL",
            "message": f"torn tail at byte {size} ({len(frame) - 3} bytes; 1 complete "
            "lines DSH would recover); DSH truncates it on its next write",
        }
    ]


def test_version_mismatch(root: Path) -> None:
    header = orjson.dumps(
        {"type": "session", "version": 3, "id": "s", "createdAt": 1, "cwd": "/p"}
        | {"isSeeded": False, "delegationDepth": 0}
    )
    path = write_log_file(root / "--p--" / "s" / CURRENT_NAME, header, [])
    findings = validate_dir(path.parent)
    assert [(f.code, f.message) for f in findings] == [
        ("VERSION_MISMATCH", f"{path}: header version 3 does not match the file name (v4)")
    ]


def test_header_with_a_retired_key_is_invalid(root: Path) -> None:
    header = orjson.dumps(
        {"type": "session", "version": 4, "id": "s", "createdAt": 1, "cwd": "/p"}
        | {"isSeeded": False, "delegationDepth": 0, "sandboxMode": "x"}
    )
    path = write_log_file(root / "--p--" / "s" / CURRENT_NAME, header, [])
    findings = validate_dir(path.parent)
    assert [(f.severity, f.code) for f in findings] == [("error", "HEADER_INVALID")]
    assert "sandboxMode" in findings[0].message


def test_path_binding(root: Path, clock: Clock) -> None:
    session_dir = published(root, clock, cwd="/srv/a")
    moved = root / "--elsewhere--" / session_dir.name
    moved.parent.mkdir()
    os.rename(session_dir, moved)
    findings = validate_dir(moved)
    assert [f.to_json() for f in findings] == [
        {
            "severity": "error",
            "code": "PATH_MISMATCH",
            "message": "the log lives in --elsewhere--/session-s but its header binds it to "
            "--srv-a--/session-s",
        }
    ]


def test_future_generation_is_not_read(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    path = write_spec_as(spec, root, 9)
    findings = validate_dir(path.parent)
    assert [(f.severity, f.code) for f in findings] == [("warning", "FUTURE_GENERATION")]


def test_old_generation_gets_only_header_and_envelope_checks(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.add("plugin/thing", clock(), {})  # unknown: not a finding below v4
    spec.add("turn/end", clock(), {"turn": 7})  # lifecycle: not checked below v4
    spec.add_raw(b'{"type":"x","seq":2,"time":1,"data":{},"extra":1}')
    path = write_spec_as(spec, root, 3)
    assert [(f.severity, f.code, f.seq) for f in validate_dir(path.parent)] == [
        ("error", "ENVELOPE", 2),
        ("info", "OLD_GENERATION", None),
    ]


@pytest.mark.parametrize("variant", ["mtime", "turns"])
def test_stale_lower_generation(root: Path, clock: Clock, variant: str) -> None:
    spec = spec_of()
    spec.turn(clock)
    spec.turn(clock)
    session_dir = spec.publish(root)
    lower = spec_of()
    lower.turn(clock)
    if variant == "turns":
        lower.turn(clock)
        lower.turn(clock)
    v3 = write_spec_as(lower, root, 3)
    current = session_dir / CURRENT_NAME
    if variant == "mtime":
        os.utime(v3, ns=(current.stat().st_mtime_ns + 10**9,) * 2)
    else:
        os.utime(v3, ns=(current.stat().st_mtime_ns - 10**9,) * 2)
    findings = validate_dir(session_dir)
    reason = "has a newer mtime" if variant == "mtime" else "has more turn/end events (3 > 2)"
    assert [f.to_json() for f in findings] == [
        {
            "severity": "warning",
            "code": "STALE_GENERATION",
            "message": f"session.v3.jsonl.zstd {reason} than the chosen session.v4.jsonl.zstd; "
            "DSH reads only the highest generation",
        }
    ]


def test_empty_dir_and_own_catalog_of_check_dir(root: Path, clock: Clock) -> None:
    empty = root / "--p--" / "leftover"
    empty.mkdir(parents=True)
    assert [(f.severity, f.code) for f in validate_dir(empty)] == [("info", "EMPTY_DIR")]
    child = spec_of(id="session-kid")
    spec = spec_of()
    spec.turn(clock)
    seq = spec.catalog(clock, child, label="kid")
    result = check_dir(spec.publish(root))
    assert result.readable
    assert [(s, d["childId"]) for s, d in result.own_catalog] == [(seq, "session-kid")]
