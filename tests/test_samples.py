"""The foreign sample home: every fact of ``facts.json``, read through the library.

The samples were written by an independent implementation of the v4 format, so these tests
check the reader against data dsh-fork did not write. They work on a private copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import SAMPLES, require_samples, tree_digest

from dsh_fork import frames as zframes
from dsh_fork.discovery import Root
from dsh_fork.locking import probe
from dsh_fork.model import MODEL_TYPES, facts_of, last_inherited_time
from dsh_fork.reader import open_log, read_header
from dsh_fork.sessionarg import locate

require_samples()
FACTS: dict[str, Any] = orjson.loads((SAMPLES / "facts.json").read_bytes())
SESSIONS: dict[str, dict[str, Any]] = FACTS["sessions"]


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_every_fact_of_each_sample_session(samples_root: Path, name: str) -> None:
    fact = SESSIONS[name]
    located = locate(fact["id"], str(samples_root))
    # facts.json gives dirs relative to the home (``sessions/...``).
    assert located.session_dir == samples_root.parent / fact["dir"]
    assert located.generation.version == fact["generation"]
    assert located.generation.name == "session.v4.jsonl.zstd"
    log = open_log(located.generation, collect=MODEL_TYPES)
    facts = facts_of(log)
    assert log.header.id == fact["id"]
    assert log.event_count == fact["events"]
    assert facts.turn_ends == fact["turnEnds"]
    assert facts.cut == fact["cut"]
    assert [entry.child_id for entry in facts.own_catalog()] == fact["ownCatalog"]
    assert len(zframes.scan(log.data).frames) == fact["frames"]
    assert len(log.chunks) + 1 == fact["frames"]
    assert log.torn is None
    assert [e.seq for e in log.events()] == list(range(fact["events"]))
    assert probe(located.session_dir) == "free"


def test_the_children_on_disk(samples_root: Path) -> None:
    root = Root(samples_root)
    expected: dict[str, list[str]] = FACTS["childrenOnDisk"]
    for fact in SESSIONS.values():
        children = [entry.id for entry in root.children_of(fact["id"])]
        assert sorted(c for c in children if c) == expected.get(fact["id"], []), fact["id"]
    assert all(entry.error is None for entry in root.entries())
    assert len(root.entries()) == len(SESSIONS)


def test_the_open_turn(samples_root: Path) -> None:
    open_turn = FACTS["openTurn"]
    for fact in SESSIONS.values():
        log = open_log(locate(fact["id"], str(samples_root)).generation, collect=MODEL_TYPES)
        turn = facts_of(log).open_turn
        if fact["id"] == open_turn["session"]:
            assert turn is not None and turn.turn == open_turn["turn"]
            assert not facts_of(log).is_valid_boundary(log.event_count - 1)
        else:
            assert turn is None, fact["id"]


def test_the_fork_child_and_its_branch(samples_root: Path) -> None:
    """The facts relink's branch membership rests on (semantics §1.5): the parent's catalog
    entries inside the fork child's inherited prefix, and the last inherited time."""
    relink = FACTS["relinkOfFork"]
    root = Root(samples_root)
    fork = open_log(locate(relink["forkChild"], str(samples_root)).generation, collect=MODEL_TYPES)
    facts = facts_of(fork)
    assert fork.header.is_fork_child
    assert [e.id for e in root.fork_children()] == [relink["forkChild"]]
    parent = fork.header.parent_session
    assert parent is not None
    inherited = {entry.child_id for entry in facts.inherited_catalog()}
    cutoff = last_inherited_time(fork, facts)
    assert cutoff is not None
    belongs: list[str | None] = []
    unrelated: list[str | None] = []
    for child in root.children_of(parent):
        member = child.id in inherited or child.created_at <= cutoff
        (belongs if member else unrelated).append(child.id)
    assert sorted(filter(None, belongs)) == relink["belongs"]
    assert sorted(filter(None, unrelated)) == relink["unrelated"]
    for child, grandchildren in relink["grandchildren"].items():
        assert sorted(e.id for e in root.children_of(child) if e.id) == grandchildren
    # A fork child starts with an empty panel: its prefix's catalog is the parent's.
    assert facts.own_catalog() == []
    assert read_header(locate(parent, str(samples_root)).generation).origin is None


def test_reading_the_samples_changes_nothing(samples_root: Path) -> None:
    before = tree_digest(samples_root)
    root = Root(samples_root)
    assert root.encoding() == "zstd"
    for entry in root.entries():
        assert entry.generation is not None
        log = open_log(entry.generation, collect=MODEL_TYPES)
        list(log.events())
        probe(entry.session_dir)
    assert tree_digest(samples_root) == before
