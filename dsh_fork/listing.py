"""``list``: the sessions of a root, one row each, so nobody has to ``ls`` the dirs of a root.

A row needs the header (id, kind, cwd, lineage) and two facts of the log: its title and its
completed turns. Filters on the project, the kind and the last activity are applied before
any log is decoded, so a narrow listing of a large root reads only the logs it shows.
"""

from __future__ import annotations

import os
from operator import attrgetter
from typing import Any

from msgspec import Struct, field

from .discovery import Root, SessionEntry
from .errors import DshForkError, Partial, UsageError
from .kinds import HEADER_KINDS, HeaderKind, KindRule, header_kind
from .layout import is_absolute_cwd, project_key
from .leanlog import ROW_TYPES, glance
from .model import derive
from .reader import open_log
from .results import rows
from .times import iso_ms

KINDS = HEADER_KINDS


class SessionRow(Struct):
    """One session of the root; ``error`` names why its log could not be read."""

    id: str
    kind: HeaderKind | None
    project: str
    path: str
    cwd: str | None
    parent: str | None
    created_at: int | None
    last_activity: int
    title: str | None = None
    turns: int | None = None
    forks: int = 0
    agents: int = 0
    error: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "project": self.project,
            "path": self.path,
            "cwd": self.cwd,
            "parentSession": self.parent,
            "createdAt": self.created_at,
            "createdAtIso": iso_ms(self.created_at),
            "turns": self.turns,
            "lastActivity": self.last_activity,
            "lastActivityIso": iso_ms(self.last_activity),
            "forks": self.forks,
            "agents": self.agents,
            "error": self.error,
        }


class SessionList(Struct):
    """The rows of a root, newest activity first, and the filters that chose them."""

    root: str
    rows: list[SessionRow]
    total: int
    filters: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    schema_version = 2
    """2: the kind ``linked`` (a session naming a parent that is neither a fork nor a
    subagent, once listed as a fork), and no kind (null) for a header that cannot be read."""

    def partial(self) -> Partial | None:
        """A session whose log cannot be read is a row with its error, never a failure."""
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "total": self.total,
            "filters": self.filters,
            "sessions": rows(self.rows, SessionRow.to_json),
        }


def kind_of(entry: SessionEntry, rule: KindRule | None = None) -> HeaderKind | None:
    """The kind by the one rule ``tree`` and ``du`` use too (``kinds``: a fork-like session
    its parent catalogues, or with its own descriptor, is a subagent); None when the header
    cannot be validated: its raw fields prove nothing (``tree`` calls such a session
    ``unreadable``). Without ``rule``, the header's kind."""
    header = entry.header
    if header is None:
        return None
    return header_kind(header) if rule is None else rule.kind(entry)


def _matches_project(entry: SessionEntry, project: str) -> bool:
    """``--project`` is a project dir name or an absolute cwd (its project dir)."""
    if entry.project == project:
        return True
    return is_absolute_cwd(project) and entry.project == project_key(project)


def _mtime_ms(entry: SessionEntry) -> int:
    if entry.glance is not None:
        return entry.glance.mtime_ms
    path = entry.log_path
    if path is None:
        return 0
    try:
        return os.stat(path).st_mtime_ns // 1_000_000
    except OSError:
        return 0


def list_sessions(
    root: Root,
    *,
    project: str | None = None,
    kinds: list[str] | None = None,
    since: int | None = None,
) -> SessionList:
    """Every session of ``root`` that passes the filters (all of them by default)."""
    for wanted in kinds or ():
        if wanted not in KINDS:
            raise UsageError(f"unknown kind {wanted!r}; choose from {', '.join(KINDS)}")
    # Unfiltered, every row's log is read: in the listing's own read. A filtered listing reads
    # headers only, then the logs of the rows it shows.
    entries = root.entries(glance=project is None and not kinds and since is None)
    rows: list[SessionRow] = []
    warnings: list[str] = []
    rule = KindRule(root)
    for entry in entries:
        if project is not None and not _matches_project(entry, project):
            continue
        kind = kind_of(entry, rule)
        if kinds and kind not in kinds:
            continue
        last = None
        if since is not None:
            last = _mtime_ms(entry)
            if last < since:
                continue
        rows.append(_row(root, entry, kind, last))
    unreadable = [row for row in rows if row.error is not None]
    if unreadable:
        warnings.append(
            f"{len(unreadable)} sessions could not be read (their rows name the error; "
            "`dsh-fork doctor` says more)"
        )
    # newest activity first, then by id: two stable sorts on C key getters, no tuple per row
    rows.sort(key=attrgetter("id"))
    rows.sort(key=attrgetter("last_activity"), reverse=True)
    filters = {"project": project, "kinds": kinds or None, "since": since}
    return SessionList(str(root.path), rows, len(entries), filters, warnings)


def _row(root: Root, entry: SessionEntry, kind: HeaderKind | None, last: int | None) -> SessionRow:
    """A row: the header's fields, and the title and turns from the lean read of the log
    (``leanlog.glance``), or from the full read when the log is not of the plain shape."""
    header = entry.header
    listed_id = entry.id
    where = entry.dir_text
    forks, agents = (0, 0) if listed_id is None else root.counts_of(listed_id)
    row = SessionRow(
        listed_id or os.path.basename(where),
        kind,
        entry.project,
        where,
        None if header is None else header.cwd,
        entry.parent,
        None if header is None else header.created_at,
        0 if last is None else last,
        None,
        None,
        forks,
        agents,
    )
    error = entry.error
    path = entry.log_path
    if error is None and path is not None and header is not None:
        seen = entry.glance if entry.glanced else glance(path, header)
        if seen is not None:
            row.title, row.turns = seen.title, seen.turns
            if last is None:
                row.last_activity = seen.mtime_ms
            return row
        if last is None:
            row.last_activity = _mtime_ms(entry)
        generation = entry.generation
        assert generation is not None
        try:
            log = open_log(generation, collect=ROW_TYPES)
            facts = derive(log.header, log.event_count, log.collected)
            row.title = facts.title
            row.turns = len(facts.turn_ends)
        except DshForkError as exc:
            error = exc
        except OSError as exc:
            row.error = {"code": "IO_ERROR", "message": f"{generation.path}: {exc.strerror}"}
    elif last is None:
        row.last_activity = _mtime_ms(entry)
    if error is not None:
        row.error = {"code": error.code, "message": error.message}
    return row


def parse_since(text: str, now_ms: int) -> int:
    """``--since``: an age (``30m``, ``2h``, ``7d``), an ISO-8601 date or time (UTC unless it
    names a zone), or epoch ms; the result is epoch ms."""
    units = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
    value = text.strip()
    if value[:-1].isdigit() and value[-1:] in units:
        return now_ms - int(value[:-1]) * units[value[-1]]
    if value.isdigit():
        return int(value)
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {text!r}: give an age (30m, 2h, 7d), an ISO-8601 date or time, or epoch ms"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
