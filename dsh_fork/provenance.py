"""Provenance: recognising a copy by its inherited prefix (semantics §4.3).

A relink copy carries no marker of where it came from; its inherited prefix *is* its source's
log prefix, byte for byte. That is enough to match copies to sources one to one on a rerun, and
to tell list-agents which child a copy was made from.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Sequence
from typing import Any

from msgspec import Struct

from .model import Facts
from .records import Event, decode_source_seqs
from .sessionlog import SessionLog


class Logged(Struct, frozen=True):
    """An opened session: the id it is known by, its log and the facts derived from it."""

    id: str
    log: SessionLog
    facts: Facts


def _plain(value: Any) -> Any:
    """JSON.parse semantics: every number is a double, so ``5.0`` and ``5`` are one value."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def normalized(event: Event) -> Any:
    """An event's parsed value with ``sourceEventSeqs`` decoded from its range encoding."""
    obj = dict(event.obj)
    if "sourceEventSeqs" in obj:
        with contextlib.suppress(ValueError):  # an undecodable list is compared as stored
            obj["sourceEventSeqs"] = decode_source_seqs(obj["sourceEventSeqs"], event.seq)
    return _plain(obj)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def first_event_key(log: SessionLog) -> str | None:
    """The normalised first event: equal for a copy and its source, a cheap pre-filter."""
    if log.event_count == 0:
        return None
    return _key(normalized(log.event(0)))


def _raw_equal(a: SessionLog, b: SessionLog, count: int) -> bool:
    if a.version < 2 or b.version < 2:
        return False
    pairs = itertools.zip_longest(a.raw_lines(0, count - 1), b.raw_lines(0, count - 1))
    return all(x == y for x, y in pairs)


def _parsed_equal(a: SessionLog, b: SessionLog, count: int) -> bool:
    pairs = zip(
        itertools.islice(a.events(), count), itertools.islice(b.events(), count), strict=True
    )
    return all(normalized(x) == normalized(y) for x, y in pairs)


def is_copy_of(copy: Logged, source: SessionLog) -> bool:
    """X is a copy of S: seeded, its cut lies outside any turn, and its prefix is S's."""
    cut = copy.facts.cut
    if not copy.log.header.is_seeded or cut < 1 or source.event_count < cut:
        return False
    if copy.facts.enclosing_turn(cut - 1) is not None:
        return False
    return _raw_equal(copy.log, source, cut) or _parsed_equal(copy.log, source, cut)


def match_copies(existing: Sequence[Logged], candidates: Sequence[Logged]) -> dict[str, str]:
    """One-to-one matching: each existing child, in order, takes the first unmatched candidate
    it is a copy of. Both sequences come sorted by (createdAt, id). Returns copy id → source id.
    """
    by_key: dict[str, list[int]] = {}
    for index, candidate in enumerate(candidates):
        key = first_event_key(candidate.log)
        if key is not None:
            by_key.setdefault(key, []).append(index)
    taken: set[int] = set()
    matches: dict[str, str] = {}
    for copy in existing:
        if not copy.log.header.is_seeded or copy.facts.cut < 1:
            continue
        key = first_event_key(copy.log)
        for index in by_key.get(key or "", ()):
            if index not in taken and is_copy_of(copy, candidates[index].log):
                taken.add(index)
                matches[copy.id] = candidates[index].id
                break
    return matches
