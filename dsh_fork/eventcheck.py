"""The v4 validity checklist of a log's events (format §15) as findings, never exceptions.

Every rule is checked in one streaming pass: the ``Validator`` keeps small per-concern state
and a few short lists (catalog facts, descriptors, markers naming another id), never the
events themselves, so a 100 MB log validates in bounded memory. The lifecycle rules (turns,
steps, tool calls) are ``lifecycle``; the envelope, surface, title, catalog, descriptor and
marker rules, and the rules that need the whole log, are here.

Logs below v4 get only header- and envelope-level checks: DSH migrates them to v4 before it
writes them, so the v4 relationship rules do not apply to their stored form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec import field

from .findings import FINDINGS_PER_CODE, Finding, Severity, _State
from .generations import MAX_SAFE_INTEGER, SUPPORTED_VERSION
from .lifecycle import LifecycleRules, _Lifecycle
from .records import (
    ENVELOPE_KEYS,
    MISSING,
    Event,
    Header,
    decode_source_seqs,
    dig,
    nonneg_int,
    safe_int,
)
from .vocabulary import DELIVERY_TYPE, KNOWN_V4_TYPES, OBJECT_DATA_TYPES, SURFACE_TYPES

if TYPE_CHECKING:
    pass


class _Envelope(_State):
    """Envelope checks: stateless but for the count of events checked (pre-v4 logs)."""

    events: int = 0


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


class Validator(LifecycleRules):
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

    def _quick_user_message(self, data: dict[str, Any], seq: int) -> bool:
        source = data.get("source")
        if type(source) is dict and source.get("kind") == "user":
            self.titles.human_messages.add(seq)
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

    # -- other relationships ----------------------------------------------------------------

    def _user_message(self, ev: Event, data: dict[str, Any]) -> None:
        if dig(data, "source", "kind") == "user":
            self.titles.human_messages.add(ev.seq)

    def _end_seed(self, ev: Event, data: dict[str, Any]) -> None:
        if data.get("inherited") is True:
            self.markers.tagged.append(ev.seq)
        self.lifecycle.compaction_open = None  # every end-seed expires an open compaction bracket

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
