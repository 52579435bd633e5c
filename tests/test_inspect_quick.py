"""inspect's common case (``Validator.quick``, ``inspect._Pass.fold``) finds exactly what the
full path finds.

The full path builds an ``Event`` per line and feeds it to the validator; the common case
takes a line only when the validator would find nothing in it and records what the full path
records. These tests run both over every line of logs built to hold every event type, then
over thousands of seeded mutations of them (each line's numbers, keys, types and envelope
bent one way or another, lines dropped, repeated and swapped), then over every session of the
fixture generator's oddities and every foreign root, and require the same findings, state,
facts and reports, or the same refusal.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from conftest import FOREIGN
from lineagekit import generate_oddities

from dsh_fork import inspect as inspect_module
from dsh_fork.errors import CorruptLog, DshForkError
from dsh_fork.eventcheck import Validator
from dsh_fork.findings import Finding
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import MAX_SAFE_INTEGER, list_generations
from dsh_fork.model import Facts
from dsh_fork.records import dumps_record, parse_event, parse_header
from dsh_fork.sessionarg import locate

SEED_LINES = 40
MUTATED_LOGS = 3000


def every_type_spec() -> SessionSpec:
    """One log with every event type the common case takes, and those it leaves to ``feed``."""
    clock = Clock()
    spec = SessionSpec(id="session-quick", created_at=clock())
    spec.turn(clock, "plain 日本 café")
    spec.tool_turn(clock, "tools", "bash", ["ls", "pwd"])
    spec.turns += 1
    n = spec.turns
    spec.add("turn/start", clock(), {"turn": n})
    spec.user_message(clock, "hi")
    spec.add("request/context", clock(), {"turn": n})
    spec.add("step/start", clock(), {"turn": n, "step": 1})
    for kind in ("system/message", "developer/message"):
        spec.add(kind, clock(), {"turn": n, "step": 1, "role": "system"}, surfaceOp="append")
    spec.add("assistant/attempt", clock(), {"turn": n, "step": 1, "attempt": 1})
    spec.add("llm/retry", clock(), {"turn": n, "attempt": 1})
    spec.add("todo/write", clock(), {"todos": []})
    spec.add("step/end", clock(), {"turn": n, "step": 1})
    spec.add("compaction/start", clock(), {"turn": n})
    spec.add("compaction/end", clock(), {"turn": n})
    spec.add("command/run", clock(), {"commandId": "c1"})
    spec.add("command/done", clock(), {"commandId": "c1"})
    spec.add("turn/end", clock(), {"turn": n, "reason": {"kind": "completed"}})
    spec.title(clock, "a title")
    spec.add("session/title", clock(), {"title": "t", "messageSeqs": [2], "source": {"kind": "x"}})
    spec.add("agent-preset/selected", clock(), {"agentPreset": "p"})
    spec.add("future/thing", clock(), {"k": 1})
    spec.add("future/other", clock(), {"k": 1}, ignorable=True)
    spec.add("user/message", clock(), {"source": {"kind": "user"}}, sourceEventSeqs=[1])
    spec.tool_turn(clock, "more tools", "read", ["a"])
    spec.open_turn(clock)
    return spec


def header_of(spec: SessionSpec) -> Any:
    return parse_header(spec.header_line()[:-1], 4)


def full_pass(spec: SessionSpec, lines: list[bytes]) -> inspect_module._Pass:
    """Every line as an ``Event`` fed to the validator (the path before the common case)."""
    header = header_of(spec)
    part = inspect_module._Pass(Validator(header, 4), Facts(header, 0))
    part.run(parse_event(line, seq) for seq, line in enumerate(lines))
    return part


def quick_pass(spec: SessionSpec, lines: list[bytes]) -> inspect_module._Pass:
    header = header_of(spec)
    part = inspect_module._Pass(Validator(header, 4), Facts(header, 0))
    part.fold(lines, 0)
    return part


def outcome(make: Callable[[], inspect_module._Pass]) -> Any:
    """Everything a pass leaves: findings, each concern's state, facts, counts; or the
    refusal."""
    try:
        part = make()
    except CorruptLog as exc:
        return ("refused", exc.message, exc.details)
    validator = part.validator
    state = [msgspec.structs.asdict(group) for group in validator._groups()]
    findings: list[Finding] = list(validator.finish())
    request = part.last_request
    return (
        findings,
        state,
        validator.unresolved(),
        validator.own_catalog(),
        part.facts,
        dict(part.types),
        None if request is None else (request.seq, request.obj, request.raw),
    )


def same_outcome(spec: SessionSpec, lines: list[bytes]) -> Any:
    full = outcome(lambda: full_pass(spec, lines))
    assert outcome(lambda: quick_pass(spec, lines)) == full
    return full


def taken(spec: SessionSpec, lines: list[bytes]) -> int:
    """How many lines the common case takes (a test that never takes it proves nothing)."""
    header = header_of(spec)
    validator = Validator(header, 4)
    count = 0
    for seq, line in enumerate(lines):
        obj = orjson.loads(line)
        if validator.quick(obj, seq) is not None:
            count += 1
        else:
            validator.feed(parse_event(line, seq))
    return count


def test_every_line_of_a_log_of_every_type_takes_the_same_path_outcome() -> None:
    spec = every_type_spec()
    lines = [line[:-1] for line in spec.lines]
    findings, *_ = same_outcome(spec, lines)
    codes = sorted({f.code for f in findings})
    assert codes == ["OPEN_TURN", "SURFACE", "TITLE", "UNKNOWN_EVENT"]
    assert taken(spec, lines) > len(lines) * 3 // 4


# -- mutations ----------------------------------------------------------------------------------

ODD_NUMBERS: list[Any] = [0, 1, 2, 3, -1, 1.0, 2.5, "1", None, True, [1], {}, MAX_SAFE_INTEGER + 1]


def _bend_value(rng: random.Random, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and rng.random() < 0.5:
        return value + rng.choice((-1, 1))
    if isinstance(value, str) and rng.random() < 0.5:
        return value + "x"
    return rng.choice(ODD_NUMBERS)


def _bend_data(rng: random.Random, data: dict[str, Any]) -> None:
    key = rng.choice(["turn", "step", "callId", "name", "arguments", "message", "source", "id"])
    choice = rng.random()
    if choice < 0.3 and key in data:
        del data[key]
    elif choice < 0.6:
        data[key] = _bend_value(rng, data.get(key))
    elif isinstance(data.get("message"), dict):
        message = data["message"]
        inner = rng.choice(["toolCallId", "content", "role", "isError", "id"])
        if rng.random() < 0.5:
            message.pop(inner, None)
        else:
            message[inner] = rng.choice([*ODD_NUMBERS, "call_0002_0000", "x"])
        content = message.get("content")
        if isinstance(content, list) and content and rng.random() < 0.5:
            block = rng.choice(content)
            if rng.random() < 0.3:
                content.append(copy.deepcopy(block))  # the same call advertised twice
            elif isinstance(block, dict):
                block[rng.choice(["type", "id"])] = rng.choice(["tool-call", "text", "", 7])
    elif isinstance(data.get("source"), dict):
        data["source"]["kind"] = rng.choice(["user", "model", None, 1])


def _bend(rng: random.Random, obj: dict[str, Any]) -> dict[str, Any]:
    choice = rng.random()
    if choice < 0.45 and isinstance(obj.get("data"), dict):
        _bend_data(rng, obj["data"])
    elif choice < 0.55:
        obj["time"] = rng.choice([1.0, None, "1", MAX_SAFE_INTEGER + 1, -1, 2**63])
    elif choice < 0.65:
        obj["surfaceOp"] = rng.choice(
            ["append", "replace", {"op": "replace", "startSeq": 0, "endSeq": 0}, None]
        )
    elif choice < 0.72:
        obj.pop(rng.choice(["surfaceOp", "data", "time"]), None)
    elif choice < 0.8:
        obj[rng.choice(["ignorable", "sourceEventSeqs", "extra"])] = rng.choice([True, [0], 1])
    elif choice < 0.88:
        obj["data"] = rng.choice([[], "text", None, 3])
    elif choice < 0.94:
        obj["type"] = rng.choice(["turn/start", "turn/end", "step/start", "tool/result", "x/y"])
    else:
        obj["seq"] = rng.choice([1, 1.0, -1])
        obj["bent"] = True
    return obj


def mutated(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """A few lines bent, dropped, repeated or swapped; the seqs renumbered (as the later
    lines of a log would be) unless a seq itself was bent."""
    objs = [orjson.loads(line) for line in lines]
    for _ in range(rng.randint(1, 4)):
        k = rng.randrange(len(objs))
        action = rng.random()
        if action < 0.7:
            objs[k] = _bend(rng, objs[k])
        elif action < 0.8:
            del objs[k]
        elif action < 0.9:
            objs.insert(k, copy.deepcopy(objs[k]))
        elif k + 1 < len(objs):
            objs[k], objs[k + 1] = objs[k + 1], objs[k]
        if not objs:
            return []
    out = []
    for seq, obj in enumerate(objs):
        if obj.pop("bent", False):
            obj["seq"] = obj["seq"] + seq  # seq + 1, seq + 1.0 or seq - 1
        elif "seq" in obj:
            obj["seq"] = seq
        out.append(dumps_record(obj))
    return out


def test_thousands_of_bent_logs_find_the_same_with_the_common_case() -> None:
    spec = every_type_spec()
    base = [line[:-1] for line in spec.lines]
    rng = random.Random(15)
    refused = differing = 0
    baseline = outcome(lambda: full_pass(spec, base))
    for _ in range(MUTATED_LOGS):
        start = rng.randrange(0, len(base) - SEED_LINES)
        # A window of the log keeps the turn numbering of its first turn only by chance:
        # the windows starting at 0 keep it, the others test mid-log state too.
        window = base if rng.random() < 0.3 else base[start : start + SEED_LINES]
        lines = mutated(rng, window)
        result = same_outcome(spec, lines)
        refused += result[0] == "refused"
        differing += result != baseline
    # The mutations reach both kinds of outcome, so the comparison is not vacuous.
    assert 0 < refused < MUTATED_LOGS // 2
    assert differing > MUTATED_LOGS * 9 // 10


def test_a_lenient_line_and_a_line_that_is_not_json_take_the_full_path() -> None:
    spec = every_type_spec()
    lines = [line[:-1] for line in spec.lines]
    lenient = lines[1].replace(b"plain", b"pl\\ud800ain")
    findings, *_ = same_outcome(spec, [lines[0], lenient, *lines[2:]])
    assert "LINE_ENCODING" in [f.code for f in findings]
    refusal = same_outcome(spec, [lines[0], b"{not json", *lines[2:]])
    assert refusal[0] == "refused" and "event 1 is not JSON" in refusal[1]


def _turn(number: Any, *, end: bool = False) -> dict[str, Any]:
    kind = "turn/end" if end else "turn/start"
    return {"type": kind, "seq": 0, "time": 1, "data": {"turn": number}}


def _call(call_id: Any, arguments: Any = "{}") -> dict[str, Any]:
    data = {"turn": 1, "step": 1, "callId": call_id, "name": "bash", "arguments": arguments}
    return {"type": "tool/call", "seq": 0, "time": 1, "data": data}


def _advert(*blocks: dict[str, Any]) -> dict[str, Any]:
    data = {"turn": 1, "step": 1, "message": {"role": "assistant", "content": list(blocks)}}
    return {"type": "assistant/message", "seq": 0, "time": 1, "data": data, "surfaceOp": "append"}


def _block(call_id: Any, arguments: Any = "{}") -> dict[str, Any]:
    return {"type": "tool-call", "id": call_id, "name": "bash", "arguments": arguments}


def _result(call_id: str, message_id: str = "m") -> dict[str, Any]:
    message = {"role": "tool", "toolCallId": call_id, "id": message_id, "isError": True}
    message["content"] = [{"type": "text", "text": "x"}]
    data = {"turn": 1, "step": 1, "message": message}
    return {"type": "tool/result", "seq": 0, "time": 1, "data": data, "surfaceOp": "append"}


STEP = {"type": "step/start", "seq": 0, "time": 1, "data": {"turn": 1, "step": 1}}
EDGES: dict[str, list[dict[str, Any]]] = {
    "turn numbers past the safe integers": [
        _turn(MAX_SAFE_INTEGER),
        _turn(MAX_SAFE_INTEGER, end=True),
        _turn(MAX_SAFE_INTEGER + 1),
        _turn(MAX_SAFE_INTEGER + 1, end=True),
    ],
    "a call advertised twice in one message": [_turn(1), STEP, _advert(_block("a"), _block("a"))],
    "a call advertised in two messages": [
        _turn(1),
        STEP,
        _advert(_block("a")),
        _advert(_block("a")),
    ],
    "arguments that are objects": [
        _turn(1),
        STEP,
        _advert(_block("a", {"x": 1})),
        _call("a", {"x": 1}),
        _result("a"),
    ],
    "a result for a call never started (a fork closer)": [
        _turn(1),
        STEP,
        _advert(_block("a")),
        _result("a", "forked-tool-result-a-3"),
        _result("a", "forked-tool-result-a-4"),
    ],
    "a result before its call": [_turn(1), STEP, _advert(_block("a")), _result("a"), _call("a")],
    "a call started twice": [_turn(1), STEP, _advert(_block("a")), _call("a"), _call("a")],
    "a turn starting inside a compaction bracket": [
        {"type": "compaction/start", "seq": 0, "time": 1, "data": {}},
        _turn(1),
        _turn(1, end=True),
    ],
}


@pytest.mark.parametrize("case", sorted(EDGES))
def test_an_edge_of_a_rule_finds_the_same_with_the_common_case(case: str) -> None:
    lines = [dumps_record({**obj, "seq": seq}) for seq, obj in enumerate(EDGES[case])]
    findings, *_ = same_outcome(every_type_spec(), lines)
    assert findings  # each edge is a finding (or an open turn) on one path or the other


# -- whole reports ------------------------------------------------------------------------------


def reports(root: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every session under ``root`` inspected with the common case and without it: the same
    ``--json`` document, or the same refusal. Returns how many were compared."""
    compared = 0
    for session_dir in sorted(p for p in root.glob("*/*") if p.is_dir()):
        if not list_generations(session_dir):
            continue
        seen: list[Any] = []
        for quick in (True, False):
            with monkeypatch.context() as patch:
                if not quick:
                    patch.setattr(Validator, "quick", lambda self, obj, seq: None)
                try:
                    located = locate(str(session_dir), str(session_dir.parent.parent), {})
                    report = inspect_module.inspect_session(located, events=False)
                    seen.append(report.to_json())
                except DshForkError as exc:
                    seen.append(("refused", type(exc).__name__, exc.message))
        assert seen[0] == seen[1], session_dir
        compared += 1
    return compared


def test_every_fixture_oddity_inspects_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generate_oddities(tmp_path / "odd")
    generate(tmp_path / "tools", sessions=2, agents=1, depth=1, turns=4, tools=True, seed=3)
    assert reports(tmp_path / "odd", monkeypatch) > 10
    assert reports(tmp_path / "tools", monkeypatch) >= 2


def test_a_log_of_every_type_inspects_the_same(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = every_type_spec()
    spec.cwd = "/fixture/project"
    spec.publish(root)
    assert reports(root, monkeypatch) == 1


FOREIGN_ROOTS = sorted(p.name for p in (FOREIGN / "roots").iterdir()) if FOREIGN.is_dir() else []


@pytest.mark.skipif(not FOREIGN_ROOTS, reason="../shared/foreign is not beside the clone")
def test_every_foreign_root_inspects_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    compared = sum(reports(FOREIGN / "roots" / name, monkeypatch) for name in FOREIGN_ROOTS)
    assert compared > 100
