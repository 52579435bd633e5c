"""Turns as a user counts them: ``inspect --turns``, ``fork --turn N`` and ``diff``'s tails.

Turn N is the N-th ``turn/start`` of the log (1-based, inherited turns included, as
``data.turn`` numbers them in a healthy log). Its events run from its ``turn/start`` to the event
before the next ``turn/start``: a title, catalog facts or a fork marker written between two turns
belong to the turn before them, whose end they follow. Only the event types a summary needs are
parsed (``SUMMARY_TYPES``), one at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from msgspec import Struct, field

from .errors import InvalidBoundary, OpenTurn
from .forkdocs import Turn
from .model import TURN_TYPES, is_cut_marker
from .records import Event, dig
from .sessionlog import SessionLog

CLOSE_TURN_HINT = "give --close-turn to fork there and close the turn"
"""Named by every OPEN_TURN refusal of a fork: the option that accepts such a boundary."""

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


TurnSummary = Turn
"""One turn: where it lies, how it ended, what the user asked, what ran in it; the document's
turn itself (``turn``: its number), made as the events are folded (``summarize_events``).
``last_seq`` is the last event of the turn's span (before the next ``turn/start``);
``valid_boundary`` is set with its ``turn/end``, a valid fork boundary (an open turn has none)."""


def _opened(number: int, start_seq: int, last_seq: int) -> TurnSummary:
    """A turn at its ``turn/start``: nothing known of it yet but where it lies."""
    return TurnSummary(
        turn=number,
        start_seq=start_seq,
        end_seq=None,
        last_seq=last_seq,
        end_time=None,
        reason=None,
        user=None,
        tools=[],
        agents=[],
        inherited=False,
        valid_boundary=False,
    )


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
            current = _opened(len(turns) + 1, ev.seq, event_count - 1)
            turns.append(current)
        elif kind == "session/end-seed":
            if is_cut_marker(ev):
                cut = ev.seq
        elif current is None:
            continue
        elif kind == "turn/end":
            if current.end_seq is None:
                current.end_seq = ev.seq
                current.valid_boundary = True
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


def boundary_of_turn(log: SessionLog, turn: int, *, close_turn: bool = False) -> int:
    """The ``turn/end`` seq of turn ``turn`` (1-based; negative counts back over the
    completed turns: -1 is the last one). A turn that does not exist is INVALID_BOUNDARY, an
    open one OPEN_TURN (both exit 4) — unless ``close_turn``: then an open turn's boundary is
    its last event, which the fork closes. ``log`` is opened with ``collect=TURN_TYPES``."""
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
    if chosen.end_seq is not None:
        return chosen.end_seq
    if close_turn:
        return chosen.last_seq
    last = completed[-1].turn if completed else None
    hint = f"; the last completed turn is {last}" if last is not None else ""
    raise OpenTurn(
        f"turn {chosen.turn} is open (started at seq {chosen.start_seq}): it has no end "
        f"to fork at{hint}; {CLOSE_TURN_HINT}",
        requested=turn,
        openTurn={"turn": chosen.turn, "startSeq": chosen.start_seq},
        session=session,
    )


# -- the open turn at a boundary (fork --close-turn) ------------------------------------------

CLOSING_TYPES = frozenset(
    (
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "assistant/message",
        "tool/call",
        "tool/result",
    )
)
"""The events DSH folds to close a turn a fork cut inside (dsh-world §3)."""


class PendingCall(Struct):
    """An advertised tool call without a result: ``call_seq`` is its ``tool/call`` (it
    started), None when it never started."""

    call_id: str
    step: Any
    call_seq: int | None = None


class OpenTurnState(Struct):
    """What is open at the end of a prefix that stops inside a turn."""

    turn: Any
    """``data.turn`` of the open turn's ``turn/start``, as DSH takes it."""
    start_seq: int
    step: Any = None
    """``data.step`` of the open step, None when no step is open."""
    pending: list[PendingCall] = field(default_factory=list)
    """In the order the calls became pending."""


def open_turn_state(events: Iterable[Event]) -> OpenTurnState | None:
    """DSH's fold before it closes a forked turn (dsh-world §3), over events in seq order that
    begin at or before the open turn's ``turn/start``; None when no turn is open at the end.

    ``turn/start`` opens ``data.turn`` and forgets the open step and pending calls;
    ``turn/end`` closes it; ``step/start`` opens ``data.step``; ``step/end`` closes the step and
    forgets the pending calls; each ``tool-call`` block of an ``assistant/message`` makes its id
    pending in the message's step (a repeated id keeps its place); a ``tool/call`` marks a
    pending call started at its seq; a ``tool/result`` settles the call its
    ``message.source.callId`` names.
    """
    state: OpenTurnState | None = None
    calls: dict[str, PendingCall] = {}
    for ev in events:
        kind = ev.type
        if kind not in CLOSING_TYPES:
            continue
        data = ev.data if isinstance(ev.data, dict) else {}
        if kind == "turn/start":
            state, calls = OpenTurnState(data.get("turn"), ev.seq), {}
        elif kind == "turn/end":
            state, calls = None, {}
        elif state is None:
            continue
        elif kind == "step/start":
            state.step = data.get("step")
        elif kind == "step/end":
            state.step, calls = None, {}
        elif kind == "assistant/message":
            content = dig(data, "message", "content")
            for block in content if isinstance(content, list) else ():
                if not isinstance(block, dict) or block.get("type") != "tool-call":
                    continue
                call_id = block.get("id")
                if isinstance(call_id, str):
                    calls[call_id] = PendingCall(call_id, data.get("step"))
        elif kind == "tool/call":
            call_id = data.get("callId")
            call = calls.get(call_id) if isinstance(call_id, str) else None
            if call is not None:
                call.call_seq = ev.seq
        else:  # tool/result
            call_id = dig(data, "message", "source", "callId")
            if isinstance(call_id, str):
                calls.pop(call_id, None)
    if state is not None:
        state.pending = list(calls.values())
    return state


def open_turn_at(log: SessionLog, start_seq: int, boundary: int) -> OpenTurnState | None:
    """The state at ``boundary`` of the turn opened at ``start_seq``: its events are parsed one
    at a time (a long open turn is never held whole)."""
    return open_turn_state(log.event(seq) for seq in range(start_seq, boundary + 1))
