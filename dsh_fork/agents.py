"""list-agents: a session's subagent tree, on disk and in the panel side by side (semantics §5).

DSH's panel shows only the parent's own-range catalog facts; the subagent sessions on disk name
their parent in their header. The two views drift apart (uncatalogued copies of old forks,
deleted children), so both are shown and every difference is flagged. Only the header frames of
the root are read to find children; only children's logs are opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct, field

from . import sessiondocs as docs
from .catalog import fact_from_descriptor
from .discovery import Root
from .errors import CorruptLog, DshForkError, Partial, UnsupportedFormat
from .generations import SUPPORTED_VERSION
from .kinds import KindRule
from .locking import running as is_running
from .model import MODEL_TYPES, CatalogEntry, Facts, facts_of
from .provenance import Logged, match_copies
from .reader import open_log
from .records import Header, nonneg_int
from .results import SCHEMA_VERSION, Documented
from .sessionarg import Located, locate
from .sessionentry import SessionEntry
from .times import iso_ms

ON_DISK_NOT_CATALOGUED = "on disk, not catalogued"
CATALOGUED_BY_MIGRATION = "catalogued by DSH's v4 migration"
CATALOGUED_MISSING = "catalogued, missing on disk"
UNREADABLE = "unreadable"
CATALOGUED_OTHER_PARENT = "catalogued, other parent"
CATALOGUED_NOT_SUBAGENT = "catalogued, not a subagent"
CREATED_AT_DIFFERS = "createdAt differs"
NO_OWN_DESCRIPTOR = "no own descriptor"
CORRUPT = "corrupt"
CYCLE = "cycle"
PARENT_MISSING = "parent missing"


AgentRow = docs.AgentRow
"""One subagent as both views see it, the document's row itself; ``children`` only with
``--recursive``. Its ``created_at`` is settled field by field as the views are read, so its
ISO text is set where the document is made (``row_document``)."""


def new_row(child_id: str, on_disk: bool, in_panel: bool) -> AgentRow:
    """A row with nothing known yet but where it is seen."""
    return AgentRow(
        id=child_id,
        label=None,
        mode=None,
        provider=None,
        model=None,
        created_at=None,
        created_at_iso=None,
        turns=None,
        status=None,
        on_disk=on_disk,
        in_panel=in_panel,
        copy_of=None,
        flags=[],
        children=[],
    )


def row_document(row: AgentRow) -> AgentRow:
    """The row alone, as a document prints it: its ISO time set, its ``children`` left to
    ``rows_document``."""
    return msgspec.structs.replace(row, created_at_iso=iso_ms(row.created_at), children=[])


MAX_JSON_LEVELS = 64
"""Deepest level of rows nested in a list-agents document; see ``rows_document``."""


def rows_document(rows: list[AgentRow]) -> list[docs.AgentRow]:
    """``to_document`` of ``rows`` and of every row below them, built without recursion and
    nested down to ``MAX_JSON_LEVELS``: a row deeper than that is a child of the row at that
    level, in order, with its ``depth`` (1 for the session's own subagents), so the order and
    the depths still give the tree, and a chain of 10,000 subagents is a document any JSON
    parser reads (Python's stops near 1,000 levels, orjson at 1,024)."""
    out: list[docs.AgentRow] = []
    levels: list[docs.AgentRow] = []  # the latest row of each level, down to the cap
    stack = [(row, 1) for row in reversed(rows)]
    while stack:
        row, depth = stack.pop()
        made = row_document(row)
        if depth > MAX_JSON_LEVELS:
            made.depth = depth
        level = min(depth, MAX_JSON_LEVELS + 1)
        (out if level == 1 else levels[level - 2].children).append(made)
        if depth <= MAX_JSON_LEVELS:
            del levels[depth - 1 :]
            levels.append(made)
        stack.extend((child, depth + 1) for child in reversed(row.children))
    return out


class AgentTree(Documented, Struct):
    """The subagents of one session, its fork children, and flags about the session itself."""

    session: str
    children: list[AgentRow]
    forks: list[docs.ForkRef]
    flags: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_document(self) -> docs.ListAgentsDocument:
        return docs.ListAgentsDocument(
            schema_version=SCHEMA_VERSION,
            session=self.session,
            flags=self.flags,
            children=rows_document(self.children),
            forks=self.forks,
        )

    def partial(self) -> Partial | None:
        """Listing never fails part-way: a child it cannot read is a row with a flag."""
        return None


class _Child(Struct):
    """A row with the log behind it, kept for provenance and recursion."""

    row: AgentRow
    entry: SessionEntry | None
    header: Header | None = None
    facts: Facts | None = None
    logged: Logged | None = None


def _text(data: Any, key: str) -> str | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


class _Lister:
    def __init__(self, root: Root, recursive: bool) -> None:
        self.root = root
        self.recursive = recursive
        self.visited: set[str] = set()

    def rows(
        self, parent: Header, facts: Facts, source_parent: str | None, where: _Where
    ) -> list[_Child]:
        """The union of ``parent``'s children on disk and its own-range catalog (§5.1).

        A parent below v4 has no catalog yet: DSH's migration appends a fact for each child in
        the parent's own project dir (format §10.5.6), so those are what its panel will show.
        """
        panel: dict[str, CatalogEntry] = {}
        for own in facts.own_catalog():
            if own.child_id is not None:
                panel.setdefault(own.child_id, own)
        children: list[_Child] = []
        on_disk: set[str] = set()
        for entry in self.root.children_of(parent.id):
            child_id = entry.id_or_dir
            on_disk.add(child_id)
            stated = panel.get(child_id)
            migrated = (
                stated is None
                and where.version < SUPPORTED_VERSION
                and entry.header is not None
                and entry.session_dir.parent == where.project_dir
            )
            row = new_row(child_id, True, stated is not None or migrated)
            child = self._child(row, entry, stated)
            if migrated:
                _migration_fact(child)
            elif stated is None:
                child.row.flags.insert(0, ON_DISK_NOT_CATALOGUED)
            children.append(child)
        for child_id, fact in panel.items():
            if child_id in on_disk:
                continue
            found = self.root.entry(child_id)
            row = new_row(child_id, False, True)
            if found is None:
                refusal = self.root.refusal(child_id)
                if refusal is None:
                    row.flags.append(CATALOGUED_MISSING)
                else:  # on disk, but its dir or log cannot be read: named, not "missing"
                    row.on_disk = True
                    row.flags.append(f"{UNREADABLE}: {refusal.message}")
                self._from_fact(row, fact)
                children.append(_Child(row, None))
                continue
            elsewhere = CATALOGUED_NOT_SUBAGENT if found.parent == parent.id else None
            row.flags.append(elsewhere or CATALOGUED_OTHER_PARENT)
            children.append(self._child(row, found, fact))
        self._provenance(children, source_parent)
        children.sort(key=lambda c: (c.row.created_at or 0, c.row.id))
        return children

    def tree(
        self, parent: Header, facts: Facts, source_parent: str | None, where: _Where
    ) -> list[AgentRow]:
        """``rows`` of ``parent`` and, with ``recursive``, of every child below, depth first
        in the order of the rows (each child's subtree before its next sibling), with a
        stack instead of recursion: a 10,000-deep chain of subagents is listed whole."""
        top = self.rows(parent, facts, source_parent, where)
        stack = list(reversed(top))
        while stack:
            child = stack.pop()
            below = self._descend(child)
            stack.extend(reversed(below))
        return [child.row for child in top]

    def _child(self, row: AgentRow, entry: SessionEntry, fact: CatalogEntry | None) -> _Child:
        child = _Child(row, entry)
        running = is_running(entry.session_dir)
        error = entry.error
        generation = entry.generation
        if error is None and generation is not None:
            try:
                log = open_log(generation, collect=MODEL_TYPES)
            except DshForkError as exc:
                error = exc
            except OSError as exc:
                error = CorruptLog(f"{generation.path}: unreadable ({exc.strerror})")
            else:
                child.header = log.header
                child.facts = facts_of(log)
                child.logged = Logged(row.id, log, child.facts)
        if error is not None or child.header is None or child.facts is None:
            row.flags.append(_error_flag(error, entry))
            row.created_at = entry.created_at or None
            row.status = "running" if running else None
            self._from_fact(row, fact)
            return child
        header, facts = child.header, child.facts
        own = facts.own_descriptors()
        descriptor = facts.descriptor()
        if own:
            data = own[0][1]
            row.label = _text(data, "label")
            row.mode = "continuable" if _version(data) == 1 else _text(data, "mode")
        else:
            row.flags.append(NO_OWN_DESCRIPTOR)
            self._from_fact(row, fact)
        provider, model = facts.provider_model
        described = None if descriptor is None else descriptor.data
        row.provider = provider or _text(described, "agentProvider")
        row.model = model or _text(described, "agentModel")
        row.created_at = header.created_at
        if fact is not None:
            stated = nonneg_int(fact.data.get("childCreatedAt"))
            if stated is not None and stated != header.created_at:
                row.flags.append(CREATED_AT_DIFFERS)
        row.turns = len(facts.turn_ends)
        if running:
            row.status = "running"
        else:
            row.status = "open turn" if facts.open_turn is not None else "idle"
        return child

    @staticmethod
    def _from_fact(row: AgentRow, fact: CatalogEntry | None) -> None:
        if fact is None:
            return
        row.label = row.label or _text(fact.data, "label")
        row.mode = row.mode or _text(fact.data, "mode")
        if row.created_at is None:
            row.created_at = nonneg_int(fact.data.get("childCreatedAt"))

    def _provenance(self, children: list[_Child], source_parent: str | None) -> None:
        """copy-of: which child of the source parent each seeded row is a copy of (§4.3)."""
        copies = [c.logged for c in children if c.row.on_disk and c.logged is not None]
        copies = [c for c in copies if c.log.header.is_seeded]
        if source_parent is None or not copies:
            return
        candidates: list[Logged] = []
        for entry in self.root.children_of(source_parent):
            generation = entry.generation
            if entry.error is not None or entry.id is None or generation is None:
                continue
            try:
                log = open_log(generation, collect=MODEL_TYPES)
            except (DshForkError, OSError):
                continue
            candidates.append(Logged(entry.id, log, facts_of(log)))
        matches = match_copies(copies, candidates)
        for child in children:
            child.row.copy_of = matches.get(child.row.id)

    def _descend(self, child: _Child) -> list[_Child]:
        """The children of ``child`` to descend into next (none: a leaf, a cycle, or not
        ``recursive``); their rows are ``child``'s row's children."""
        row = child.row
        if not row.on_disk or child.header is None or child.facts is None:
            return []
        if row.id in self.visited:
            row.flags.append(CYCLE)
            return []
        if not self.recursive:
            return []
        self.visited.add(row.id)
        assert child.entry is not None and child.entry.generation is not None
        where = _Where(child.entry.generation.version, child.entry.session_dir.parent)
        below = self.rows(child.header, child.facts, row.copy_of, where)
        row.children = [kid.row for kid in below]
        return below


class _Where(Struct, frozen=True):
    """A parent's generation version and project dir (what DSH's migration looks at)."""

    version: int
    project_dir: Path


def _migration_fact(child: _Child) -> None:
    """The row as the fact DSH's migration appends shows it: version 0 from the child's single
    valid own descriptor, else version 1 with mode ``unknown`` (format §10.5.6)."""
    row = child.row
    row.flags.insert(0, CATALOGUED_BY_MIGRATION)
    if child.facts is None or child.header is None:
        return
    own = child.facts.own_descriptors()
    plan = fact_from_descriptor(
        own[0][1] if own else None, row.id, child.header.created_at, own_descriptors=len(own)
    )
    if plan.data is None:
        row.mode = "unknown"
    else:
        row.mode = plan.data["mode"]
        row.label = row.label or _text(plan.data, "label")


def _version(data: Any) -> int | None:
    return nonneg_int(data.get("version")) if isinstance(data, dict) else None


def _error_flag(error: DshForkError | None, entry: SessionEntry) -> str:
    if isinstance(error, UnsupportedFormat):
        version = error.details.get("version")
        if version is None and entry.generation is not None:
            version = entry.generation.version
        return f"unsupported v{version}"
    return CORRUPT


def list_agents(located: Located, *, recursive: bool) -> AgentTree:
    """The subagent tree of the located session; its own read errors are the command's."""
    root = located.root
    log = open_log(located.generation, collect=MODEL_TYPES)
    facts = facts_of(log)
    header = log.header
    lister = _Lister(root, recursive)
    lister.visited.add(header.id)
    kinds = KindRule(root)  # forks by the one rule: a delegation child is none
    kinds.learn(header.id, facts)  # this log's catalog settles its children: not read again
    listed = root.entry(header.id)
    is_fork = header.is_fork_child and (listed is None or kinds.is_user_fork(listed))
    source_parent = header.parent_session if is_fork else None
    where = _Where(located.generation.version, located.session_dir.parent)
    rows = lister.tree(header, facts, source_parent, where)
    forks = [
        docs.ForkRef(entry.id, entry.created_at)
        for entry in root.forks_of(header.id)
        if kinds.is_user_fork(entry)
    ]
    tree = AgentTree(header.id, rows, forks, warnings=list(located.warnings))
    if header.parent_session is not None and root.entry(header.parent_session) is None:
        tree.flags.append(PARENT_MISSING)
    return tree


def list_agents_arg(
    arg: str,
    root_option: str | None,
    *,
    recursive: bool = False,
    env: Mapping[str, str] | None = None,
) -> AgentTree:
    """Resolve a SESSION argument and list its agents (the ``list-agents`` command)."""
    return list_agents(locate(arg, root_option, env), recursive=recursive)
