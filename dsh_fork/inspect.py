"""The ``inspect`` report of one session (semantics §1.7, §6).

One streaming pass over the chosen generation feeds the validator, counts event types, keeps the
few model events the derived facts need and, with ``events``, one short line per event. Parsed
events are dropped as soon as they are looked at, so a 300,000-event log is inspected in
bounded memory.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from msgspec import UNSET, Struct, field

from . import frames as zframes
from . import sessiondocs as docs
from .budget import CHECK_MIN_BYTES, check_line
from .errors import CorruptLog, Partial, UnsupportedFormat
from .eventcheck import Validator
from .findings import Finding, counts
from .forkdocs import Turn
from .generations import list_generations, non_canonical_files, select
from .locking import LockState, probe
from .logindex import Chunk
from .model import MODEL_TYPES, Facts
from .reader import open_log, parse_recovered, peek_fields
from .records import (
    MISSING,
    Event,
    decode_source_seqs,
    event_of,
    header_version,
    parse_event,
)
from .results import SCHEMA_VERSION, Documented, rows
from .sessionarg import Located, locate
from .sessionlog import FramedLog, SessionLog
from .times import iso_ms
from .validation import (
    GenerationInfo,
    binding_problem,
    file_findings,
    stale_findings,
    survey_generation,
)

SUMMARY_WIDTH = 80
_SPACES = re.compile(r"\s+")


# -- short event lines ------------------------------------------------------------------------


EventLine = docs.EventLine
"""One line of ``inspect --events``."""


def format_ranges(seqs: list[int]) -> str:
    """``[3, 4, 5, 6, 9]`` → ``"3-6, 9"``."""
    parts: list[str] = []
    i = 0
    while i < len(seqs):
        j = i
        while j + 1 < len(seqs) and seqs[j + 1] == seqs[j] + 1:
            j += 1
        parts.append(str(seqs[i]) if j == i else f"{seqs[i]}-{seqs[j]}")
        i = j + 1
    return ", ".join(parts)


def _clip(text: str, width: int = SUMMARY_WIDTH) -> str:
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= width else text[: width - 1] + "…"


def _text_of(message: Any) -> str | None:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                return str(block["text"])
    return None


def _calls_of(message: Any) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [
        f"{block.get('name')}({block.get('id')})"
        for block in content
        if isinstance(block, dict) and block.get("type") == "tool-call"
    ]


def _message_summary(data: dict[str, Any]) -> str:
    message = data.get("message") if isinstance(data.get("message"), dict) else data
    role = message.get("role") if isinstance(message, dict) else None
    text = _text_of(message)
    parts = [f"{role}:" if isinstance(role, str) else "?:"]
    if isinstance(message, dict) and isinstance(message.get("toolCallId"), str):
        parts.append(f"[{message['toolCallId']}]")
    if text is not None:
        parts.append(text)
    calls = _calls_of(message)
    if calls:
        parts.append("→ " + ", ".join(calls))
    return " ".join(parts)


def _turn_summary(kind: str, data: dict[str, Any]) -> str:
    text = f"turn {data.get('turn')}"
    if "step" in data:
        text += f" step {data.get('step')}"
    if kind == "turn/end":
        reason = data.get("reason")
        if isinstance(reason, dict):
            text += f" {reason.get('kind')}"
            inner = reason.get("reason")
            if isinstance(inner, dict) and "kind" in inner:
                text += f" ({inner['kind']})"
    return text


def _dump(data: Any) -> str:
    """Compact JSON of any parsed value: also a missing ``data``, integers beyond 64 bits and
    lone surrogates (lines DSH reads leniently), which orjson refuses."""
    if data is MISSING:
        return "(no data)"
    try:
        return orjson.dumps(data).decode()
    except TypeError:
        return json.dumps(data, separators=(",", ":"), default=repr)


def _data_summary(kind: str, data: Any) -> str:
    if not isinstance(data, dict):
        return _dump(data)
    if kind.startswith(("turn/", "step/")):
        return _turn_summary(kind, data)
    if kind in ("user/message", "assistant/message", "tool/result") or kind in (
        "system/message",
        "developer/message",
    ):
        return _message_summary(data)
    if kind == "subagent/catalog":
        label = data.get("label")
        tail = f" {label!r}" if isinstance(label, str) else ""
        return f"{data.get('childId')} {data.get('mode')}{tail}"
    if kind == "subagent/descriptor":
        mode = data.get("mode", "continuable")
        return f"v{data.get('version')} {mode} {data.get('label')!r} via {data.get('provider')}"
    if kind == "session/end-seed":
        return "inherited (fork cut)" if data.get("inherited") is True else "untagged"
    if kind == "tool/call":
        return f"{data.get('name')} {data.get('callId')}"
    if kind == "request/header":
        config = (
            data.get("header", {}).get("config") if isinstance(data.get("header"), dict) else None
        )
        if isinstance(config, dict):
            return f"{config.get('provider')}/{config.get('model')} ({data.get('reason')})"
    if kind == "session/title":
        source = data.get("source")
        source_kind = source.get("kind") if isinstance(source, dict) else None
        return f"{data.get('title')!r} ({source_kind})"
    if kind == "agent-preset/selected":
        return str(data.get("agentPreset"))
    if kind == "session-log-deepseek/delivery-accepted":
        return f"{data.get('sessionId')} through {data.get('throughSeq')}"
    return _dump(data)


def summarize(ev: Event) -> str:
    """At most 80 characters: the gist of an event's data, with decoded sourceEventSeqs."""
    text = _data_summary(ev.type, ev.data)
    stored = ev.obj.get("sourceEventSeqs")
    if stored is not None:
        try:
            text += f" ← {format_ranges(decode_source_seqs(stored, ev.seq))}"
        except ValueError:
            text += " ← (invalid sourceEventSeqs)"
    return _clip(text)


# -- the report -------------------------------------------------------------------------------


class FrameStats(Documented, Struct):
    count: int
    header_frame_ok: bool
    with_checksum: int
    largest_index: int
    largest_bytes: int

    def to_document(self) -> docs.FrameCounts:
        return docs.FrameCounts(
            count=self.count,
            header_frame_ok=self.header_frame_ok,
            with_checksum=self.with_checksum,
            without_checksum=self.count - self.with_checksum,
            largest=docs.LargestFrame(self.largest_index + 1, self.largest_bytes),
        )


class InspectReport(Documented, Struct):
    """Everything ``inspect`` shows; ``to_document`` is the ``--json`` document."""

    session_dir: Path
    log: SessionLog
    facts: Facts
    generations: list[GenerationInfo]
    ignored_files: list[str]
    root_encoding: str
    binding: str | None
    frames: FrameStats | None
    recoverable_lines: int
    lock: LockState
    by_type: dict[str, int]
    event_lines: list[EventLine] | None
    open_step: int | None
    unresolved_calls: list[str]
    parent_exists: bool | None
    last_inherited_time: int | None
    findings: list[Finding]
    warnings: list[str]
    turn_list: list[Turn] | None = None
    """One summary per turn (``inspect --turns``), else None."""

    @property
    def header(self) -> dict[str, Any]:
        return self.log.header.fields

    @property
    def session_id(self) -> str:
        return self.log.header.id

    @property
    def event_count(self) -> int:
        return self.log.event_count

    def boundaries(self) -> list[tuple[int, int]]:
        return self.facts.boundary_ranges()

    def descriptor(self) -> docs.Descriptor | None:
        descriptor = self.facts.descriptor()
        if descriptor is None:
            return None
        data = descriptor.data if isinstance(descriptor.data, dict) else {}
        version = data.get("version")
        return docs.Descriptor(
            seq=descriptor.seq,
            version=version,
            mode=data.get("mode", "continuable" if version == 1 else None),
            label=data.get("label"),
            provider=data.get("provider"),
            inherited_only=descriptor.inherited_only,
        )

    def catalog(self) -> list[docs.CatalogRow]:
        rows: list[docs.CatalogRow] = []
        for entry in self.facts.own_catalog():
            data = entry.data if isinstance(entry.data, dict) else {}
            rows.append(
                docs.CatalogRow(
                    seq=entry.seq,
                    child_id=data.get("childId"),
                    child_created_at=data.get("childCreatedAt"),
                    mode=data.get("mode"),
                    label=data.get("label"),
                    version=data.get("version"),
                )
            )
        return rows

    def open_turn(self) -> docs.OpenTurn | None:
        turn = self.facts.open_turn
        if turn is None:
            return None
        return docs.OpenTurn(turn.turn, turn.start_seq, self.open_step, self.unresolved_calls)

    def pending_inbox(self) -> list[Any]:
        """Inherited items the session would still deliver (its own range may cancel them)."""
        return self.facts.inherited_pending_inbox()

    def partial(self) -> Partial | None:
        """Inspecting is one read: it succeeds or fails whole."""
        return None

    def to_document(self) -> docs.InspectDocument:
        log, facts = self.log, self.facts
        chosen = log.generation
        provider, model = facts.provider_model
        torn = log.torn
        turn_ends = facts.turn_ends
        return docs.InspectDocument(
            schema_version=SCHEMA_VERSION,
            session=self.session_id,
            path=str(self.session_dir),
            header=self.header,
            generation=docs.Generation(chosen.version, chosen.name, chosen.encoding),
            generations=[g.to_document(g.generation == chosen) for g in self.generations],
            ignored_files=self.ignored_files,
            root_encoding=self.root_encoding,
            path_binding=docs.PathBinding(self.binding is None, self.binding),
            frames=None if self.frames is None else self.frames.to_document(),
            torn_tail=None
            if torn is None
            else docs.TornTail(
                offset=torn.offset,
                bytes=torn.size,
                complete_lines=len(torn.recovered),
                recoverable_lines=self.recoverable_lines,
            ),
            lock=self.lock,
            events=docs.EventCounts(log.event_count, self.by_type),
            turns=docs.TurnCounts(len(turn_ends), self.open_turn()),
            boundaries=docs.Boundaries([list(r) for r in self.boundaries()], turn_ends),
            inheritance=docs.Inheritance(
                cut=facts.cut,
                is_seeded=log.header.is_seeded,
                parent_session=log.header.parent_session,
                parent_exists=self.parent_exists,
                markers=facts.tagged_markers,
                last_inherited_time=self.last_inherited_time,
                last_inherited_time_iso=iso_ms(self.last_inherited_time),
            ),
            descriptor=self.descriptor(),
            catalog=self.catalog(),
            title=facts.title,
            preset=facts.preset,
            model=docs.ModelChoice(provider, model),
            pending_inbox=self.pending_inbox(),
            findings=[f.to_document() for f in self.findings],
            counts=docs.Counts(**counts(self.findings)),
            event_list=UNSET if self.event_lines is None else rows(self.event_lines, _same),
            turn_list=UNSET if self.turn_list is None else self.turn_list,
        )


def _same(line: EventLine) -> EventLine:
    return line


def _frame_stats(log: SessionLog) -> FrameStats | None:
    if log.generation.encoding != "zstd":
        return None
    header_frame = zframes.scan(zframes.head(log.content, log.header_end), limit=1).frames[0]
    frames = [header_frame, *log.body_frames]
    largest = max(range(len(frames)), key=lambda i: frames[i].size)
    return FrameStats(
        count=len(frames),
        header_frame_ok=True,
        with_checksum=sum(1 for f in frames if f.checksum),
        largest_index=largest,
        largest_bytes=frames[largest].size,
    )


def _where(error: CorruptLog, path: Path) -> CorruptLog:
    """A corruption error whose message names the file (frame-level errors name only bytes)."""
    if str(path) in error.message:
        return error
    return CorruptLog(f"{path}: {error.message}", **error.details)


def _run_parts(log: FramedLog, whole: _Pass) -> None:
    """One pass over every event (the frames, then the torn tail's kept events); the pass
    builds the log's index as it goes."""
    log.fold_parts(0, len(log.pending_frames), 0, whole.chunks, whole.fold)
    whole.run(log.tail_events(whole.chunks[-1].end_seq if whole.chunks else 0, whole.chunks))
    log.adopt_index(whole.chunks)


def inspect_session(located: Located, *, events: bool) -> InspectReport:
    """Read the chosen generation once and build the report; findings never fail it."""
    return _inspect(located, events=events)


class _Pass(Struct):
    """What inspect folds from a run of events: checks, model facts, type counts, lines."""

    validator: Validator
    facts: Facts
    types: Counter[str] = field(default_factory=Counter)
    last_request: Event | None = None  # request headers can be large: keep only the latest
    lines: list[EventLine] | None = None
    chunks: list[Chunk] = field(default_factory=list)
    where: str = "log"
    """How the log is named in a defect's message."""

    def run(self, events: Iterable[Event]) -> None:
        feed = self.validator.feed
        keep = self._keep
        lines = self.lines
        types: list[str] = []
        for ev in events:
            feed(ev)
            kind = ev.type
            types.append(kind)
            if kind in MODEL_TYPES:
                keep(ev)
            if lines is not None:
                lines.append(EventLine(ev.seq, kind, ev.time, summarize(ev)))
        self.types.update(types)

    def _keep(self, ev: Event) -> None:
        """A model event: folded into the facts, or kept as the latest request header."""
        if ev.type == "request/header":
            self.last_request = ev
        else:
            self.facts.add(ev)

    def fold(self, lines: list[bytes], seq: int) -> None:
        """``run`` over the events of ``lines`` (the first at ``seq``), checked as
        ``parse_event`` checks them: each line costs one ``orjson.loads``, and an ``Event`` is
        built only for a line the validator's common case does not take (``Validator.quick``)
        or the model facts keep."""
        if self.lines is not None or not self.validator.full:  # event lines, or a v2/v3 log
            self.run(self._events(lines, seq))
            return
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        quick = self.validator.quick
        feed = self.validator.feed
        keep = self._keep
        marks = self.facts.turn_marks
        where = self.where
        types: list[str] = []
        # The run's latest request header taken by the common case, made an Event once.
        request: tuple[int, dict[str, Any], bytes] | None = None
        for line in lines:
            if len(line) >= CHECK_MIN_BYTES:
                check_line(line, where, seq)  # never parse beyond the budget
            try:
                obj = loads(line)
            except decode_error:
                ev = parse_event(line, seq, where=where)  # lenient, or names the defect
            else:
                kind = quick(obj, seq) if type(obj) is dict else None
                if kind is not None:
                    types.append(kind)
                    if kind in MODEL_TYPES:
                        # ``Facts.add`` of a turn event, whose number ``quick`` checked
                        if kind == "turn/start":
                            marks.append((seq, False, obj["data"]["turn"]))
                        elif kind == "turn/end":
                            marks.append((seq, True, None))
                        elif kind == "request/header":
                            request = (seq, obj, line)
                        else:
                            keep(Event(seq, kind, obj["time"], obj["data"], obj, line))
                    seq += 1
                    continue
                ev = event_of(obj, line, seq, where=where)
            feed(ev)
            kind = ev.type
            types.append(kind)
            if kind in MODEL_TYPES:
                if kind == "request/header":
                    request = None
                keep(ev)
            seq += 1
        if request is not None:
            at, obj, line = request
            self.last_request = Event(at, "request/header", obj["time"], obj["data"], obj, line)
        self.types.update(types)

    def _events(self, lines: list[bytes], seq: int) -> Iterator[Event]:
        where = self.where
        for line in lines:
            yield parse_event(line, seq, where=where)
            seq += 1


def _inspect(located: Located, *, events: bool) -> InspectReport:
    generation = located.generation
    try:
        # The events pass below indexes the frames too: each frame is decoded once.
        log = open_log(generation, index=False)
    except CorruptLog as exc:
        raise _where(exc, generation.path) from None
    whole = _Pass(Validator(log.header, log.version), Facts(log.header, 0), where=log.where)
    whole.lines = [] if events else None
    try:
        if isinstance(log, FramedLog) and log.pending_frames:
            _run_parts(log, whole)
        else:
            whole.run(log.events())
    except CorruptLog as exc:
        raise _where(exc, generation.path) from None
    validator, facts = whole.validator, whole.facts
    by_type = whole.types
    lines = whole.lines
    if whole.last_request is not None:
        facts.add(whole.last_request)
    facts.event_count = log.event_count
    facts.torn = log.torn

    findings = file_findings(log) + validator.finish() + _duplicate_id(located, log.header.id)
    chosen = survey_generation(generation, events=log.event_count, turn_ends=validator.turn_ends)
    others = [
        survey_generation(g) for g in list_generations(located.session_dir) if g != generation
    ]
    stale = stale_findings(chosen, others)
    findings.extend(stale)
    generations = sorted(
        [chosen, *others], key=lambda g: (g.generation.version, g.generation.encoding)
    )

    cut = facts.cut
    last_time = log.event(cut - 1).time if 0 < cut <= log.event_count else None
    parent = log.header.parent_session
    return InspectReport(
        session_dir=located.session_dir,
        log=log,
        facts=facts,
        generations=generations,
        ignored_files=non_canonical_files(located.session_dir),
        root_encoding=located.root.encoding(),
        binding=binding_problem(located.session_dir, log.header),
        frames=_frame_stats(log),
        recoverable_lines=len(parse_recovered(log)),
        lock=probe(located.session_dir),
        by_type=dict(sorted(by_type.items())),
        event_lines=lines,
        open_step=validator.open_step if facts.open_turn is not None else None,
        unresolved_calls=validator.unresolved() if facts.open_turn is not None else [],
        parent_exists=None if parent is None else located.root.exists(parent),
        last_inherited_time=last_time,
        findings=findings,
        warnings=[*located.warnings, *(f.message for f in stale)],
    )


def _duplicate_id(located: Located, session_id: str) -> list[Finding]:
    """An id with a generation in another project dir too: DSH refuses to list the root."""
    others = [
        e.project
        for e in located.root.entries()
        if e.id == session_id and e.session_dir != located.session_dir
    ]
    if not others:
        return []
    message = (
        f"session {session_id} also appears in {', '.join(others)}; DSH refuses to list the "
        "root (appears in multiple project directories)"
    )
    return [Finding("error", "DUPLICATE_ID", message)]


def _future_details(error: UnsupportedFormat) -> UnsupportedFormat:
    """A refusal of a future generation that still lists the files and the raw header version."""
    path = error.details.get("path")
    if not isinstance(path, str):
        return error
    session_dir = Path(path).parent
    try:
        files = sorted(os.listdir(session_dir))
    except OSError:
        return error
    generation = select(list_generations(session_dir))
    raw = header_version(peek_fields(generation)) if generation is not None else None
    message = f"{error.message}; files: {', '.join(files)}"
    if raw is not None:
        message += f"; header version {raw}"
    details = {**error.details, "files": files, "headerVersion": raw}
    return UnsupportedFormat(message, **details)


def inspect_arg(
    arg: str,
    root_option: str | None,
    *,
    events: bool,
    turns: bool = False,
    env: Mapping[str, str] | None = None,
) -> InspectReport:
    """Resolve a SESSION argument and inspect it (the ``inspect`` command); ``turns`` adds
    one summary per turn."""
    try:
        located = locate(arg, root_option, env)
    except UnsupportedFormat as exc:
        raise _future_details(exc) from None
    report = inspect_session(located, events=events)
    if turns:
        from .turns import turn_summaries  # ``--turns`` only: not at start-up

        report.turn_list = turn_summaries(report.log)
    return report
