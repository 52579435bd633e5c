"""Turns as a user counts them: ``inspect --turns``, ``fork --turn N`` and ``diff``'s tails.

Turn N is the N-th ``turn/start`` of the log (1-based, inherited turns included, as
``data.turn`` numbers them in a healthy log). Its events run from its ``turn/start`` to the event
before the next ``turn/start``: a title, catalog facts or a fork marker written between two turns
belong to the turn before them, whose end they follow. Only the event types a summary needs are
parsed (``SUMMARY_TYPES``), one at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from .errors import InvalidBoundary, OpenTurn
from .model import TURN_TYPES
from .reader import SessionLog
from .records import Event, dig

if TYPE_CHECKING:
    pass

SUMMARY_TYPES = (
    "turn/start",
    "turn/end",
    "user/message",
    "tool/call",
    "subagent/catalog",
    "session/end-seed",
)
CONTENT_TYPES = frozenset(("user/message", "tool/call", "subagent/catalog"))
FIRST_LINE_WIDTH = 80


class TurnSummary(Struct):
    """One turn: where it lies, how it ended, what the user asked, what ran in it."""

    number: int
    start_seq: int
    last_seq: int
    """The last event of the turn's span (before the next ``turn/start``)."""
    end_seq: int | None
    end_time: int | None = None
    reason: str | None = None
    user: str | None = None
    tools: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    inherited: bool = False

    @property
    def is_boundary(self) -> bool:
        """Its ``turn/end`` is a valid fork boundary; an open turn has none."""
        return self.end_seq is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "turn": self.number,
            "startSeq": self.start_seq,
            "endSeq": self.end_seq,
            "lastSeq": self.last_seq,
            "endTime": self.end_time,
            "reason": self.reason,
            "user": self.user,
            "tools": self.tools,
            "agents": self.agents,
            "inherited": self.inherited,
            "validBoundary": self.is_boundary,
        }


def first_line(message: Any) -> str | None:
    """The first non-empty line of a message's text, clipped to 80 characters."""
    content = message.get("content") if isinstance(message, dict) else None
    texts: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        texts += [
            b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)
        ]
    for text in texts:
        for raw in text.splitlines():
            line = raw.strip()
            if line:
                return line if len(line) <= FIRST_LINE_WIDTH else line[: FIRST_LINE_WIDTH - 1] + "…"
    return None


def _is_human(message: Any) -> bool:
    return dig(message, "source", "kind") == "user" if isinstance(message, dict) else False


def _agent_name(data: Any) -> str | None:
    child = data.get("childId") if isinstance(data, dict) else None
    if not isinstance(child, str):
        return None
    label = data.get("label")
    return f"{child} ({label})" if isinstance(label, str) else child


def summarize_events(
    events: Iterable[Event], event_count: int, content_from: int = 0
) -> tuple[list[TurnSummary], int]:
    """Fold the events of ``SUMMARY_TYPES`` (in seq order) into turns; returns them and the
    cut (the last tagged end-seed, 0 when none: v2+ logs). User messages, tools and agents
    are taken only from ``content_from`` on (a tail that begins inside a turn)."""
    turns: list[TurnSummary] = []
    cut = 0
    current: TurnSummary | None = None
    for ev in events:
        kind = ev.type
        if ev.seq < content_from and kind in CONTENT_TYPES:
            continue
        if kind == "turn/start":
            if current is not None:
                current.last_seq = ev.seq - 1
            current = TurnSummary(len(turns) + 1, ev.seq, event_count - 1, None)
            turns.append(current)
        elif kind == "session/end-seed":
            if isinstance(ev.data, dict) and ev.data.get("inherited") is True:
                cut = ev.seq
        elif current is None:
            continue
        elif kind == "turn/end":
            if current.end_seq is None:
                current.end_seq = ev.seq
                current.end_time = ev.time
                reason = dig(ev.data, "reason", "kind")
                current.reason = reason if isinstance(reason, str) else None
        elif kind == "user/message":
            if current.user is None and current.end_seq is None and _is_human(ev.data):
                current.user = first_line(ev.data)
        elif kind == "tool/call":
            name = dig(ev.data, "name")
            if isinstance(name, str) and name not in current.tools:
                current.tools.append(name)
        elif kind == "subagent/catalog":
            agent = _agent_name(ev.data)
            if agent is not None and agent not in current.agents:
                current.agents.append(agent)
    return turns, cut


def turn_summaries(log: SessionLog, *, content_from: int = 0) -> list[TurnSummary]:
    """Every turn of a log, those ending inside the inherited prefix marked ``inherited``;
    ``content_from``: see ``summarize_events``."""
    turns, cut = summarize_events(log.events(SUMMARY_TYPES), log.event_count, content_from)
    if log.version < 2:
        cut = log.header.seed_length or 0
    for turn in turns:
        turn.inherited = turn.end_seq is not None and turn.end_seq < cut
    return turns


def turn_containing(turns: list[TurnSummary], seq: int) -> TurnSummary | None:
    """The turn whose span holds ``seq`` (None before the first turn)."""
    found = None
    for turn in turns:
        if turn.start_seq <= seq:
            found = turn
        else:
            break
    return found if found is not None and seq <= found.last_seq else None


# -- fork --turn ----------------------------------------------------------------------------


def boundary_of_turn(log: SessionLog, turn: int) -> int:
    """The ``turn/end`` seq of turn ``turn`` (1-based; negative counts back over the
    completed turns: -1 is the last one). A turn that does not exist is INVALID_BOUNDARY, an
    open one OPEN_TURN (both exit 4). ``log`` is opened with ``collect=TURN_TYPES``."""
    marks = [ev for ev in log.collected if ev.type in TURN_TYPES]
    turns, _ = summarize_events(marks, log.event_count)
    completed = [t for t in turns if t.end_seq is not None]
    session = log.header.id
    if turn > 0 and turn <= len(turns):
        chosen = turns[turn - 1]
    elif turn < 0 and -turn <= len(completed):
        chosen = completed[turn]
    else:
        detail = (
            "the session has no turns"
            if not turns
            else f"the session has {len(turns)} turns ({len(completed)} completed)"
        )
        raise InvalidBoundary(
            f"turn {turn} does not exist: {detail}",
            requested=turn,
            turns=len(turns),
            completedTurns=len(completed),
            session=session,
        )
    if chosen.end_seq is None:
        last = completed[-1].number if completed else None
        hint = f"; the last completed turn is {last}" if last is not None else ""
        raise OpenTurn(
            f"turn {chosen.number} is open (started at seq {chosen.start_seq}): it has no end "
            f"to fork at{hint}",
            requested=turn,
            openTurn={"turn": chosen.number, "startSeq": chosen.start_seq},
            session=session,
        )
    return chosen.end_seq
