"""DSH's workspace registry, ``<home>/storages/workspace.json`` (dsh-world §1): read, check, edit.

The registry says which sessions the web UI shows under which workspace. DSH reads it once
when it starts and rewrites it whole on every change; this module is the one place that
knows its shape, the rules DSH checks before it trusts it (§1.3) and the rules of an offline
writer (§1.4). Everything else asks it three kinds of questions:

- lookups: ``Registry.listing`` (the record that lists a session), ``archived``, ``pinned``,
  ``by_name``, and ``is_member`` (the membership rule: listed AND ``realpath(cwd)`` an
  existing dir equal to the record's ``path``);
- targets: ``fork_target`` (a fork child joins the record that lists its source, or for a
  subagent source its nearest listed ancestor) and ``cwd_target`` (a session with a new cwd
  joins the record whose ``path`` is its ``realpath(cwd)``); never a new workspace;
- edits: ``edit(home, decide)`` takes the lock, reads the file, lets ``decide`` name the
  ``Change``s (attach or detach) on what it read, and writes them in one whole-file replace
  (locking, reading and replacing the file itself are ``storage``'s).

The home is the sessions root's parent (``home_of``), never ``$DSH_HOME`` when ``--root``
points elsewhere. A registry that is missing or not initialised is left alone (DSH sorts its
sessions on its first start); one DSH would refuse, one of another unit or version, one with
a ``pendingMutation``, or one our writer would not reproduce byte for byte is refused: nothing
is written and ``reason`` says why. A header's cwd names a directory outside the root: it is
only resolved and stat-ed here, never written.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from msgspec import Struct

from . import storage
from .errors import DshForkError
from .times import iso_ms

if TYPE_CHECKING:
    from . import rootdocs

UNIT_NAME = "workspace"
UNIT_VERSION = 2
STORAGES = storage.STORAGES
FILE_NAME = "workspace.json"
MAX_BYTES = 12 * 1024 * 1024
"""A registry larger than this is refused unread, so memory stays bounded whatever the input:
DSH's own for 100,000 sessions is about 6 MB, and an edit of an 8 MB one (140,000 ids) peaks
about 40 MB above the process's start."""

State = Literal["missing", "uninitialised", "refused", "ready"]
GLOBAL = "global"
"""In ``Edit.changed``: a global list of ids changed (``Change.lists``)."""


class Record(Struct, frozen=True):
    """One workspace: its id (the key in ``tables.workspaces``), its ``path``, ``title`` and
    ``sessionIds`` (newest first)."""

    id: str
    path: str
    title: str
    session_ids: tuple[str, ...]


class Change(Struct, frozen=True):
    """Put ``session`` into the record ``target`` (and out of every other), or with
    ``target=None`` take it out of every record; ``lists``: global lists of ids to put it
    into (True) or take it out of (False), such as ``archivedSessionIds`` (trash, restore)."""

    session: str
    target: str | None
    lists: tuple[tuple[str, bool], ...] = ()


class Target(Struct, frozen=True):
    """Where a session would go: a record, or None and the reason it stays Ungrouped."""

    record: Record | None
    reason: str | None


def home_of(root: Path) -> Path:
    """The DSH home of a sessions root: its parent (the registry is ``storages/`` there)."""
    return root.parent


def registry_path(home: Path) -> Path:
    return home / STORAGES / FILE_NAME


CHUNK = 1 << 16


def chunks(doc: Any) -> Iterator[bytes]:
    """The file as DSH writes it (``JSON.stringify(doc, null, 2) + "\\n"``, non-ASCII as is),
    a piece at a time: the indenting encoder makes a string per token, and a registry of
    100,000 ids joined whole would hold a million of them at once. Raises
    ``UnicodeEncodeError`` for a lone surrogate, which no UTF-8 file holds."""
    encoder = json.JSONEncoder(indent=2, ensure_ascii=False)
    pending: list[str] = []
    size = 0
    for piece in encoder.iterencode(doc):
        pending.append(piece)
        size += len(piece)
        if size >= CHUNK:
            yield "".join(pending).encode()
            pending, size = [], 0
    pending.append("\n")
    yield "".join(pending).encode()


def dumps(doc: Any) -> bytes:
    """``chunks`` joined: the whole file."""
    return b"".join(chunks(doc))


def reproduces(doc: Any, data: bytes) -> bool:
    """Whether our writer spells ``doc`` as exactly ``data`` (compared a chunk at a time)."""
    view = memoryview(data)
    offset = 0
    try:
        for chunk in chunks(doc):
            end = offset + len(chunk)
            if view[offset:end] != chunk:
                return False
            offset = end
    except UnicodeEncodeError:
        return False
    return offset == len(data)


@functools.lru_cache(maxsize=4096)
def real_cwd(cwd: str | None) -> str | None:
    """``realpath(cwd)`` when it is an existing directory, else None (DSH's attach fails).

    Only resolved and stat-ed: the cwd lies outside the root. A cwd no file name can hold (a
    NUL, a lone surrogate) names no directory."""
    if not cwd:
        return None
    try:
        real = os.path.realpath(cwd)
        return real if os.path.isdir(real) else None
    except (OSError, ValueError):
        return None


class Registry:
    """One read of the registry: its state, records and, when ``ready``, what an edit needs."""

    def __init__(
        self, path: Path, state: State, reason: str | None = None, *, dsh_refuses: bool = False
    ) -> None:
        self.path = path
        self.state: State = state
        self.reason = reason
        self.dsh_refuses = dsh_refuses
        """Refused by a rule DSH checks too (it would not start its workspace feature), not
        only by this module's own caution (``doctor`` reports it as an error)."""
        self.doc: dict[str, Any] | None = None
        self.records: list[Record] = []
        self.archived_ids: frozenset[str] = frozenset()
        self.pinned_ids: frozenset[str] = frozenset()
        self._listing: dict[str, Record] = {}
        self._by_path: dict[str, Record] = {}

    @property
    def ready(self) -> bool:
        """Whether an edit may be written (initialised, valid, reproducible)."""
        return self.state == "ready"

    @property
    def present(self) -> bool:
        """Whether there are records to look sessions up in (ready, or refused after it was
        parsed: a listing still shows what it holds)."""
        return bool(self.records)

    def listing(self, session_id: str) -> Record | None:
        """The record whose ``sessionIds`` hold the id (the first, if a broken file has two)."""
        return self._listing.get(session_id)

    def by_path(self, path: str | None) -> Record | None:
        return None if path is None else self._by_path.get(path)

    def by_name(self, name: str) -> list[Record]:
        """``--workspace NAME``: the records titled NAME, or whose path is NAME."""
        return [r for r in self.records if name in (r.title, r.path)]

    def archived(self, session_id: str) -> bool:
        return session_id in self.archived_ids

    def pinned(self, session_id: str) -> bool:
        return session_id in self.pinned_ids

    def is_member(self, session_id: str, cwd: str | None) -> bool:
        """The membership rule (§1.2): listed, and ``realpath(cwd)`` is the record's path."""
        record = self.listing(session_id)
        return record is not None and real_cwd(cwd) == record.path

    def placement(self, session_id: str, cwd: str | None) -> rootdocs.Placement | None:
        """The record listing the session and whether it is a member there (its
        ``realpath(cwd)`` is the record's path; else it moved away), as list and tree print
        it; None when no record lists it (DSH shows it as Ungrouped, if it is visible)."""
        record = self.listing(session_id)
        if record is None:
            return None
        from . import rootdocs  # only list and tree place sessions

        member = real_cwd(cwd) == record.path
        return rootdocs.Placement(record.id, record.title, record.path, member)

    def describe(self) -> str:
        """Why no edit may be written, as a warning's tail."""
        return f"the workspace registry {self.path} was not changed: {self.reason}"


# -- targets (§1.4.3) -------------------------------------------------------------------------


def fork_target(registry: Registry, lineage: Sequence[str], child_cwd: str | None) -> Target:
    """A fork child's workspace: the record listing the source (``lineage[0]``), or for a
    subagent source the first of its ancestors (``lineage[1:]``, nearest first) a record
    lists; only if ``realpath(child cwd)`` is that record's path, as DSH's attach checks."""
    record = next((r for r in map(registry.listing, lineage) if r is not None), None)
    if record is None:
        return Target(None, "no workspace lists the source")
    return _checked(record, child_cwd)


def cwd_target(registry: Registry, cwd: str | None) -> Target:
    """A session with a new cwd (``fork --cwd``, ``import``, ``attach``): the record whose
    path is ``realpath(cwd)``. No match: it stays Ungrouped (no workspace is created)."""
    real = real_cwd(cwd)
    if real is None:
        what = "it has no cwd" if cwd is None else f"its cwd {cwd} is not an existing directory"
        return Target(None, what)
    record = registry.by_path(real)
    if record is None:
        return Target(None, f"no workspace has the path {real}")
    return Target(record, None)


def _checked(record: Record, cwd: str | None) -> Target:
    real = real_cwd(cwd)
    if real != record.path:
        where = "is not an existing directory" if real is None else f"resolves to {real}"
        if cwd is None:
            return Target(None, f"workspace {record.title!r} lists the source, but it has no cwd")
        return Target(
            None,
            f"workspace {record.title!r} lists the source, but the cwd {cwd} {where}, not "
            f"{record.path} (DSH's attach would fail too)",
        )
    return Target(record, None)


# -- reading and checking ---------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise storage.Refusal(f"it holds {name}, which is not JSON", dsh=True)


def _js_float(text: str) -> float:
    """A fractional number as both writers spell it alike, else a refusal: JavaScript never
    writes ``2.0`` (it writes ``2``) and spells exponents its own way (``1e-7``, not
    ``1e-07``), so a number in such a form did not come from DSH's writer, and ours would
    not reproduce what DSH would make of it."""
    value = float(text)
    if "e" in text or "E" in text or value.is_integer() or repr(value) != text:
        raise storage.Refusal(
            f"it holds the number {text}, which DSH's writer would spell otherwise"
        )
    return value


def parse(path: Path, data: bytes) -> Registry:
    """The registry a file's bytes hold, checked by DSH's rules (§1.3, §1.4.2) and our own
    writer's (§1.4.6: re-serialised unchanged it must give the very bytes read)."""
    try:
        doc = json.loads(data, parse_constant=_no_constant, parse_float=_js_float)
    except (UnicodeDecodeError, ValueError) as exc:
        return Registry(path, "refused", f"it is not valid JSON ({exc})", dsh_refuses=True)
    except storage.Refusal as exc:
        return Registry(path, "refused", str(exc), dsh_refuses=exc.dsh)
    if not isinstance(doc, dict):
        return Registry(path, "refused", "it is not a JSON object", dsh_refuses=True)
    unit = doc.get("unit")
    if not isinstance(unit, dict) or unit.get("name") != UNIT_NAME:
        name = unit.get("name") if isinstance(unit, dict) else None
        reason = f"its unit is {name!r}, not {UNIT_NAME!r}"
        return Registry(path, "refused", reason, dsh_refuses=True)
    if unit.get("version") != UNIT_VERSION or isinstance(unit.get("version"), bool):
        reason = f"its unit version is {unit.get('version')!r}, not {UNIT_VERSION}"
        return Registry(path, "refused", reason, dsh_refuses=True)
    glob = doc.get("global")
    glob = glob if isinstance(glob, dict) else {}
    registry = Registry(path, "ready")
    try:
        _fill(registry, doc, glob)
    except storage.Refusal as exc:
        registry.state, registry.reason = "refused", str(exc)
        registry.dsh_refuses = exc.dsh
        return registry
    if glob.get("initialized") is not True:
        registry.state = "uninitialised"
        registry.reason = "it is not initialised yet (DSH sorts sessions on its first start)"
        return registry
    problem = broken_rule(registry, glob)
    if problem is not None:
        registry.state, registry.reason = "refused", f"DSH would refuse it: {problem}"
        registry.dsh_refuses = True
        return registry
    if "pendingMutation" in glob:
        registry.state = "refused"
        registry.reason = "it holds a pendingMutation (DSH was creating or deleting a workspace)"
        return registry
    if not reproduces(doc, data):
        registry.state = "refused"
        registry.reason = (
            "re-written unchanged it would not be the same bytes (a number, escape or layout "
            "DSH's writer spells differently), so it is not rewritten"
        )
        return registry
    registry.doc = doc
    return registry


def _fill(registry: Registry, doc: dict[str, Any], glob: dict[str, Any]) -> None:
    """Records, listings and the archived/pinned sets, in ``workspaceIds`` order first."""
    tables = doc.get("tables", {})
    table = tables.get("workspaces", {}) if isinstance(tables, dict) else None
    if not isinstance(table, dict):
        raise storage.Refusal("its tables.workspaces is not an object", dsh=True)
    order = glob.get("workspaceIds", [])
    if not isinstance(order, list):
        raise storage.Refusal("its global.workspaceIds is not a list", dsh=True)
    ranked = [i for i in order if isinstance(i, str) and i in table]
    first = set(ranked)
    ranked += [i for i in table if i not in first]
    for record_id in dict.fromkeys(ranked):
        registry.records.append(_record(record_id, table[record_id]))
    for record in registry.records:
        registry._by_path.setdefault(record.path, record)
        for session_id in record.session_ids:
            registry._listing.setdefault(session_id, record)
    registry.archived_ids = frozenset(_ids(glob, "archivedSessionIds"))
    registry.pinned_ids = frozenset(_ids(glob, "pinnedSessionIds"))


def _record(record_id: str, value: Any) -> Record:
    if not isinstance(value, dict):
        raise storage.Refusal(f"its workspace {record_id} is not an object", dsh=True)
    for key in ("path", "title", "createdAt", "updatedAt"):
        if not isinstance(value.get(key), str):
            raise storage.Refusal(f"its workspace {record_id} has no string {key!r}", dsh=True)
    ids = value.get("sessionIds")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise storage.Refusal(f"its workspace {record_id} has no list of sessionIds", dsh=True)
    return Record(record_id, value["path"], value["title"], tuple(ids))


def _ids(glob: dict[str, Any], key: str) -> list[str]:
    value = glob.get(key, [])
    return [i for i in value if isinstance(i, str)] if isinstance(value, list) else []


def broken_rule(registry: Registry, glob: dict[str, Any]) -> str | None:
    """The first rule of §1.3 an initialised registry breaks (what makes DSH refuse to start
    its workspace feature), or None."""
    owners: dict[str, str] = {}
    for record in registry.records:
        for session_id in dict.fromkeys(record.session_ids):
            other = owners.setdefault(session_id, record.id)
            if other != record.id:
                return f"session {session_id} is listed by two workspaces ({other}, {record.id})"
    paths: dict[str, str] = {}
    for record in registry.records:
        other = paths.setdefault(record.path, record.id)
        if other != record.id:
            return f"two workspaces ({other}, {record.id}) have the path {record.path}"
    order = glob.get("workspaceIds", [])
    known = {r.id for r in registry.records}
    seen: set[str] = set()
    for record_id in order:
        if record_id in seen:
            return f"workspaceIds repeats {record_id}"
        if record_id not in known:
            return f"workspaceIds names {record_id}, which no workspace record has"
        seen.add(record_id)
    missing = known - seen
    if missing:
        return f"workspace {min(missing)} is missing from workspaceIds"
    pending = glob.get("pendingMutation")
    if isinstance(pending, dict) and pending.get("workspaceId") in seen:
        return f"a pendingMutation names workspace {pending.get('workspaceId')}, still listed"
    return None


def load(home: Path) -> Registry:
    """The registry of ``home`` as it is now, read without a lock (lookups, dry runs)."""
    real_cwd.cache_clear()  # directories may have come or gone since a previous read
    path = registry_path(home)
    try:
        held = storage.open_dirs(home)
        if held is None:
            return _missing(path)
        try:
            read = storage.read(held, FILE_NAME, MAX_BYTES)
        finally:
            held.close()
    except storage.Refusal as exc:
        return Registry(path, "refused", str(exc))
    except (DshForkError, OSError) as exc:
        return Registry(path, "refused", f"it cannot be read ({_why(exc)})")
    return _missing(path) if read is None else parse(path, read[0])


def _missing(path: Path) -> Registry:
    return Registry(path, "missing", "there is none (DSH sorts sessions on its first start)")


def _why(exc: BaseException) -> str:
    if isinstance(exc, DshForkError):
        return exc.message
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


# -- editing (§1.4.5, §1.4.6) -----------------------------------------------------------------


class Edit(Struct, frozen=True):
    """What one ``edit`` did: the registry as read under the lock, the changes ``decide``
    named, the records they changed, and whether the file was written (if not: ``reason``)."""

    registry: Registry
    changes: list[Change]
    changed: list[str]
    written: bool
    reason: str | None


Decide = Callable[[Registry], Iterable[Change]]


def apply(doc: dict[str, Any], changes: Iterable[Change], now: str) -> list[str]:
    """Apply ``changes`` to the parsed file in place (§1.4.5): the id is removed from every
    record but its target and prepended to the target's ``sessionIds`` (not moved when it
    is already there); each record changed gets ``updatedAt`` = ``now``. Every other key,
    and the key order, stays. Returns the ids of the records changed, in file order, and
    ``GLOBAL`` last when a global list changed (``Change.lists``)."""
    tables = doc.get("tables")
    table: dict[str, dict[str, Any]] = tables.get("workspaces", {}) if tables else {}
    changed: set[str] = set()
    found = doc.get("global")
    glob: dict[str, Any] = found if isinstance(found, dict) else {}
    lists_changed = False
    for change in changes:
        for key, wanted in change.lists:
            held = glob.get(key)
            if wanted and isinstance(found, dict) and change.session not in (held or ()):
                glob[key] = [*(held if isinstance(held, list) else ()), change.session]
                lists_changed = True
            elif not wanted and isinstance(held, list) and change.session in held:
                glob[key] = [i for i in held if i != change.session]
                lists_changed = True
        for record_id, record in table.items():
            ids: list[str] = record["sessionIds"]
            if record_id == change.target:
                if change.session not in ids:
                    ids.insert(0, change.session)
                    changed.add(record_id)
            elif change.session in ids:
                record["sessionIds"] = [i for i in ids if i != change.session]
                changed.add(record_id)
    for record_id in changed:
        table[record_id]["updatedAt"] = now
    return [r for r in table if r in changed] + ([GLOBAL] if lists_changed else [])


def edit(home: Path, decide: Decide, now_ms: int) -> Edit:
    """Read the registry under the storages dir's lock, apply what ``decide`` names on what
    was read, and replace the file in one write, the lock held until the rename (two runs
    never lose each other's edit). Nothing is written when the registry is not ``ready``,
    when nothing changes, or when the file changed since it was read (DSH takes no lock)."""
    real_cwd.cache_clear()
    path = registry_path(home)
    try:
        held = storage.open_dirs(home)
    except (DshForkError, OSError) as exc:
        return _unwritten(Registry(path, "refused", f"it cannot be read ({_why(exc)})"))
    if held is None:
        return _unwritten(_missing(path))
    try:
        return _edit_held(held, path, decide, now_ms)
    finally:
        held.close()  # closing the storages dir's descriptor releases the lock


def _edit_held(held: storage.Held, path: Path, decide: Decide, now_ms: int) -> Edit:
    try:
        storage.lock(held.storages)
        read = storage.read(held, FILE_NAME, MAX_BYTES)
    except storage.Refusal as exc:
        return _unwritten(Registry(path, "refused", str(exc)))
    except (DshForkError, OSError) as exc:
        return _unwritten(Registry(path, "refused", f"it cannot be read ({_why(exc)})"))
    if read is None:
        return _unwritten(_missing(path))
    data, st = read
    registry = parse(path, data)
    if not registry.ready:
        return _unwritten(registry)
    changes = list(decide(registry))
    assert registry.doc is not None
    changed = apply(registry.doc, changes, iso_ms(now_ms) or "")
    if not changed:
        return Edit(registry, changes, [], False, None)
    problem = _recheck(path, registry.doc)
    if problem is not None:  # never write what DSH would refuse (by construction: a defect)
        return Edit(registry, changes, [], False, f"the edit would break a rule: {problem}")
    try:
        storage.replace(held, FILE_NAME, chunks(registry.doc), st)
    except storage.Refusal as exc:
        return Edit(registry, changes, [], False, str(exc))
    except (DshForkError, OSError) as exc:
        return Edit(registry, changes, [], False, f"it could not be written ({_why(exc)})")
    return Edit(registry, changes, changed, True, None)


def _recheck(path: Path, doc: dict[str, Any]) -> str | None:
    """The rule of §1.3 the edited document would break, if any (never, by construction)."""
    edited = Registry(path, "ready")
    try:
        _fill(edited, doc, doc["global"])
    except storage.Refusal as exc:
        return str(exc)
    return broken_rule(edited, doc["global"])


def _unwritten(registry: Registry) -> Edit:
    return Edit(registry, [], [], False, registry.reason)
