"""Each copy relink wrote, read back: can DSH resume it? (the plugin's ``unresumable`` check).

The peer plugin checked each copy by asking for its write lease, through a service that was
never injected, so its check always passed (semantics §9.4). Here the check is made on disk,
after the walk, once every lock relink took is released, and it fails when the checked thing
is missing. A copy DSH can resume:

- reads whole (every frame checked, as any read does);
- has its own ``subagent/descriptor`` (DSH wakes a subagent by it; the catalog omits a child
  without one);
- holds no turn open (a copy ends before an open last turn of its source);
- has a free ``session.lock`` (a held one refuses DSH's cold resume: "unavailable");
- is named by a ``subagent/catalog`` fact in its parent's own range (v4's panel reads only that).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .discovery import Root
from .errors import DshForkError
from .locking import running
from .model import facts_of
from .reader import open_log

COPY_TYPES = ("session/end-seed", "subagent/descriptor", "turn/start", "turn/end")
PARENT_TYPES = ("session/end-seed", "subagent/catalog")


def unresumable(root: Root, copied: Iterable[dict[str, Any]]) -> list[dict[str, str]]:
    """``{id, message}`` of each written copy (rows of a summary's ``copied``, with their
    ``copy`` and ``parent`` ids) that fails the check, in the order given; [] when all pass."""
    failed: list[dict[str, str]] = []
    catalogs: dict[str, frozenset[str] | str] = {}
    for row in copied:
        copy_id, parent_id = row.get("copy"), row.get("parent")
        if not isinstance(copy_id, str) or not isinstance(parent_id, str):
            continue  # a planned copy (dry run): nothing was written
        problems = _copy_problems(root, copy_id)
        if parent_id not in catalogs:
            catalogs[parent_id] = _own_catalog(root, parent_id)
        catalog = catalogs[parent_id]
        if isinstance(catalog, str):
            problems.append(f"its parent {parent_id} cannot be read: {catalog}")
        elif copy_id not in catalog:
            problems.append(f"its parent {parent_id} has no catalog fact naming it")
        if problems:
            failed.append({"id": copy_id, "message": f"{copy_id}: " + "; ".join(problems)})
    return failed


def _copy_problems(root: Root, copy_id: str) -> list[str]:
    entry = root.entry(copy_id)
    generation = None if entry is None else entry.generation
    if entry is None or generation is None:
        return ["it is not on disk"]
    try:
        log = open_log(generation, collect=COPY_TYPES)
    except DshForkError as exc:
        return [f"it cannot be read: {exc.message}"]
    except OSError as exc:
        return [f"it cannot be read: {exc.strerror or exc}"]
    facts = facts_of(log)
    problems: list[str] = []
    if not facts.own_descriptors():
        problems.append("it has no own subagent/descriptor")
    if facts.open_turn is not None:
        problems.append(f"it holds an open turn (started at seq {facts.open_turn.start_seq})")
    if running(entry.session_dir):
        problems.append("its session.lock is held")
    return problems


def _own_catalog(root: Root, parent_id: str) -> frozenset[str] | str:
    """The ids the parent's own-range catalog names, or why the parent cannot be read."""
    entry = root.entry(parent_id)
    generation = None if entry is None else entry.generation
    if entry is None or generation is None:
        return "it is not on disk"
    try:
        log = open_log(generation, collect=PARENT_TYPES)
    except DshForkError as exc:
        return exc.message
    except OSError as exc:
        return str(exc.strerror or exc)
    facts = facts_of(log)
    return frozenset(e.child_id for e in facts.own_catalog() if e.child_id is not None)
