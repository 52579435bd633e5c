"""The fork family graph of a root: who is a fork, subagent or copy of whom (``tree``).

The graph is built from header frames alone (``Root.entries``): ``parentSession``, ``origin`` and
``isSeeded`` say every edge and every kind. Logs are opened only for what a header cannot give,
and only for sessions that have relatives: the cut of a seeded session (forks and copies), the
provenance of a copy (which subagent it was copied from, semantics §4.3), titles, labels and
turn counts. A root of thousands of unrelated sessions therefore costs their header frames.
Orphans, self-parents and cycles are shown where they are, never fatal; a session whose header
cannot be read is a node of its own.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct, field

from . import rootdocs as docs
from .discovery import Root
from .errors import DshForkError
from .generations import Generation
from .kinds import KindRule, header_kind, settled_kind, unsettled
from .model import Facts, derive
from .provenance import Logged, match_copies
from .reader import open_log
from .results import SCHEMA_VERSION, Documented, Whole, rows
from .sessionarg import Located
from .sessionentry import SessionEntry
from .sessionlog import SessionLog

Kind = docs.TreeKind
KINDS: tuple[Kind, ...] = (
    "root",
    "fork",
    "subagent",
    "copy",
    "seeded-subagent",
    "linked",
    "unreadable",
)
"""``copy``: a seeded subagent matched to the session it was copied from (relink);
``seeded-subagent``: one that matches none (DSH seeds some subagents with their parent's
context itself, and a copy whose original is gone looks the same); ``linked``: a session naming
a parent that is neither a fork nor a subagent."""

FACT_TYPES = (
    "turn/start",
    "turn/end",
    "session/end-seed",
    "session/title",
    "subagent/descriptor",
    "subagent/catalog",
)
"""What a node's facts are folded from: a filtered read of its log (only these are parsed);
the catalog and descriptors also settle the kind of a fork-like child (``kinds.KindRule``)."""

PARENT_MISSING = "parent missing"
SELF_PARENT = "self-parent"
CYCLE = "cycle"
DUPLICATE_ID = "duplicate id"
TORN_TAIL = "torn tail"
PLACED_AT_TOP = frozenset((PARENT_MISSING, SELF_PARENT, CYCLE))
"""Flags of a node drawn at the top although it names a parent."""


class Node(Documented, Struct):
    """One session of the root, placed under its parent (or at the top)."""

    id: str
    path: str
    """``<project dir>/<session dir>``, unique even when an id is not."""
    kind: Kind
    parent: str | None
    created_at: int | None
    is_seeded: bool
    entry: SessionEntry | None
    """What the listing read of its dir, until the lineage is complete (``lineage``): then
    None, so a root of 100,000 sessions keeps no header line or dir text beside each node."""
    version: int | None = None
    """The chosen generation's version, read from the entry while it is at hand."""
    cut: int | None = None
    cut_turn: int | None = None
    turns: int | None = None
    open_turn: bool | None = None
    title: str | None = None
    label: str | None = None
    copy_of: str | None = None
    error: str | None = None
    flags: tuple[str, ...] = ()
    """A tuple, and ``children`` one, so that a leaf without flags, most nodes of a root,
    holds the shared empty tuple, not two empty lists."""
    children: tuple[Node, ...] = ()
    workspace: docs.Placement | None = None
    """The workspace of DSH's registry that lists it (``lineage`` with ``workspaces``), else
    None."""
    archived: bool = False
    pinned: bool = False

    @property
    def session_dir(self) -> Path:
        return self._entry().session_dir

    @property
    def generation(self) -> Generation | None:
        """The chosen generation; built only for the sessions whose log is opened."""
        return self._entry().generation

    def _entry(self) -> SessionEntry:
        """The entry, asked for only while the lineage is built (it is released after)."""
        if self.entry is None:
            raise RuntimeError(f"{self.path}: the entry was released with the lineage")
        return self.entry

    @property
    def project(self) -> str:
        return self.path.split("/", 1)[0]

    @property
    def forked_at(self) -> int | None:
        """The source seq the fork was cut after (``fork --at``): cut − 1."""
        return None if self.cut is None or self.cut < 1 else self.cut - 1

    def to_document(self) -> docs.TreeNode:
        cut = self.cut
        children = self.children
        return docs.TreeNode(
            id=self.id,
            path=self.path,
            kind=self.kind,
            parent_session=self.parent,
            created_at=self.created_at,
            is_seeded=self.is_seeded,
            version=self.version,
            cut=cut,
            forked_at=cut - 1 if cut is not None and cut >= 1 else None,
            cut_turn=self.cut_turn,
            turns=self.turns,
            open_turn=self.open_turn,
            title=self.title,
            label=self.label,
            copy_of=self.copy_of,
            error=self.error,
            flags=list(self.flags),
            children=[child.path for child in children] if children else [],
            workspace=self.workspace,
            archived=self.archived,
            pinned=self.pinned,
        )


class Edge(Documented, Struct, frozen=True):
    """``parent`` → ``child`` by header (kind = the child's kind), or copy → source."""

    source: Node
    target: Node
    kind: docs.EdgeKind

    def to_document(self) -> docs.TreeEdge:
        return docs.TreeEdge(
            from_=self.source.id,
            to=self.target.id,
            from_path=self.source.path,
            to_path=self.target.path,
            kind=self.kind,
        )


class Lineage(Whole, Struct):
    """The forest of a root (or of one family): top nodes with their descendants."""

    root: Path
    session: str | None
    tops: list[Node]
    warnings: list[str] = field(default_factory=list)

    def nodes(self) -> Iterator[Node]:
        """Every node once, depth first in display order."""
        stack = list(reversed(self.tops))
        while stack:
            node = stack.pop()
            yield node
            if node.children:
                stack.extend(reversed(node.children))

    def edges(self) -> list[Edge]:
        return _edges(list(self.nodes()))

    def counts(self) -> dict[str, int]:
        return _counts(self.nodes())

    def unreadable(self) -> list[Node]:
        return [node for node in self.nodes() if node.kind == "unreadable"]

    def to_document(self) -> docs.TreeDocument:
        nodes = list(self.nodes())
        return docs.TreeDocument(
            schema_version=SCHEMA_VERSION,
            root=str(self.root),
            session=self.session,
            counts=msgspec.convert(_counts(nodes), docs.TreeCounts),
            tops=[node.path for node in self.tops],
            nodes=rows(nodes, Node.to_document),
            edges=rows(_edges(nodes), Edge.to_document),
            unreadable=[docs.Unreadable(n.path, n.error) for n in nodes if n.kind == "unreadable"],
        )


def _counts(nodes: Iterable[Node]) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(KINDS, 0)
    for node in nodes:
        counts[node.kind] += 1
    return counts


def _edges(nodes: list[Node]) -> list[Edge]:
    """Parent → child edges in display order, then copy → original edges."""
    out = [Edge(node, child, child.kind) for node in nodes for child in node.children]
    copies = [node for node in nodes if node.copy_of]
    if copies:
        by_id = {node.id: node for node in nodes}  # a repeated id: the last one drawn
        for node in copies:
            source = by_id.get(node.copy_of or "")
            if source is not None:
                out.append(Edge(node, source, "copy-of"))
    return out


# -- building the forest --------------------------------------------------------------------


def _node(entry: SessionEntry, place: Placer | None = None) -> Node:
    """The node of a listed entry, placed in its workspace (``place``) while its header is
    parsed; the entry then sheds its header line (it keeps its dir, names, sizes, id and
    parent), except a fork-like node's, whose kind is settled from its header later."""
    dir_text = entry.dir_text  # no Path per session: most are only drawn, never opened
    head, name = dir_text.rsplit(os.sep, 1)
    path = f"{head.rsplit(os.sep, 1)[-1]}/{name}"
    header = entry.header
    if header is not None:  # a valid header says every field the raw one would
        node = Node(
            header.id,
            path,
            header_kind(header),
            header.parent_session,
            header.created_at,
            header.is_seeded,
            entry,
            entry.version,  # the chosen generation's, without building it
        )
        if place is not None:
            place(node)
        if unsettled(node.kind):
            entry.forget()  # back to its header line: ``settled_kind`` reads it again
        else:
            entry.shed()  # a header asked for again is read from the log
        return node
    error = entry.error
    created_at = entry.created_at
    unreadable = Node(
        id=entry.id or name,
        path=path,
        kind="unreadable",
        parent=entry.parent,
        created_at=created_at or None,
        is_seeded=False,
        entry=entry,
        version=entry.version,
        error=error.message if error is not None else "unreadable header",
        flags=("unreadable",),
    )
    if place is not None:
        place(unreadable)
    return unreadable


def _created(node: Node) -> int:
    return node.created_at or 0


_ORDER_KEYS: tuple[Callable[[Node], Any], ...] = (_created, attrgetter("id"), attrgetter("path"))
"""How nodes are ordered, most significant key first: oldest first, then by id, then by path."""


def _order(node: Node) -> tuple[Any, ...]:
    return tuple(key(node) for key in _ORDER_KEYS)


Placer = Callable[[Node], None]
"""Sets a node's workspace, archived and pinned state (``_placer``)."""


def build_forest(root: Root, place: Placer | None = None) -> list[Node]:
    """Every session of ``root`` placed under its parent; returns the top nodes, sorted.

    A node is at the top when it names no parent, when its parent is not in the root (flagged
    ``parent missing``), when it names itself, or when it is the first (oldest) member of a
    parent cycle (flagged ``cycle``; the edge that closes the cycle is not followed).
    """
    # the dirs that cannot be listed too (no permission, a link): named, never left out
    nodes = [_node(entry, place) for entry in [*root.entries(), *root.unlisted()]]
    for key in reversed(_ORDER_KEYS):  # stable sorts, least significant key first: in
        nodes.sort(key=key)  # ``_order`` with no tuple per node (10 ms of 100,000 nodes)
    return _place(nodes)


def _place(ordered: list[Node]) -> list[Node]:
    """``build_forest`` on nodes sorted by ``_order``: appending in that order keeps every
    list of children, and the tops, sorted."""
    by_id: dict[str, Node] = {}
    for node in ordered:
        if node.id in by_id:
            node.flags += (DUPLICATE_ID,)
        else:
            by_id[node.id] = node
    ups: dict[str, Node] = {}  # path → the node it is drawn under (a top has none)
    for node in ordered:
        parent_id = node.parent
        if parent_id is None:
            continue
        if parent_id == node.id:
            node.flags += (SELF_PARENT,)
            continue
        parent = by_id.get(parent_id)
        if parent is None:
            node.flags += (PARENT_MISSING,)
            continue
        ups[node.path] = parent
    # A node that does not reach a top by its parents lies on (or hangs off) a cycle.
    reaches: set[str] = set()
    for node in ordered:
        if node.path not in ups:
            continue
        trail: list[Node] = []
        seen: set[str] = set()
        current: Node | None = node
        while current is not None and current.path not in reaches:
            if current.path in seen:  # a cycle: its oldest member becomes a top
                loop = trail[trail.index(current) :]
                head = min(loop, key=_order)
                head.flags += (CYCLE,)
                del ups[head.path]
                reaches.add(head.path)
                break
            seen.add(current.path)
            trail.append(current)
            current = ups.get(current.path)
        reaches.update(member.path for member in trail)
    tops: list[Node] = []
    kids: dict[str, list[Node]] = {}  # parent path → its children, made a tuple at the end
    for node in ordered:
        parent = ups.get(node.path)
        if parent is None:
            tops.append(node)
        else:
            kids.setdefault(parent.path, []).append(node)
    for node in ordered:
        found = kids.pop(node.path, None)
        if found is not None:
            node.children = tuple(found)
    return tops


def _is_lonely(node: Node) -> bool:
    return node.parent is None and not node.children


def family_of(tops: list[Node], session_dir: Path) -> Node | None:
    """The top node whose tree holds the session dir."""
    target = session_dir.resolve()
    for top in tops:
        stack = [top]
        while stack:
            node = stack.pop()
            name = node.path.rsplit("/", 1)[-1]  # the dir's name, without building its Path
            if name == target.name and node.session_dir.resolve() == target:
                return top
            stack.extend(node.children)
    return None


# -- the facts logs are opened for ------------------------------------------------------------


LogHook = Callable[[Node, SessionLog], None]
"""Called once for every log opened, while it is open (``du`` measures prefixes with it)."""


class _Reader:
    """Opens each log of a family at most once: facts for the node, the log kept only for
    subagents and copies (provenance compares their prefixes) until the family is done."""

    def __init__(self, *, everyone: bool, hook: LogHook | None, kinds: KindRule) -> None:
        self.everyone = everyone
        self.hook = hook
        self.kinds = kinds
        self.kept: dict[str, Logged | None] = {}
        self.done: set[str] = set()

    def wanted(self, node: Node) -> bool:
        """Seeded nodes (their cut), every node with relatives with ``everyone``, and the
        parents of fork-like children (their catalog settles the children's kind)."""
        if node.is_seeded or (self.everyone and not _is_lonely(node)):
            return True
        return any(unsettled(child.kind) for child in node.children)

    def open(self, node: Node, *, keep: bool = False) -> Logged | None:
        """The node's log and facts (read once); ``keep`` holds it for provenance."""
        if node.path in self.kept:
            return self.kept[node.path]
        if node.path in self.done and not keep:
            return None
        logged = self._read(node)
        self.done.add(node.path)
        if keep:
            self.kept[node.path] = logged
        return logged

    def _read(self, node: Node) -> Logged | None:
        """Open the log for the facts of ``FACT_TYPES``; an unreadable log flags the node."""
        generation = node.generation
        if generation is None or node.kind == "unreadable":
            return None
        try:
            log = open_log(generation, collect=FACT_TYPES)
        except DshForkError as exc:
            node.error = exc.message
            node.flags += ("unreadable log",)
            self.kinds.learn(node.id, None)
            return None
        except OSError as exc:
            node.error = f"{generation.path}: unreadable ({exc.strerror})"
            node.flags += ("unreadable log",)
            self.kinds.learn(node.id, None)
            return None
        facts = derive(log.header, log.event_count, log.collected)
        facts.torn = log.torn
        self.kinds.learn(node.id, facts)  # handed down: the rule reads no log twice
        if node.path not in self.done:
            _apply(node, facts)
            if self.hook is not None:
                try:
                    self.hook(node, log)
                except DshForkError as exc:
                    node.error = exc.message
                    node.flags += ("unreadable log",)
        return Logged(node.id, log, facts)

    def family(self, top: Node) -> None:
        """Facts of the family's nodes and copy-of of its copies, parents before children
        (a copy's own copies are matched against its original's subagents)."""
        index = _index(top)
        queue = deque([top])
        while queue:
            node = queue.popleft()
            queue.extend(node.children)
            if self.wanted(node):
                self.open(node, keep=node.kind in ("subagent", "copy"))
            entry = node._entry()
            if unsettled(node.kind) and entry.header is not None:
                node.kind = settled_kind(entry.header, self.kinds.why(entry))
            copies = [c for c in node.children if c.kind == "copy"]
            if copies:
                self._match(node, copies, index)
        self.kept.clear()
        self.done.clear()
        self.kinds.forget()  # a family's parents are in it: no later family asks of them
        stack = [top]
        while stack:  # the paths and parsed headers the reads built are not kept
            node = stack.pop()
            node._entry().forget()
            stack.extend(node.children)

    def _match(self, node: Node, copies: list[Node], index: Mapping[str, Node]) -> None:
        candidates: list[Node] = []
        source = _source_of(node, index)
        seen: set[str] = {node.path}
        while source is not None and source.path not in seen:
            seen.add(source.path)
            candidates += [c for c in source.children if c.kind in ("subagent", "copy")]
            source = _source_of(source, index)
        if not candidates:
            return
        existing = [x for x in (self.open(c, keep=True) for c in copies) if x is not None]
        offered = [x for x in (self.open(c, keep=True) for c in candidates) if x is not None]
        by_id = {copy.id: copy for copy in copies}
        for copy_id, source_id in match_copies(existing, offered).items():
            by_id[copy_id].copy_of = source_id


def _apply(node: Node, facts: Facts) -> None:
    """What a node shows of its log's facts; the facts themselves are not kept (a root of
    100,000 sessions would hold every catalog and descriptor it read)."""
    if facts.torn is not None:
        node.flags += (TORN_TAIL,)
    cut = facts.cut
    ends = facts.turn_ends
    node.turns = len(ends)
    node.open_turn = facts.open_turn is not None
    node.title = facts.title
    descriptor = facts.descriptor()
    if descriptor is not None and isinstance(descriptor.data, dict):
        label = descriptor.data.get("label")
        node.label = label if isinstance(label, str) else None
    if node.is_seeded:
        node.cut = cut
        node.cut_turn = sum(1 for seq in ends if seq < cut)


def _enrich(
    tops: list[Node], kinds: KindRule, *, everyone: bool, hook: LogHook | None = None
) -> None:
    """Read the facts of seeded nodes (and, with ``everyone``, of every node with relatives),
    settle the kind of every fork-like node (a delegation child is a subagent) and match each
    seeded subagent to the session it was copied from, family by family."""
    reader = _Reader(everyone=everyone, hook=hook, kinds=kinds)
    for top in tops:
        if not top.children and not reader.wanted(top):  # no relatives and no log to read
            continue
        reader.family(top)
        stack = [top]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children)
            if node.kind == "copy" and node.copy_of is None:
                node.kind = "seeded-subagent"


def _source_of(node: Node, by_id: Mapping[str, Node]) -> Node | None:
    """Whose subagents a node's copies come from: a fork's parent, a copy's original."""
    if node.kind == "fork" and node.parent is not None:
        return by_id.get(node.parent)
    if node.kind == "copy" and node.copy_of is not None:
        return by_id.get(node.copy_of)
    return None


def _index(top: Node) -> dict[str, Node]:
    out: dict[str, Node] = {}
    stack = [top]
    while stack:
        node = stack.pop()
        out.setdefault(node.id, node)
        stack.extend(node.children)
    return out


# -- the command --------------------------------------------------------------------------------


Settle = Callable[[Node, Node], None]
"""Called with each node and the top of its family, parents first, while the node still has
its entry (``du`` takes each session's sizes from it)."""


def lineage(
    root: Root,
    *,
    session_dir: Path | None = None,
    session: str | None = None,
    detail: bool = True,
    hook: LogHook | None = None,
    workspaces: bool = False,
    settle: Settle | None = None,
) -> Lineage:
    """The forest of ``root``, or only the family holding ``session_dir``.

    With ``detail`` the titles, labels and turn counts of every session that has relatives
    (a parent or children) are read too; seeded sessions are always read, for their cut. A
    session without relatives is shown from its header alone, so a root of thousands of
    unrelated sessions costs their header frames. With ``workspaces`` each node's workspace,
    archived and pinned state come from the registry of the root's home.

    Once complete, the lineage keeps no entry: each node keeps what it shows, and the root's
    listing is released. A caller that settles every node (``settle``: ``du``) keeps what it needs
    of each and gets no nodes back (no tops), so nothing per session outlives its settling.
    """
    placing: list[str] = []  # a refused registry's warning
    tops = build_forest(root, _placer(root.path, placing) if workspaces else None)
    if session_dir is not None:
        family = family_of(tops, session_dir)
        tops = [] if family is None else [family]
    _enrich(tops, KindRule(root), everyone=detail, hook=hook)
    root.invalidate()  # every entry the lineage needs is held by its node, until released
    result = Lineage(root.path, session, tops)
    unreadable: list[Node] = []
    kept = settle is None
    heads = tops if kept else tops[::-1]
    for head in heads if kept else _drained(heads):
        stack = [head]
        while stack:  # display order: parents first, children in order
            node = stack.pop()
            if node.kind == "unreadable":
                unreadable.append(node)
            if settle is not None:
                settle(node, head)
            node.entry = None
            if node.children:
                stack.extend(reversed(node.children))
            if not kept:
                node.children = ()
    result.warnings = [f"unreadable session {n.path}: {n.error}" for n in unreadable]
    result.warnings += placing
    return result


def _drained(reversed_tops: list[Node]) -> Iterator[Node]:
    """The tops in order, each let go of by the list as it is handed out."""
    while reversed_tops:
        yield reversed_tops.pop()


def _placer(root: Path, warnings: list[str]) -> Placer | None:
    """What sets a node's workspace, archived and pinned state from the registry of the
    root's home (``registry``), while the node's header is at hand; None when the home has
    none (a refused registry is warned of in ``warnings``)."""
    from . import registry

    reg = registry.load(registry.home_of(root))
    if reg.state == "refused":
        warnings.append(f"the workspace registry {reg.path} is not used: {reg.reason}")
    if not reg.present:
        return None

    def place(node: Node) -> None:
        entry = node.entry
        header = None if entry is None else entry.header
        node.workspace = reg.placement(node.id, None if header is None else header.cwd)
        node.archived, node.pinned = reg.archived(node.id), reg.pinned(node.id)

    return place


def lineage_of(
    scope: Root | Located,
    *,
    session: str | None = None,
    detail: bool = True,
    hook: LogHook | None = None,
    workspaces: bool = False,
    settle: Settle | None = None,
) -> Lineage:
    """The lineage of a whole root, or of the family of a located ``session`` (the lookup's
    warnings first): what ``tree`` shows and ``du`` measures."""
    root, located = (scope, None) if isinstance(scope, Root) else (scope.root, scope)
    found = lineage(
        root,
        session_dir=None if located is None else located.session_dir,
        session=None if located is None else session,
        detail=detail,
        hook=hook,
        workspaces=workspaces,
        settle=settle,
    )
    if located is not None:
        found.warnings[:0] = located.warnings
    return found
