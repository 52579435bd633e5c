"""relink: copy a fork's subagent tree under the fork child, offline (semantics §4).

Two phases. The planner reads (headers of the whole root once, then the logs it needs) and
decides every outcome: the candidates of every session up the fork chain, grouped by lineage
(an original and its copies, matched by provenance) so each is copied once; which lineage
belongs to the branch, which already has a copy under the fork child, which is running, open,
unreadable, uncatalogable or copied afresh; and which catalog facts and descriptors are
missing. The walker then replays that plan top-down, writing through ``seeded`` (new copies)
and ``writer`` (appends) as it goes, or — for ``--dry-run`` — only records it, so a plan and a
real run report the same outcome. docs/fork-chains.md explains the choices.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import shlex
from collections.abc import Callable, Container, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from msgspec import Struct, field
from msgspec.structs import replace

from . import layout, seeded, writer
from . import oplog as messages
from .catalog import fact_from_descriptor
from .discovery import Root, SessionEntry, locate
from .display import counted
from .errors import (
    CorruptLog,
    DshForkError,
    IoError,
    Partial,
    SessionLocked,
    SessionNotFound,
    UsageError,
    unsupported_below_v4,
)
from .generations import SUPPORTED_VERSION, Generation
from .ids import ClockMs, IdFactory, new_session_id, now_ms
from .kinds import DELEGATION_WHY, KindRule
from .locking import SessionLock, running
from .model import TURN_TYPES, Facts, facts_of
from .oplog import OpLog
from .progress import SILENT, Progress
from .provenance import Logged, first_event_key, is_copy_of
from .reader import SessionLog, current_generation, open_log, read_header
from .records import Event, dumps_record, held, parse_line
from .resumable import unresumable
from .workspace import Workspace, moved_workspace, rebase_cwd

LINEAGE_CYCLE = "lineage cycle"
RERUN_CODES = frozenset(
    ("SESSION_LOCKED", "SESSION_STALE", "SESSION_NOT_FOUND", "IO_ERROR", "UNRESUMABLE")
)
"""Failures a later run may not meet again (a lock released, a session that stopped
changing, a transient I/O error, a copy's catalog fact or descriptor a rerun repairs). A
corrupt log, a generation below v4 (DSH must open it first) or a descriptor that makes no
catalog fact fail the same way on every run: no "Next:" is offered for them alone."""


def rerun_helps(items: list[dict[str, Any]]) -> bool:
    """Whether running the same command again can finish any of these failed items."""
    return any(item.get("code") in RERUN_CODES for item in items)


NO_AGENTS_REASON = "no-agents"
"""Why ``relink --all`` leaves a fork alone: it was made with ``fork --no-agents``."""

# -- the fork point ---------------------------------------------------------------------------


class ForkPoint(Struct, frozen=True):
    """Where a new parent's history branched off its source parent.

    ``parent_id`` is the nearest source parent whose children are candidates; ``chain`` the
    sessions it inherited from in turn, nearest first (its fork ancestors, or the upstream
    members of a copied lineage), whose children are candidates too (semantics §1.5 "Fork
    chains"). ``cut`` and ``last_inherited_time`` decide branch membership together with the
    catalog facts the new parent inherited; ``depth`` is the new parent's delegation depth.
    """

    parent_id: str
    cut: int
    last_inherited_time: int | None
    inherited_catalog_ids: frozenset[str]
    depth: int
    chain: tuple[str, ...] = ()

    def with_chain(self, chain: tuple[str, ...]) -> ForkPoint:
        return replace(self, chain=chain)


_APPEND_TYPES = frozenset(("session/end-seed", "subagent/catalog", "subagent/descriptor"))
"""What relink needs of a parent it appends to: cut, catalog, descriptors — never its turns,
so re-reading a fork child that inherited a huge log parses only a handful of lines."""

_PLAN_TYPES = _APPEND_TYPES | frozenset((*TURN_TYPES, "agent-preset/selected"))
"""What the planner needs of a child: its turns (K, §2.6), cut, catalog, descriptors and
preset. Every line's envelope is checked whatever is collected; only these are parsed."""


def _event_time(log: SessionLog, seq: int) -> int | None:
    """The time of event ``seq``: from the events parsed at open when it is one of them (the
    ``turn/end`` closing a child's last turn, usually), else read from its frame."""
    collected = log.collected
    index = bisect.bisect_left(collected, seq, key=_seq_of)
    if index < len(collected) and collected[index].seq == seq:
        return collected[index].time
    return log.event(seq).time


def _seq_of(event: Event) -> int:
    return event.seq


def fork_point(
    log: SessionLog, facts: Facts, parent_id: str, boundary: int, depth: int
) -> ForkPoint:
    """The fork point of a session that inherited ``log``'s events ``0..boundary``.

    For a fork child C: its own log with ``boundary = cut(C) - 1``; for a planned fork: the
    source with the fork boundary; for a copy of S: S's log with ``boundary = K(S) - 1``.
    """
    time = _event_time(log, boundary) if boundary >= 0 else None
    return _point(facts, parent_id, boundary, depth, time)


def _point(facts: Facts, parent_id: str, boundary: int, depth: int, time: int | None) -> ForkPoint:
    """``fork_point`` with the time of event ``boundary`` already known."""
    if boundary < 0:
        return ForkPoint(parent_id, 0, None, frozenset(), depth)
    ids = frozenset(
        entry.child_id
        for entry in facts.catalog
        if entry.seq <= boundary and entry.child_id is not None
    )
    return ForkPoint(parent_id, boundary + 1, time, ids or _NONE, depth)


_NONE: frozenset[str] = frozenset()
"""One empty set for the fork points of the many copies whose source catalogued nothing."""


def copy_cut(facts: Facts) -> int | None:
    """K(S) (semantics §2.6): the seq of the open last turn's ``turn/start``, or the event
    count when the last turn is closed; None when S never completed a turn."""
    if facts.last_turn_end is None:
        return None
    open_turn = facts.open_turn
    return facts.event_count if open_turn is None else open_turn.start_seq


def belongs(
    point: ForkPoint,
    child_id: str,
    created_at: int,
    horizon: int | None = None,
    catalogued: Container[str] = (),
) -> bool:
    """Branch membership (semantics §4.2.3): an inherited catalog fact, else createdAt ≤ T.

    ``horizon`` replaces T for the children of a farther chain member: what that member
    spawned after the nearer one branched off cannot be on the branch (docs/fork-chains.md).
    ``catalogued``: the ids the child's parent catalogues anywhere in its log. One of them
    whose fact is not in the prefix was spawned after the branch point: the createdAt rule is
    only for a child its parent has no catalog entry for (semantics §1.5), and T says nothing
    once the prefix ends in events newer than the branch (a fork's title, a later turn).
    """
    if point.cut <= 0:
        return False
    if child_id in point.inherited_catalog_ids:
        return True
    if child_id in catalogued:
        return False
    limit = point.last_inherited_time if horizon is None else horizon
    return limit is not None and created_at <= limit


# -- results ----------------------------------------------------------------------------------


class RelinkSummary(Struct):
    """The outcome of one fork child (semantics §4.6); ``to_json`` is the contract object."""

    fork_child: str | None
    source: str | None
    dry_run: bool
    copied: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    unrelated: list[str] = field(default_factory=list)
    uncatalogable: list[dict[str, Any]] = field(default_factory=list)
    catalogued: list[str] = field(default_factory=list)
    descriptors_repaired: list[str] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unresumable: list[dict[str, str]] = field(default_factory=list)
    """Written copies that failed the check made by reading them back (``resumable``):
    ``{id, message}``; the contract object lists their ids, as the plugin's record does."""
    unlisted: list[Path] | None = None
    """Not part of the outcome: the dirs the run found unlisted, for ``sweep_abandoned``."""
    temp_left: set[str] = field(default_factory=set)
    """Not part of the outcome: the copies whose publish left its temp (rare), by id."""

    def to_json(self) -> dict[str, Any]:
        return {
            "forkChild": self.fork_child,
            "source": self.source,
            "copied": self.copied,
            "skipped": self.skipped,
            "unrelated": self.unrelated,
            "uncatalogable": self.uncatalogable,
            "catalogued": self.catalogued,
            "descriptorsRepaired": self.descriptors_repaired,
            "failed": self.failed,
            "unresumable": [item["id"] for item in self.unresumable],
            "dryRun": self.dry_run,
            "warnings": self.warnings,
        }

    def clean_copies(self) -> frozenset[str]:
        """The copies published with their temp removed, by id: ``sweep_abandoned`` does not
        list their dirs again. Derived from the summary's rows, so a run of thousands of
        copies keeps no second record of them while it walks."""
        copies = {row["copy"] for row in self.copied if row["copy"] is not None}
        return frozenset(copies - self.temp_left)

    @property
    def ok(self) -> bool:
        """Exit 0: skips and unrelated children are normal outcomes, failures are not."""
        return not self.failed and not self.uncatalogable and not self.unresumable

    def problems(self) -> list[dict[str, Any]]:
        """Every item that makes the run PARTIAL, named: failures, then uncatalogable copies."""
        items = [dict(item) for item in self.failed]
        for item in self.uncatalogable:
            items.append(
                {
                    "id": item["id"],
                    "code": "UNCATALOGABLE",
                    "message": f"no catalog fact can be made: {item['reason']}",
                }
            )
        for item in self.unresumable:
            items.append({"id": item["id"], "code": "UNRESUMABLE", "message": item["message"]})
        return items

    def partial(self) -> Partial | None:
        """The PARTIAL error (exit 10) this outcome amounts to, or None when it is a success."""
        if self.ok:
            return None
        problems = self.problems()
        total = len(self.copied) + len(self.skipped) + len(self.failed)
        total += len(self.uncatalogable)
        rerun = None
        if rerun_helps(problems) and self.fork_child is not None and not self.dry_run:
            rerun = f"dsh-fork relink {shlex.quote(self.fork_child)}"  # finishes what failed
        return Partial(
            f"{len(problems)} of {counted(max(total, len(problems)), 'item')} failed",
            problems,
            self.to_json(),
            next_command=rerun,
        )


class RelinkAllResult(Struct):
    """``relink --all``: one summary per fork child and every failure, each with its fork."""

    results: list[RelinkSummary]
    failed: list[dict[str, Any]]
    forks: int = 0
    dry_run: bool = False
    skipped: list[dict[str, Any]] = field(default_factory=list)
    """Fork children left alone on purpose: ``{forkChild, reason}`` (``no-agents``)."""
    notes: list[str] = field(default_factory=list)
    """Warnings of the whole run (sessions that cannot be read and no fork's tree names)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "results": [r.to_json() for r in self.results],
            "failed": self.failed,
            "skipped": self.skipped,
        }

    @property
    def warnings(self) -> list[str]:
        """Each fork child's warnings, prefixed with its id."""
        return self.notes + [f"{r.fork_child}: {w}" for r in self.results for w in r.warnings]

    def partial(self) -> Partial | None:
        """PARTIAL (exit 10) naming every failed item, where it failed (in which fork
        children, or outside any: a session of the root that cannot be read), and
        ``relink --all`` as the next step only when a rerun can finish something."""
        if not self.failed:
            return None
        forks = {item["forkChild"] for item in self.failed if item["forkChild"] is not None}
        outside = sum(1 for item in self.failed if item["forkChild"] is None)
        inside = len(self.failed) - outside
        of_forks = f"in {len(forks)} of {counted(self.forks, 'fork child', 'fork children')}"
        failed = counted(len(self.failed), "item")
        if not outside:
            message = f"{failed} failed {of_forks}"
        elif not inside:
            message = f"{failed} failed outside any fork child"
        else:
            message = f"{failed} failed: {inside} {of_forks}, {outside} outside any fork child"
        rerun = rerun_helps(self.failed) and not self.dry_run
        return Partial(
            message,
            self.failed,
            self.to_json(),
            next_command="dsh-fork relink --all" if rerun else None,
        )


# -- the plan ---------------------------------------------------------------------------------


class _Opened(Struct):
    """A session whose log the planner needed: readable (log, facts) or not (error)."""

    entry: SessionEntry
    log: SessionLog | None = None
    facts: Facts | None = None
    error: DshForkError | None = None

    @property
    def id(self) -> str:
        return self.entry.id or self.entry.session_dir.name

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


class _NewFact(NamedTuple):
    """A catalog fact the walk will append to a parent, held encoded until the append parses
    it again (about 170 bytes, where its parsed dict takes about 500: a level of thousands
    of copies holds one per copy until its parent's frame is written)."""

    created_at: int
    child_id: str
    encoded: bytes

    @classmethod
    def of(cls, fact: dict[str, Any]) -> _NewFact:
        encoded = held(dumps_record(fact))
        return cls(fact["childCreatedAt"], fact["childId"], encoded)

    def data(self) -> Any:
        """The fact as parsed values again (``dumps_record`` then ``parse_line``: equal)."""
        return parse_line(self.encoded)[0]


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


class _Member(Struct):
    """One candidate: a subagent child of a source parent on the chain (rank 0 = nearest)."""

    entry: SessionEntry
    rank: int
    belongs: bool
    readable: bool = False
    """Whether its log is read at all (it belongs, or lineages are grouped): read on first
    use, so a wide level holds one log at a time, not every child's at once."""
    opener: Opener = _open
    _opened: _Opened | None = None
    _key: str | None = None

    @property
    def id(self) -> str:
        return self.entry.id or self.entry.session_dir.name

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


def _order(entry: SessionEntry) -> tuple[int, str]:
    return (entry.created_at, entry.id or entry.session_dir.name)


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
                child_id = entry.id or entry.session_dir.name
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
        chosen.sort(key=lambda pair: _order(pair[0].entry))

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
            ordered.append((_order(member.entry), item))
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


# -- the walk ---------------------------------------------------------------------------------


HELD_RUNS_MAX = 2 << 20
"""Bytes of verbatim runs a plan holds in memory; beyond, each is reread from its file."""

COPY_BATCH = 32
"""Copies of one level published together: their fsyncs overlap. Each keeps its lock (four
descriptors) until its subtree is done, so a batch is also bounded by ``LOCKS_HELD_MAX``."""
LOCKS_HELD_MAX = 128
"""Copy locks a walk holds at once before its batches shrink (to one copy at a time)."""


class _Parent(Struct):
    """The new parent of a level as the walk knows it (no id/dir for a planned copy)."""

    id: str | None
    session_dir: Path | None
    lock: SessionLock | None
    depth: int


class _Walker:
    """Replays a plan top-down; writes unless ``dry_run`` (semantics §4.4)."""

    def __init__(
        self,
        root: Root,
        summary: RelinkSummary,
        log: OpLog,
        *,
        clock: ClockMs,
        new_id: IdFactory,
        total: int,
    ) -> None:
        self.root = root
        self.summary = summary
        self.log = log
        self.dry_run = summary.dry_run
        self.clock = clock
        self.new_id = new_id
        self.total = total
        self.done = 0
        self.created: set[str] = set()
        self.unsynced: set[Path] = set()
        self.held = 0
        """Copy locks held by the batches of the levels being walked."""
        self.workspace: Workspace | None = None
        self.progress: Progress = SILENT
        """Told of each agent done (copied, skipped or failed), as the operation log is."""
        self._listed: set[str] | None = None
        self._names: set[str] = set()

    def sync(self) -> None:
        """Make the new copies' directory entries durable before anything refers to them."""
        if self.unsynced:
            writer.sync_dirs(self.unsynced)

    # -- bookkeeping --------------------------------------------------------------------------

    def _tick(self) -> None:
        self.done += 1
        self.progress.advance()
        if self.done % messages.PROGRESS_EVERY == 0 and self.done < self.total:
            self.log.write(
                messages.PROGRESS,
                {"forkChild": self.summary.fork_child, "done": self.done, "total": self.total},
            )

    def _skip(self, child_id: str, reason: str) -> None:
        """A normal outcome; a running child is also logged (the plugin's record of it)."""
        self.summary.skipped.append({"id": child_id, "reason": reason})
        if reason == "running":
            self.log.write(
                messages.SKIPPED_RUNNING,
                {"forkChild": self.summary.fork_child, "childId": child_id, "reason": reason},
            )

    def _fail(self, child_id: str, code: str, message: str) -> None:
        self.summary.failed.append({"id": child_id, "code": code, "message": message})
        self.log.write(
            messages.CHILD_FAILED,
            {
                "forkChild": self.summary.fork_child,
                "childId": child_id,
                "code": code,
                "message": message,
            },
        )

    # -- levels -------------------------------------------------------------------------------

    def level(self, level: _Level, parent: _Parent) -> None:
        self.summary.unrelated.extend(level.unrelated)
        new_facts: list[_NewFact] = []
        self._items(level, parent, new_facts)
        for outcome in level.existing_outcomes:
            if isinstance(outcome, _Fail):
                self._fail(outcome.id, outcome.code, outcome.message)
            else:
                self._skip(outcome.id, outcome.reason)
        for child, data in level.descriptor_repairs:
            self._repair_descriptor(child, data)
        self._append_to_parent(level, parent, new_facts)

    def _items(self, level: _Level, parent: _Parent, new_facts: list[_NewFact]) -> None:
        """Walk a level's items, in batches of copies. A plan is walked once: each item is
        freed once walked, so a wide tree's plan shrinks as its copies are written."""
        batch: list[_Copy] = []
        pending, level.items = level.items[::-1], []
        while pending:
            item = pending.pop()
            if isinstance(item, _Copy) and not self.dry_run:
                batch.append(item)
                if len(batch) >= max(1, min(COPY_BATCH, LOCKS_HELD_MAX - self.held)):
                    self._copies(batch, parent, new_facts)
                    batch = []
                continue
            if batch:
                self._copies(batch, parent, new_facts)
                batch = []
            if isinstance(item, _Fail):
                self._tick()
                self._fail(item.id, item.code, item.message)
            elif isinstance(item, _Skip):
                self._tick()
                self._skip(item.id, item.reason)
            elif isinstance(item, _Uncat):
                self._tick()
                self.summary.uncatalogable.append(
                    {"id": item.id, "source": item.id, "reason": item.reason}
                )
            elif isinstance(item, _Copy):
                self._tick()
                self._copy(item, parent)
            else:
                self._match(item)
        if batch:
            self._copies(batch, parent, new_facts)

    def _copy(self, item: _Copy, parent: _Parent) -> None:
        """A planned copy of a dry run: recorded with no id, its subtree planned under it."""
        depth = parent.depth + 1
        self._record_copy(item, None, parent.id, depth)
        if item.level is not None:
            self.level(item.level, _Parent(None, None, None, depth))

    def _copies(self, items: list[_Copy], parent: _Parent, new_facts: list[_NewFact]) -> None:
        """Publish a batch of one level's copies together (``writer.publish_batch``: their
        fsyncs overlap), then walk each copy's subtree under the copy's own lock."""
        depth = parent.depth + 1
        assert parent.id is not None
        ready: list[tuple[_Copy, str, dict[str, Any], writer.Draft]] = []
        try:
            self._drafts(items, parent.id, depth, ready)
        except BaseException:
            for _, _, _, draft in ready:  # the publish never took their open dirs over
                if draft.dirs is not None:
                    draft.dirs.close()
            raise
        outcomes = writer.publish_batch([d for _, _, _, d in ready], keep_lock=True)
        locks: list[SessionLock | None] = []
        for (_, copy_id, _, draft), outcome in zip(ready, outcomes, strict=True):
            if isinstance(outcome, writer.Published):
                seeded.register(self.root, draft, outcome)
                if outcome.temp_left:
                    self.summary.temp_left.add(copy_id)
                locks.append(outcome.lock)
                self.held += 1
            else:
                locks.append(None)
        try:
            for index, ((item, copy_id, fact, draft), outcome) in enumerate(
                zip(ready, outcomes, strict=True)
            ):
                source = item.source
                if isinstance(outcome, DshForkError):
                    what = "" if outcome.details.get("published") else " the copy was not written:"
                    self._fail(source.id, outcome.code, f"{source.id}:{what} {outcome}")
                    continue
                lock = locks[index]
                assert lock is not None
                self.created.add(copy_id)
                self._record_copy(item, copy_id, parent.id, depth)
                new_facts.append(_NewFact.of(fact))
                if item.level is not None:
                    self.level(item.level, _Parent(copy_id, draft.session_dir, lock, depth))
                lock.release()
                locks[index] = None
                self.held -= 1
        finally:
            for held in locks:
                if held is not None:
                    held.release()
                    self.held -= 1

    def _drafts(
        self,
        items: list[_Copy],
        parent_id: str,
        depth: int,
        ready: list[tuple[_Copy, str, dict[str, Any], writer.Draft]],
    ) -> None:
        """Draft each copy of a batch into ``ready``; one that cannot be drafted fails alone."""
        taken: set[str] = set()
        for item in items:  # each source's lock was probed once, by the plan (§4.2.5)
            self._tick()
            source = item.source
            try:
                if parent_id in self.created:
                    self.sync()  # a copy's header names its parent: that parent must be durable
                copy_id, fact, draft = self._draft(item, parent_id, depth, taken)
            except DshForkError as exc:
                self._fail(source.id, exc.code, f"{source.id}: the copy was not written: {exc}")
                continue
            except OSError as exc:  # its run, reread from its file (seeded.RunRef)
                error = IoError.of(exc, "read")
                self._fail(source.id, error.code, f"{source.id}: the copy was not written: {error}")
                continue
            taken.add(copy_id)
            ready.append((item, copy_id, fact, draft))

    def _draft(
        self, item: _Copy, parent_id: str, depth: int, taken: set[str]
    ) -> tuple[str, dict[str, Any], writer.Draft]:
        """The copy to write (semantics §1.5, §4.4.1): S's events ``0..K(S)-1`` verbatim,
        the marker, S's descriptor, in a new session dir; and the catalog fact that will
        name it in its parent, from the same parse of the descriptor."""
        prefix, item.prefix = item.prefix, None  # held no longer than the copy needs it
        assert prefix is not None
        copy_id = seeded.fresh_id(self.root, self.new_id, taken, exists=self._exists)
        created_at = self.clock()
        descriptor = item.descriptor_data()
        fact = fact_from_descriptor(descriptor, copy_id, created_at).data
        assert fact is not None  # the plan made it once already (``_classify``)
        plan = seeded.plan_prefix(
            prefix,
            session_id=copy_id,
            created_at=created_at,
            parent_session=parent_id,
            origin="subagent",
            depth=depth,
            own=[("subagent/descriptor", descriptor)],
        )
        if self.workspace is not None:  # a fork moved to another workspace: copies follow
            plan.cwd = rebase_cwd(plan.cwd, *self.workspace)
        draft = seeded.draft_prefix(self.root, plan, prefix, deferred=self.unsynced)
        self._names.add(draft.session_dir.name)
        return copy_id, fact, draft

    def _exists(self, session_id: str) -> bool:
        """Whether a session dir of the root is named for this id: from the listing (made
        under the fork child's lock) and the copies this walk drafted, not a look into every
        project dir per copy."""
        if self._listed is None:
            self._listed = {os.path.basename(e.dir_text) for e in self.root.entries()}
            self._listed.update(os.path.basename(e.dir_text) for e in self.root.unlisted())
        segment = layout.encode_segment(session_id)
        return segment in self._listed or segment in self._names

    def _record_copy(
        self, item: _Copy, copy_id: str | None, parent_id: str | None, depth: int
    ) -> None:
        self.summary.copied.append(
            {"source": item.source.id, "copy": copy_id, "parent": parent_id, "depth": depth}
        )

    def _match(self, item: _Match) -> None:
        copy = item.existing
        level = item.level
        header = copy.entry.header
        assert header is not None
        if isinstance(level.blocked, _Fail):
            self._fail(level.blocked.id, level.blocked.code, level.blocked.message)
            return
        if isinstance(level.blocked, _Skip):
            self._skip(copy.id, "running")
            return
        parent = _Parent(copy.id, copy.entry.session_dir, None, header.delegation_depth)
        if self.dry_run or not level.writes_parent():
            self.level(level, parent)
            return
        try:
            parent.lock = SessionLock(copy.entry.session_dir).acquire()
        except SessionLocked:
            self._skip(copy.id, "running")
            return
        try:
            self.level(level, parent)
        finally:
            parent.lock.release()

    def _repair_descriptor(self, child: _Opened, data: Any) -> None:
        """Append a copy's lost descriptor under the copy's own lock (semantics §4.4.2)."""
        if self.dry_run:
            self.summary.descriptors_repaired.append(child.id)
            return
        appended: list[str] = []

        def build(log: SessionLog, facts: Facts) -> list[writer.NewEvent]:
            if facts.own_descriptors():
                return []
            appended.append(child.id)
            return [("subagent/descriptor", self.clock(), data)]

        try:
            writer.append(child.entry.session_dir, build, collect=_APPEND_TYPES)
        except SessionLocked:
            self._skip(child.id, "running")
            return
        except DshForkError as exc:
            self._fail(child.id, exc.code, exc.message)
            return
        self.summary.descriptors_repaired.extend(appended)

    def _append_to_parent(self, level: _Level, parent: _Parent, new_facts: list[_NewFact]) -> None:
        """One frame for the parent: its lost descriptor, repair facts and the new copies'
        facts, sorted by (childCreatedAt, childId); ids already in its own range are skipped."""
        repaired = [r for r in level.repairs if r.fact is not None]
        for repair in level.repairs:
            if repair.fact is None:
                assert repair.reason is not None
                self.summary.uncatalogable.append(
                    {"id": repair.child.id, "source": repair.source_id, "reason": repair.reason}
                )
        facts = [_NewFact.of(r.fact) for r in repaired if r.fact is not None] + new_facts
        facts.sort(key=lambda f: (f.created_at, f.child_id))
        repaired_ids = {r.child.id for r in repaired}
        own_descriptor = level.own_descriptor
        if self.dry_run or parent.session_dir is None:
            self.summary.catalogued.extend(r.child.id for r in repaired)
            if own_descriptor is not None and parent.id is not None:
                self.summary.descriptors_repaired.append(parent.id)
            return
        if not facts and own_descriptor is None:
            return
        catalogued: list[str] = []
        descriptor_added: list[bool] = []

        def build(log: SessionLog, current: Facts) -> Iterator[writer.NewEvent]:
            """The events to append, each fact parsed as the writer takes it (one at a time)."""
            now = self.clock()
            if own_descriptor is not None and not current.own_descriptors():
                descriptor_added.append(True)
                yield ("subagent/descriptor", now, own_descriptor)
            present = {e.child_id for e in current.own_catalog()}
            for fact in facts:
                if fact.child_id in present:
                    continue
                present.add(fact.child_id)
                if fact.child_id in repaired_ids:
                    catalogued.append(fact.child_id)
                yield ("subagent/catalog", now, fact.data())

        assert parent.id is not None
        try:
            self.sync()
            writer.append(
                parent.session_dir,
                build,
                lock=parent.lock,
                collect=_APPEND_TYPES,
                cut=level.point.cut,  # its inherited facts (one per agent) are not parsed again
            )
        except DshForkError as exc:
            self._fail(parent.id, exc.code, f"{parent.id}: catalog facts not appended: {exc}")
            return
        self.summary.catalogued.extend(catalogued)
        if descriptor_added:
            self.summary.descriptors_repaired.append(parent.id)


# -- entry points -----------------------------------------------------------------------------


def _fork_chain(root: Root, parent_id: str, kinds: KindRule) -> tuple[str, ...]:
    """The sessions P inherited from, nearest first: P's parent while P is a user fork, and
    so on up (semantics §1.5 "Fork chains"); a missing ancestor, a cycle or a delegation
    child (``kinds``: its subagents are its own, not its parent's) ends the chain."""
    chain: list[str] = []
    seen = {parent_id}
    entry = root.entry(parent_id)
    while entry is not None and kinds.is_user_fork(entry):
        above = entry.parent
        if above is None or above in seen:
            break
        chain.append(above)
        seen.add(above)
        entry = root.entry(above)
    return tuple(chain)


def _refresh(root: Root) -> list[Path]:
    """Add to the root's listing the sessions published since it was built (by another run);
    return the dirs of the root still not listed (no session in them, or unlistable), which
    ``unreadable_sessions`` and ``sweep_abandoned`` look at instead of walking the root again.

    Called with the fork child's lock held: every copy a finished run made under it is on
    disk by then, so the existing copies are listed from disk, never from a listing made
    before the lock (two runs at once never both copy one child). Only dirs the listing does
    not know are read, so a ``relink --all`` over many fork children stays cheap.
    """
    left: list[Path] = []
    for text in root.unknown_texts():  # text: no Path hashed per dir
        session_dir = Path(text)
        entry = None
        with contextlib.suppress(DshForkError, OSError):
            entry = root.register(session_dir)
        if entry is None:
            left.append(session_dir)
    return left


def _unreadable_item(entry: SessionEntry) -> dict[str, Any]:
    error = entry.error or CorruptLog(f"{entry.session_dir}: unreadable header")
    return {"id": entry.id or entry.session_dir.name, "code": error.code, "message": str(error)}


def unreadable_forks(root: Root) -> list[dict[str, Any]]:
    """Fork children whose header is refused (its raw fields name a parent, no origin):
    relink --all cannot relink them, each is a failed item."""
    items: list[dict[str, Any]] = []
    for entry in root.unreadable():
        raw = entry.raw_fields
        if raw is not None and raw.get("parentSession") is not None and raw.get("origin") is None:
            items.append(_unreadable_item(entry))
    return items


def unreadable_sessions(root: Root, *, unlisted: list[Path] | None = None) -> list[dict[str, Any]]:
    """Session dirs whose lineage cannot be read (an unlistable dir, a header that cannot be
    read at all): any of them may be part of a fork's tree (``_plan`` decides by the tree's
    catalog facts). ``unlisted``: the dirs ``_refresh`` left unlisted, so the root is not
    walked again."""
    items: list[dict[str, Any]] = []
    known = root.listed_texts()
    named: set[str] = set()  # a dir the listing could not read is named once, not twice
    for entry in root.unreadable():
        if entry.raw_fields is None:
            items.append(_unreadable_item(entry))
            named.add(entry.dir_text)
    for session_dir in root.candidate_dirs() if unlisted is None else unlisted:
        if str(session_dir) in known or str(session_dir) in named:
            continue
        try:
            os.listdir(session_dir)
        except OSError as exc:
            error = IoError.of(exc, "list")
            items.append({"id": session_dir.name, "code": error.code, "message": error.message})
    return items


def _run(
    root: Root,
    level: _Level,
    summary: RelinkSummary,
    top: _Parent,
    log: OpLog,
    *,
    clock: ClockMs,
    new_id: IdFactory,
    children: int,
    workspace: Workspace | None = None,
    progress: Progress = SILENT,
) -> None:
    """Log, walk and log the summary: the part every entry point shares."""
    total, copies = _counted(level)
    progress.stage("agents planned" if summary.dry_run else "agents copied", total)
    if copies:
        log.write(
            messages.COPYING,
            {
                "forkChild": summary.fork_child,
                "source": summary.source,
                "children": children,
                "total": total,
            },
        )
    walker = _Walker(root, summary, log, clock=clock, new_id=new_id, total=total)
    walker.workspace = workspace
    walker.progress = progress
    for failure in summary.failed:  # found before the walk (unreadable sessions)
        walker.log.write(
            messages.CHILD_FAILED,
            {
                "forkChild": summary.fork_child,
                "childId": failure["id"],
                "code": failure["code"],
                "message": failure["message"],
            },
        )
    try:
        with writer.sync_threads():
            walker.level(level, top)
    finally:
        walker.sync()
    if not summary.dry_run:  # every copy read back, once every lock of the walk is released
        summary.unresumable = unresumable(root, summary.copied)
        for item in summary.unresumable:
            log.write(
                messages.UNRESUMABLE,
                {"forkChild": summary.fork_child, "copyId": item["id"], "message": item["message"]},
            )
    if summary.catalogued:
        log.write(
            messages.CATALOGUED,
            {"forkChild": summary.fork_child, "catalogued": len(summary.catalogued)},
        )
    log.write(messages.COPIED, summary.to_json())


def _counted(level: _Level) -> tuple[int, int]:
    """(outcomes, copies) of a plan: counted, not listed, for the walk frees each item once
    it is walked."""
    total = copies = 0
    for item in level.walk_items():
        total += not isinstance(item, _Match)
        copies += isinstance(item, _Copy)
    return total, copies


def _plan(
    root: Root,
    point: ForkPoint,
    existing: list[_Opened],
    own: set[str],
    summary: RelinkSummary,
    unreadable: list[dict[str, Any]],
    *,
    kinds: KindRule | None = None,
    warn_unclaimed: bool = True,
    opener: Opener = _open,
) -> tuple[ForkPoint, _Level]:
    """The whole tree's plan under a fork child whose fork point is ``point``.

    ``unreadable``: sessions of the root whose header cannot be read at all (so whose parent
    is unknown). One that a catalog fact on the branch names is part of the fork's tree: a
    failed item. A dir that cannot be listed (IO_ERROR) may hide any of the tree: a failed
    item too, which a rerun finishes once it can be read (relink --all, which passes
    ``warn_unclaimed=False``, names the unlisted dirs no fork claims once, outside the forks).
    Any other is not known to be part of the tree: a warning (``warn_unclaimed``), not a
    failure, so a damaged session elsewhere in the root does not make every relink PARTIAL
    (and no rerun could read it).
    """
    kinds = kinds or KindRule(root)
    point = point.with_chain(_fork_chain(root, point.parent_id, kinds))
    planner = _Planner(root, kinds, opener)
    planner.visited.update((point.parent_id, *point.chain))
    level = planner.level(point, existing, own)
    for item in unreadable:
        listed = item["id"] in planner.catalogued
        if listed or (warn_unclaimed and item["code"] == IoError.code):
            summary.failed.append(item)
        elif warn_unclaimed:
            summary.warnings.append(
                f"{item['id']} cannot be read ({item['message']}); no catalog fact of this "
                "fork's tree names it, so it is left out"
            )
    return point, level


def plan_new_fork(root: Root, point: ForkPoint, kinds: KindRule | None = None) -> RelinkSummary:
    """The dry-run plan for a fork child that does not exist yet (no existing copies);
    ``kinds`` holds what the fork read of its source (``KindRule.learn``)."""
    summary = RelinkSummary(None, point.parent_id, dry_run=True)
    point, level = _plan(root, point, [], set(), summary, unreadable_sessions(root), kinds=kinds)
    _run(
        root,
        level,
        summary,
        _Parent(None, None, None, point.depth),
        OpLog(None),
        clock=now_ms,
        new_id=new_session_id,
        children=len(root.children_of(point.parent_id)),
    )
    return summary


def relink_new_child(
    root: Root,
    child_id: str,
    child_dir: Path,
    point: ForkPoint,
    lock: SessionLock,
    *,
    oplog_path: Path | None = None,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    workspace: Workspace | None = None,
    kinds: KindRule | None = None,
) -> RelinkSummary:
    """relink of a fork child ``fork`` has just published and still holds the lock of:
    its fork point is the one fork computed from the source, so the child is not re-read.
    ``workspace`` (old cwd, new cwd): the child was forked into another workspace. ``kinds``
    holds what the fork knows of its source and child, so neither log is read again."""
    summary = RelinkSummary(child_id, point.parent_id, False)
    log = OpLog(oplog_path, clock=clock, warn=summary.warnings.append)
    summary.unlisted = _refresh(root)
    unreadable = unreadable_sessions(root, unlisted=summary.unlisted)
    existing = [_open(e) for e in root.children_of(child_id)]
    point, level = _plan(root, point, existing, set(), summary, unreadable, kinds=kinds)
    _run(
        root,
        level,
        summary,
        _Parent(child_id, child_dir, lock, point.depth),
        log,
        clock=clock,
        new_id=new_id,
        children=len(root.children_of(point.parent_id)),
        workspace=workspace,
        progress=root.progress or SILENT,
    )
    return summary


def relink(
    root: Root,
    fork_child_dir: Path,
    *,
    dry_run: bool = False,
    lock: SessionLock | None = None,
    oplog_path: Path | None = None,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    unreadable: list[dict[str, Any]] | None = None,
    kinds: KindRule | None = None,
    progress: Progress = SILENT,
    refresh: bool = True,
    opener: Opener = _open,
) -> RelinkSummary:
    """Copy the subagent trees of C's fork chain under the fork child C (semantics §4).

    With ``lock`` the caller already holds C's lock; otherwise C's lock is taken for the
    whole run, or only probed in a dry run. Precondition failures raise their typed error;
    item failures are reported in the summary (see ``RelinkSummary.partial``).
    ``unreadable``: the root's sessions whose header cannot be read, found once by relink
    --all (which warns of those no fork claims once); by default found here, and each one
    not part of C's tree is a warning of this summary. ``kinds``: the rule that tells C from a
    delegation child, with what it has read so far (relink --all settles every fork with one).
    ``refresh=False``: plan against the root's listing as it is, without looking for sessions
    published since it was made (``doctor``'s dry run judges every fork against the one
    listing it reports on, and would otherwise walk every project dir again per fork).
    ``opener``: how a candidate's log is read (``Opener``).
    """
    generation = current_generation(fork_child_dir)
    if generation is None:
        raise SessionNotFound(f"{fork_child_dir} holds no session log", path=str(fork_child_dir))
    header = read_header(generation)
    if not header.is_fork_child:
        raise UsageError(
            f"{header.id} is not a fork child (a fork child is seeded, has a parentSession and "
            "no origin)",
            session=header.id,
        )
    root.entries()  # the listing the run needs anyway: the root's encoding is read from it
    kinds = kinds or KindRule(root)
    _require_user_fork(root, kinds, header.id, fork_child_dir)
    if generation.version < SUPPORTED_VERSION:
        raise unsupported_below_v4(f"fork child {header.id}", generation.version)
    root.require_writable()
    acquired: SessionLock | None = None
    if lock is None and not dry_run:
        acquired = lock = SessionLock(fork_child_dir).acquire()
    elif lock is None and running(fork_child_dir):
        raise SessionLocked(
            f"{header.id} is in use: its session.lock is held by a live process",
            lockPath=str(fork_child_dir / "session.lock"),
        )
    warn = unreadable is None
    try:
        summary = RelinkSummary(header.id, header.parent_session, dry_run)
        log = OpLog(oplog_path, dry_run=dry_run, clock=clock, warn=summary.warnings.append)
        c_log, c_facts = _read_fork_child(generation, fork_child_dir, lock, summary)
        if refresh:  # under C's lock: what a finished run made is listed
            summary.unlisted = _refresh(root)
        if unreadable is None:
            unreadable = unreadable_sessions(root, unlisted=summary.unlisted)
        parent_id = c_log.header.parent_session
        assert parent_id is not None
        parent_entry = root.entry(parent_id)
        if parent_entry is None or parent_entry.header is None:
            why = "missing" if parent_entry is None else "unreadable"
            summary.warnings.append(
                f"the parent {parent_id} is {why}; branch membership uses {header.id}'s "
                "inherited prefix and createdAt only"
            )
        point = fork_point(c_log, c_facts, parent_id, c_facts.cut - 1, header.delegation_depth)
        existing = [_open(e) for e in root.children_of(header.id)]
        own = {e.child_id for e in c_facts.own_catalog() if e.child_id is not None}
        del c_log, c_facts  # its catalog holds a fact per agent of its source: not kept
        point, level = _plan(
            root,
            point,
            existing,
            own,
            summary,
            unreadable,
            kinds=kinds,
            warn_unclaimed=warn,
            opener=opener,
        )
        top = _Parent(header.id, fork_child_dir, lock, header.delegation_depth)
        parent_header = None if parent_entry is None else parent_entry.header
        moved = None if parent_header is None else moved_workspace(parent_header.cwd, header.cwd)
        _run(
            root,
            level,
            summary,
            top,
            log,
            clock=clock,
            new_id=new_id,
            children=len(root.children_of(parent_id)),
            workspace=moved,
            progress=progress,
        )
        return summary
    finally:
        if acquired is not None:
            acquired.release()


def _require_user_fork(root: Root, kinds: KindRule, session_id: str, session_dir: Path) -> None:
    """A seeded session without ``origin`` that its parent catalogues, or that has its own
    descriptor, is a delegation child (dsh-world §4): a subagent tree under it is its own,
    and copying its parent's subagents under it would duplicate them (USAGE, nothing done)."""
    entry = root.entry(session_id)
    if entry is None or entry.session_dir != session_dir:
        entry = next((e for e in root.entries() if e.session_dir == session_dir), None)
    why = None if entry is None else kinds.why(entry)
    if why is not None:
        raise UsageError(
            f"{session_id} is a delegation child, not a fork child: {DELEGATION_WHY[why]}; "
            "relink copies subagent trees under user forks only",
            session=session_id,
        )


def _read_fork_child(
    generation: Generation, fork_child_dir: Path, lock: SessionLock | None, summary: RelinkSummary
) -> tuple[SessionLog, Facts]:
    """C's log and facts: read under its lock, a torn tail repaired first (only reported in a
    dry run, which holds no lock)."""
    if summary.dry_run:
        log = open_log(generation, collect=_APPEND_TYPES)
        if log.torn is not None:
            summary.warnings.append(
                f"{log.header.id} has a torn tail at byte {log.torn.offset}; a real run "
                "repairs it first"
            )
        return log, facts_of(log)
    appended = writer.append(
        fork_child_dir, lambda _log, _facts: [], lock=lock, collect=_APPEND_TYPES
    )
    if appended.repaired_tail:
        summary.warnings.append(f"repaired a torn tail in {appended.log.header.id}")
    return appended.log, appended.facts


class _Within:
    """The progress of one fork child inside ``relink --all``: its agents advance the run's
    one stage; the stage it would start of its own is not started."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def stage(self, what: str, total: int | None = None) -> None:
        return None

    def advance(self, count: int = 1) -> None:
        self._progress.advance(count)


def relink_all(
    root: Root,
    *,
    dry_run: bool = False,
    oplog_path: Path | None = None,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    progress: Progress = SILENT,
) -> RelinkAllResult:
    """Relink every user fork of the root, in (createdAt, id) order; one failing fork child
    (locked, below v4, unreadable) is a failed item and does not stop the others.

    A delegation child whose header looks like a fork's (``kinds.KindRule``) is no fork: its
    subagents are its own. A fork the operation log says was made with ``--no-agents`` is
    left alone (``skipped``): it has no tree on purpose; ``relink FORK_CHILD`` still copies it.
    """
    kinds = KindRule(root)
    forks = kinds.fork_children()
    on_purpose = messages.forks_without_agents(oplog_path)
    refused = unreadable_forks(root)
    result = RelinkAllResult([], [], len(forks) + len(refused), dry_run)
    for item in refused:
        result.failed.append({**item, "forkChild": item["id"]})
    unreadable = unreadable_sessions(root)  # each claimed by the fork whose tree names it
    # one stage for the whole run: the agents of every fork child, counted as they are done
    progress.stage("agents planned" if dry_run else "agents copied")
    within = _Within(progress)
    for entry in forks:
        fork_id = entry.id or entry.session_dir.name
        if fork_id in on_purpose:
            result.skipped.append({"forkChild": fork_id, "reason": NO_AGENTS_REASON})
            continue
        try:
            summary = relink(
                root,
                entry.session_dir,
                dry_run=dry_run,
                oplog_path=oplog_path,
                clock=clock,
                new_id=new_id,
                unreadable=unreadable,
                kinds=kinds,
                progress=within,
            )
        except DshForkError as exc:
            result.failed.append(
                {"id": fork_id, "code": exc.code, "message": exc.message, "forkChild": fork_id}
            )
            continue
        except OSError as exc:  # e.g. a fork child we may not read: this one fails, not all
            error = IoError.of(exc, "access")
            result.failed.append(
                {"id": fork_id, "code": error.code, "message": error.message, "forkChild": fork_id}
            )
            continue
        result.results.append(summary)
        for item in summary.problems():
            result.failed.append({**item, "forkChild": fork_id})
    claimed = {item["id"] for item in result.failed}
    for item in unreadable:
        if item["id"] in claimed:
            continue
        if item["code"] == IoError.code:  # unlisted: may hide any tree, a rerun can read it
            result.failed.append({**item, "forkChild": None})
        else:
            result.notes.append(
                f"{item['id']} cannot be read ({item['message']}); no fork's tree names it, "
                "so relink leaves it out (`dsh-fork doctor` says more)"
            )
    return result


def sweep_abandoned(
    root: Root,
    fork_children: list[str],
    *,
    unlisted: list[Path] | None = None,
    clean: frozenset[str] = frozenset(),
) -> int:
    """Remove the temps interrupted publishes left: in dirs that hold no session (the listing
    skips them) and beside the fork children and their copies (a publish that died between
    its link and its temp removal). writer.sweep_own_temps says what is removed.
    ``unlisted``: the dirs the run's ``_refresh`` left unlisted (no walk of the root);
    ``clean``: ids of copies the run published and removed the temp of (not listed again)."""
    known = root.listed_texts()
    candidates = root.candidate_dirs() if unlisted is None else unlisted
    dirs = [d for d in candidates if str(d) not in known]
    seen: set[str] = set()
    todo = list(fork_children)
    while todo:
        session_id = todo.pop()
        if session_id in seen:
            continue
        seen.add(session_id)
        entry = root.entry(session_id)
        if entry is not None and session_id not in clean:
            dirs.append(entry.session_dir)
        todo.extend(e.id for e in root.children_of(session_id) if e.id is not None)
    return sum(len(writer.sweep_own_temps(d)) for d in dirs)


def relink_arg(
    arg: str,
    root_option: str | None,
    *,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    progress: Progress = SILENT,
) -> RelinkSummary:
    """Resolve a FORK_CHILD argument and relink it (the ``relink`` command)."""
    located = locate(arg, root_option, env)
    located.root.progress = progress
    summary = relink(
        located.root,
        located.session_dir,
        dry_run=dry_run,
        oplog_path=layout.oplog_path(root_option, env),
        progress=progress,
    )
    summary.warnings[:0] = located.warnings
    if not dry_run and summary.fork_child is not None:  # preconditions held: bad input
        sweep_abandoned(  # never writes
            located.root,
            [summary.fork_child],
            unlisted=summary.unlisted,
            clean=summary.clean_copies(),
        )
    return summary


def relink_all_arg(
    root_option: str | None,
    *,
    dry_run: bool = False,
    progress: Progress = SILENT,
    env: Mapping[str, str] | None = None,
) -> RelinkAllResult:
    """Relink every fork child of the root named by ``--root`` or ``DSH_HOME``."""
    root = Root(layout.resolve_root(root_option, env), progress=progress)
    result = relink_all(
        root,
        dry_run=dry_run,
        oplog_path=layout.oplog_path(root_option, env),
        progress=progress,
    )
    if not dry_run:
        sweep_abandoned(root, [s.fork_child for s in result.results if s.fork_child])
    return result
