"""relink's planner: reads, never writes, and decides every outcome of a relink (semantics
§4.2, §4.3, §4.4.2).

It reads the candidates of every session up the fork chain, groups them by lineage (an
original and its copies, matched by provenance) so each is copied once, and decides for each:
on the branch or unrelated, already copied under the new parent, running, open, unreadable,
uncatalogable or to be copied afresh; and which catalog facts and descriptors are missing.
The result is a tree of ``_Level`` objects the walk (``relinkwalk``) replays. Apart from the
walk because it is the half a dry run (``doctor``, ``fork --dry-run``) relies on alone, and
the half whose rules the spec states: it can be read without any of the writing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from msgspec import Struct, field

from . import seeded
from .catalog import fact_from_descriptor
from .discovery import Root
from .errors import CorruptLog, DshForkError, IoError, SessionNotFound, unsupported_below_v4
from .forkpoint import (
    _NONE,
    _PLAN_TYPES,
    ForkPoint,
    _event_time,
    _point,
    belongs,
    copy_cut,
    fork_point,
)
from .generations import SUPPORTED_VERSION
from .kinds import KindRule
from .locking import SessionLock, running
from .model import Facts, facts_of
from .provenance import Logged, first_event_key, is_copy_of
from .reader import open_log
from .records import held
from .sessionentry import SessionEntry, birth_order
from .sessionlog import SessionLog

LINEAGE_CYCLE = "lineage cycle"


class _Held(Struct):
    """A session the planner holds by its listing entry, named as results name it."""

    entry: SessionEntry

    @property
    def id(self) -> str:
        return self.entry.id_or_dir


class _Opened(_Held):
    """A session whose log the planner needed: readable (log, facts) or not (error)."""

    log: SessionLog | None = None
    facts: Facts | None = None
    error: DshForkError | None = None

    def logged(self) -> Logged | None:
        if self.log is None or self.facts is None:
            return None
        return Logged(self.id, self.log, self.facts)


def _open(entry: SessionEntry) -> _Opened:
    generation = entry.generation
    if entry.error is not None or generation is None:
        return _Opened(entry, error=entry.error or SessionNotFound(f"{entry.session_dir}: gone"))
    try:
        log = open_log(generation, collect=_PLAN_TYPES)
    except DshForkError as exc:
        return _Opened(entry, error=exc)
    except OSError as exc:
        return _Opened(entry, error=IoError.of(exc, "read"))
    return _Opened(entry, log, facts_of(log))


class _Fail(Struct):
    id: str
    code: str
    message: str


class _Skip(Struct):
    id: str
    reason: str


class _Uncat(Struct):
    """A belonging child whose descriptor cannot make a catalog fact: reported, not copied."""

    id: str
    reason: str


class _Copy(Struct):
    source: _Opened
    """S, its log released once the prefix is taken: the plan of a wide tree holds no log."""
    inherited: int
    """K(S): the copy inherits S's events ``0..K(S)-1``."""
    descriptor: bytes
    """S's descriptor data, encoded (it encodes, or S is no copy): a wide plan holds its
    bytes, not its parsed values, until the copy's descriptor and catalog fact are made."""
    level: _Level | None
    """What happens under the copy; None when nothing does (a leaf: most copies), so a wide
    plan holds no empty level per copy."""
    prefix: seeded.Prefix | None = None
    """What the copy takes of S; dropped once the copy is drafted."""

    def descriptor_data(self) -> Any:
        """The descriptor as parsed values again (encoded by orjson, so parsed back equal)."""
        return orjson.loads(self.descriptor)


class _Match(Struct):
    source_id: str
    existing: _Opened
    level: _Level


class _Repair(Struct):
    """A catalog fact for an existing child of the level's parent that has none."""

    child: _Opened
    source_id: str | None
    fact: dict[str, Any] | None
    reason: str | None


_Item = _Fail | _Skip | _Uncat | _Copy | _Match


class _Parent(Struct):
    """The new parent of a level as the walk knows it (no id/dir for a planned copy)."""

    id: str | None
    session_dir: Path | None
    lock: SessionLock | None
    depth: int


class _Level(Struct):
    """Everything that happens under one new parent (C, a copy, or a matched copy)."""

    point: ForkPoint
    items: list[_Item] = field(default_factory=list)
    unrelated: list[str] = field(default_factory=list)
    existing_outcomes: list[_Fail | _Skip] = field(default_factory=list)
    repairs: list[_Repair] = field(default_factory=list)
    descriptor_repairs: list[tuple[_Opened, Any]] = field(default_factory=list)
    own_descriptor: Any | None = None
    blocked: _Fail | _Skip | None = None

    def is_empty(self) -> bool:
        """Whether walking this level would do nothing at all."""
        return not (
            self.items
            or self.unrelated
            or self.existing_outcomes
            or self.repairs
            or self.descriptor_repairs
            or self.own_descriptor is not None
            or self.blocked is not None
        )

    def writes_parent(self) -> bool:
        """Whether anything is appended to this level's parent (so its lock is needed)."""
        return (
            self.own_descriptor is not None
            or any(isinstance(item, _Copy) for item in self.items)
            or any(repair.fact is not None for repair in self.repairs)
        )

    def walk_items(self) -> Iterator[_Item]:
        """Every item of this level and the levels below it, in walk order."""
        if self.blocked is not None:
            return
        for item in self.items:
            yield item
            if isinstance(item, _Copy | _Match) and item.level is not None:
                yield from item.level.walk_items()


def _failure(child_id: str, error: DshForkError) -> _Fail:
    return _Fail(child_id, error.code, error.message)


Opener = Callable[[SessionEntry], _Opened]
"""How the planner reads a candidate's log: ``_open``, or a caller's that remembers the logs
it read (``doctor`` plans every fork of a root, and the forks of one parent share their
candidates)."""


class _Member(_Held):
    """One candidate: a subagent child of a source parent on the chain (rank 0 = nearest)."""

    rank: int
    belongs: bool
    readable: bool = False
    """Whether its log is read at all (it belongs, or lineages are grouped): read on first
    use, so a wide level holds one log at a time, not every child's at once."""
    opener: Opener = _open
    _opened: _Opened | None = None
    _key: str | None = None

    def open(self) -> _Opened | None:
        if self._opened is None and self.readable:
            self._opened = self.opener(self.entry)
        return self._opened

    def logged(self) -> Logged | None:
        opened = self.open()
        return None if opened is None else opened.logged()

    def key(self) -> str | None:
        """The normalised first event (a copy's equals its source's): a cheap pre-filter."""
        logged = self.logged()
        if self._key is None and logged is not None:
            self._key = first_event_key(logged.log)
        return self._key


def _copy_of(copy: Logged, copy_key: str | None, member: _Member) -> bool:
    source = member.logged()
    return (
        source is not None
        and copy_key is not None
        and member.key() == copy_key
        and is_copy_of(copy, source.log)
    )


def _lineages(ranks: list[list[_Member]]) -> list[list[_Member]]:
    """Group the candidates of every chain rank by lineage (an original and its copies,
    semantics §4.3), each lineage nearest member first. Farthest rank first: a copy joins the
    first lineage not yet joined at its rank that holds a member it is a copy of, so two
    identical copies under one parent stay two lineages (one-to-one, like §4.3)."""
    lineages: list[list[_Member]] = []
    for members in reversed(ranks):
        taken: set[int] = set()
        free = len(lineages)  # lineages of farther ranks not joined yet: the only joinable
        for member in members:
            joined: int | None = None
            logged = member.logged() if free else None  # read only when it could join one
            if logged is not None and logged.log.header.is_seeded and logged.facts.cut > 0:
                key = member.key()
                for index, lineage in enumerate(lineages):
                    if index not in taken and any(_copy_of(logged, key, m) for m in lineage):
                        joined = index
                        break
            if joined is None:
                lineages.append([member])
                taken.add(len(lineages) - 1)
            else:
                lineages[joined].insert(0, member)
                taken.add(joined)
                free -= 1
    return lineages


class _Planner:
    """Read-only: decides every outcome of a relink (semantics §4.2, §4.3, §4.4.2)."""

    def __init__(self, root: Root, kinds: KindRule, opener: Opener = _open) -> None:
        self.root = root
        self.kinds = kinds
        self.opener = opener
        """Which sessions are a source's subagents (candidates): the one rule of ``kinds``."""
        self.visited: set[str] = set()
        self.held = 0
        """Bytes of verbatim runs the plan holds; past ``HELD_RUNS_MAX`` runs stay in their
        files (``seeded.RunRef``), so the plan's memory is bounded whatever the tree."""
        self.catalogued: set[str] = set()
        """Every id a catalog fact on the branch names: the sessions of the tree by name,
        which tells an unreadable session of the tree from one of the rest of the root."""

    def _ranks(self, point: ForkPoint, failures: list[_Fail]) -> list[list[_Member]]:
        """The candidates of every source parent on the chain, with their branch membership.

        A farther member's children are judged against the horizon min(T, createdAt of the
        nearer member): what it spawned after the nearer one branched off is not on the branch.
        """
        sources = (point.parent_id, *point.chain)
        horizon = point.last_inherited_time
        ranks: list[list[_Member]] = []
        for rank, source_id in enumerate(sources):
            if rank > 0 and horizon is not None:
                nearer = self.root.entry(sources[rank - 1])
                if nearer is not None and nearer.header is not None:
                    horizon = min(horizon, nearer.created_at)
            members: list[_Member] = []
            catalogued = self._catalogued(source_id) if rank > 0 else _NONE
            for entry in self.kinds.subagents_of(source_id):
                child_id = entry.id_or_dir
                if entry.error is not None:
                    failures.append(_failure(child_id, entry.error))
                    continue
                on_branch = belongs(point, child_id, entry.created_at, horizon, catalogued)
                member = _Member(entry, rank, on_branch, opener=self.opener)
                members.append(member)
            ranks.append(members)
        grouping = len(sources) > 1
        for members in ranks:
            for member in members:
                member.readable = member.belongs or grouping
        return ranks

    def _catalogued(self, source_id: str) -> frozenset[str]:
        """The ids a farther chain member catalogues in its whole log. Its log was read for
        the kind rule when the chain was followed (the nearer member is a user fork only if
        this one does not catalogue it), so this reads nothing new."""
        entry = self.root.entry(source_id)
        evidence = None if entry is None else self.kinds.evidence(entry)
        return _NONE if evidence is None else evidence.catalogued

    def level(
        self,
        point: ForkPoint,
        existing: list[_Opened],
        own_catalog: set[str],
        *,
        own_descriptor: Any | None = None,
    ) -> _Level:
        level = _Level(point, own_descriptor=own_descriptor)
        if point.inherited_catalog_ids:
            self.catalogued |= point.inherited_catalog_ids
        failures: list[_Fail] = []
        lineages = _lineages(self._ranks(point, failures))
        chosen: list[tuple[_Member, list[_Member]]] = []
        for lineage in lineages:
            pick = next((m for m in lineage if m.belongs), None)
            if pick is None:
                level.unrelated.append(lineage[0].id)
            else:
                chosen.append((pick, [m for m in lineage if m.rank > pick.rank]))
        chosen.sort(key=lambda pair: birth_order(pair[0].entry))

        matches = self._match_existing(existing, chosen)
        by_id = {o.id: o for o in existing}
        matched_source = {source: copy for copy, source in matches.items()}
        ordered: list[tuple[tuple[int, str], _Item]] = []
        for failure in failures:
            entry = self.root.entry(failure.id)
            ordered.append(((0 if entry is None else entry.created_at, failure.id), failure))
        for member, upstream in chosen:
            chain = tuple(m.id for m in upstream)
            if member.id in self.visited:
                item: _Item = _Fail(
                    member.id, CorruptLog.code, f"{LINEAGE_CYCLE}: {member.id} is its own ancestor"
                )
            else:
                self.visited.add(member.id)
                if member.id in matched_source:
                    item = self._match(member.id, by_id[matched_source[member.id]], chain)
                else:
                    opened = member.open()
                    assert opened is not None
                    item = self._classify(opened, point, chain)
            ordered.append((birth_order(member.entry), item))
        ordered.sort(key=lambda pair: pair[0])
        level.items = [item for _, item in ordered]
        self._repairs(level, existing, own_catalog, matches)
        return level

    def _match_existing(
        self, existing: list[_Opened], chosen: list[tuple[_Member, list[_Member]]]
    ) -> dict[str, str]:
        """Existing children of the new parent, in (createdAt, id) order, each take the first
        unmatched belonging lineage holding a member it is a copy of. Copy id → chosen id."""
        taken: set[int] = set()
        matches: dict[str, str] = {}
        for copy in existing:
            logged = copy.logged()
            if logged is None or not logged.log.header.is_seeded or logged.facts.cut < 1:
                continue
            key = first_event_key(logged.log)
            for index, (pick, upstream) in enumerate(chosen):
                lineage = [pick, *upstream]
                if index not in taken and any(_copy_of(logged, key, m) for m in lineage):
                    taken.add(index)
                    matches[copy.id] = pick.id
                    break
        return matches

    def _classify(
        self, source: _Opened, point: ForkPoint, chain: tuple[str, ...]
    ) -> _Fail | _Skip | _Uncat | _Copy:
        """Semantics §4.2.5, in order: running, below v4, unreadable, open, uncatalogable,
        else a copy of S's events ``0..K(S)-1``."""
        entry = source.entry
        generation = entry.generation
        assert generation is not None
        if running(entry.session_dir):
            return _Skip(source.id, "running")
        if generation.version < SUPPORTED_VERSION:
            error = unsupported_below_v4(f"subagent {source.id}", generation.version)
            return _failure(source.id, error)
        if source.error is not None or source.log is None or source.facts is None:
            assert source.error is not None
            return _failure(source.id, source.error)
        inherited = copy_cut(source.facts)
        if inherited is None:
            return _Skip(source.id, "open")
        descriptor = source.facts.descriptor()
        data = None if descriptor is None else descriptor.data
        encoded = b"null"
        if data is not None:
            try:
                encoded = held(orjson.dumps(data))  # held in the plan until the copy is drafted
            except orjson.JSONEncodeError:
                return _Fail(
                    source.id, CorruptLog.code, f"{source.id}: its descriptor cannot be re-encoded"
                )
        reason = fact_from_descriptor(data, source.id, 0).reason
        if reason is not None:
            return _Uncat(source.id, reason)
        log, facts = source.log, source.facts
        last_time = _event_time(log, inherited - 1) if inherited > 0 else None
        sub = _point(facts, source.id, inherited - 1, point.depth + 1, last_time)
        prefix = seeded.take(log, facts, inherited, last_time, hold=self._hold(log))
        if isinstance(prefix.run, bytes):
            self.held += len(prefix.run)
        source.log = source.facts = None  # the log is not needed again: memory stays flat
        entry.forget()  # nor the paths and header opening it built: rebuilt if asked for
        below = self.level(sub.with_chain(chain), [], set())
        item = _Copy(source, inherited, encoded, None if below.is_empty() else below)
        item.prefix = prefix
        return item

    def _hold(self, log: SessionLog) -> bool:
        """Whether the plan may hold this log's verbatim run (within ``HELD_RUNS_MAX``)."""
        return self.held + len(log.data) <= HELD_RUNS_MAX

    def _match(self, source_id: str, copy: _Opened, chain: tuple[str, ...]) -> _Match:
        """Recurse into an existing copy with its own cut and last inherited time (§4.2.6)."""
        assert copy.log is not None and copy.facts is not None
        facts = copy.facts
        header = copy.log.header
        sub = fork_point(copy.log, facts, source_id, facts.cut - 1, header.delegation_depth)
        repair_descriptor = _descriptor_to_repair(copy)
        children = [_open(e) for e in self.root.children_of(copy.id)]
        own = {e.child_id for e in facts.own_catalog() if e.child_id is not None}
        level = self.level(sub.with_chain(chain), children, own, own_descriptor=repair_descriptor)
        if level.writes_parent():
            # Whatever would be appended to this copy cannot be; leave its subtree to a rerun.
            if copy.log.version < SUPPORTED_VERSION:
                error = unsupported_below_v4(f"subagent {copy.id}", copy.log.version)
                level.blocked = _failure(copy.id, error)
            elif running(copy.entry.session_dir):
                level.blocked = _Skip(copy.id, "running")
        return _Match(source_id, copy, level)

    def _repairs(
        self,
        level: _Level,
        existing: list[_Opened],
        own_catalog: set[str],
        matches: dict[str, str],
    ) -> None:
        """Old forks (§4.4.2): uncatalogued children get a fact; copies a lost descriptor."""
        for child in existing:
            if child.error is not None or child.log is None or child.facts is None:
                assert child.error is not None
                level.existing_outcomes.append(_failure(child.id, child.error))
                continue
            facts = child.facts
            if child.id not in own_catalog:
                descriptor = facts.descriptor()
                plan = fact_from_descriptor(
                    None if descriptor is None else descriptor.data,
                    child.id,
                    child.log.header.created_at,
                    own_descriptors=len(facts.own_descriptors()),
                )
                level.repairs.append(_Repair(child, matches.get(child.id), plan.data, plan.reason))
            if child.id in matches:
                continue  # a matched copy repairs its own descriptor under its own lock
            data = _descriptor_to_repair(child)
            if data is None:
                continue
            if child.log.version < SUPPORTED_VERSION:
                error = unsupported_below_v4(f"subagent {child.id}", child.log.version)
                level.existing_outcomes.append(_failure(child.id, error))
            elif running(child.entry.session_dir):
                level.existing_outcomes.append(_Skip(child.id, "running"))
            else:
                level.descriptor_repairs.append((child, data))
        level.repairs.sort(key=lambda r: (r.child.entry.created_at, r.child.id))


def _descriptor_to_repair(child: _Opened) -> Any | None:
    """A seeded child with no own descriptor but one in its inherited prefix: that one."""
    if child.log is None or child.facts is None or not child.log.header.is_seeded:
        return None
    descriptor = child.facts.descriptor()
    if descriptor is None or not descriptor.inherited_only:
        return None
    return descriptor.data


HELD_RUNS_MAX = 2 << 20
"""Bytes of verbatim runs a plan holds in memory; beyond, each is reread from its file."""
