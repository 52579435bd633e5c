"""The header check has two forms: msgspec's (fast, for v2+ lines) and ``header_of``'s, which
decides. The fast form may refuse a line the other accepts (it then goes on to the other), but
what it accepts must be accepted by ``header_of`` with the very same values."""

from __future__ import annotations

import json
from typing import Any

import hypothesis_profiles  # noqa: F401  (registers and loads the Hypothesis profile)
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_fork import records
from dsh_fork.errors import DshForkError
from dsh_fork.records import (
    HEADER_KEYS_V2,
    Header,
    LineError,
    encode_header,
    header_of,
    parse_header,
    parse_line,
)

MAX_SAFE = 2**53 - 1

NEAR_MISSES: dict[str, list[Any]] = {
    "type": ["Session", "session ", ""],
    "version": [1, 5, -1, 4.0, "4", True],
    "id": ["", 0, "a\x00", "\ud800"],
    "createdAt": [-1, 0, MAX_SAFE, MAX_SAFE + 1, 2**64, 1.0, 1e3, 0.5, "1", False],
    "cwd": ["", "relative", "C:\\x", "\\\\host\\share", "/", "/a\ud800", 7],
    "parentSession": ["", 1, "\udfff"],
    "isSeeded": [0, 1, "true"],
    "origin": ["", "Subagent", "fork", 0],
    "delegationDepth": [-1, 1.0, MAX_SAFE + 1, "0"],
    "agentPreset": ["", 2, "é"],
    "seedLength": [0, 3],
    "x": [0, "x"],
}
"""Values near the valid ones, per key (a null, a list and an object are drawn for any key)."""


def odd_value(key: str) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(NEAR_MISSES[key]),
        st.sampled_from([None, [], {}, [1], {"a": 1}]),
        st.text(max_size=6),
    )


def typical(version: int = 4) -> dict[str, Any]:
    return {
        "type": "session",
        "version": version,
        "id": "session-1",
        "createdAt": 1768000000000,
        "cwd": "/home/u/proj",
        "parentSession": "session-0",
        "isSeeded": True,
        "origin": "subagent",
        "delegationDepth": 1,
        "agentPreset": "explore",
    }


@st.composite
def header_lines(draw: st.DrawFn) -> tuple[bytes, int]:
    """A header line near the valid ones: keys dropped or added, values swapped for odd ones,
    written with or without ASCII escapes, sometimes with a key repeated or a byte broken."""
    fields = typical(draw(st.sampled_from([2, 3, 4])))
    for key in draw(st.lists(st.sampled_from(HEADER_KEYS_V2), max_size=3)):
        fields.pop(key, None)
    for key in draw(st.lists(st.sampled_from(sorted(NEAR_MISSES)), max_size=2)):
        fields[key] = draw(odd_value(key))
    text = json.dumps(fields, ensure_ascii=draw(st.booleans()), separators=(",", ":"))
    if draw(st.integers(0, 3)) == 0 and fields:  # a repeated key: the last one counts
        key = draw(st.sampled_from(sorted(fields)))
        text = text[:-1] + "," + json.dumps({key: draw(odd_value(key))})[1:]
    line = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:  # a byte that is no UTF-8
        at = draw(st.integers(1, len(line) - 2))
        line = line[:at] + b"\xff" + line[at:]
    file_version = draw(st.sampled_from([2, 3, 4, fields.get("version", 4)]))
    return line, file_version if isinstance(file_version, int) else 4


def decided(line: bytes, file_version: int) -> Header | DshForkError | LineError:
    """What ``header_of`` makes of a line (the form that decides)."""
    try:
        value, _ = parse_line(line)
        return header_of(value, line, file_version)
    except (DshForkError, LineError) as exc:
        return exc


@settings(max_examples=400)
@given(header_lines())
def test_what_the_fast_form_accepts_header_of_accepts_alike(case: tuple[bytes, int]) -> None:
    line, file_version = case
    fast = records._fast_header(line, file_version)
    if fast is not None:
        assert decided(line, file_version) == fast


@pytest.mark.parametrize("version", [2, 3, 4])
@pytest.mark.parametrize(
    "optional",
    [(), ("cwd",), ("parentSession", "origin"), ("agentPreset",), ("cwd", "parentSession")],
)
def test_the_fast_form_takes_the_headers_dsh_and_dsh_fork_write(
    version: int, optional: tuple[str, ...]
) -> None:
    """Not a form that refuses everything: every usual header is read by it."""
    fields = typical(version)
    for key in optional:
        del fields[key]
    for line in (
        json.dumps(fields, separators=(",", ":")).encode(),
        json.dumps(fields, separators=(", ", ": ")).encode(),
    ):
        fast = records._fast_header(line, version)
        assert fast is not None
        assert fast == decided(line, version)
    written = encode_header(
        session_id="s",
        created_at=1,
        cwd="/p",
        parent_session="p",
        is_seeded=True,
        origin=None,
        delegation_depth=0,
        agent_preset=None,
    ).rstrip(b"\n")
    assert records._fast_header(written, 4) == decided(written, 4)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (
            b'{"type":"session","version":4,"id":"\\ud800","createdAt":1,"isSeeded":false,'
            b'"delegationDepth":0}',
            "a lone surrogate escape, read leniently",
        ),
        (
            b'{"type":"session","version":4,"id":"a","createdAt":5.0,"isSeeded":false,'
            b'"delegationDepth":0}',
            "an integer written as a float",
        ),
        (
            b'{"type":"x","type":"session","version":4,"id":"a","createdAt":1,"isSeeded":false,'
            b'"delegationDepth":0}',
            "a repeated key whose last value is valid",
        ),
        (
            b'{"type":"session","version":4,"id":"\xff","createdAt":1,"isSeeded":false,'
            b'"delegationDepth":0}',
            "invalid UTF-8, read with a replacement character",
        ),
    ],
)
def test_lines_only_the_lenient_read_accepts_go_past_the_fast_form(line: bytes, why: str) -> None:
    assert records._fast_header(line, 4) is None, why
    assert isinstance(decided(line, 4), Header), why


def test_a_long_listing_takes_the_fast_form_and_its_refusals_stay_header_of_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the first headers of a process, parse_header tries the fast form; a line it
    refuses still gets header_of's own verdict and message."""
    monkeypatch.setattr(records, "_headers_parsed", records.FAST_HEADERS_AFTER)
    taken: list[bytes] = []
    real = records._fast_header

    def counted(line: bytes, file_version: int) -> Header | None:
        taken.append(line)
        return real(line, file_version)

    monkeypatch.setattr(records, "_fast_header", counted)
    good = json.dumps(typical()).encode()
    assert parse_header(good, 4) == decided(good, 4)
    bad = json.dumps({**typical(), "cwd": "relative"}).encode()
    with pytest.raises(DshForkError, match="is not absolute"):
        parse_header(bad, 4)
    assert taken == [good, bad]


@pytest.mark.parametrize(
    ("change", "file_version"),
    [
        ({"version": 5}, 5),
        ({"version": 3}, 4),
        ({"id": ""}, 4),
        ({"cwd": "relative"}, 4),
        ({"cwd": None}, 4),
        ({"createdAt": -1}, 4),
        ({"createdAt": MAX_SAFE + 1}, 4),
        ({"origin": "fork"}, 4),
        ({"isSeeded": 1}, 4),
        ({"seedLength": 3}, 4),
    ],
)
def test_the_fast_form_refuses_every_header_header_of_refuses(
    change: dict[str, Any], file_version: int
) -> None:
    line = json.dumps({**typical(), **change}).encode()
    assert records._fast_header(line, file_version) is None
    assert isinstance(decided(line, file_version), DshForkError)


def test_the_fast_form_names_exactly_the_v2_header_keys() -> None:
    """The key rules live in ``records`` (``HEADER_KEYS_V2``, the required ones); the fast
    form spells them as fields, so a key added to one and not the other fails here."""
    import msgspec

    info = msgspec.inspect.type_info(records._HeaderForm)
    assert isinstance(info, msgspec.inspect.StructType)
    assert {f.encode_name for f in info.fields} == set(HEADER_KEYS_V2)
    assert {f.encode_name for f in info.fields if f.required} == records._REQUIRED_V2
