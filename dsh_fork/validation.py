"""The v4 validity checklist (format §15) as findings, never exceptions.

``inspect`` and ``doctor`` report what DSH would refuse (``error``), what only DSH's runtime
folds or dsh-fork's own conventions care about (``warning``, the informative items), and legal
states worth knowing (``info``, e.g. an open last turn). Every rule is checked in one streaming
pass: the ``Validator`` keeps small per-turn state and a few short lists (catalog facts,
descriptors, markers naming another id), never the events themselves, so a 100 MB log validates
in bounded memory.

Logs below v4 get only header- and envelope-level checks: DSH migrates them to v4 before it
writes them, so the v4 relationship rules do not apply to their stored form.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from msgspec import UNSET, Struct, field
from msgspec.structs import replace

from .errors import CorruptLog, DshForkError, SessionStale, UnsupportedFormat
from .generations import (
    MAX_SAFE_INTEGER,
    SUPPORTED_VERSION,
    Generation,
    list_generations,
    select,
)
from .layout import encode_segment, project_dir_name
from .reader import check_current, open_log, parse_recovered, peek_fields, read_header
from .records import (
    ENVELOPE_KEYS,
    MISSING,
    Event,
    Header,
    decode_source_seqs,
    dig,
    header_version,
    nonneg_int,
    safe_int,
)
from .results import Documented
from .sessionlog import SessionLog

if TYPE_CHECKING:
    from . import documents

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

# The generated v4 vocabulary (format §8.6).
KNOWN_V4_TYPES = frozenset(
    (
        "agent-preset/selected",
        "agent/inbox/spliced",
        "approval/asked",
        "approval/decided",
        "approval/policy",
        "assistant/attempt",
        "assistant/message",
        "command/done",
        "command/run",
        "compaction/end",
        "compaction/prune",
        "compaction/start",
        "compaction/summary",
        "deliverables/presented",
        "developer/message",
        "feedback/message-delete",
        "feedback/message-put",
        "feedback/record",
        "goal/change",
        "hook/invoked",
        "hook/result",
        "image/offload",
        "llm/retry",
        "llm/retry-started",
        "model/selection",
        "permission/preset",
        "plan/mode",
        "request/context",
        "request/header",
        "sandbox/mode",
        "schedule/change",
        "session-log-deepseek/delivery-accepted",
        "session/end-seed",
        "session/title",
        "session/title-llm-request",
        "step/end",
        "step/start",
        "subagent/catalog",
        "subagent/descriptor",
        "subagent/model-selection-policy",
        "system/message",
        "team/member",
        "team/message/delivered",
        "team/message/queued",
        "team/task",
        "todo/write",
        "tool-workflow/agent-end",
        "tool-workflow/agent-start",
        "tool-workflow/run-end",
        "tool-workflow/run-start",
        "tool/call",
        "tool/ptc-dispatch",
        "tool/ptc-dispatch-start",
        "tool/result",
        "turn/end",
        "turn/start",
        "user/message",
        "web/deepseek-search-llm-request",
        "workspace/changes",
    )
)
SURFACE_TYPES = frozenset(
    ("system/message", "developer/message", "user/message", "assistant/message", "tool/result")
)

# Types whose ``data`` DSH relates to other events, hence must be an object (format §15).
OBJECT_DATA_TYPES = SURFACE_TYPES | frozenset(
    (
        "session/end-seed",
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "assistant/attempt",
        "tool/call",
        "request/header",
        "request/context",
        "session/title",
        "command/run",
        "command/done",
        "compaction/start",
        "compaction/end",
        "compaction/prune",
        "compaction/summary",
        "llm/retry",
        "llm/retry-started",
        "tool/ptc-dispatch",
        "tool/ptc-dispatch-start",
    )
)
STEP_BOUND_TYPES = frozenset(
    (
        "assistant/message",
        "tool/call",
        "tool/result",
        "system/message",
        "developer/message",
        "assistant/attempt",
    )
)
TURN_BOUND_TYPES = frozenset(("request/header", "request/context"))
DELIVERY_TYPE = "session-log-deepseek/delivery-accepted"
FINDINGS_PER_CODE = 50
"""Findings kept per code and session; the rest are counted in one summary finding."""


class Finding(Documented, Struct, frozen=True):
    """One checklist result; ``seq`` names the event it is about, when there is one."""

    severity: Severity
    code: str
    message: str
    seq: int | None = None

    def to_document(self) -> documents.LogFinding:
        from . import documents

        seq = UNSET if self.seq is None else self.seq
        return documents.LogFinding(self.severity, self.code, self.message, seq)


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """``{"error": n, "warning": n, "info": n}``."""
    out: dict[str, int] = dict.fromkeys(SEVERITIES, 0)
    for finding in findings:
        out[finding.severity] += 1
    return out


def _same_value(a: Any, b: Any) -> bool:
    """JavaScript ``===`` on parsed JSON: objects and arrays are never identical."""
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def _repair_number(message_id: str, prefix: str) -> int | None:
    """The trailing number of a ``<prefix><n>`` repair id, or None."""
    if not message_id.startswith(prefix):
        return None
    rest = message_id[len(prefix) :]
    if not rest or not rest.isascii() or not rest.isdigit():
        return None
    return int(rest)


class _Call(Struct):
    name: Any
    arguments: Any
    started: bool = False
    resolved: bool = False


class _State(Struct, eq=False):
    """State of one concern of the checks."""


class _Envelope(_State):
    """Envelope checks: stateless but for the count of events checked (pre-v4 logs)."""

    events: int = 0


class _Lifecycle(_State):
    """Turns, steps, tool calls, compaction brackets and commands."""

    next_turn: int = 1
    open_turn: int | None = None
    open_turn_seq: int | None = None
    open_step: int | None = None
    next_step: int = 1
    calls: dict[str, _Call] = field(default_factory=dict)
    pending: int = 0
    """How many advertised calls of the open turn have no result yet."""
    compaction_open: int | None = None
    commands_run: set[str] = field(default_factory=set)
    commands_done: set[str] = field(default_factory=set)
    turn_ends: int = 0


class _Titles(_State):
    """Titles cite earlier human user messages."""

    human_messages: set[int] = field(default_factory=set)


class _Catalog(_State):
    """Catalog facts and descriptors, judged once the cut is known."""

    facts: list[tuple[int, Any]] = field(default_factory=list)
    descriptors: list[tuple[int, str | None]] = field(default_factory=list)


class _Markers(_State):
    """Tagged end-seed markers (the cut, the header's isSeeded) and delivery markers naming
    another session, judged once the cut is known."""

    tagged: list[int] = field(default_factory=list)
    foreign_markers: list[tuple[int, str]] = field(default_factory=list)


class Validator:
    """Streaming checker: ``feed`` every event in seq order, then ``finish``.

    Its state is kept by concern, each group declared below (``_State``). A plain class (not
    a record): a validator is made once per log, and ``inspect`` imports this module on every
    run.
    """

    def __init__(self, header: Header, version: int) -> None:
        self.header = header
        self.version = version
        self.findings: list[Finding] = []
        self._per_code: dict[str, int] = {}
        self._overflow: dict[str, tuple[Severity, int]] = {}
        self.envelope = _Envelope()
        self.lifecycle = _Lifecycle()
        self.titles = _Titles()
        self.catalog = _Catalog()
        self.markers = _Markers()
        self.finished = False
        self.full = version >= SUPPORTED_VERSION
        """Whether the v4 relationship rules apply (only to v4 logs)."""

    @property
    def turn_ends(self) -> int:
        return self.lifecycle.turn_ends

    @property
    def open_step(self) -> int | None:
        return self.lifecycle.open_step

    # -- recording --------------------------------------------------------------------------

    def add(self, severity: Severity, code: str, message: str, seq: int | None = None) -> None:
        seen = self._per_code.get(code, 0)
        self._per_code[code] = seen + 1
        if seen < FINDINGS_PER_CODE:
            self.findings.append(Finding(severity, code, message, seq))
        else:
            _, extra = self._overflow.get(code, (severity, 0))
            self._overflow[code] = (severity, extra + 1)

    def _lifecycle(self, message: str, seq: int) -> None:
        self.add("error", "LIFECYCLE", message, seq)

    # -- the pass ---------------------------------------------------------------------------

    def feed(self, ev: Event) -> None:
        """Check one event; the common, valid case costs a handful of dict lookups."""
        kind = ev.type
        obj = ev.obj
        if (
            # four keys with time and data present can only be type, seq, time, data
            (len(obj) != 4 and not obj.keys() <= ENVELOPE_KEYS)
            or ev.time is None
            or ev.data is MISSING
            or ev.lenient
            or ("ignorable" in obj and obj["ignorable"] is not True)
        ) and ev.raw is not None:  # packed-row members (v0/v1) have no envelope of their own
            self._envelope(ev)
        if not self.full:
            self.envelope.events += 1
            if kind == "turn/end":
                self.lifecycle.turn_ends += 1
            elif kind == "session/end-seed" and self.version >= 2:
                # v2/v3 as v4: the last tagged marker is the cut (format §7.4).
                data = ev.data
                if type(data) is dict and data.get("inherited") is True:
                    self.markers.tagged.append(ev.seq)
            return
        if kind not in KNOWN_V4_TYPES:
            self._unknown(ev)
            return
        op = obj.get("surfaceOp", MISSING)
        if kind in SURFACE_TYPES:
            if op != "append":
                self._surface_op(ev, op)
        elif op is not MISSING:
            self.add("error", "SURFACE", f"surfaceOp is not allowed on {kind}", ev.seq)
        if "sourceEventSeqs" in obj:
            self._source_seqs(ev, known=True)
        data = ev.data
        if type(data) is not dict and kind in OBJECT_DATA_TYPES:
            self.add("error", "EVENT_DATA", f"{kind} data is not an object", ev.seq)
            if kind not in ("turn/start", "turn/end"):
                return
            data = {}  # keep counting turns, so one bad event does not cascade
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, ev, data)

    # -- the common, valid case -------------------------------------------------------------

    def quick(self, obj: dict[str, Any], seq: int) -> str | None:
        """``feed`` of the event parsed (strictly) to ``obj``, expected at ``seq``, when it is
        of a common type and ``feed`` would find nothing: the state changes as ``feed`` changes
        it, and its type is returned. None, with nothing changed, in every other case: the
        caller then builds the ``Event`` and ``feed`` decides and words any finding.

        No ``Event`` is built and no finding can come from here, so a rule is still stated
        once (in ``feed`` and its handlers); what is here is only the condition under which
        those rules find nothing, and what they then record. A line as DSH writes it holds
        exactly ``type, seq, time, data`` (and ``surfaceOp`` on the surface types), so the
        envelope is checked by counting its keys.
        """
        try:
            kind: str = obj["type"]
            check, keys = _QUICK[kind]
            number, time, data = obj["seq"], obj["time"], obj["data"]
        except (KeyError, TypeError):  # a type left to ``feed``, no type name, a key missing
            return None
        if (
            len(obj) != keys
            or (keys == _SURFACE_KEYS and obj.get("surfaceOp") != "append")
            or type(number) is not int
            or number != seq
            or type(time) is not int
            or not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER
            or type(data) is not dict
            or not self.full
            or not check(self, data, seq)
        ):
            return None
        return kind

    def _quick_plain(self, data: dict[str, Any], seq: int) -> bool:
        return True  # a type ``feed`` relates to nothing: its envelope was all there was

    def _quick_turn_start(self, data: dict[str, Any], seq: int) -> bool:
        life = self.lifecycle
        number = data.get("turn")
        if (
            type(number) is not int
            or number != life.next_turn
            or number > MAX_SAFE_INTEGER
            or life.open_turn is not None
            or life.compaction_open is not None
        ):
            return False
        life.open_turn = number
        life.open_turn_seq = seq
        life.next_turn = number + 1
        life.open_step = None
        life.next_step = 1
        life.calls = {}
        life.pending = 0
        return True

    def _quick_turn_end(self, data: dict[str, Any], seq: int) -> bool:
        life = self.lifecycle
        number = data.get("turn")
        if (
            life.open_turn is None
            or type(number) is not int
            or number != life.open_turn
            or number > MAX_SAFE_INTEGER
            or life.open_step is not None
            or life.pending
            or life.compaction_open is not None
        ):
            return False
        life.turn_ends += 1
        life.open_turn = None
        life.open_turn_seq = None
        life.calls = {}
        return True

    def _quick_step_start(self, data: dict[str, Any], seq: int) -> bool:
        life = self.lifecycle
        turn, step = data.get("turn"), data.get("step")
        if (
            life.open_turn is None
            or type(turn) is not int
            or turn != life.open_turn
            or life.open_step is not None
            or type(step) is not int
            or step != life.next_step
        ):
            return False
        life.open_step = step
        life.next_step = step + 1
        return True

    def _quick_step_end(self, data: dict[str, Any], seq: int) -> bool:
        life = self.lifecycle
        turn, step = data.get("turn"), data.get("step")
        if (
            life.open_step is None
            or type(turn) is not int
            or turn != life.open_turn
            or type(step) is not int
            or step != life.open_step
            or life.pending
        ):
            return False
        life.open_step = None
        return True

    def _quick_bound(self, data: dict[str, Any], *, step: bool) -> bool:
        """``_bound`` when it finds nothing."""
        life = self.lifecycle
        if life.open_turn is None:
            return False
        turn = data.get("turn", life.open_turn)
        if type(turn) is not int or turn != life.open_turn:
            return False
        if not step:
            return True
        if life.open_step is None:
            return False
        number = data.get("step", life.open_step)
        return type(number) is int and number == life.open_step

    def _quick_turn_bound(self, data: dict[str, Any], seq: int) -> bool:
        return self._quick_bound(data, step=False)

    def _quick_step_bound(self, data: dict[str, Any], seq: int) -> bool:
        return self._quick_bound(data, step=True)

    def _quick_user_message(self, data: dict[str, Any], seq: int) -> bool:
        source = data.get("source")
        if type(source) is dict and source.get("kind") == "user":
            self.titles.human_messages.add(seq)
        return True

    def _quick_assistant_message(self, data: dict[str, Any], seq: int) -> bool:
        if not self._quick_bound(data, step=True):
            return False
        message = data.get("message")
        content = message.get("content") if type(message) is dict else None
        if type(content) is not list:
            return True
        blocks = [b for b in content if type(b) is dict and b.get("type") == "tool-call"]
        if not blocks:
            return True
        calls = self.lifecycle.calls
        ids: list[Any] = [block.get("id") for block in blocks]
        if not all(
            type(call_id) is str and call_id and call_id not in calls for call_id in ids
        ) or len(set(ids)) != len(ids):
            return False
        for block, call_id in zip(blocks, ids, strict=True):
            calls[call_id] = _Call(block.get("name"), block.get("arguments"))
        self.lifecycle.pending += len(blocks)
        return True

    def _quick_tool_call(self, data: dict[str, Any], seq: int) -> bool:
        if not self._quick_bound(data, step=True):
            return False
        call_id = data.get("callId")
        call = self.lifecycle.calls.get(call_id) if type(call_id) is str else None
        name, arguments = data.get("name"), data.get("arguments")
        if (
            call is None
            or call.started
            or type(name) is not str
            or type(arguments) is not str
            or name != call.name
            or arguments != call.arguments
        ):
            return False
        call.started = True
        return True

    def _quick_tool_result(self, data: dict[str, Any], seq: int) -> bool:
        if not self._quick_bound(data, step=True):
            return False
        message = data.get("message")
        call_id = message.get("toolCallId") if type(message) is dict else None
        call = self.lifecycle.calls.get(call_id) if type(call_id) is str else None
        if call is None or call.resolved or not call.started:
            return False  # a call never started needs the repair rules
        call.resolved = True
        self.lifecycle.pending -= 1
        return True

    def _unknown(self, ev: Event) -> None:
        if ev.obj.get("ignorable") is True:
            self._source_seqs(ev, known=False)
            return
        self.add(
            "error",
            "UNKNOWN_EVENT",
            f"unknown event type {ev.type!r} without ignorable: true "
            "(DSH refuses the whole log as written by a newer harness)",
            ev.seq,
        )

    def _envelope(self, ev: Event) -> None:
        obj = ev.obj
        if not obj.keys() <= ENVELOPE_KEYS:
            extra = ", ".join(sorted(set(obj) - ENVELOPE_KEYS))
            self.add("error", "ENVELOPE", f"envelope keys not allowed: {extra}", ev.seq)
        if ev.time is None:
            self.add("error", "ENVELOPE", "time is not a safe integer", ev.seq)
        if ev.data is MISSING:
            self.add("error", "ENVELOPE", "data is missing", ev.seq)
        if "ignorable" in obj and obj["ignorable"] is not True:
            self.add("error", "ENVELOPE", "ignorable is present but not true", ev.seq)
        if ev.lenient:
            self.add(
                "warning",
                "LINE_ENCODING",
                "line is not strict UTF-8 JSON (invalid UTF-8, a lone surrogate escape or an "
                "oversized number); DSH reads it leniently and dsh-fork copies its bytes as stored",
                ev.seq,
            )

    def _surface_op(self, ev: Event, op: Any) -> None:
        if op is MISSING:
            self.add("error", "SURFACE", f"{ev.type} without surfaceOp", ev.seq)
            return
        problem = _replace_problem(op, ev.seq)
        if problem is not None:
            self.add("error", "SURFACE", f"{ev.type} surfaceOp {problem}", ev.seq)

    def _source_seqs(self, ev: Event, *, known: bool) -> None:
        stored = ev.obj.get("sourceEventSeqs", MISSING)
        if stored is MISSING:
            return
        try:
            decoded = decode_source_seqs(stored, ev.seq)
        except ValueError as exc:
            self.add("error", "SURFACE", f"sourceEventSeqs: {exc}", ev.seq)
            return
        if not known:
            return
        if ev.type not in SURFACE_TYPES or ev.type == "assistant/message":
            self.add("error", "SURFACE", f"sourceEventSeqs is not allowed on {ev.type}", ev.seq)
        elif not decoded:
            self.add("error", "SURFACE", "sourceEventSeqs is empty", ev.seq)

    # -- turns and steps --------------------------------------------------------------------

    def _turn_start(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        number = nonneg_int(data.get("turn"))
        if life.open_turn is not None:
            self._lifecycle(
                f"turn/start while turn {life.open_turn} (seq {life.open_turn_seq}) is open",
                ev.seq,
            )
        if number != life.next_turn:
            self._lifecycle(
                f"turn/start numbered {data.get('turn')!r}, expected {life.next_turn}",
                ev.seq,
            )
        self._compaction_boundary(ev)
        life.open_turn = number if number is not None else life.next_turn
        life.open_turn_seq = ev.seq
        life.next_turn = life.open_turn + 1
        life.open_step = None
        life.next_step = 1
        life.calls = {}
        life.pending = 0

    def _turn_end(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        life.turn_ends += 1
        number = nonneg_int(data.get("turn"))
        if life.open_turn is None:
            self._lifecycle("turn/end without an open turn", ev.seq)
        else:
            if number != life.open_turn:
                self._lifecycle(
                    f"turn/end for turn {data.get('turn')!r} while turn {life.open_turn} is open",
                    ev.seq,
                )
            if life.open_step is not None:
                self._lifecycle(f"turn/end while step {life.open_step} is open", ev.seq)
            self._unresolved_check("turn/end", ev.seq)
        self._compaction_boundary(ev)
        life.open_turn = None
        life.open_turn_seq = None
        life.open_step = None
        life.calls = {}
        life.pending = 0

    def _step_start(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        if life.open_turn is None:
            self._lifecycle("step/start without an open turn", ev.seq)
            return
        turn = data.get("turn")
        step = data.get("step")
        if type(step) is not int:
            step = nonneg_int(step)
        if turn != life.open_turn or type(turn) is not int:
            self._lifecycle(
                f"step/start names turn {data.get('turn')!r} inside turn {life.open_turn}",
                ev.seq,
            )
        if life.open_step is not None:
            self._lifecycle(f"step/start while step {life.open_step} is open", ev.seq)
        if step != life.next_step:
            self._lifecycle(
                f"step/start numbered {data.get('step')!r}, expected {life.next_step}",
                ev.seq,
            )
        life.open_step = step if step is not None else life.next_step
        life.next_step = life.open_step + 1

    def _step_end(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        if life.open_step is None:
            self._lifecycle("step/end without an open step", ev.seq)
            return
        turn = data.get("turn")
        step = data.get("step")
        if (
            turn != life.open_turn
            or step != life.open_step
            or type(turn) is not int
            or type(step) is not int
        ) and (nonneg_int(turn), nonneg_int(step)) != (
            life.open_turn,
            life.open_step,
        ):
            self._lifecycle(
                f"step/end for turn {data.get('turn')!r} step {data.get('step')!r} while "
                f"turn {life.open_turn} step {life.open_step} is open",
                ev.seq,
            )
        self._unresolved_check("step/end", ev.seq)
        life.open_step = None

    def _unresolved_check(self, what: str, seq: int) -> None:
        if self.lifecycle.pending:
            pending = ", ".join(self.unresolved())
            self._lifecycle(f"{what} with unresolved tool calls: {pending}", seq)

    def unresolved(self) -> list[str]:
        """Advertised calls of the open turn without a result."""
        return [call_id for call_id, call in self.lifecycle.calls.items() if not call.resolved]

    def _bound(self, ev: Event, data: dict[str, Any], *, step: bool) -> bool:
        """Whether ``ev`` sits in the open turn (and step); a finding when it does not."""
        life = self.lifecycle
        if life.open_turn is None:
            self._lifecycle(f"{ev.type} outside a turn", ev.seq)
            return False
        turn = data.get("turn", life.open_turn)
        if (type(turn) is not int or turn != life.open_turn) and nonneg_int(turn) != life.open_turn:
            self._lifecycle(f"{ev.type} names turn {turn!r} inside turn {life.open_turn}", ev.seq)
        if not step:
            return True
        if life.open_step is None:
            self._lifecycle(f"{ev.type} outside a step (turn {life.open_turn})", ev.seq)
            return False
        number = data.get("step", life.open_step)
        if (type(number) is not int or number != life.open_step) and nonneg_int(
            number
        ) != life.open_step:
            self._lifecycle(f"{ev.type} names step {number!r} inside step {life.open_step}", ev.seq)
        return True

    def _step_bound(self, ev: Event, data: dict[str, Any]) -> None:
        self._bound(ev, data, step=True)

    def _turn_bound(self, ev: Event, data: dict[str, Any]) -> None:
        self._bound(ev, data, step=False)

    # -- tool calls -------------------------------------------------------------------------

    def _assistant_message(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        if not self._bound(ev, data, step=True):
            return
        if ev.obj.get("surfaceOp") != "append":
            return
        message = data.get("message")
        content = message.get("content") if type(message) is dict else None
        if type(content) is not list:
            return
        for block in content:
            if type(block) is not dict or block.get("type") != "tool-call":
                continue
            call_id = block.get("id")
            if not isinstance(call_id, str) or not call_id:
                self._lifecycle("tool-call block without a non-empty id", ev.seq)
                continue
            if call_id in life.calls:
                self._lifecycle(f"tool call {call_id} advertised twice in one turn", ev.seq)
                continue
            life.calls[call_id] = _Call(block.get("name"), block.get("arguments"))
            life.pending += 1

    def _tool_call(self, ev: Event, data: dict[str, Any]) -> None:
        if not self._bound(ev, data, step=True):
            return
        call_id = data.get("callId")
        call = self.lifecycle.calls.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            self._lifecycle(f"tool/call {call_id!r} was not advertised in this turn", ev.seq)
            return
        name, arguments = data.get("name"), data.get("arguments")
        if call.started:
            self._lifecycle(f"tool/call {call_id} started twice", ev.seq)
        elif not (  # plain strings, the usual case, compare without a call
            type(name) is str
            and type(arguments) is str
            and name == call.name
            and arguments == call.arguments
        ) and not (_same_value(call.name, name) and _same_value(call.arguments, arguments)):
            self._lifecycle(
                f"tool/call {call_id} name or arguments differ from its advertisement", ev.seq
            )
        call.started = True

    def _tool_result(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        if type(ev.obj.get("surfaceOp")) is dict:  # a replacement only rewrites content
            self._bound(ev, data, step=False)
            return
        if not self._bound(ev, data, step=True):
            return
        message = data.get("message")
        call_id = message.get("toolCallId") if isinstance(message, dict) else None
        if not isinstance(call_id, str) or not isinstance(message, dict):
            self._lifecycle("tool/result without message.toolCallId", ev.seq)
            return
        call = life.calls.get(call_id)
        if call is None:
            self._lifecycle(f"tool/result for call {call_id} that was not advertised", ev.seq)
            return
        if call.resolved:
            self._lifecycle(f"tool/result for call {call_id}, which is already resolved", ev.seq)
            return
        call.resolved = True
        life.pending -= 1
        if call.started:
            return
        message_id = message.get("id")
        message_id = message_id if isinstance(message_id, str) else ""
        forked = _repair_number(message_id, f"forked-tool-result-{call_id}-")
        interrupted = _repair_number(message_id, f"interrupted-tool-result-{call_id}-")
        if forked is None and interrupted is None:
            self._lifecycle(
                f"tool/result for call {call_id}, which was never started, is not a "
                "TOOL_NOT_STARTED repair",
                ev.seq,
            )
            return
        if forked is not None:
            problem = _fork_closer_problem(ev, message, call_id, forked)
            if problem is not None:
                self._lifecycle(f"fork closer for call {call_id}: {problem}", ev.seq)

    # -- other relationships ----------------------------------------------------------------

    def _user_message(self, ev: Event, data: dict[str, Any]) -> None:
        if dig(data, "source", "kind") == "user":
            self.titles.human_messages.add(ev.seq)

    def _end_seed(self, ev: Event, data: dict[str, Any]) -> None:
        if data.get("inherited") is True:
            self.markers.tagged.append(ev.seq)
        self.lifecycle.compaction_open = None  # every end-seed expires an open compaction bracket

    def _compaction_start(self, ev: Event, data: dict[str, Any]) -> None:
        self.lifecycle.compaction_open = ev.seq

    def _compaction_end(self, ev: Event, data: dict[str, Any]) -> None:
        self.lifecycle.compaction_open = None

    def _compaction_boundary(self, ev: Event) -> None:
        life = self.lifecycle
        if life.compaction_open is not None:
            self._lifecycle(
                f"compaction bracket opened at seq {life.compaction_open} crosses a turn boundary",
                ev.seq,
            )
            life.compaction_open = None

    def _command_run(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        command_id = data.get("commandId")
        if not isinstance(command_id, str):
            self._lifecycle("command/run without a commandId", ev.seq)
            return
        if command_id in life.commands_run:
            self._lifecycle(f"commandId {command_id} is used twice", ev.seq)
        life.commands_run.add(command_id)

    def _command_done(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        command_id = data.get("commandId")
        if not isinstance(command_id, str) or command_id not in life.commands_run:
            self._lifecycle(f"command/done {command_id!r} follows no command/run", ev.seq)
        elif command_id in life.commands_done:
            self._lifecycle(f"command/done {command_id} is recorded twice", ev.seq)
        else:
            life.commands_done.add(command_id)

    def _title(self, ev: Event, data: dict[str, Any]) -> None:
        seqs = data.get("messageSeqs")
        user = dig(data, "source", "kind") == "user"
        if not isinstance(seqs, list):
            self.add("error", "TITLE", "session/title messageSeqs is not a list", ev.seq)
            return
        if user:
            if seqs:
                self.add("error", "TITLE", "a user title must have empty messageSeqs", ev.seq)
            return
        values = [nonneg_int(s) for s in seqs]
        if not values:
            self.add("error", "TITLE", "a non-user title must cite user messages", ev.seq)
        elif len(set(values)) != len(values):
            self.add("error", "TITLE", "session/title messageSeqs has duplicates", ev.seq)
        else:
            bad = [
                s for s, v in zip(seqs, values, strict=True) if v not in self.titles.human_messages
            ]
            if bad:
                self.add(
                    "error",
                    "TITLE",
                    f"session/title cites {bad!r}, which are not earlier human user messages",
                    ev.seq,
                )

    def _catalog(self, ev: Event, data: Any) -> None:
        self.catalog.facts.append((ev.seq, ev.data))

    def _descriptor(self, ev: Event, data: Any) -> None:
        from .catalog import descriptor_problem  # a subagent's log only: not at start-up

        self.catalog.descriptors.append((ev.seq, descriptor_problem(ev.data)))

    def _delivery(self, ev: Event, data: Any) -> None:
        data = ev.data
        if not isinstance(data, dict):
            self.add("error", "DELIVERY_MARKER", "delivery marker data is not an object", ev.seq)
            return
        raw_version = data.get("sessionFormatVersion", 0)
        version = nonneg_int(raw_version)
        if version is None:
            self.add(
                "error",
                "DELIVERY_MARKER",
                f"delivery marker sessionFormatVersion {raw_version!r} is not a non-negative "
                "safe integer",
                ev.seq,
            )
            return
        if version != self.version:
            return
        session_id = data.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            self.add("error", "DELIVERY_MARKER", "delivery marker without sessionId", ev.seq)
            return
        through = safe_int(data.get("throughSeq"))
        if through is None or through >= ev.seq:
            self.add(
                "error",
                "DELIVERY_MARKER",
                f"delivery marker throughSeq {data.get('throughSeq')!r} is not below its seq",
                ev.seq,
            )
        if session_id != self.header.id:
            self.markers.foreign_markers.append((ev.seq, session_id))

    def _groups(self) -> tuple[_State, ...]:
        """Every concern's state (a test compares two passes by them)."""
        return (self.envelope, self.lifecycle, self.titles, self.catalog, self.markers)

    # -- the end ----------------------------------------------------------------------------

    @property
    def cut(self) -> int:
        if self.version < 2:
            return self.header.seed_length or 0
        return self.markers.tagged[-1] if self.markers.tagged else 0

    def finish(self) -> list[Finding]:
        """Rules that need the whole log (the cut, the open turn); returns every finding."""
        life = self.lifecycle
        if self.finished:
            return self.findings
        self.finished = True
        if not self.full:
            self._header_rules()
            self.add(
                "info",
                "OLD_GENERATION",
                f"generation v{self.version}: only header and envelope checks apply (DSH "
                "migrates it to v4 the next time it writes the session)",
            )
            return self._close()
        self._header_rules()
        cut = self.cut
        self._catalog_rules(cut)
        self._descriptor_rules(cut)
        for seq, session_id in self.markers.foreign_markers:
            if seq < cut and self.header.parent_session is not None:
                continue
            self.add(
                "error",
                "DELIVERY_MARKER",
                f"delivery marker names {session_id!r}, not this session "
                f"({'own range' if seq >= cut else 'no parentSession'})",
                seq,
            )
        if life.open_turn is not None:
            parts = [f"turn {life.open_turn} is open (started at seq {life.open_turn_seq})"]
            if life.open_step is not None:
                parts.append(f"step {life.open_step} is open")
            pending = self.unresolved()
            if pending:
                parts.append(f"unresolved tool calls: {', '.join(pending)}")
            self.add("info", "OPEN_TURN", "; ".join(parts), life.open_turn_seq)
        return self._close()

    def _header_rules(self) -> None:
        header = self.header
        if self.version < 2:
            seed = header.seed_length
            if seed is not None and seed > self.envelope.events:
                self.add(
                    "error",
                    "SEEDED_MISMATCH",
                    f"header seedLength {seed} exceeds the event count {self.envelope.events}",
                )
            return
        if header.is_seeded and not self.markers.tagged:
            self.add(
                "error",
                "SEEDED_MISMATCH",
                'header isSeeded is true but no session/end-seed {"inherited":true} exists',
            )
        elif not header.is_seeded and self.markers.tagged:
            self.add(
                "error",
                "SEEDED_MISMATCH",
                "header isSeeded is false but the log has tagged end-seed markers",
                self.markers.tagged[0],
            )

    def _catalog_rules(self, cut: int) -> None:
        if not self.catalog.facts:
            return
        from .catalog import catalog_problem  # a parent's log only: not at start-up

        seen: dict[str, int] = {}
        for seq, data in self.catalog.facts:
            if seq < cut:
                continue
            problem = catalog_problem(data)
            if problem is not None:
                self.add("error", "CATALOG_INVALID", problem, seq)
                continue
            child = data["childId"]
            if child in seen:
                self.add(
                    "error",
                    "CATALOG_DUPLICATE",
                    f"duplicate own-range catalog childId {child} (first at seq {seen[child]})",
                    seq,
                )
            else:
                seen[child] = seq

    def _descriptor_rules(self, cut: int) -> None:
        if self.header.origin != "subagent":
            return
        own = [(seq, problem) for seq, problem in self.catalog.descriptors if seq >= cut]
        for seq, problem in own:
            if problem is not None:
                self.add(
                    "warning", "DESCRIPTOR", f"own-range descriptor is invalid: {problem}", seq
                )
        valid = [seq for seq, problem in own if problem is None]
        if len(valid) == 1:
            return
        if not own:
            inherited = any(seq < cut for seq, _ in self.catalog.descriptors)
            note = " (only an inherited one)" if inherited else ""
            message = f"subagent child has no own-range descriptor{note}"
        else:
            message = f"subagent child has {len(valid)} valid own-range descriptors, not exactly 1"
        self.add("warning", "DESCRIPTOR", message)

    def own_catalog(self) -> list[tuple[int, Any]]:
        """Own-range catalog facts (seq, data), valid or not."""
        cut = self.cut
        return [(seq, data) for seq, data in self.catalog.facts if seq >= cut]

    def _close(self) -> list[Finding]:
        for code, (severity, extra) in self._overflow.items():
            self.findings.append(Finding(severity, code, f"{extra} more {code} findings not shown"))
        self._overflow = {}
        return self.findings


def _replace_problem(op: Any, seq: int) -> str | None:
    if not isinstance(op, dict) or set(op) != {"op", "startSeq", "endSeq"}:
        return 'must be "append" or {"op":"replace","startSeq":S,"endSeq":E}'
    if op["op"] != "replace":
        return 'op must be "replace"'
    start, end = nonneg_int(op["startSeq"]), nonneg_int(op["endSeq"])
    if start is None or end is None or start >= seq or end >= seq:
        return "startSeq/endSeq must be non-negative integers below the event's seq"
    return None


def _fork_closer_problem(
    ev: Event, message: dict[str, Any], call_id: str, number: int
) -> str | None:
    if number != ev.seq:
        return f"the number in its id is {number}, not its own seq {ev.seq}"
    if "sourceEventSeqs" in ev.obj:
        return "an appended closer has no sourceEventSeqs"
    if message.get("role") != "tool" or message.get("isError") is not True:
        return "it must have role tool and isError true"
    if message.get("toolCallId") != call_id:
        return "toolCallId differs from the call"
    content = message.get("content")
    if (
        not isinstance(content, list)
        or len(content) != 1
        or not isinstance(content[0], dict)
        or content[0].get("type") != "text"
    ):
        return "it must hold exactly one text block"
    return None


_HANDLERS: dict[str, Any] = {
    "turn/start": Validator._turn_start,
    "turn/end": Validator._turn_end,
    "step/start": Validator._step_start,
    "step/end": Validator._step_end,
    "assistant/message": Validator._assistant_message,
    "tool/call": Validator._tool_call,
    "tool/result": Validator._tool_result,
    "system/message": Validator._step_bound,
    "developer/message": Validator._step_bound,
    "assistant/attempt": Validator._step_bound,
    "request/header": Validator._turn_bound,
    "request/context": Validator._turn_bound,
    "user/message": Validator._user_message,
    "session/end-seed": Validator._end_seed,
    "compaction/start": Validator._compaction_start,
    "compaction/end": Validator._compaction_end,
    "command/run": Validator._command_run,
    "command/done": Validator._command_done,
    "session/title": Validator._title,
    "subagent/catalog": Validator._catalog,
    "subagent/descriptor": Validator._descriptor,
    DELIVERY_TYPE: Validator._delivery,
}


_Quick = Callable[[Validator, dict[str, Any], int], bool]
_QUICK_HANDLERS: dict[str, _Quick] = {
    "turn/start": Validator._quick_turn_start,
    "turn/end": Validator._quick_turn_end,
    "step/start": Validator._quick_step_start,
    "step/end": Validator._quick_step_end,
    "assistant/message": Validator._quick_assistant_message,
    "tool/call": Validator._quick_tool_call,
    "tool/result": Validator._quick_tool_result,
    "system/message": Validator._quick_step_bound,
    "developer/message": Validator._quick_step_bound,
    "assistant/attempt": Validator._quick_step_bound,
    "request/header": Validator._quick_turn_bound,
    "request/context": Validator._quick_turn_bound,
    "user/message": Validator._quick_user_message,
}
# Every known type: its happy path where ``feed`` relates it to other events, else only its
# envelope (the rare related types, catalog facts, titles, markers, commands, always take
# ``feed``).
_SURFACE_KEYS = 5
"""type, seq, time, data and surfaceOp; the other types have the first four only."""
_QUICK: dict[str, tuple[_Quick, int]] = {
    kind: (_QUICK_HANDLERS.get(kind, Validator._quick_plain), 4 + (kind in SURFACE_TYPES))
    for kind in KNOWN_V4_TYPES
    if kind in _QUICK_HANDLERS or kind not in _HANDLERS
}


# -- file-level rules -------------------------------------------------------------------------


def binding_problem(session_dir: str | Path, header: Header) -> str | None:
    """Path binding (format §2.6): the dir names the header's cwd and id map to, or None.
    ``session_dir`` may be text (a listed entry's ``dir_text``: no Path built for a check
    that nearly always passes)."""
    expected_project = project_dir_name(header.cwd)
    expected_dir = encode_segment(header.id)
    project, _, name = os.fspath(session_dir).rpartition(os.sep)
    actual = f"{os.path.basename(project)}/{name}"
    if actual == f"{expected_project}/{expected_dir}":
        return None
    return f"the log lives in {actual} but its header binds it to {expected_project}/{expected_dir}"


def file_findings(log: SessionLog, *, binding: bool = True) -> list[Finding]:
    """Path binding (unless ``binding`` is false: a caller that checked it from the listed
    header) and the torn tail of an opened log."""
    out: list[Finding] = []
    problem = binding_problem(log.session_dir, log.header) if binding else None
    if problem is not None:
        out.append(Finding("error", "PATH_MISMATCH", problem))
    if log.torn is not None:
        recoverable = len(parse_recovered(log))
        out.append(
            Finding(
                "warning",
                "TORN_TAIL",
                f"torn tail at byte {log.torn.offset} ({log.torn.size} bytes; {recoverable} "
                "complete lines DSH would recover); DSH truncates it on its next write",
            )
        )
    return out


def validate_log(log: SessionLog) -> list[Finding]:
    """Every checklist finding of one opened log (one streaming pass over its events)."""
    validator = Validator(log.header, log.version)
    for ev in log.events():
        validator.feed(ev)
    return file_findings(log) + validator.finish()


# -- generations ------------------------------------------------------------------------------


class GenerationInfo(Struct, frozen=True):
    """One canonical generation file of a session dir, for the stale-generation rule."""

    generation: Generation
    size: int
    mtime_ns: int
    events: int | None
    turn_ends: int | None
    error: str | None = None

    def to_document(self, chosen: bool) -> documents.GenerationFile:
        from . import documents

        return documents.GenerationFile(
            version=self.generation.version,
            file=self.generation.name,
            encoding=self.generation.encoding,
            size=self.size,
            mtime=self.mtime_ns // 1_000_000,
            events=self.events,
            turn_ends=self.turn_ends,
            chosen=chosen,
            error=UNSET if self.error is None else self.error,
        )


def survey_generation(
    generation: Generation, *, events: int | None = None, turn_ends: int | None = None
) -> GenerationInfo:
    """Size, mtime and counts of a generation; counts are read unless given."""
    try:
        st = os.stat(generation.path)
    except OSError as exc:
        return GenerationInfo(generation, 0, 0, None, None, f"unreadable ({exc.strerror})")
    if events is None or turn_ends is None:
        try:
            log = open_log(generation, collect=("turn/end",), check_dir=False)
        except DshForkError as exc:
            return GenerationInfo(generation, st.st_size, st.st_mtime_ns, None, None, exc.message)
        except OSError as exc:
            return GenerationInfo(
                generation, st.st_size, st.st_mtime_ns, None, None, f"unreadable ({exc.strerror})"
            )
        events, turn_ends = log.event_count, len(log.collected)
    return GenerationInfo(generation, st.st_size, st.st_mtime_ns, events, turn_ends)


def stale_findings(chosen: GenerationInfo, others: list[GenerationInfo]) -> list[Finding]:
    """A lower generation newer by mtime or with more turn/end events (format §3.6)."""
    out: list[Finding] = []
    for other in others:
        reasons: list[str] = []
        if other.mtime_ns > chosen.mtime_ns:
            reasons.append("has a newer mtime")
        if (
            other.turn_ends is not None
            and chosen.turn_ends is not None
            and other.turn_ends > chosen.turn_ends
        ):
            reasons.append(f"has more turn/end events ({other.turn_ends} > {chosen.turn_ends})")
        if reasons:
            out.append(
                Finding(
                    "warning",
                    "STALE_GENERATION",
                    f"{other.generation.name} {' and '.join(reasons)} than the chosen "
                    f"{chosen.generation.name}; DSH reads only the highest generation",
                )
            )
    return out


# -- whole session dirs -----------------------------------------------------------------------


class DirCheck(Struct, eq=False):
    """Findings of one session dir plus what lineage checks need from its log."""

    session_dir: Path
    generation: Generation | None
    header: Header | None = None
    findings: list[Finding] = field(default_factory=list)
    own_catalog: list[tuple[int, Any]] = field(default_factory=list)
    readable: bool = False
    event_count: int = 0
    collected: list[Event] = field(default_factory=list)
    """The events of the types asked for (``check_dir``'s ``collect``), once readable."""


def check_dir(
    session_dir: Path,
    generations: list[Generation] | None = None,
    *,
    listed: bool = False,
    collect: frozenset[str] = frozenset(),
) -> DirCheck:
    """Open the highest generation and validate it; a read error becomes a finding.
    ``generations``: the dir's, when its caller has listed it already (doctor's listing of the
    root), so that the dir is not listed again. ``listed``: that listing validated the header
    of the highest of them and checked its path binding (doctor's root rules), so neither is
    done again before the log is opened (which reads and checks the header once more, as part
    of the log). ``collect``: event types kept from the same pass (``DirCheck.collected``),
    for a caller that would otherwise read the log again for them (doctor's kind rule)."""
    if generations is None:
        generations = list_generations(session_dir)
    generation = select(generations)
    result = DirCheck(session_dir, generation)
    if generation is None:
        result.findings.append(
            Finding("info", "EMPTY_DIR", "no canonical generation file: not a session")
        )
        return result
    if generation.version > SUPPORTED_VERSION:
        result.findings.append(
            Finding(
                "warning",
                "FUTURE_GENERATION",
                f"{generation.name} is generation v{generation.version}, newer than "
                f"v{SUPPORTED_VERSION}: written by a newer harness; not read",
            )
        )
        return result
    header_finding = None if listed else _header_finding(generation)
    if header_finding is not None:
        result.findings.append(header_finding)
        return result
    try:
        # the pass below indexes it: one decode
        log = open_log(generation, index=False, check_dir=False)
        check_current(generation)  # the re-list of the read recipe, after the read
        validator = Validator(log.header, log.version)
        if collect:
            collected = result.collected
            for ev in log.events():
                validator.feed(ev)
                if ev.type in collect:  # without the line bytes: a fact needs its data
                    collected.append(replace(ev, raw=None))
        else:
            for ev in log.events():
                validator.feed(ev)
    except CorruptLog as exc:
        message = exc.message
        if str(generation.path) not in message:
            message = f"{generation.path}: {message}"
        result.findings.append(Finding("error", "CORRUPT_LOG", message))
        return result
    except SessionStale as exc:
        result.findings.append(Finding("warning", "SESSION_STALE", exc.message))
        return result
    except UnsupportedFormat as exc:
        result.findings.append(Finding("warning", "FUTURE_GENERATION", exc.message))
        return result
    except OSError as exc:
        result.findings.append(
            Finding("error", "CORRUPT_LOG", f"{generation.path}: unreadable ({exc.strerror})")
        )
        return result
    result.header = log.header
    result.readable = True
    result.event_count = log.event_count
    result.findings.extend(file_findings(log, binding=not listed))
    result.findings.extend(validator.finish())
    result.own_catalog = validator.own_catalog()
    if len(generations) > 1:  # nearly every dir holds one: nothing to compare, nothing to stat
        turn_ends = validator.turn_ends
        chosen = survey_generation(generation, events=log.event_count, turn_ends=turn_ends)
        others = [survey_generation(g) for g in generations if g != generation]
        result.findings.extend(stale_findings(chosen, others))
    return result


def _header_finding(generation: Generation) -> Finding | None:
    """VERSION_MISMATCH, HEADER_INVALID or CORRUPT_LOG when the header cannot be read."""
    try:
        read_header(generation)
    except UnsupportedFormat as exc:
        raw = header_version(peek_fields(generation))
        if raw is not None and raw != generation.version:
            return _version_mismatch(generation, raw)
        return Finding("warning", "FUTURE_GENERATION", exc.message)
    except CorruptLog as exc:
        fields = peek_fields(generation)
        raw = header_version(fields)
        if raw is not None and raw != generation.version:
            return _version_mismatch(generation, raw)
        # The container (no header frame, a frame that does not decode or holds more than the
        # header line) is corrupt; a header frame holding a bad record is HEADER_INVALID.
        in_container = fields is None or exc.details.get("frame") is not None
        code = "CORRUPT_LOG" if in_container else "HEADER_INVALID"
        message = exc.message
        if str(generation.path) not in message:
            message = f"{generation.path}: {message}"
        return Finding("error", code, message)
    except OSError as exc:
        return Finding("error", "CORRUPT_LOG", f"{generation.path}: unreadable ({exc.strerror})")
    return None


def _version_mismatch(generation: Generation, raw: int) -> Finding:
    return Finding(
        "error",
        "VERSION_MISMATCH",
        f"{generation.path}: header version {raw} does not match the file name "
        f"(v{generation.version})",
    )


def validate_dir(session_dir: Path) -> list[Finding]:
    """Every finding of one session dir: header, log, checklist, stale generations."""
    return check_dir(session_dir).findings
