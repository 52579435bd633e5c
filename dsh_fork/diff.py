"""``diff``: where two sessions of a family part, and what each did after (read-only).

The common prefix is counted by comparing stored event lines byte for byte, seq by seq, which is
exactly what forks and relink copies share (they copy event bytes, never re-serialise them);
logs of the packed v0/v1 generations are compared by parsed value instead. Each side's tail,
from the first differing seq on, is summarised per turn (``turns.TurnSummary``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from msgspec import Struct, field

from . import sessiondocs as docs
from .agents import list_agents, row_document
from .kinds import header_kind
from .model import MODEL_TYPES, facts_of
from .provenance import Logged, is_copy_of, normalized
from .reader import open_log
from .results import SCHEMA_VERSION, Whole
from .sessionarg import Located
from .sessionlog import SessionLog
from .turns import turn_containing, turn_summaries

DiffSide = docs.DiffSide
"""One of the two sessions: what it is, the turn the split falls in, its tail (the turns
from the split on) and its subagents on disk, as ``list-agents`` rows (``_side``)."""


class DiffResult(Whole, Struct):
    a: DiffSide
    b: DiffSide
    relation: str
    common: int
    """Number of leading events that are byte-identical on both sides."""
    warnings: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.common == self.a.events == self.b.events

    @property
    def first_difference(self) -> int | None:
        """The first seq that differs or exists on one side only; None when identical."""
        return None if self.identical else self.common

    @property
    def differs(self) -> bool:
        """Either side has a turn after the common prefix: a turn of its own, or a shared
        turn that goes on differently. What a fork or copy adds between turns (its marker,
        title, catalog facts) is no difference (``diff --exit-code``)."""
        return any(
            turn.end_seq is None or turn.end_seq >= self.common
            for side in (self.a, self.b)
            for turn in side.tail
        )

    def to_document(self) -> docs.DiffDocument:
        return docs.DiffDocument(
            schema_version=SCHEMA_VERSION,
            a=self.a,
            b=self.b,
            relation=self.relation,
            common_prefix=self.common,
            no_common_prefix=self.common == 0,
            identical=self.identical,
            first_differing_seq=self.first_difference,
            differs=self.differs,
        )


def _lines(log: SessionLog) -> Iterator[Any]:
    """What is compared, seq by seq: stored line bytes (v2+), parsed values (v0/v1)."""
    if log.version >= 2:
        return log.raw_lines(0, log.event_count - 1) if log.event_count else iter(())
    return (normalized(ev) for ev in log.events())


def common_prefix(a: SessionLog, b: SessionLog) -> int:
    """How many leading events two logs share."""
    if a.version >= 2 and b.version >= 2:
        pairs: Iterator[tuple[Any, Any]] = zip(_lines(a), _lines(b), strict=False)
    else:
        left = (normalized(ev) for ev in a.events())
        right = (normalized(ev) for ev in b.events())
        pairs = zip(left, right, strict=False)
    return sum(1 for _ in itertools.takewhile(lambda pair: pair[0] == pair[1], pairs))


def _kind(log: SessionLog) -> docs.DiffKind:
    """``tree``'s kind by header; a seeded subagent stays ``seeded-subagent`` here (whether it
    is a copy of some original is the relation's question, not the side's)."""
    kind = header_kind(log.header)
    return "seeded-subagent" if kind == "copy" else kind


def _relation(a: SessionLog, b: SessionLog, a_logged: Logged) -> str:
    ha, hb = a.header, b.header
    if ha.id == hb.id:
        return "same id"
    if ha.parent_session == hb.id:
        return f"A is a {_kind(a).replace('-', ' ')} of B"
    if hb.parent_session == ha.id:
        return f"B is a {_kind(b).replace('-', ' ')} of A"
    if ha.parent_session is not None and ha.parent_session == hb.parent_session:
        return "siblings (same parent)"
    if is_copy_of(a_logged, b):
        return "A is a copy of B"
    b_logged = Logged(hb.id, b, facts_of(b))
    if is_copy_of(b_logged, a):
        return "B is a copy of A"
    return "no parent relation"


def _side(located: Located, log: SessionLog, split: int) -> DiffSide:
    turns = turn_summaries(log, content_from=split)
    facts = facts_of(log)
    split_event = log.event(split).type if split < log.event_count else None
    at_split = turn_containing(turns, split)
    tail = [turn for turn in turns if turn.last_seq >= split]
    agents = list_agents(located, recursive=False)
    return DiffSide(
        id=log.header.id,
        path=str(located.session_dir),
        kind=_kind(log),
        parent_session=log.header.parent_session,
        events=log.event_count,
        cut=facts.cut,
        split_event_type=split_event,
        split_turn=None if at_split is None else at_split.turn,
        tail=tail,
        subagents=[row_document(row) for row in agents.children if row.on_disk],
    )


def diff(a: Located, b: Located) -> DiffResult:
    """Compare two located sessions (semantics of ``diff``: see docs/lineage-commands.md)."""
    log_a = open_log(a.generation, collect=MODEL_TYPES)
    log_b = open_log(b.generation, collect=MODEL_TYPES)
    common = common_prefix(log_a, log_b)
    relation = _relation(log_a, log_b, Logged(log_a.header.id, log_a, facts_of(log_a)))
    result = DiffResult(
        a=_side(a, log_a, common),
        b=_side(b, log_b, common),
        relation=relation,
        common=common,
        warnings=[*a.warnings, *b.warnings],
    )
    for log in (log_a, log_b):
        if log.torn is not None:
            torn = f"{log.header.id} has a torn tail; only its complete frames are compared"
            result.warnings.append(torn)
    return result
