"""``fork --close-turn``: the events that close, in the child, a turn the boundary cut inside.

Late-v4 DSH forks inside an open turn and closes that turn in the child (dsh-world §3): right
after the end-seed marker, with the seqs that follow it and the time of the last inherited event,
one ``tool/result`` per call still pending (in the order the calls became pending), a
``step/end`` when a step is open, then ``turn/end`` with reason ``forked``. A call that had
started gets ``TOOL_OUTCOME_UNKNOWN`` (and cites its ``tool/call``): it may have run, and may
still complete in the source. A call never started gets ``TOOL_NOT_STARTED``. The shapes are
DSH's, which its read path checks exactly (format §10.2); the texts are ours.

What is open at the boundary is folded once, in ``turns.open_turn_state``; this module only turns
that state into events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from msgspec import Struct

from .results import Documented
from .turns import OpenTurnState

if TYPE_CHECKING:
    from . import forkdocs as docs

RESULT_ID_PREFIX = "forked-tool-result-"
FORKED_REASON = {"kind": "forked"}

OUTCOME_UNKNOWN = {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
NOT_STARTED = {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}

OUTCOME_UNKNOWN_TEXT = (
    "This conversation was forked while this tool call was running, so its result is not part "
    "of this branch. The call may have finished, or may still finish, in the original "
    "conversation. Do not repeat it blindly: if it can have side effects, check their current "
    "state (or ask the user) first; repeat it only if it is read-only or safe to run twice."
)
NOT_STARTED_TEXT = (
    "This conversation was forked before this tool call started, so it never ran in this "
    "branch. Run it again if it is still needed."
)


class Closer(Struct, frozen=True):
    """One closing event: its seq, type, data and the envelope keys after ``data``."""

    seq: int
    type: str
    data: dict[str, Any]
    extra: dict[str, Any]


class ClosedCall(Documented, Struct, frozen=True):
    """A pending call and the result that settles it in the child (for the report)."""

    call_id: str
    step: Any
    result_seq: int
    code: str
    call_seq: int | None
    """The seq of its ``tool/call`` (a started call), else None."""

    def to_document(self) -> docs.ClosedToolResult:
        from . import forkdocs as docs

        return docs.ClosedToolResult(
            call_id=self.call_id,
            step=self.step,
            result_seq=self.result_seq,
            code=cast("docs.ClosingCode", self.code),  # one of the two codes above
            call_seq=self.call_seq,
        )


class ClosedTurn(Documented, Struct, frozen=True):
    """What ``--close-turn`` appends after the marker, decided before anything is written."""

    turn: Any
    start_seq: int
    calls: list[ClosedCall]
    step_end_seq: int | None
    turn_end_seq: int
    events: list[Closer]

    @property
    def outcome_unknown(self) -> list[str]:
        """Calls that had started: they may still complete in the source."""
        return [c.call_id for c in self.calls if c.call_seq is not None]

    def to_document(self) -> docs.ClosedTurn:
        from . import forkdocs as docs

        return docs.ClosedTurn(
            turn=self.turn,
            start_seq=self.start_seq,
            tool_results=[call.to_document() for call in self.calls],
            step_end_seq=self.step_end_seq,
            turn_end_seq=self.turn_end_seq,
            events=len(self.events),
        )


def close(state: OpenTurnState, first_seq: int) -> ClosedTurn:
    """The closers of ``state``'s open turn, numbered from ``first_seq`` (the seq after the
    child's marker). A result's id carries its own seq, as DSH's read path requires."""
    events: list[Closer] = []
    calls: list[ClosedCall] = []
    seq = first_seq
    for call in state.pending:
        started = call.call_seq is not None
        message = {
            "id": f"{RESULT_ID_PREFIX}{call.call_id}-{seq}",
            "role": "tool",
            "toolCallId": call.call_id,
            "isError": True,
            "source": {"kind": "tool", "callId": call.call_id},
            "content": [
                {"type": "text", "text": OUTCOME_UNKNOWN_TEXT if started else NOT_STARTED_TEXT}
            ],
        }
        error = OUTCOME_UNKNOWN if started else NOT_STARTED
        data = {"turn": state.turn, "step": call.step, "message": message, "error": error}
        extra: dict[str, Any] = {"surfaceOp": "append"}
        if started:
            extra["sourceEventSeqs"] = [call.call_seq]
        events.append(Closer(seq, "tool/result", data, extra))
        calls.append(ClosedCall(call.call_id, call.step, seq, str(error["code"]), call.call_seq))
        seq += 1
    step_end = None
    if state.step is not None:
        step_end = seq
        events.append(Closer(seq, "step/end", {"turn": state.turn, "step": state.step}, {}))
        seq += 1
    turn_end = {"turn": state.turn, "reason": dict(FORKED_REASON)}
    events.append(Closer(seq, "turn/end", turn_end, {}))
    return ClosedTurn(state.turn, state.start_seq, calls, step_end, seq, events)


def unknown_warning(closed: ClosedTurn, source: str) -> str:
    """The warning of a fork that marks started calls as having an unknown outcome."""
    calls = closed.outcome_unknown
    listed = ", ".join(calls)
    return (
        f"{len(calls)} tool call{'' if len(calls) == 1 else 's'} ({listed}) had started at the "
        f"boundary: the child records {'its' if len(calls) == 1 else 'their'} outcome as unknown, "
        f"but {'it' if len(calls) == 1 else 'they'} may still complete in the source {source}"
    )
