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

Each copy is read once: a copy is also the parent of the copies below it, so the read that
checks it collects its catalog too. The catalog of a parent that is no copy (the fork child)
is the one the walk's append left under the parent's lock, when the walk appended to it.
Where each copy's log is, the walk that published it says (``written``): the check reads
that file from disk (with the re-list of its dir every read makes), but does not look the
copy up in the root again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from msgspec import Struct

from .discovery import Root
from .errors import DshForkError
from .generations import Generation
from .locking import running
from .model import Facts, facts_of
from .reader import open_log

COPY_TYPES = ("session/end-seed", "subagent/descriptor", "turn/start", "turn/end")
PARENT_TYPES = ("session/end-seed", "subagent/catalog")
READ_TYPES = (*COPY_TYPES, "subagent/catalog")
"""What one read of a copy collects: its own checks and, as it may be a parent, its catalog."""

Catalog = frozenset[str] | str
"""The ids a session's own-range catalog names, or why the session cannot be read."""


class _ReadBack(Struct, frozen=True):
    """One copy as read back: what fails the check of it, and its own catalog (it is the
    parent of the copies below it, so the same read answers for them)."""

    problems: list[str]
    catalog: Catalog


def unresumable(
    root: Root,
    copied: Iterable[dict[str, Any]],
    appended: Mapping[str, frozenset[str]] | None = None,
    written: Mapping[str, Generation] | None = None,
) -> list[dict[str, str]]:
    """``{id, message}`` of each written copy (rows of a summary's ``copied``, with their
    ``copy`` and ``parent`` ids) that fails the check, in the order given; [] when all pass.

    Each copy is read back once, whatever its depth: that read gives its own problems and
    the catalog its children are looked up in. ``appended``: the own-range catalog of each
    parent as the walk left it under the parent's lock, right after appending to it (what
    ``relinkwalk`` knows); only a parent that is no copy of this run and was not appended to
    is read on its own, once. ``written``: the generation each copy was published as (what
    the walk knows); a copy missing from it is looked up in the root's listing."""
    rows = [
        (row["copy"], row["parent"])
        for row in copied
        if isinstance(row.get("copy"), str) and isinstance(row.get("parent"), str)
    ]  # a planned copy (dry run) has no ids: nothing was written
    where = written or {}
    read = {
        copy_id: _read_back(where.get(copy_id) or _listed(root, copy_id)) for copy_id, _ in rows
    }
    catalogs: dict[str, Catalog] = dict(appended or {})
    catalogs.update((copy_id, back.catalog) for copy_id, back in read.items())  # as on disk
    failed: list[dict[str, str]] = []
    for copy_id, parent_id in rows:
        problems = list(read[copy_id].problems)
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


def _listed(root: Root, session_id: str) -> Generation | None:
    """The current generation of a session of the root's listing, if any."""
    entry = root.entry(session_id)
    return None if entry is None else entry.generation


def _read_back(generation: Generation | None) -> _ReadBack:
    """The copy whose log is ``generation``, read from disk and checked."""
    if generation is None:
        return _ReadBack(["it is not on disk"], "it is not on disk")
    try:
        log = open_log(generation, collect=READ_TYPES)
    except DshForkError as exc:
        return _ReadBack([f"it cannot be read: {exc.message}"], exc.message)
    except OSError as exc:
        reason = str(exc.strerror or exc)
        return _ReadBack([f"it cannot be read: {reason}"], reason)
    facts = facts_of(log)
    del log
    problems: list[str] = []
    if not facts.own_descriptors():
        problems.append("it has no own subagent/descriptor")
    if facts.open_turn is not None:
        problems.append(f"it holds an open turn (started at seq {facts.open_turn.start_seq})")
    if running(generation.path.parent):
        problems.append("its session.lock is held")
    return _ReadBack(problems, _catalogued(facts))


def _catalogued(facts: Facts) -> frozenset[str]:
    return frozenset(e.child_id for e in facts.own_catalog() if e.child_id is not None)


def _own_catalog(root: Root, parent_id: str) -> Catalog:
    """The ids the parent's own-range catalog names, or why the parent cannot be read."""
    generation = _listed(root, parent_id)
    if generation is None:
        return "it is not on disk"
    try:
        log = open_log(generation, collect=PARENT_TYPES)
    except DshForkError as exc:
        return exc.message
    except OSError as exc:
        return str(exc.strerror or exc)
    return _catalogued(facts_of(log))
