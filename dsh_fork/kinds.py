"""A session's kind: the one rule by which every command names kinds.

Format §1 and semantics §2: a fork child is seeded, names a parent and has no ``origin``; a
subagent child has ``origin: "subagent"`` and names the parent that spawned it; a copy is a
seeded subagent child. What names a parent but is neither (an unseeded session without
``origin``, as in DSH's own catalog test of a child of another origin) is ``linked``: DSH does
not take it for a fork (it has no inherited prefix) nor for a subagent (header-based child
listing and the catalog backfill skip it). A session that names no parent is a ``root``
whatever its ``origin`` says: no parent can list it as a child.

The header alone cannot tell a user fork from a delegation child that lacks ``origin``
(dsh-world §4, semantics §11): DSH itself tells them apart by ``origin`` or by live ownership,
which is never saved. So a session the header calls ``fork`` or ``linked`` is settled by what
the logs say (``KindRule``): when its parent's log catalogues its id, or it has a
``subagent/descriptor`` in its own range, it is a delegation child — a ``subagent`` — and every
command treats it as one (relink never copies a tree under it, doctor never asks for one). An
unseeded session with such evidence is a delegation child too: the rule of dsh-world §4 does not
ask for a seed, and a session its parent catalogues is listed in that parent's panel.

Each log is read for what the rule asks of it and no more. A parent's catalog is any
``subagent/catalog`` fact of its log, read whole (and usually already read by the command
asking). A child's own descriptor lies after its cut, the last tagged end-seed (format §7.4),
so its log is read from the end (``reader.latest_event``) down to the first descriptor or tagged
marker met, and only when its parent does not catalogue it: a user fork of a long session holds
the session's whole history before its few own events, and a fork of that session must not read
every such history again. The frames read are checked as a whole read checks them; a defect in
the frames before the answer, which a whole read would have named, leaves the answer standing
(the command that reads the log reports the defect).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from msgspec import Struct

from .discovery import Root
from .errors import DshForkError
from .model import Facts, derive, is_cut_marker
from .reader import NotFromEnd, latest_event, open_log
from .records import Event, Header
from .sessionentry import SessionEntry, birth_order

HeaderKind = Literal["root", "fork", "subagent", "copy", "linked"]
HEADER_KINDS: tuple[HeaderKind, ...] = ("root", "fork", "subagent", "copy", "linked")

DESCRIPTOR_TYPE = "subagent/descriptor"
EVIDENCE_TYPES = ("session/end-seed", DESCRIPTOR_TYPE, "subagent/catalog")
"""What a log is read for to settle a kind: its cut (marker), own descriptors, catalog."""
OWN_TYPES = ("session/end-seed", DESCRIPTOR_TYPE)
"""What a log is read for, from its end, to tell whether it has an own descriptor."""

Delegation = Literal["origin", "catalogued", "descriptor"]
"""Why a session is a delegation child: its ``origin``, its parent's catalog, its descriptor."""

DELEGATION_WHY: dict[Delegation, str] = {
    "origin": 'its header says origin "subagent"',
    "catalogued": "its parent's log catalogues it",
    "descriptor": "it has its own subagent/descriptor",
}


def header_kind(header: Header) -> HeaderKind:
    """The kind a validated header says; a seeded subagent is a ``copy`` (``tree`` then calls
    one that matches no original a ``seeded-subagent``). ``fork`` and ``linked`` are what the
    header says; ``KindRule`` settles whether the logs make them a delegation child."""
    if header.parent_session is None:
        return "root"
    if header.origin == "subagent":
        return "copy" if header.is_seeded else "subagent"
    return "fork" if header.is_seeded else "linked"


def unsettled(kind: str | None) -> bool:
    """Whether the logs may still make a session of this header kind a delegation child."""
    return kind in ("fork", "linked")


class Evidence(Struct, frozen=True):
    """What one log says for the rule: whether it has an own-range descriptor, and the ids
    its catalog names (any ``subagent/catalog`` fact of the log)."""

    own_descriptor: bool
    catalogued: frozenset[str]

    @classmethod
    def of(cls, facts: Facts) -> Evidence:
        ids = frozenset(e.child_id for e in facts.catalog if e.child_id is not None)
        return cls(bool(facts.own_descriptors()), ids or _NONE)


_NONE: frozenset[str] = frozenset()


def delegation(
    header: Header, *, own_descriptor: bool, catalogued_by_parent: bool
) -> Delegation | None:
    """The rule of dsh-world §4 for a session naming a parent: why it is a delegation child,
    or None (then, seeded, it is a user fork). A session naming no parent is neither."""
    if header.parent_session is None:
        return None
    if header.origin == "subagent":
        return "origin"
    if catalogued_by_parent:
        return "catalogued"
    if own_descriptor:
        return "descriptor"
    return None


def settled_kind(header: Header, why: Delegation | None) -> HeaderKind:
    """The header's kind, with a fork or linked session that ``delegation`` named a
    delegation child called what it is: a ``subagent``."""
    kind = header_kind(header)
    return "subagent" if why is not None and unsettled(kind) else kind


Reader = Callable[[SessionEntry], "Evidence | None"]


def read_evidence(entry: SessionEntry) -> Evidence | None:
    """A log read for ``EVIDENCE_TYPES`` only; None when it cannot be read (its kind is then
    the header's, and the command that needs the log reports it)."""
    generation = entry.generation
    if generation is None or entry.header is None:
        return None
    try:  # streamed: a log of any size is read in pieces, never held whole
        log = open_log(generation, collect=EVIDENCE_TYPES, stream=True)
    except (DshForkError, OSError):
        return None
    return Evidence.of(derive(log.header, log.event_count, log.collected))


OwnReader = Callable[[SessionEntry], "bool | None"]


def read_own_descriptor(entry: SessionEntry) -> bool | None:
    """Whether the log has a ``subagent/descriptor`` in its own range, read from its end: the
    last descriptor or tagged marker decides (a descriptor after every tagged marker is own;
    a marker met first is the cut, and what lies before it is inherited). None when it cannot
    be read; a log the end cannot be read from is read whole (``read_evidence``)."""
    generation = entry.generation
    if generation is None or entry.header is None:
        return None
    try:
        last = latest_event(generation, OWN_TYPES, _decides_own)
    except NotFromEnd:
        evidence = read_evidence(entry)
        return None if evidence is None else evidence.own_descriptor
    except (DshForkError, OSError):
        return None
    return last is not None and last.type == DESCRIPTOR_TYPE


def _decides_own(event: Event) -> bool:
    return event.type == DESCRIPTOR_TYPE or is_cut_marker(event)


class KindRule:
    """Settles the kinds of one root's sessions, reading each log it needs at most once
    (a child's from its end for its own descriptor, a parent's whole for its catalog).

    Only a session the header calls ``fork`` or ``linked`` is settled, from its own log (own
    descriptor) and its parent's (catalog); every other kind is the header's. A command that
    has already read a log hands what it found down with ``learn`` (``tree`` reads a family's
    logs parents first, ``doctor`` validates every log), so no log is read twice for the rule.
    """

    def __init__(
        self,
        root: Root,
        *,
        read: Reader = read_evidence,
        read_own: OwnReader | None = read_own_descriptor,
    ) -> None:
        """``read`` reads a log whole for the rule; ``read_own`` tells whether a log has an own
        descriptor (None: ``read`` tells, for a command that reads every log whole anyway)."""
        self.root = root
        self._read = read
        self._read_own = read_own
        self._evidence: dict[str, Evidence | None] = {}
        self._own: dict[str, bool | None] = {}
        self._why: dict[str, Delegation | None] = {}

    def learn(self, session_id: str, facts: Facts | Evidence | None) -> None:
        """What a log the caller read says (None: it could not be read)."""
        if session_id in self._evidence:
            return
        if isinstance(facts, Facts):
            facts = Evidence.of(facts)
        self._evidence[session_id] = facts

    def forget(self) -> None:
        """Drop what was learned and settled: a caller that reads a root family by family
        (``tree``) forgets each family once it is done, and so holds no evidence (catalogued
        ids) of every session of the root at its end. A session asked of again is read again."""
        self._evidence.clear()
        self._own.clear()
        self._why.clear()

    def evidence(self, entry: SessionEntry) -> Evidence | None:
        session_id = entry.id
        if session_id is None:
            return None
        if session_id not in self._evidence:
            self._evidence[session_id] = self._read(entry)
        return self._evidence[session_id]

    def own_descriptor(self, entry: SessionEntry) -> bool:
        """Whether the session's log has an own-range descriptor: what a whole read of it
        learned, else its end read (``read_own``)."""
        session_id = entry.id
        if session_id is None:
            return False
        if session_id in self._evidence or self._read_own is None:
            own = self.evidence(entry)
            return own is not None and own.own_descriptor
        if session_id not in self._own:
            self._own[session_id] = self._read_own(entry)
        return self._own[session_id] is True

    def why(self, entry: SessionEntry) -> Delegation | None:
        """Why the session is a delegation child, or None."""
        header = entry.header
        if header is None or header.parent_session is None:
            return None
        if header.origin == "subagent":
            return "origin"
        session_id = header.id
        if session_id in self._why:
            return self._why[session_id]
        parent = self.root.entry(header.parent_session)
        above = None if parent is None else self.evidence(parent)
        catalogued = above is not None and session_id in above.catalogued
        why = delegation(  # a catalogued session's own log is not read: the catalog decides
            header,
            own_descriptor=not catalogued and self.own_descriptor(entry),
            catalogued_by_parent=catalogued,
        )
        self._why[session_id] = why
        return why

    def kind(self, entry: SessionEntry) -> HeaderKind | None:
        """The settled kind; None when the header cannot be validated."""
        header = entry.header
        if header is None:
            return None
        kind = header_kind(header)
        if not unsettled(kind):
            return kind
        return settled_kind(header, self.why(entry))

    def is_user_fork(self, entry: SessionEntry) -> bool:
        """A seeded session with ``parentSession``, no ``origin`` and no delegation evidence."""
        header = entry.header
        return header is not None and header.is_fork_child and self.why(entry) is None

    def subagents_of(self, parent_id: str) -> list[SessionEntry]:
        """The parent's delegation children, in (createdAt, id) order: those its header names
        (``origin: "subagent"``, ``Root.children_of``, with the ones whose header is refused)
        and the seeded ones without ``origin`` that the rule makes subagents (a forked
        subagent DSH wrote without ``origin``): relink copies both, doctor checks both."""
        kids = self.root.children_of(parent_id)
        more = [e for e in self.root.forks_of(parent_id) if self.why(e) is not None]
        if not more:
            return kids
        return sorted(kids + more, key=birth_order)

    def fork_children(self) -> list[SessionEntry]:
        """The root's user forks, in (createdAt, id) order."""
        return [entry for entry in self.root.fork_children() if self.is_user_fork(entry)]

    def delegated(self) -> list[tuple[SessionEntry, Delegation]]:
        """The sessions whose header says fork but that are delegation children, and why."""
        out: list[tuple[SessionEntry, Delegation]] = []
        for entry in self.root.fork_children():
            why = self.why(entry)
            if why is not None:
                out.append((entry, why))
        return out
