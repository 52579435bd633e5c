"""The fork point: where a new parent's history branched off its source (semantics §4.2).

Fork, relink and doctor all ask the same two questions of a log — where did this session
branch off, and is this subagent on the branch? — so the answers live here, apart from the
planner that uses them and free of anything that writes: ``ForkPoint``, ``fork_point``,
``copy_cut`` (K(S), §2.6) and ``belongs`` (branch membership, §4.2.3), with the event types a
relink parses of the logs it reads.
"""

from __future__ import annotations

import bisect
from collections.abc import Container

from msgspec import Struct
from msgspec.structs import replace

from .model import TURN_TYPES, Facts
from .records import Event
from .sessionlog import SessionLog


class ForkPoint(Struct, frozen=True):
    """Where a new parent's history branched off its source parent.

    ``parent_id`` is the nearest source parent whose children are candidates; ``chain`` the
    sessions it inherited from in turn, nearest first (its fork ancestors, or the upstream
    members of a copied lineage), whose children are candidates too (semantics §1.5 "Fork
    chains"). ``cut`` and ``last_inherited_time`` decide branch membership together with the
    catalog facts the new parent inherited; ``depth`` is the new parent's delegation depth.
    """

    parent_id: str
    cut: int
    last_inherited_time: int | None
    inherited_catalog_ids: frozenset[str]
    depth: int
    chain: tuple[str, ...] = ()

    def with_chain(self, chain: tuple[str, ...]) -> ForkPoint:
        return replace(self, chain=chain)


_APPEND_TYPES = frozenset(("session/end-seed", "subagent/catalog", "subagent/descriptor"))
"""What relink needs of a parent it appends to: cut, catalog, descriptors — never its turns,
so re-reading a fork child that inherited a huge log parses only a handful of lines."""


_PLAN_TYPES = _APPEND_TYPES | frozenset((*TURN_TYPES, "agent-preset/selected"))
"""What the planner needs of a child: its turns (K, §2.6), cut, catalog, descriptors and
preset. Every line's envelope is checked whatever is collected; only these are parsed."""


def _event_time(log: SessionLog, seq: int) -> int | None:
    """The time of event ``seq``: from the events parsed at open when it is one of them (the
    ``turn/end`` closing a child's last turn, usually), else read from its frame."""
    collected = log.collected
    index = bisect.bisect_left(collected, seq, key=_seq_of)
    if index < len(collected) and collected[index].seq == seq:
        return collected[index].time
    return log.event(seq).time


def _seq_of(event: Event) -> int:
    return event.seq


def fork_point(
    log: SessionLog, facts: Facts, parent_id: str, boundary: int, depth: int
) -> ForkPoint:
    """The fork point of a session that inherited ``log``'s events ``0..boundary``.

    For a fork child C: its own log with ``boundary = cut(C) - 1``; for a planned fork: the
    source with the fork boundary; for a copy of S: S's log with ``boundary = K(S) - 1``.
    """
    time = _event_time(log, boundary) if boundary >= 0 else None
    return _point(facts, parent_id, boundary, depth, time)


def _point(facts: Facts, parent_id: str, boundary: int, depth: int, time: int | None) -> ForkPoint:
    """``fork_point`` with the time of event ``boundary`` already known."""
    if boundary < 0:
        return ForkPoint(parent_id, 0, None, frozenset(), depth)
    ids = frozenset(
        entry.child_id
        for entry in facts.catalog
        if entry.seq <= boundary and entry.child_id is not None
    )
    return ForkPoint(parent_id, boundary + 1, time, ids or _NONE, depth)


_NONE: frozenset[str] = frozenset()
"""One empty set for the fork points of the many copies whose source catalogued nothing."""


def copy_cut(facts: Facts) -> int | None:
    """K(S) (semantics §2.6): the seq of the open last turn's ``turn/start``, or the event
    count when the last turn is closed; None when S never completed a turn."""
    if facts.last_turn_end is None:
        return None
    open_turn = facts.open_turn
    return facts.event_count if open_turn is None else open_turn.start_seq


def belongs(
    point: ForkPoint,
    child_id: str,
    created_at: int,
    horizon: int | None = None,
    catalogued: Container[str] = (),
) -> bool:
    """Branch membership (semantics §4.2.3): an inherited catalog fact, else createdAt ≤ T.

    ``horizon`` replaces T for the children of a farther chain member: what that member
    spawned after the nearer one branched off cannot be on the branch (docs/fork-chains.md).
    ``catalogued``: the ids the child's parent catalogues anywhere in its log. One of them
    whose fact is not in the prefix was spawned after the branch point: the createdAt rule is
    only for a child its parent has no catalog entry for (semantics §1.5), and T says nothing
    once the prefix ends in events newer than the branch (a fork's title, a later turn).
    """
    if point.cut <= 0:
        return False
    if child_id in point.inherited_catalog_ids:
        return True
    if child_id in catalogued:
        return False
    limit = point.last_inherited_time if horizon is None else horizon
    return limit is not None and created_at <= limit
