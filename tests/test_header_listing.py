"""Listing checks each header from the value it parsed once (``records.header_of``); every
header, valid or not, must get the verdict reading that session's log alone gives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from dsh_fork.discovery import Root
from dsh_fork.errors import DshForkError
from dsh_fork.fixtures import write_log_file
from dsh_fork.generations import canonical_name
from dsh_fork.reader import read_header
from dsh_fork.records import Header, header_of, parse_header
from dsh_fork.sessionentry import SessionEntry

V4: dict[str, Any] = {
    "type": "session",
    "version": 4,
    "id": "s",
    "createdAt": 1,
    "cwd": "/work",
    "isSeeded": False,
    "delegationDepth": 0,
}
V0: dict[str, Any] = {"type": "session", "version": 0, "id": "s", "createdAt": 1}
KEYS = (*V4, "parentSession", "origin", "agentPreset", "seedLength", "unknown")
VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    5.0,
    5.5,
    2**53,
    "",
    "/abs",
    "relative",
    "subagent",
    [],
    {"a": 1},
)
DROP = object()


def variants() -> list[tuple[int, bytes]]:
    """(file version, header line): each key of a v4 and a v0 header set to each value (or
    dropped), in files of the header's version and of another."""
    out: list[tuple[int, bytes]] = []
    for version, base in ((4, V4), (0, V0)):
        for key in KEYS:
            for value in (*VALUES, DROP):
                fields = {k: v for k, v in base.items() if k != key}
                if value is not DROP:
                    fields[key] = value
                line = orjson.dumps(fields)
                out.append((version, line))
        out.append((2, orjson.dumps(base)))
    out += [(4, b"[]"), (4, b"null"), (4, b'{"type":"session"')]
    return out


def verdict(read: Callable[..., Header], *args: Any, **kwargs: Any) -> tuple[str, object]:
    try:
        header = read(*args, **kwargs)
    except DshForkError as exc:
        return type(exc).__name__, exc.message
    return "ok", (header.id, header.created_at, header.parent_session, header.is_seeded)


def test_a_parsed_header_gets_the_verdict_of_its_line() -> None:
    for version, line in variants():
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        alone = verdict(parse_header, line, version, where="w")
        assert verdict(header_of, value, line, version, where="w") == alone, line


def listed(entry: SessionEntry) -> Header:
    """The header listing validated, or the error it named the session with."""
    if entry.header is None:
        assert entry.error is not None
        raise entry.error
    return entry.header


def test_a_listed_header_gets_the_verdict_reading_its_log_gives(root: Path) -> None:
    made = variants()
    for index, (version, line) in enumerate(made):
        name = canonical_name(version)
        write_log_file(root / "project" / f"s{index:04d}" / name, line, [])
    entries = Root(root).entries()
    assert len(entries) == len(made)
    outcomes: list[str] = []
    for entry in entries:
        generation = entry.generation
        assert generation is not None
        got = verdict(listed, entry)
        assert got == verdict(read_header, generation), entry
        outcomes.append(got[0])
    assert outcomes.count("ok") > 20 and outcomes.count("CorruptLog") > 100
