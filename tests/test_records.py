"""JSONL records (format §6–§9): headers per generation, envelopes, packed rows, ranges,
lenient parsing and the JavaScript number rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from dsh_fork.errors import CorruptLog, UnsupportedFormat
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file
from dsh_fork.generations import Generation
from dsh_fork.reader import open_log
from dsh_fork.records import (
    HEADER_KEYS_V2,
    MISSING,
    LineError,
    decode_source_seqs,
    encode_event,
    encode_header,
    expand_row,
    nonneg_int,
    parse_event,
    parse_header,
    parse_line,
    parse_v0_line,
    safe_int,
    split_lines,
)

MAX_SAFE = 2**53 - 1


def header(version: int, **changes: Any) -> bytes:
    """A valid header of ``version`` (v0/v1 or v2+ layout) with keys changed or removed."""
    fields: dict[str, Any] = {"type": "session", "version": version, "id": "s-1"}
    fields["createdAt"] = 1768000000000
    fields["cwd"] = "/home/u/proj"
    if version >= 2:
        fields["isSeeded"] = False
    fields["delegationDepth"] = 0
    for key, value in changes.items():
        if value is MISSING:
            fields.pop(key, None)
        else:
            fields[key] = value
    return orjson.dumps(fields)


# -- headers --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_a_minimal_header_of_every_generation(version: int) -> None:
    parsed = parse_header(header(version, cwd=MISSING), version)
    assert (parsed.version, parsed.id, parsed.created_at) == (version, "s-1", 1768000000000)
    assert (parsed.cwd, parsed.parent_session, parsed.origin, parsed.agent_preset) == (None,) * 4
    assert parsed.is_seeded is False
    assert parsed.delegation_depth == 0


@pytest.mark.parametrize("version", [0, 1])
def test_v0_v1_headers_are_seeded_by_seed_length(version: int) -> None:
    line = header(
        version,
        parentSession="p",
        seedLength=42,
        origin="subagent",
        agentPreset="code",
        delegationDepth=2,
    )
    parsed = parse_header(line, version)
    assert (parsed.is_seeded, parsed.seed_length, parsed.parent_session) == (True, 42, "p")
    assert (parsed.origin, parsed.agent_preset, parsed.delegation_depth) == ("subagent", "code", 2)
    assert parsed.raw == line
    assert parsed.fields == orjson.loads(line)


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"isSeeded": True}, "keys not allowed in v{v}: isSeeded"),
        ({"delegationDepth": -1}, "delegationDepth must be a non-negative safe integer"),
        ({"seedLength": -1}, "seedLength must be a non-negative integer"),
        ({"seedLength": 1.5}, "seedLength must be a non-negative integer"),
    ],
)
def test_v0_v1_header_rules(version: int, change: dict[str, Any], message: str) -> None:
    with pytest.raises(CorruptLog, match=message.format(v=version)):
        parse_header(header(version, **change), version)


@pytest.mark.parametrize("version", [0, 1])
def test_a_v0_v1_header_without_delegation_depth_is_depth_0(version: int) -> None:
    """DSH's own 0.1.1 logs omit it, and DSH reads them; v2+ headers must carry it."""
    assert parse_header(header(version, delegationDepth=MISSING), version).delegation_depth == 0


@pytest.mark.parametrize("version", [2, 3, 4])
def test_v2_to_v4_headers_with_every_optional_key(version: int) -> None:
    line = header(
        version, parentSession="", isSeeded=True, origin="subagent", agentPreset="", cwd="/x"
    )
    parsed = parse_header(line, version)
    assert parsed.is_seeded is True
    assert parsed.parent_session == ""  # any string, never resolved (format §7.2)
    assert parsed.cwd == "/x"
    assert parsed.seed_length is None
    assert parsed.is_subagent and not parsed.is_fork_child


@pytest.mark.parametrize("version", [2, 3, 4])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sandboxMode": "x"}, "keys not allowed in v{v}: sandboxMode"),
        ({"approvalPolicy": "x"}, "keys not allowed in v{v}: approvalPolicy"),
        ({"seedLength": 3}, "keys not allowed in v{v}: seedLength"),
        ({"title": "t", "owner": "o"}, "keys not allowed in v{v}: owner, title"),
        ({"delegationDepth": MISSING}, "lacks delegationDepth"),
        ({"isSeeded": MISSING}, "lacks isSeeded"),
        ({"id": MISSING, "createdAt": MISSING}, "lacks createdAt, id"),
        ({"id": ""}, "id must be a non-empty string"),
        ({"id": 7}, "id must be a non-empty string"),
        ({"createdAt": -1}, "createdAt must be a non-negative safe integer"),
        ({"createdAt": 2**53}, "createdAt must be a non-negative safe integer"),
        ({"createdAt": "1"}, "createdAt must be a non-negative safe integer"),
        ({"delegationDepth": True}, "delegationDepth must be a non-negative safe integer"),
        ({"cwd": "relative/path"}, "cwd 'relative/path' is not absolute"),
        # DSH on POSIX refuses a Windows path: "first line is not a session header".
        ({"cwd": "C:/ws"}, "first line is not a session header: cwd 'C:/ws' is not absolute"),
        ({"cwd": "C:\\ws"}, "is not absolute"),
        ({"cwd": "\\\\server\\share"}, "is not absolute"),
        ({"cwd": ""}, "cwd must be a non-empty string"),
        ({"cwd": None}, "cwd must be a string, not null"),
        ({"origin": "automation"}, 'origin must be "subagent"'),
        ({"origin": None}, "origin must be a string, not null"),
        ({"parentSession": None}, "parentSession must be a string, not null"),
        ({"parentSession": 5}, "parentSession must be a string"),
        ({"agentPreset": None}, "agentPreset must be a string, not null"),
        ({"isSeeded": "true"}, "isSeeded must be a boolean"),
    ],
)
def test_v2_to_v4_header_rules(version: int, change: dict[str, Any], message: str) -> None:
    with pytest.raises(CorruptLog, match=message.format(v=version)):
        parse_header(header(version, **change), version)


def test_five_point_zero_counts_as_an_integer_in_a_header() -> None:
    parsed = parse_header(header(4, createdAt=5.0, delegationDepth=1e0), 4)
    assert (parsed.created_at, parsed.delegation_depth) == (5, 1)


def test_header_version_must_match_the_file_name() -> None:
    with pytest.raises(CorruptLog, match=r"header version 3 does not match the file name \(v4\)"):
        parse_header(header(3), 4)


def test_a_future_version_is_unsupported_before_its_shape_is_checked() -> None:
    line = orjson.dumps({"type": "session", "version": 9, "whatever": [1, 2]})
    with pytest.raises(UnsupportedFormat, match="header version 9 is newer than v4") as caught:
        parse_header(line, 9)
    assert caught.value.details["version"] == 9


def test_a_v4_file_holding_a_v9_header_is_mislabelled() -> None:
    with pytest.raises(CorruptLog, match="does not match the file name"):
        parse_header(header(9), 4)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "header is not JSON"),
        (b"[1,2]", "first record is not a session header"),
        (b'{"type":"turn/start","seq":0}', "first record is not a session header"),
        (b'{"type":"session","version":"4"}', "header version must be a non-negative integer"),
        (b'{"type":"session"}', "header version must be a non-negative integer"),
    ],
)
def test_records_that_are_no_header(line: bytes, message: str) -> None:
    with pytest.raises(CorruptLog, match=message):
        parse_header(line, 4)


def test_encode_header_key_order_and_omitted_optionals() -> None:
    line = encode_header(
        session_id="c",
        created_at=5,
        cwd=None,
        parent_session="p",
        is_seeded=True,
        origin=None,
        delegation_depth=0,
        agent_preset="code",
    )
    assert line == (
        b'{"type":"session","version":4,"id":"c","createdAt":5,"parentSession":"p",'
        b'"isSeeded":true,"delegationDepth":0,"agentPreset":"code"}\n'
    )
    full = orjson.loads(
        encode_header(
            session_id="c",
            created_at=5,
            cwd="/x",
            parent_session="p",
            is_seeded=True,
            origin="subagent",
            delegation_depth=1,
            agent_preset="a",
        )
    )
    assert tuple(full) == HEADER_KEYS_V2
    assert parse_header(line[:-1], 4).is_fork_child


# -- event envelope -------------------------------------------------------------------------


def test_an_event_envelope() -> None:
    line = b'{"type":"turn/start","seq":5,"time":1768000000123,"data":{"turn":2}}'
    event = parse_event(line, 5)
    assert (event.seq, event.type, event.time, event.data) == (
        5,
        "turn/start",
        1768000000123,
        {"turn": 2},
    )
    assert event.raw == line
    assert not event.ignorable and not event.lenient


def test_envelope_details() -> None:
    assert parse_event(b'{"type":"x/y","seq":5.0,"time":1,"data":null}', 5).seq == 5
    assert parse_event(b'{"type":"x/y","seq":0,"time":1,"data":null}', 0).data is None
    assert parse_event(b'{"type":"x/y","seq":0,"time":1}', 0).data is MISSING
    assert parse_event(b'{"type":"x/y","seq":0,"time":1.5,"data":1}', 0).time is None
    assert parse_event(b'{"type":"x/y","seq":0,"time":-5,"data":1}', 0).time == -5
    assert parse_event(b'{"type":"x","seq":0,"time":1,"data":1,"ignorable":true}', 0).ignorable
    assert not parse_event(b'{"type":"x","seq":0,"time":1,"data":1,"ignorable":1}', 0).ignorable


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{", "event 3 is not JSON"),
        (b"[]", "event 3 is not an object"),
        (b'{"seq":3}', "event 3 has no type"),
        (b'{"type":7,"seq":3}', "event 3 has no type"),
        (b'{"type":"a","seq":4}', "seq 4 where 3 was expected"),
        (b'{"type":"a","seq":2}', "seq 2 where 3 was expected"),
        (b'{"type":"a","seq":"3"}', "seq '3' where 3 was expected"),
        (b'{"type":"a","seq":true}', "seq True where 3 was expected"),
        (b'{"type":"a"}', "seq None where 3 was expected"),
        (
            b'{"type":"text-chunks","seq0":3,"time0":1,"data":{}}',
            "event 3 is a packed text-chunks row",
        ),
    ],
)
def test_bad_envelopes_are_corrupt(line: bytes, message: str) -> None:
    with pytest.raises(CorruptLog, match=message) as caught:
        parse_event(line, 3)
    assert caught.value.details["line"] == 3


def test_encode_event_is_compact_with_raw_utf8() -> None:
    line = encode_event("session/end-seed", 7, 9, {"inherited": True, "t": "é\u2028"})
    assert line == (
        b'{"type":"session/end-seed","seq":7,"time":9,"data":{"inherited":true,"t":"'
        + "é\u2028".encode()
        + b'"}}\n'
    )


# -- packed rows (v0/v1) ----------------------------------------------------------------------


def text_row(seq0: int, time0: float = 1755000000500, **data: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"turn": 3, "step": 1, "index": 0, "dt": [4, -1]}
    body["texts"] = ["Hel", "lo", " world"]
    body.update(data)
    return {"type": "text-chunks", "seq0": seq0, "time0": time0, "data": body}


def test_the_format_example_row_expands_to_three_events() -> None:
    events = expand_row(text_row(120), 120)
    assert [(e.seq, e.time, e.type) for e in events] == [
        (120, 1755000000500, "assistant/chunk"),
        (121, 1755000000504, "assistant/chunk"),
        (122, 1755000000503, "assistant/chunk"),
    ]
    assert events[1].data == {
        "turn": 3,
        "step": 1,
        "chunk": {"type": "text-delta", "index": 0, "text": "lo"},
    }
    assert events[0].obj == {
        "type": "assistant/chunk",
        "seq": 120,
        "time": 1755000000500,
        "data": events[0].data,
    }
    assert all(e.raw is None for e in events)


def test_reasoning_and_tool_call_rows() -> None:
    row = text_row(0)
    row["type"] = "reasoning-chunks"
    assert expand_row(row, 0)[2].data["chunk"] == {
        "type": "reasoning-delta",
        "index": 0,
        "text": " world",
    }
    tool: dict[str, Any] = {
        "type": "tool-call-chunks",
        "seq0": 4,
        "time0": 10,
        "data": {"turn": 1, "step": 1, "index": 2, "id": "c1", "name": "ls", "dt": [-3]},
    }
    tool["data"]["args"] = ['{"a"', ":1}"]
    events = expand_row(tool, 4)
    assert [(e.seq, e.time) for e in events] == [(4, 10), (5, 7)]
    assert events[1].data["chunk"] == {
        "type": "tool-call-delta",
        "index": 2,
        "id": "c1",
        "name": "ls",
        "argumentsDelta": ":1}",
    }
    del tool["data"]["name"]
    assert "name" not in expand_row(tool, 4)[0].data["chunk"]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (text_row(7), "seq0 7 does not continue the seqs"),
        ({**text_row(5), "seq": 5}, "envelope keys"),
        (text_row(5, time0=1.5), "time0 is not a safe integer"),
        (text_row(5, dt=[1]), "payload and dt"),
        (text_row(5, texts=[]), "payload and dt"),
        (text_row(5, texts=["a", 1, "b"]), "payload and dt"),
        (text_row(5, dt=[1, "x"]), "dt entry"),
        (text_row(5, time0=MAX_SAFE, dt=[1, 1]), "running time"),
        (text_row(5, extra=1), "data keys"),
        ({**text_row(5), "data": []}, "data is not an object"),
    ],
)
def test_malformed_packed_rows_are_corrupt(row: dict[str, Any], reason: str) -> None:
    with pytest.raises(CorruptLog, match=reason):
        expand_row(row, 5)


def test_a_tool_call_row_needs_its_id() -> None:
    tool: dict[str, Any] = {
        "type": "tool-call-chunks",
        "seq0": 0,
        "time0": 1,
        "data": {"turn": 1, "step": 1, "index": 0, "id": "", "dt": [], "args": ["x"]},
    }
    with pytest.raises(CorruptLog, match="id"):
        expand_row(tool, 0)
    del tool["data"]["id"]
    with pytest.raises(CorruptLog, match="data keys"):
        expand_row(tool, 0)


def test_parse_v0_line_tells_rows_from_events() -> None:
    assert len(parse_v0_line(orjson.dumps(text_row(2)), 2)) == 3
    plain = parse_v0_line(b'{"type":"turn/start","seq":2,"time":1,"data":{"turn":1}}', 2)
    assert [e.type for e in plain] == ["turn/start"]


def v0_log(tmp_path: Path, clock: Clock, version: int, *, seq0: int | None = None) -> Generation:
    """A v0/v1 log with packed rows of all three kinds between ordinary events."""
    spec = SessionSpec(id="old", created_at=clock())
    spec.add("turn/start", clock(), {"turn": 1})
    spec.add_raw(orjson.dumps(text_row(1 if seq0 is None else seq0, time0=5000)))
    reasoning = text_row(4, time0=6000, dt=[-10, 3])
    reasoning["type"] = "reasoning-chunks"
    spec.add_raw(orjson.dumps(reasoning))
    spec.lines.append(
        orjson.dumps({"type": "turn/end", "seq": 7, "time": clock(), "data": {"turn": 1}}) + b"\n"
    )
    tool: dict[str, Any] = {
        "type": "tool-call-chunks",
        "seq0": 8,
        "time0": 7000,
        "data": {"turn": 2, "step": 1, "index": 0, "id": "c", "dt": [2, 2], "args": ["{", "}", ""]},
    }
    spec.add_raw(orjson.dumps(tool))
    spec.lines.append(
        orjson.dumps({"type": "turn/start", "seq": 11, "time": clock(), "data": {"turn": 2}})
        + b"\n"
    )
    fields = orjson.loads(spec.header_line())
    fields["version"] = version
    del fields["isSeeded"]
    name = "session.jsonl.zstd" if version == 0 else f"session.v{version}.jsonl.zstd"
    path = write_log_file(tmp_path / "p" / "old" / name, orjson.dumps(fields), spec.lines)
    return Generation(path, version, "zstd")


@pytest.mark.parametrize("version", [0, 1])
def test_a_v0_log_with_packed_rows_reads_dense_seqs(
    tmp_path: Path, clock: Clock, version: int
) -> None:
    log = open_log(v0_log(tmp_path, clock, version))
    events = list(log.events())
    assert log.event_count == len(events) == 12
    assert [e.seq for e in events] == list(range(12))
    assert [e.type for e in events].count("assistant/chunk") == 9
    assert [e.time for e in events[4:7]] == [6000, 5990, 5993]  # negative dt
    assert [e.type for e in log.events(["turn/start", "turn/end"])] == [
        "turn/start",
        "turn/end",
        "turn/start",
    ]
    assert log.event(9).data["chunk"]["argumentsDelta"] == "}"


def test_a_packed_row_overlapping_committed_seqs_is_corrupt(tmp_path: Path, clock: Clock) -> None:
    with pytest.raises(CorruptLog, match="seq0 0 does not continue the seqs"):
        open_log(v0_log(tmp_path, clock, 0, seq0=0))


def test_a_packed_row_in_a_v4_log_is_corrupt(tmp_path: Path) -> None:
    path = write_log_file(
        tmp_path / "p" / "s" / "session.v4.jsonl.zstd",
        header(4),
        [orjson.dumps(text_row(0)) + b"\n"],
    )
    with pytest.raises(CorruptLog, match="event 0 is a packed text-chunks row, which only v0/v1"):
        open_log(Generation(path, 4, "zstd"))


# -- sourceEventSeqs ranges -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "logical"),
    [
        ([[3, 6], 9, 11, 12], [3, 4, 5, 6, 9, 11, 12]),
        ([7, 8], [7, 8]),
        ([5, 2], [5, 2]),
        ([], []),
        ([[0, 0]], [0]),
        ([1, [3, 5]], [1, 3, 4, 5]),
        ([5.0], [5]),
    ],
)
def test_source_event_seqs_decoding(stored: list[Any], logical: list[int]) -> None:
    assert decode_source_seqs(stored, 20) == logical


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        ({"a": 1}, "not a list"),
        ([[1, 2, 3]], "not of length 2"),
        ([[1]], "not of length 2"),
        ([[6, 3]], "bad range pair"),
        ([[-1, 3]], "bad range pair"),
        ([["1", 3]], "bad range pair"),
        ([20], "not earlier than its own"),
        ([[18, 20]], "not earlier than its own"),
        ([[0, MAX_SAFE - 1]], "not earlier than its own"),
        ([3, 3], "duplicate seqs"),
        ([[1, 3], 2], "duplicate seqs"),
        ([[4, 6], 1], "increasing list"),
        ([-1], "not a non-negative integer"),
        ([True], "not a non-negative integer"),
        ([1.5], "not a non-negative integer"),
    ],
)
def test_source_event_seqs_rejections(stored: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_source_seqs(stored, 20)


# -- lenient parsing and lines ----------------------------------------------------------------


def test_raw_line_separators_inside_a_string_stay_one_line() -> None:
    text = "a\u2028b\u2029c\u0085d"
    line = orjson.dumps({"type": "user/message", "seq": 0, "time": 1, "data": text})
    assert "\u2028".encode() in line
    lines = split_lines(line + b"\n" + line + b"\n")
    assert lines == [line, line]
    assert parse_event(lines[0], 0).data == text


def test_a_lone_surrogate_escape_parses_leniently() -> None:
    value, lenient = parse_line(b'{"t":"a\\ud800b"}')
    assert value == {"t": "a\ud800b"}
    assert lenient


def test_invalid_utf8_parses_with_replacement_and_is_flagged() -> None:
    line = b'{"type":"user/message","seq":0,"time":1,"data":"caf\xe9 \xff"}'
    event = parse_event(line, 0)
    assert event.data == "caf\ufffd \ufffd"
    assert event.lenient
    assert event.raw == line  # the bytes a fork copies are untouched


def test_strict_json_is_not_flagged() -> None:
    assert parse_line(b'{"a":[1,2.5,"\\u00e9"]}') == ({"a": [1, 2.5, "é"]}, False)
    # Beyond 64 bits a number is a double, as JSON.parse makes every number.
    assert parse_line(b"123456789012345678901234567890")[0] == 1.2345678901234568e29


@pytest.mark.parametrize(
    "line", [b"NaN", b'{"a":NaN}', b'{"a":Infinity}', b'{"a":-Infinity}', b"", b"{}x"]
)
def test_non_json_is_rejected(line: bytes) -> None:
    with pytest.raises(LineError):
        parse_line(line)


def test_split_lines_rules() -> None:
    assert split_lines(b"") == []
    assert split_lines(b"a\nb\n") == [b"a", b"b"]
    with pytest.raises(CorruptLog, match="torn JSONL record"):
        split_lines(b"a\nb")
    with pytest.raises(CorruptLog, match="empty line"):
        split_lines(b"a\n\nb\n")
    with pytest.raises(CorruptLog, match="empty line"):
        split_lines(b"\n")


# -- JavaScript number rules ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        (5.0, 5),
        (0.0, 0),
        (-7, -7),
        (MAX_SAFE, MAX_SAFE),
        (-MAX_SAFE, -MAX_SAFE),
        (float(MAX_SAFE), MAX_SAFE),
        (2**53, None),
        (-(2**53), None),
        (float(2**53), None),
        (-0.0, None),
        (5.5, None),
        (float("inf"), None),
        (float("nan"), None),
        (True, None),
        (False, None),
        ("5", None),
        (None, None),
    ],
)
def test_safe_int(value: Any, expected: int | None) -> None:
    assert safe_int(value) == expected


def test_nonneg_int() -> None:
    assert nonneg_int(0) == 0
    assert nonneg_int(3.0) == 3
    assert nonneg_int(-1) is None
    assert nonneg_int(-0.0) is None


def test_records_with_lone_surrogates_are_written_as_json_stringify_does() -> None:
    """orjson refuses them; JSON.stringify escapes them, and DSH reads them back."""
    line = encode_event("subagent/descriptor", 3, 4, {"label": "a\ud800b", "e": "😀"})
    assert line == (
        b'{"type":"subagent/descriptor","seq":3,"time":4,"data":{"label":"a\\ud800b","e":"'
        + "😀".encode()
        + b'"}}\n'
    )
    assert parse_event(line[:-1], 3).data == {"label": "a\ud800b", "e": "😀"}
    head = encode_header(
        session_id="id-\udcff",
        created_at=1,
        cwd=None,
        parent_session=None,
        is_seeded=False,
        origin=None,
        delegation_depth=0,
        agent_preset=None,
    )
    assert b'"id":"id-\\udcff"' in head
    assert parse_header(head[:-1], 4).id == "id-\udcff"
