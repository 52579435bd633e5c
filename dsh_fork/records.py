"""JSONL records: line splitting, lenient parsing, headers, event envelopes, packed rows.

Lines are split on byte 0x0A only (format §6). Inherited lines are never re-serialised; only the
records dsh-fork itself creates are encoded here.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import UNSET, Meta, Struct, UnsetType

from .budget import CHECK_MIN_BYTES, check_line, line_problem
from .errors import CorruptLog, UnsupportedFormat
from .generations import MAX_SAFE_INTEGER, SUPPORTED_VERSION
from .layout import is_absolute_cwd

MISSING: Any = object()

HEADER_KEYS_V2 = (
    "type",
    "version",
    "id",
    "createdAt",
    "cwd",
    "parentSession",
    "isSeeded",
    "origin",
    "delegationDepth",
    "agentPreset",
)
_REQUIRED_V2 = frozenset(("type", "version", "id", "createdAt", "isSeeded", "delegationDepth"))
_ALLOWED_V2 = frozenset(HEADER_KEYS_V2)
# DSH's own 0.1.1 logs have v0 headers without delegationDepth, and DSH reads them (depth 0).
_REQUIRED_V0 = frozenset(("type", "version", "id", "createdAt"))
_ALLOWED_V0 = frozenset(
    (
        *_REQUIRED_V0,
        "delegationDepth",
        "cwd",
        "parentSession",
        "seedLength",
        "origin",
        "agentPreset",
    )
)
_OPTIONAL_TEXT = frozenset(("cwd", "parentSession", "origin", "agentPreset"))
ENVELOPE_KEYS = frozenset(
    ("type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable")
)
PACKED_TYPES = frozenset(("text-chunks", "reasoning-chunks", "tool-call-chunks"))


class LineError(ValueError):
    """A line that cannot be parsed as a JSON value."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def parse_line(line: bytes) -> tuple[Any, bool]:
    """(value, lenient): orjson first; JSON.parse-compatible fallback for lone surrogate
    escapes, invalid UTF-8 and big integers, which DSH accepts (format §6). A line beyond the
    memory budget (``budget.line_problem``) is not parsed."""
    problem = line_problem(line)
    if problem is not None:
        raise LineError(problem)
    try:
        return orjson.loads(line), False
    except orjson.JSONDecodeError:
        pass
    try:
        text = line.decode("utf-8", "replace")
        return json.loads(text, parse_constant=_reject_constant), True
    except (ValueError, RecursionError) as exc:
        raise LineError(str(exc)) from None


def safe_int(value: Any) -> int | None:
    """The integer a JSON number stands for under JavaScript rules, or None.

    ``5.0`` counts as 5; ``-0``, booleans, fractions and values beyond ±(2^53−1) do not.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        if value == 0 and str(value).startswith("-"):
            return None
        as_int = int(value)
        return as_int if -MAX_SAFE_INTEGER <= as_int <= MAX_SAFE_INTEGER else None
    return None


def nonneg_int(value: Any) -> int | None:
    if type(value) is int and 0 <= value <= MAX_SAFE_INTEGER:  # the usual case, no call
        return value
    result = safe_int(value)
    return result if result is not None and result >= 0 else None


def split_lines(plaintext: bytes, *, where: str = "log") -> list[bytes]:
    """Lines without their 0x0A; the text must end on a line boundary and hold no empty line."""
    if not plaintext:
        return []
    if not plaintext.endswith(b"\n"):
        raise CorruptLog(f"{where}: complete frame contains a torn JSONL record")
    lines = plaintext[:-1].split(b"\n")
    if b"" in lines:
        raise CorruptLog(f"{where}: empty line in the committed part")
    return lines


# -- header ---------------------------------------------------------------------------------


class Header(Struct, frozen=True):
    """A validated session header. A frozen Struct, not a frozen dataclass: every listing that
    validates headers builds one per session, and a Struct is built without running Python
    code (about 0.1 µs, a fraction of a dataclass's or a named tuple's)."""

    version: int
    id: str
    created_at: int
    cwd: str | None
    parent_session: str | None
    is_seeded: bool
    origin: str | None
    delegation_depth: int
    agent_preset: str | None
    seed_length: int | None
    raw: bytes
    """The header line as the log holds it (no newline): the one form of its fields kept. A
    root of 100,000 validated headers would hold their parsed dicts at about 700 B each."""

    @property
    def fields(self) -> dict[str, Any]:
        """The header's fields as parsed from ``raw`` (validated: always an object)."""
        value, _ = parse_line(self.raw)
        assert isinstance(value, dict)
        return value

    @property
    def is_subagent(self) -> bool:
        return self.origin == "subagent" and self.parent_session is not None

    @property
    def is_fork_child(self) -> bool:
        return self.is_seeded and self.parent_session is not None and self.origin is None


def header_version(value: Any) -> int | None:
    """The raw ``version`` of a header object, checked before its shape (format §7.2)."""
    if not isinstance(value, dict) or value.get("type") != "session":
        return None
    return nonneg_int(value.get("version"))


def parse_header(line: bytes, file_version: int, *, where: str = "header") -> Header:
    """Validate a header line for its generation; future versions are unsupported, not corrupt.

    A process's first few headers take ``header_of`` alone; after them a v2+ line is tried in
    the fast form first (``_fast_header``), and whatever that does not accept goes on to
    ``header_of``, which decides and names the defect."""
    global _headers_parsed
    if file_version >= 2:
        if _headers_parsed >= FAST_HEADERS_AFTER:
            header = _fast_header(line, file_version)
            if header is not None:
                return header
        else:
            _headers_parsed += 1
    try:
        value, _ = parse_line(line)
    except LineError as exc:
        raise CorruptLog(f"{where}: header is not JSON ({exc})") from None
    return header_of(value, line, file_version, where=where)


def header_of(value: Any, line: bytes, file_version: int, *, where: str = "header") -> Header:
    """``parse_header`` of a line already parsed to ``value`` (listing has parsed it once).

    Called for every session when a root is listed, so the usual header costs a handful of
    dict lookups; every check and its message is as the format gives them, in one order.
    """
    if not isinstance(value, dict) or value.get("type") != "session":
        raise CorruptLog(f"{where}: first record is not a session header")
    version = nonneg_int(value.get("version"))
    if version is None:
        raise CorruptLog(f"{where}: header version must be a non-negative integer")
    # The file name first, then the supported range (format §13 step 4): a v4 file holding a
    # v9 header is a mislabelled file, a v9 file holding a v9 header is a newer harness's.
    if version != file_version:
        raise CorruptLog(
            f"{where}: header version {version} does not match the file name (v{file_version})",
            version=version,
        )
    if version > SUPPORTED_VERSION:
        raise UnsupportedFormat(
            f"{where}: header version {version} is newer than v{SUPPORTED_VERSION}",
            version=version,
        )
    fields: dict[str, Any] = value
    keys = fields.keys()
    required, allowed = (_REQUIRED_V0, _ALLOWED_V0) if version < 2 else (_REQUIRED_V2, _ALLOWED_V2)
    if not keys >= required:
        missing = ", ".join(sorted(required - set(keys)))
        raise CorruptLog(f"{where}: header lacks {missing}")
    if not keys <= allowed:
        extra = ", ".join(sorted(set(keys) - allowed))
        raise CorruptLog(f"{where}: header has keys not allowed in v{version}: {extra}")
    get = fields.get
    cwd = get("cwd", MISSING)
    parent = get("parentSession", MISSING)
    origin = get("origin", MISSING)
    preset = get("agentPreset", MISSING)
    if cwd is None or parent is None or origin is None or preset is None:
        # Absent optionals are omitted, never null (format §7.2).
        nulls = sorted(k for k in _OPTIONAL_TEXT if get(k, MISSING) is None)
        raise CorruptLog(f"{where}: header {', '.join(nulls)} must be a string, not null")
    session_id = fields["id"]
    if not isinstance(session_id, str) or session_id == "":
        raise CorruptLog(f"{where}: header id must be a non-empty string")
    created_at = nonneg_int(fields["createdAt"])
    if created_at is None:
        raise CorruptLog(f"{where}: header createdAt must be a non-negative safe integer")
    depth = nonneg_int(get("delegationDepth", 0))
    if depth is None:
        raise CorruptLog(f"{where}: header delegationDepth must be a non-negative safe integer")
    if cwd is MISSING:
        cwd = None
    elif not isinstance(cwd, str) or cwd == "":
        raise CorruptLog(f"{where}: header cwd must be a non-empty string")
    elif not is_absolute_cwd(cwd):
        raise CorruptLog(
            f"{where}: first line is not a session header: cwd {cwd!r} is not absolute"
        )
    if origin is MISSING:
        origin = None
    elif origin != "subagent":
        raise CorruptLog(f'{where}: header origin must be "subagent"')
    if parent is MISSING:
        parent = None
    elif not isinstance(parent, str):
        raise CorruptLog(f"{where}: header parentSession must be a string")
    if preset is MISSING:
        preset = None
    elif not isinstance(preset, str):
        raise CorruptLog(f"{where}: header agentPreset must be a string")
    seed_length: int | None = None
    if version < 2:
        if "seedLength" in fields:
            seed_length = nonneg_int(fields["seedLength"])
            if seed_length is None:
                raise CorruptLog(f"{where}: header seedLength must be a non-negative integer")
        is_seeded = seed_length is not None
    else:
        is_seeded = fields["isSeeded"]
        if not isinstance(is_seeded, bool):
            raise CorruptLog(f"{where}: header isSeeded must be a boolean")
    return Header(
        version,
        session_id,
        created_at,
        cwd,
        parent,
        is_seeded,
        origin,
        depth,
        preset,
        seed_length,
        line,
    )


FAST_HEADERS_AFTER = 16
"""Headers a process validates with ``header_of`` alone before it builds the fast form: a
command that reads a few sessions does not pay the 0.2 ms of building its decoder."""
_headers_parsed = 0


class _HeaderForm(Struct, forbid_unknown_fields=True, rename="camel", gc=False):
    """A v2+ header as msgspec decodes and checks it in one C pass, without building a dict:
    every rule of ``header_of`` that a field's type can say (no other key, no null, the
    types, non-empty ``id`` and ``cwd``, safe non-negative integers, ``origin`` "subagent").
    It accepts a subset of what ``header_of`` accepts: duplicate keys, integers written as
    floats, lone surrogate escapes and invalid UTF-8 (which the lenient parse reads) all fail
    here and go to ``header_of``. What it accepts, ``header_of`` accepts with the same
    values; the records tests compare the two on generated lines."""

    type: Literal["session"]
    version: Annotated[int, Meta(ge=2, le=SUPPORTED_VERSION)]
    id: Annotated[str, Meta(min_length=1)]
    created_at: Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
    is_seeded: bool
    delegation_depth: Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
    cwd: Annotated[str, Meta(min_length=1)] | UnsetType = UNSET
    parent_session: str | UnsetType = UNSET
    origin: Literal["subagent"] | UnsetType = UNSET
    agent_preset: str | UnsetType = UNSET


_decode_header: Callable[[bytes], _HeaderForm] | None = None


def _fast_header(line: bytes, file_version: int) -> Header | None:
    """The header a v2+ line holds when the fast form accepts it; None sends it to
    ``header_of`` (it may still be valid there, read leniently, or it is refused there)."""
    global _decode_header
    if _decode_header is None:
        _decode_header = msgspec.json.Decoder(_HeaderForm).decode
    try:
        form = _decode_header(line)
    except msgspec.DecodeError:  # no nesting is decoded: every field is a scalar
        return None
    cwd, parent, origin, preset = form.cwd, form.parent_session, form.origin, form.agent_preset
    if form.version != file_version or (cwd is not UNSET and not is_absolute_cwd(cwd)):
        return None
    return Header(
        form.version,
        form.id,
        form.created_at,
        None if cwd is UNSET else cwd,
        None if parent is UNSET else parent,
        form.is_seeded,
        None if origin is UNSET else origin,
        form.delegation_depth,
        None if preset is UNSET else preset,
        None,
        line,
    )


def encode_header(
    *,
    session_id: str,
    created_at: int,
    cwd: str | None,
    parent_session: str | None,
    is_seeded: bool,
    origin: str | None,
    delegation_depth: int,
    agent_preset: str | None,
) -> bytes:
    """A v4 header line (with its 0x0A) in the key order of format §7.2; absent keys omitted."""
    values: dict[str, Any] = {
        "type": "session",
        "version": SUPPORTED_VERSION,
        "id": session_id,
        "createdAt": created_at,
        "cwd": cwd,
        "parentSession": parent_session,
        "isSeeded": is_seeded,
        "origin": origin,
        "delegationDepth": delegation_depth,
        "agentPreset": agent_preset,
    }
    return dumps_record({k: v for k, v in values.items() if v is not None}) + b"\n"


# -- events ---------------------------------------------------------------------------------


class Event(Struct):
    """One logical event. ``raw`` is the stored line (no 0x0A); None for packed-row members."""

    seq: int
    type: str
    time: int | None
    data: Any
    obj: dict[str, Any]
    raw: bytes | None
    lenient: bool = False

    @property
    def ignorable(self) -> bool:
        return self.obj.get("ignorable") is True


def parse_event(line: bytes, expected_seq: int | None, *, where: str = "log") -> Event:
    """Envelope of one v2+ line; a non-object, a missing type or a wrong seq is corruption.

    With ``expected_seq`` None any non-negative seq is taken: the last line of a frame, whose
    seq says how many lines the frame holds when they were not counted. A line beyond the
    memory budget is refused before it is parsed (``budget.check_line``).
    """
    if len(line) >= CHECK_MIN_BYTES:
        check_line(line, where, _label(expected_seq))
    try:
        value = orjson.loads(line)
        lenient = False
    except orjson.JSONDecodeError:
        try:
            value, lenient = parse_line(line)
        except LineError as exc:
            label = _label(expected_seq)
            raise CorruptLog(f"{where}: event {label} is not JSON ({exc})", line=label) from None
    return event_of(value, line, expected_seq, lenient=lenient, where=where)


def event_of(
    value: Any, line: bytes, expected_seq: int | None, *, lenient: bool = False, where: str = "log"
) -> Event:
    """``parse_event`` of a line already parsed to ``value`` (strictly, unless ``lenient``)."""
    if type(value) is not dict:
        label = _label(expected_seq)
        raise CorruptLog(f"{where}: event {label} is not an object", line=label)
    event_type = value.get("type")
    if type(event_type) is not str:
        label = _label(expected_seq)
        raise CorruptLog(f"{where}: event {label} has no type", line=label)
    seq = value.get("seq")
    # Fast paths for plain integers (every line DSH writes); other spellings take safe_int.
    if type(seq) is not int:
        seq = nonneg_int(seq)
    if seq is None or (seq != expected_seq and (expected_seq is not None or seq < 0)):
        if event_type in PACKED_TYPES and "seq" not in value:
            label = _label(expected_seq)
            raise CorruptLog(
                f"{where}: event {label} is a packed {event_type} row, which only v0/v1 logs "
                "hold (a v2+ row lacks required field seq)",
                line=label,
            )
        expected = "a non-negative seq" if expected_seq is None else str(expected_seq)
        raise CorruptLog(
            f"{where}: seq {value.get('seq')!r} where {expected} was expected (seqs must be "
            "dense from 0)",
            line=_label(expected_seq),
        )
    time = value.get("time")
    if type(time) is not int or not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER:
        time = safe_int(time)
    return Event(seq, event_type, time, value.get("data", MISSING), value, line, lenient)


def dense_run(lines: list[bytes]) -> tuple[int, list[str]] | None:
    """(first seq, each line's type) when each of ``lines`` is an event envelope
    ``parse_event`` accepts and their seqs are dense; None when one is not (``parse_event``
    then names the defect).

    The check every copied line passes (a fork copies frames it never parses into events): a
    raw NUL, a non-object, a missing type or a seq out of order is refused, as DSH refuses it.
    One parse per line gives both the verdict and the type: a strict line's value is the one
    ``parse_event`` would build; a lenient line (rare) goes through ``parse_event`` itself.
    """
    loads = orjson.loads
    first = -1
    types: list[str] = []
    append = types.append
    for k, line in enumerate(lines):
        if len(line) >= CHECK_MIN_BYTES and line_problem(line) is not None:
            return None  # parse_event names it
        try:
            value = loads(line)
        except orjson.JSONDecodeError:
            try:
                event = parse_event(line, None)
            except CorruptLog:
                return None
            seq, event_type = event.seq, event.type
        else:
            if type(value) is not dict:
                return None
            raw_type = value.get("type")
            if type(raw_type) is not str:
                return None
            event_type = raw_type
            raw_seq = value.get("seq")
            checked = raw_seq if type(raw_seq) is int else nonneg_int(raw_seq)
            if checked is None:
                return None
            seq = checked
        if k == 0:
            if seq < 0:
                return None
            first = seq
        elif seq != first + k:
            return None
        append(event_type)
    return first, types


def _label(expected_seq: int | None) -> int | str:
    return "at a frame end" if expected_seq is None else expected_seq


def expand_row(value: dict[str, Any], expected_seq: int, where: str = "log") -> list[Event]:
    """The events of a v0/v1 packed chunk row (format §9); a malformed row is corruption."""

    def bad(reason: str) -> CorruptLog:
        return CorruptLog(f"{where}: packed row at seq {expected_seq}: {reason}")

    if set(value) != {"type", "seq0", "time0", "data"}:
        raise bad("envelope keys are not type, seq0, time0, data")
    seq0 = nonneg_int(value["seq0"])
    time0 = safe_int(value["time0"])
    if seq0 != expected_seq:
        raise bad(f"seq0 {value['seq0']!r} does not continue the seqs")
    if time0 is None:
        raise bad("time0 is not a safe integer")
    data = value["data"]
    kind = value["type"]
    if not isinstance(data, dict):
        raise bad("data is not an object")
    payload_key = "args" if kind == "tool-call-chunks" else "texts"
    base = {"turn", "step", "index", "dt", payload_key}
    if kind == "tool-call-chunks":
        if not base | {"id"} <= set(data) <= base | {"id", "name"}:
            raise bad("data keys")
        if not isinstance(data["id"], str) or not data["id"]:
            raise bad("id")
    elif set(data) != base:
        raise bad("data keys")
    payload = data[payload_key]
    gaps = data["dt"]
    if (
        not isinstance(payload, list)
        or not payload
        or not all(isinstance(p, str) for p in payload)
        or not isinstance(gaps, list)
        or len(gaps) != len(payload) - 1
    ):
        raise bad("payload and dt")
    events: list[Event] = []
    time = time0
    for k, piece in enumerate(payload):
        if k:
            gap = safe_int(gaps[k - 1])
            if gap is None:
                raise bad("dt entry")
            time += gap
            if safe_int(time) is None:
                raise bad("running time")
        if kind == "tool-call-chunks":
            chunk: dict[str, Any] = {
                "type": "tool-call-delta",
                "index": data["index"],
                "id": data["id"],
            }
            if "name" in data:
                chunk["name"] = data["name"]
            chunk["argumentsDelta"] = piece
        else:
            delta = "text-delta" if kind == "text-chunks" else "reasoning-delta"
            chunk = {"type": delta, "index": data["index"], "text": piece}
        event_data = {"turn": data["turn"], "step": data["step"], "chunk": chunk}
        obj = {"type": "assistant/chunk", "seq": seq0 + k, "time": time, "data": event_data}
        events.append(Event(seq0 + k, "assistant/chunk", time, event_data, obj, None))
    return events


def parse_v0_line(line: bytes, expected_seq: int, *, where: str = "log") -> list[Event]:
    """One v0/v1 line: a packed row expands to several events, anything else is one event."""
    try:
        value, _ = parse_line(line)
    except LineError as exc:
        raise CorruptLog(f"{where}: row at seq {expected_seq} is not JSON ({exc})") from None
    row_type = value.get("type") if isinstance(value, dict) else None
    if isinstance(row_type, str) and row_type in PACKED_TYPES and "seq0" in value:
        return expand_row(value, expected_seq, where)
    return [parse_event(line, expected_seq, where=where)]


def decode_source_seqs(stored: Any, seq: int) -> list[int]:
    """The logical ``sourceEventSeqs`` list of a row (format §8.4); ValueError when invalid."""
    if not isinstance(stored, list):
        raise ValueError("sourceEventSeqs is not a list")
    out: list[int] = []
    had_pair = False
    for item in stored:
        if isinstance(item, list):
            if len(item) != 2:
                raise ValueError("range pair is not of length 2")
            start, end = nonneg_int(item[0]), nonneg_int(item[1])
            if start is None or end is None or start > end:
                raise ValueError("bad range pair")
            if end >= seq:
                # Checked before expanding: a corrupt pair must not expand to 2^53 values.
                raise ValueError("cites a seq not earlier than its own")
            had_pair = True
            out.extend(range(start, end + 1))
        else:
            value = nonneg_int(item)
            if value is None:
                raise ValueError("entry is not a non-negative integer")
            out.append(value)
    if any(v >= seq for v in out):
        raise ValueError("cites a seq not earlier than its own")
    if len(set(out)) != len(out):
        raise ValueError("duplicate seqs")
    if had_pair and any(b <= a for a, b in itertools.pairwise(out)):
        raise ValueError("ranges do not decode to an increasing list")
    return out


def encode_event(
    event_type: str, seq: int, time: int, data: Any, extra: Mapping[str, Any] | None = None
) -> bytes:
    """A line dsh-fork creates (with its 0x0A), keys in the order ``type, seq, time, data``,
    then the envelope keys of ``extra`` in their order (``surfaceOp``, ``sourceEventSeqs``)."""
    record = {"type": event_type, "seq": seq, "time": time, "data": data}
    if extra:
        record.update(extra)
    return dumps_record(record) + b"\n"


_LONE_SURROGATE = "[\ud800-\udfff]"  # compiled on first use (re's cache): rarely needed


def held(encoded: bytes) -> bytes:
    """An encoding to hold for long (thousands of them in a plan), copied to its exact size:
    orjson's result keeps its whole 4 KiB buffer however short the JSON."""
    return bytes(memoryview(encoded))


def dumps_record(value: Any) -> bytes:
    """Compact JSON with raw UTF-8, as JSON.stringify writes it (format §6).

    orjson refuses strings holding lone surrogates (an ``--id`` taken from a non-UTF-8 argv, or
    descriptor data parsed leniently from a ``\\ud800`` escape); JSON.stringify writes them as
    ``\\udXXX`` escapes, and so does this fallback.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return re.sub(_LONE_SURROGATE, lambda m: f"\\u{ord(m.group()):04x}", text).encode()


def dig(value: Any, *keys: str) -> Any:
    """``value[k1][k2]…`` through nested objects, or None where a level is not an object."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
