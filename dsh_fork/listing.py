"""``list``: the sessions of a root, one row each, so nobody has to ``ls`` the dirs of a root.

A row needs the header (id, kind, cwd, lineage) and two facts of the log: its title and its
completed turns. Filters on the project, the kind and the last activity are applied before
any log is decoded, so a narrow listing of a large root reads only the logs it shows.

By default a listing shows what people look for: the conversations (``CONVERSATIONS``: roots,
forks, linked sessions), each with the subagents and copies under it counted (``_owners``),
and every session that cannot be read or belongs to no conversation — never hidden. ``all``
(or a ``kinds`` filter) lists every session.
"""

from __future__ import annotations

import os
from operator import attrgetter
from typing import Any, ClassVar, Literal

import msgspec
from msgspec import Struct, field

from . import registry
from . import rootdocs as docs
from .discovery import Root
from .errors import DshForkError, Partial, UsageError
from .kinds import HEADER_KINDS, HeaderKind, KindRule, header_kind
from .layout import is_absolute_cwd, project_key
from .leanlog import ROW_TYPES, glance, label_of
from .model import derive
from .progress import SILENT
from .reader import open_log
from .results import Documented, rows
from .sessionentry import SessionEntry
from .times import iso_ms

KINDS = HEADER_KINDS
CONVERSATIONS: frozenset[str | None] = frozenset(("root", "fork", "linked"))
"""The kinds a person talks to; subagents and copies are counted under theirs."""
AGENT_KINDS = ("subagent", "copy")


SessionRow = docs.ListRow
"""One session of the root: the document's row itself, made once in ``_row``; ``error`` names
why its log could not be read. It holds its times' ISO texts as None: ``_dated`` sets them
only in the copy the document is written from, so 100,000 held rows hold no texts."""


def _dated(row: SessionRow) -> SessionRow:
    """The row as ``--json`` prints it: its times' ISO texts set."""
    return msgspec.structs.replace(
        row,
        created_at_iso=iso_ms(row.created_at),
        last_activity_iso=iso_ms(row.last_activity),
    )


class SessionList(Documented, Struct):
    """The rows of a root, newest activity first, and the filters that chose them."""

    root: str
    rows: list[SessionRow]
    total: int
    filters: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    everything: bool = True
    """Every session is a row (``--all`` or ``--kind``), else the conversations."""
    workspaces: bool = False
    """Whether the root's home has a workspace registry to show (a column of its own)."""
    schema_version: ClassVar[Literal[3]] = 3
    """2: the kind ``linked`` (a session naming a parent that is neither a fork nor a
    subagent, once listed as a fork), and no kind (null) for a header that cannot be read.
    3: by default the conversations only (``all`` false), each row with ``label``,
    ``subagents``, ``copies``, ``bytes`` and ``agentBytes``."""

    def partial(self) -> Partial | None:
        """A session whose log cannot be read is a row with its error, never a failure."""
        return None

    def to_document(self) -> docs.ListDocument:
        return docs.ListDocument(
            schema_version=self.schema_version,
            root=self.root,
            total=self.total,
            all=self.everything,
            filters=msgspec.convert(self.filters, docs.ListFilters),
            sessions=rows(self.rows, _dated),
        )


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
    return project_matches(entry.project, project)


def project_matches(project_dir: str, project: str) -> bool:
    """``--project`` is a project dir name or an absolute cwd (its project dir)."""
    if project_dir == project:
        return True
    return is_absolute_cwd(project) and project_dir == project_key(project)


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
    everything: bool = False,
    workspace: str | None = None,
) -> SessionList:
    """The sessions of ``root`` that pass the filters: the conversations and the sessions no
    conversation holds, or, with ``everything`` or ``kinds``, every session; each with its
    workspace when the root's home has DSH's registry (``workspace`` keeps the sessions the
    workspace of that title, or path, lists). The root's listing is released once the rows
    hold what they show (``Root.invalidate``): a later question of ``root`` lists it again."""
    for wanted in kinds or ():
        if wanted not in KINDS:
            raise UsageError(f"unknown kind {wanted!r}; choose from {', '.join(KINDS)}")
    everything = everything or bool(kinds)
    # Every log is read in the listing's own read when no filter narrows it (a filtered
    # listing reads headers only, then the logs it shows); by default a subagent's log is
    # not folded there: its row is rarely shown (``_owners``).
    reg = registry.load(registry.home_of(root.path))
    listed = None if workspace is None else _listed_by(reg, workspace)
    whole = project is None and not kinds and since is None and listed is None
    # the dirs that cannot be listed too (no permission, a link): rows naming their error
    entries = [*root.entries(glance=whole, sizes=True, agents=everything), *root.unlisted()]
    total = len(entries)
    rule = KindRule(root)
    progress = root.progress or SILENT
    progress.stage("kinds settled", total)  # a fork's kind may need its parent's log
    # One pass settles each kind and, while the header is parsed, makes the row of each
    # session shown whose facts the listing's read folded; then the entry sheds its header
    # line and facts. So a root's parsed headers, or header lines beside their rows, are
    # never all held at once. A row that needs its log read waits for the "rows read" stage,
    # as does a subagent or copy: shown only when no conversation holds it.
    kinds_of: list[HeaderKind | None] = []
    rows: list[SessionRow] = []
    later: list[int] = []
    strings: dict[str, str] = {}  # one string per project dir and cwd, whatever the rows
    for index, entry in enumerate(entries):
        kind = kind_of(entry, rule)
        kinds_of.append(kind)
        if _wanted(entry, kind, project, listed, kinds):
            if not everything and kind in AGENT_KINDS and entry.id is not None:
                later.append(index)  # nearly always held: its header is read again if not
            elif entry.glanced or entry.header is None:  # its facts are in hand
                row = _row(entry, kind, since, strings)
                if row is not None:
                    rows.append(row)
            else:
                later.append(index)
                entry.forget()
                progress.advance()
                continue
        entry.shed()
        progress.advance()
    owners = _owners(entries, kinds_of)
    counted: dict[str, list[int]] = {}  # conversation id: [subagents, copies, bytes]
    direct: dict[str, list[int]] = {}  # parent id: [forks, agents], by the one rule
    for entry, kind in zip(entries, kinds_of, strict=True):
        parent = entry.parent
        if parent is not None and (kind in ("fork", "subagent", "copy") or entry.is_subagent):
            direct.setdefault(parent, [0, 0])[0 if kind == "fork" else 1] += 1
        owner = owners.get(entry.id) if kind in AGENT_KINDS and entry.id is not None else None
        if owner is not None:
            tally = counted.setdefault(owner, [0, 0, 0])
            tally[0 if kind == "subagent" else 1] += 1
            tally[2] += 0 if entry.sizes is None else entry.sizes[0]
    # what a row needs is in the rows: the listing's entries go (a root of 100,000 sessions
    # would hold both); the subagents no conversation holds keep theirs until their row
    pending = [
        (entries[i], kinds_of[i])
        for i in later
        if everything or kinds_of[i] not in AGENT_KINDS or _unheld(entries[i], owners)
    ]
    root.invalidate()
    del entries, kinds_of, owners, later
    progress.stage("rows read", len(rows) + len(pending))
    progress.advance(len(rows))
    while pending:  # (the rows are sorted below) each entry goes once its row is made
        entry, kind = pending.pop()
        row = _row(entry, kind, since, strings)
        if row is not None:
            rows.append(row)
        progress.advance()
    del pending
    warnings: list[str] = []
    for row in rows:
        subagents, copies, agent_bytes = counted.get(row.id, (0, 0, 0))
        row.subagents, row.copies, row.agent_bytes = subagents, copies, agent_bytes
        row.forks, row.agents = direct.get(row.id, (0, 0))  # a delegation child is no fork
    unreadable = [row for row in rows if row.error is not None]
    if unreadable:
        warnings.append(
            f"{len(unreadable)} sessions could not be read (their rows name the error; "
            "`dsh-fork doctor` says more)"
        )
    if reg.present:
        for row in rows:
            row.workspace = reg.placement(row.id, row.cwd)
            row.archived, row.pinned = reg.archived(row.id), reg.pinned(row.id)
    if reg.state == "refused":
        warnings.append(f"the workspace registry {reg.path} is not used: {reg.reason}")
    # newest activity first, then by id, then by dir (an id in two project dirs): stable
    # sorts on C key getters, no tuple per row
    rows.sort(key=attrgetter("path"))
    rows.sort(key=attrgetter("id"))
    rows.sort(key=attrgetter("last_activity"), reverse=True)
    filters = {"project": project, "kinds": kinds or None, "since": since}
    if workspace is not None:
        filters["workspace"] = workspace
    listing = SessionList(str(root.path), rows, total, filters, warnings, everything)
    listing.workspaces = reg.present
    return listing


def _unheld(entry: SessionEntry, owners: dict[str, str | None]) -> bool:
    """Whether no conversation holds the session (a subagent or copy is counted in its
    conversation's row, not shown): any session but a held subagent or copy."""
    return entry.id is None or owners.get(entry.id) is None


def _wanted(
    entry: SessionEntry,
    kind: HeaderKind | None,
    project: str | None,
    listed: set[str] | None,
    kinds: list[str] | None,
) -> bool:
    """Whether the filters that need no log keep the session (``--since`` needs its log)."""
    if project is not None and not _matches_project(entry, project):
        return False
    if listed is not None and entry.id not in listed:
        return False
    return not kinds or kind in kinds


def _listed_by(reg: registry.Registry, name: str) -> set[str]:
    """``--workspace NAME``: the ids listed by the workspaces titled NAME (or whose path is
    NAME); a name no workspace has is refused with the names there are."""
    if not reg.present:
        raise UsageError(f"--workspace {name}: the workspace registry {reg.path}: {reg.reason}")
    records = reg.by_name(name)
    if not records:
        titles = ", ".join(sorted({r.title for r in reg.records}))
        raise UsageError(f"no workspace is titled {name!r} or has that path; titles: {titles}")
    return {session for record in records for session in record.session_ids}


def _owners(
    entries: list[SessionEntry], kinds_of: list[HeaderKind | None]
) -> dict[str, str | None]:
    """The conversation each subagent and copy is counted under: the first session up its
    chain of parents that is a conversation, reached through subagents and copies only. A
    chain that ends at a missing parent, an unreadable one, or in a cycle has none (None:
    its sessions are then rows of their own). Iterative, so a chain of any depth is walked.
    One dict of the root's ids, and one of its subagents and copies: a root of 100,000
    sessions holds them beside its rows."""
    nodes: dict[str, str | bool] = {}  # a subagent or copy: its parent; else: a conversation?
    for entry, kind in zip(entries, kinds_of, strict=True):
        ident = entry.id
        if ident is not None and ident not in nodes:
            parent = entry.parent
            if kind in AGENT_KINDS and parent is not None:
                nodes[ident] = parent
            else:
                nodes[ident] = kind in CONVERSATIONS
    owners: dict[str, str | None] = {}
    for start, up in nodes.items():
        if not isinstance(up, str) or start in owners:
            continue
        chain: list[str] = []
        seen: set[str] = set()
        node = start
        owner: str | None = None
        while node not in seen:
            if node in owners:
                owner = owners[node]
                break
            above = nodes.get(node)
            if above is None or above is False:
                break  # a missing or unreadable parent: no conversation holds the chain
            if above is True:
                owner = node
                break
            seen.add(node)
            chain.append(node)
            node = above
        for member in chain:
            owners[member] = owner
    return owners


def _row(
    entry: SessionEntry, kind: HeaderKind | None, since: int | None, strings: dict[str, str]
) -> SessionRow | None:
    """A row: the header's fields, and the title and turns from the lean read of the log
    (``leanlog.glance``), or from the full read when the log is not of the plain shape;
    None when the log's last activity is before ``since``. ``strings`` gives one string
    object per project dir and cwd, shared by every row that shows it."""
    last = None
    if since is not None:
        last = _mtime_ms(entry)
        if last < since:
            return None
    header = entry.header
    where = entry.dir_text
    sizes = entry.sizes
    project = entry.project
    cwd = None if header is None else header.cwd
    row = SessionRow(
        id=entry.id_or_dir,
        kind=kind,
        title=None,
        project=strings.setdefault(project, project),
        path=where,
        cwd=None if cwd is None else strings.setdefault(cwd, cwd),
        parent_session=entry.parent,
        created_at=None if header is None else header.created_at,
        created_at_iso=None,
        turns=None,
        last_activity=0 if last is None else last,
        last_activity_iso=None,
        forks=0,
        agents=0,
        label=None,
        subagents=0,
        copies=0,
        bytes=None if sizes is None else sizes[0],
        agent_bytes=0,
        error=None,
        workspace=None,
        archived=False,
        pinned=False,
    )
    error = entry.error
    path = entry.log_path
    if error is None and path is not None and header is not None:
        seen = entry.glance if entry.glanced else glance(path, header)
        if seen is not None:
            row.title, row.turns, row.label = seen.title, seen.turns, seen.label
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
            row.label = label_of(facts)
        except DshForkError as exc:
            error = exc
        except OSError as exc:
            row.error = docs.RowError("IO_ERROR", f"{generation.path}: {exc.strerror}")
    elif last is None:
        row.last_activity = _mtime_ms(entry)
    if error is not None:
        row.error = docs.RowError(error.code, error.message)
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
