"""Queued input: the pending items of ``agent/inbox/spliced`` edits, and their cancellation.

Each splice edits one target's list (``next-turn`` or ``next-step``): ``removedCount`` items from
``start`` are replaced by ``inserted``. A claim (delivery) and a cancellation are both removals;
``outcome: "canceled"`` says the removed items were dropped rather than delivered (DSH writes
``{"start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}``), so a canceled splice
removes items like any other. A fork inherits what is still queued at its cut; ``fork
--drop-inherited-inbox`` appends one canceling splice per target right after the child's marker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from msgspec import Struct

from .records import nonneg_int

SPLICE_TYPE = "agent/inbox/spliced"
TARGETS = ("next-turn", "next-step")


class Queued(Struct, frozen=True):
    """One pending item and the seq of the splice that queued it."""

    seq: int
    item: Any


def fold(splices: Iterable[tuple[int, Any]], through: int | None = None) -> dict[str, list[Queued]]:
    """Each target's queue after the splices up to seq ``through`` (all when None).

    A malformed splice (no target, no integer start, no inserted list) is skipped, as it cannot
    be applied; removals past the end of a list remove what is there.
    """
    queues: dict[str, list[Queued]] = {}
    for seq, data in splices:
        if through is not None and seq > through:
            break
        if not isinstance(data, dict):
            continue
        target = data.get("target")
        start = nonneg_int(data.get("start"))
        removed = nonneg_int(data.get("removedCount", 0))
        inserted = data.get("inserted")
        if not isinstance(target, str) or start is None or removed is None:
            continue
        if not isinstance(inserted, list):
            continue
        queue = queues.setdefault(target, [])
        queue[start : start + removed] = [Queued(seq, item) for item in inserted]
    return queues


def pending(splices: Iterable[tuple[int, Any]], through: int | None = None) -> list[Any]:
    """Every pending item of every target (next-turn first), in queue order."""
    queues = fold(splices, through)
    order = [t for t in TARGETS if t in queues] + sorted(t for t in queues if t not in TARGETS)
    return [entry.item for target in order for entry in queues[target]]


def inherited_pending(splices: Iterable[tuple[int, Any]], cut: int) -> list[Any]:
    """Items queued in the inherited prefix (seq < cut) that are still queued at the end of
    the log: what the session would deliver that it did not queue itself."""
    queues = fold(splices)
    return [
        entry.item
        for target in sorted(queues, key=_target_order)
        for entry in queues[target]
        if entry.seq < cut
    ]


def cancellations(splices: Iterable[tuple[int, Any]], through: int) -> list[dict[str, Any]]:
    """The splices that cancel every item queued at seq ``through``: one per non-empty target,
    each removing the whole list from its start."""
    queues = fold(splices, through)
    return [
        {
            "target": target,
            "start": 0,
            "removedCount": len(queues[target]),
            "inserted": [],
            "outcome": "canceled",
        }
        for target in sorted(queues, key=_target_order)
        if queues[target]
    ]


def _target_order(target: str) -> tuple[int, str]:
    return (TARGETS.index(target) if target in TARGETS else len(TARGETS), target)
