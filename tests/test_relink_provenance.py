"""Provenance (semantics §4.3): a copy is recognised by its inherited prefix alone."""

from __future__ import annotations

from pathlib import Path

import orjson
from conftest import tree_digest
from relinkkit import CWD, fork_of, legacy_copy, run, session_path, subagent

from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.model import MODEL_TYPES, facts_of
from dsh_fork.provenance import Logged, is_copy_of, match_copies
from dsh_fork.reader import current_generation, open_log


def opened(root: Path, spec: SessionSpec) -> Logged:
    generation = current_generation(session_path(root, spec).parent)
    assert generation is not None
    log = open_log(generation, collect=MODEL_TYPES)
    return Logged(spec.id, log, facts_of(log))


def source_with_ranges(clock: Clock, session_id: str, parent: SessionSpec) -> SessionSpec:
    """A child whose log holds a surface event citing earlier seqs as a stored range."""
    spec = subagent(clock, session_id, parent, label=session_id)
    spec.add("turn/start", clock(), {"turn": 2})
    message = {"id": "m", "role": "system", "content": [{"type": "text", "text": "ctx"}]}
    spec.add("system/message", clock(), message, surfaceOp="append", sourceEventSeqs=[[0, 3]])
    spec.add("turn/end", clock(), {"turn": 2, "reason": {"kind": "completed"}})
    return spec


def reserialised(line: bytes) -> bytes:
    """The same event written by another serialiser: keys reversed, ranges expanded,
    integers as floats where JSON.parse would not care."""
    value = orjson.loads(line)
    if isinstance(value.get("sourceEventSeqs"), list):
        value["sourceEventSeqs"] = [0, 1, 2, 3]
    value["time"] = float(value["time"])
    return orjson.dumps(dict(reversed(list(value.items()))))


def test_copies_match_by_bytes_by_value_and_after_the_source_grew(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    grown = source_with_ranges(clock, "grown", parent)
    by_api = source_with_ranges(clock, "by-api", parent)
    other = source_with_ranges(clock, "other", parent)
    fork = fork_of(parent, "session-C", clock())
    copy_grown = legacy_copy(grown, "copy-grown", fork, clock())
    grown.turn(clock)  # the source went on after it was copied
    copy_api = legacy_copy(by_api, "copy-api", fork, clock())
    copy_api.lines = [reserialised(line) + b"\n" for line in copy_api.lines]
    for spec in (parent, grown, by_api, other, fork, copy_grown, copy_api):
        spec.publish(root)
    candidates = [opened(root, s) for s in (grown, by_api, other)]

    assert is_copy_of(opened(root, copy_grown), candidates[0].log)
    assert not is_copy_of(opened(root, copy_grown), candidates[2].log)
    assert is_copy_of(opened(root, copy_api), candidates[1].log)
    assert not is_copy_of(opened(root, copy_api), candidates[0].log)
    assert not is_copy_of(candidates[0], candidates[0].log)  # not seeded: not a copy
    matches = match_copies([opened(root, copy_grown), opened(root, copy_api)], candidates)
    assert matches == {"copy-grown": "grown", "copy-api": "by-api"}


def test_a_prefix_that_does_not_end_on_a_turn_end_is_no_copy(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    source = subagent(clock, "source", parent, label="s")
    fork = fork_of(parent, "session-C", clock())
    not_a_copy = fork_of(source, "mid-turn", clock(), at=2, origin="subagent")
    not_a_copy.parent = fork.id
    for spec in (parent, source, fork, not_a_copy):
        spec.publish(root)

    assert not is_copy_of(opened(root, not_a_copy), opened(root, source).log)


def test_identical_candidates_still_get_one_copy_each(root: Path, clock: Clock) -> None:
    """Matching is one to one: a copy of one of two identical children leaves the other to
    be copied, and then each copy keeps its own source."""
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    twin_a = subagent(clock, "twin-a", parent, label="twin", created_at=clock())
    twin_b = SessionSpec(
        id="twin-b",
        created_at=twin_a.created_at + 1,
        cwd=CWD,
        parent=parent.id,
        origin="subagent",
        depth=1,
    )
    twin_b.lines = list(twin_a.lines)
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    existing = legacy_copy(twin_a, "old-copy", fork, clock())
    for spec in (parent, twin_a, twin_b, fork, existing):
        spec.publish(root)

    summary = run(root, fork.id)

    assert [c["source"] for c in summary.copied] == ["twin-b"]
    assert summary.catalogued == ["old-copy"]
    copies = [e.id or "" for e in Root(root).children_of(fork.id)]
    twins = [opened(root, twin_a), opened(root, twin_b)]
    as_logged = []
    for copy_id in copies:
        generation = current_generation(Root(root).find(copy_id))
        assert generation is not None
        log = open_log(generation, collect=MODEL_TYPES)
        as_logged.append(Logged(copy_id, log, facts_of(log)))
    assert match_copies(as_logged, twins) == {"old-copy": "twin-a", copies[1]: "twin-b"}
    before = tree_digest(root)
    assert run(root, fork.id).copied == []
    assert tree_digest(root) == before
