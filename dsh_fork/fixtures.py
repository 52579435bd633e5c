"""Realistic, deterministic DSH sessions for tests, the demo and benchmarks (semantics §8).

``SessionSpec`` builds one session's lines event by event (what the tests use to state a
scenario exactly) and publishes it through the library writer; ``write_log_file`` and
``write_spec_as`` write a log directly, under any name or generation, for foreign and bad
inputs. Whole roots are built from these by ``fixtureroot.generate`` (what ``dsh-fork fixture``
writes), and logs DSH refuses by ``fixturedamage.damage``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from msgspec import Struct, field

from . import frames as zframes
from .durable import ensure_session_dir
from .generations import canonical_name
from .layout import encode_segment, project_dir_name
from .records import dumps_record, encode_header
from .writer import Body, publish

FIXTURE_EPOCH_MS = 1767225600000  # 2026-01-01T00:00:00Z


class Clock:
    """Deterministic epoch-ms time: every call moves forward by ``step`` ms."""

    def __init__(self, start: int = FIXTURE_EPOCH_MS, step: int = 250) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


class Ids:
    """``session-<uuid4>`` ids from a seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self) -> str:
        return f"session-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"


def event_line(event_type: str, seq: int, time: int, data: Any, extra: dict[str, Any]) -> bytes:
    """One event's line as DSH writes it, newline included."""
    obj: dict[str, Any] = {"type": event_type, "seq": seq, "time": time, "data": data, **extra}
    return dumps_record(obj) + b"\n"


class SessionSpec(Struct):
    """One session to write: header fields, then lines appended event by event."""

    id: str
    created_at: int
    cwd: str | None = "/fixture/project"
    parent: str | None = None
    origin: str | None = None
    depth: int = 0
    is_seeded: bool = False
    agent_preset: str | None = None
    lines: list[bytes] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    turns: int = 0
    written: int = 0
    """How many events were written once the events were let go (``generate``)."""

    @property
    def seq(self) -> int:
        return len(self.lines)

    def add(self, event_type: str, time: int, data: Any, **extra: Any) -> int:
        """Append one event (extra envelope keys such as ``surfaceOp`` as keywords)."""
        seq = self.seq
        self.lines.append(event_line(event_type, seq, time, data, extra))
        return seq

    def add_raw(self, line: bytes) -> int:
        """Append a line exactly as given (a newline is added when missing)."""
        self.lines.append(line if line.endswith(b"\n") else line + b"\n")
        return self.seq - 1

    def flush(self) -> None:
        """End a write batch: the lines so far go to frames of their own (DSH flush)."""
        if not self.batches or self.batches[-1] != self.seq:
            self.batches.append(self.seq)

    def header_line(self) -> bytes:
        return encode_header(
            session_id=self.id,
            created_at=self.created_at,
            cwd=self.cwd,
            parent_session=self.parent,
            is_seeded=self.is_seeded,
            origin=self.origin,
            delegation_depth=self.depth,
            agent_preset=self.agent_preset,
        )

    # -- higher-level events ----------------------------------------------------------------

    def turn(
        self,
        clock: Clock,
        text: str = "hello",
        *,
        close: bool = True,
        reason: dict[str, Any] | None = None,
        provider: str = "fixture",
        model: str = "fixture-1",
        steps: int = 1,
    ) -> int:
        """A whole turn; returns the seq of its ``turn/end`` (or of its last event if open)."""
        self.turns += 1
        number = self.turns
        self.add("turn/start", clock(), {"turn": number})
        self.user_message(clock, text)
        self.add(
            "request/header",
            clock(),
            {
                "header": {"config": {"provider": provider, "model": model}},
                "reason": "initial" if number == 1 else "series",
            },
        )
        for step in range(1, steps + 1):
            self.add("step/start", clock(), {"turn": number, "step": step})
            self.add("step/end", clock(), {"turn": number, "step": step})
        if not close:
            return self.seq - 1
        return self.add(
            "turn/end", clock(), {"turn": number, "reason": reason or {"kind": "completed"}}
        )

    def framed_turns(self, clock: Clock, count: int, text: str = "hello") -> None:
        """``count`` whole turns, each flushed into frames of its own (a log DSH wrote over
        several runs, as a reader from its end meets it)."""
        for _ in range(count):
            self.turn(clock, text)
            self.flush()

    def tool_turn(
        self,
        clock: Clock,
        text: str,
        tool: str,
        subjects: list[str],
        *,
        on_call: Callable[[int], object] | None = None,
        provider: str = "fixture",
        model: str = "fixture-1",
    ) -> int:
        """A completed turn whose first step calls ``tool`` once per subject (an assistant
        message advertising the calls, each ``tool/call``, then its ``tool/result``) and whose
        second step answers in text. ``on_call(k)`` runs right after the k-th ``tool/call``:
        where a spawned subagent lives and the parent's catalog fact goes (DSH's order)."""
        self.turns += 1
        number = self.turns
        self.add("turn/start", clock(), {"turn": number})
        self.user_message(clock, text)
        config = {"provider": provider, "model": model}
        reason = "initial" if number == 1 else "series"
        self.add("request/header", clock(), {"header": {"config": config}, "reason": reason})
        calls: list[tuple[str, str]] = []
        for k, subject in enumerate(subjects):
            args: dict[str, Any] = {"command": subject}
            if tool == "agent":
                args = {"task": text, "label": subject, "index": k}
            calls.append((f"call_{number:04d}_{k:04d}", orjson.dumps(args).decode()))
        blocks: list[dict[str, Any]] = [{"type": "text", "text": f"calling {tool}"}]
        blocks += [
            {"type": "tool-call", "id": call_id, "name": tool, "arguments": arguments}
            for call_id, arguments in calls
        ]
        self.add("step/start", clock(), {"turn": number, "step": 1})
        self.assistant_message(clock, number, 1, blocks, provider=provider, model=model)
        for k, (call_id, arguments) in enumerate(calls):
            step = {"turn": number, "step": 1}
            call = {**step, "callId": call_id, "name": tool, "arguments": arguments}
            self.add("tool/call", clock(), call)
            if on_call is not None:
                on_call(k)
            result = {
                "id": str(uuid.UUID(int=len(self.lines) + 1)),
                "role": "tool",
                "toolCallId": call_id,
                "source": {"kind": "tool", "callId": call_id},
                "content": [{"type": "text", "text": f"{tool} {subjects[k]}: done"}],
            }
            self.add("tool/result", clock(), {**step, "message": result}, surfaceOp="append")
        self.add("step/end", clock(), {"turn": number, "step": 1})
        self.add("step/start", clock(), {"turn": number, "step": 2})
        answer = [{"type": "text", "text": text}]
        self.assistant_message(clock, number, 2, answer, provider=provider, model=model)
        self.add("step/end", clock(), {"turn": number, "step": 2})
        return self.add("turn/end", clock(), {"turn": number, "reason": {"kind": "completed"}})

    def assistant_message(
        self,
        clock: Clock,
        turn: int,
        step: int,
        content: list[dict[str, Any]],
        *,
        provider: str = "fixture",
        model: str = "fixture-1",
    ) -> int:
        message = {
            "id": str(uuid.UUID(int=len(self.lines) + 1)),
            "role": "assistant",
            "source": {"kind": "model", "provider": provider, "model": model},
            "content": content,
        }
        data = {
            "turn": turn,
            "step": step,
            "message": message,
            "stream": [],
            "usage": {"inputTokens": 100 + len(self.lines), "outputTokens": 10},
        }
        return self.add("assistant/message", clock(), data, surfaceOp="append")

    def unfinished_turn(
        self,
        clock: Clock,
        text: str = "unfinished",
        *,
        tool: str = "shell",
        calls: int = 0,
        started: int = 0,
        settled: int = 0,
        step: bool = True,
        on_call: Callable[[int], object] | None = None,
    ) -> list[str]:
        """A turn left open in the middle, as a crash or a live session leaves it (what
        ``fork --close-turn`` closes): ``turn/start``, the user's message and the request;
        then, with ``step``, an open step 1 whose assistant message advertises ``calls`` tool
        calls, the first ``started`` of them started (``tool/call``, then ``on_call(k)``) and
        the first ``settled`` of those settled (``tool/result``); without ``step``, a finished
        step 1 and no step open. Returns the advertised call ids, in order."""
        if not 0 <= settled <= started <= calls or (calls and not step):
            raise ValueError("settled <= started <= calls, and calls need an open step")
        self.turns += 1
        number = self.turns
        self.add("turn/start", clock(), {"turn": number})
        self.user_message(clock, text)
        reason = "initial" if number == 1 else "series"
        config = {"provider": "fixture", "model": "fixture-1"}
        self.add("request/header", clock(), {"header": {"config": config}, "reason": reason})
        self.add("step/start", clock(), {"turn": number, "step": 1})
        if not step:
            self.assistant_message(clock, number, 1, [{"type": "text", "text": "thinking"}])
            self.add("step/end", clock(), {"turn": number, "step": 1})
            return []
        ids = [f"call_{number:04d}_{k:04d}" for k in range(calls)]
        arguments = [orjson.dumps({"command": f"step {k}"}).decode() for k in range(calls)]
        if calls:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": f"calling {tool}"}]
            blocks += [
                {"type": "tool-call", "id": i, "name": tool, "arguments": a}
                for i, a in zip(ids, arguments, strict=True)
            ]
            self.assistant_message(clock, number, 1, blocks)
        where = {"turn": number, "step": 1}
        for k in range(started):
            call = {**where, "callId": ids[k], "name": tool, "arguments": arguments[k]}
            self.add("tool/call", clock(), call)
            if on_call is not None:
                on_call(k)
            if k < settled:
                result = {
                    "id": str(uuid.UUID(int=len(self.lines) + 1)),
                    "role": "tool",
                    "toolCallId": ids[k],
                    "source": {"kind": "tool", "callId": ids[k]},
                    "content": [{"type": "text", "text": f"{tool}: done"}],
                }
                self.add("tool/result", clock(), {**where, "message": result}, surfaceOp="append")
        return ids

    def open_turn(self, clock: Clock, text: str = "unfinished") -> int:
        """A turn left open (crashed mid-turn): ``turn/start`` and a user message only."""
        self.turns += 1
        self.add("turn/start", clock(), {"turn": self.turns})
        return self.user_message(clock, text)

    def user_message(self, clock: Clock, text: str) -> int:
        message = {
            "id": str(uuid.UUID(int=len(self.lines) + 1)),
            "role": "user",
            "source": {"kind": "user"},
            "content": [{"type": "text", "text": text}],
        }
        return self.add("user/message", clock(), message, surfaceOp="append")

    def title(self, clock: Clock, title: str) -> int:
        data = {"title": title, "messageSeqs": [], "source": {"kind": "user"}}
        return self.add("session/title", clock(), data)

    def descriptor(
        self,
        clock: Clock,
        label: str | None,
        *,
        mode: str = "continuable",
        version: int = 3,
        provider: str = "in-process",
        agent_provider: str | None = "fixture",
        agent_model: str | None = "fixture-1",
    ) -> int:
        data: dict[str, Any] = {"version": version, "mode": mode, "provider": provider}
        if version == 1:
            del data["mode"]
        if label is not None:
            data["label"] = label
        if mode == "continuable":
            if agent_provider is not None:
                data["agentProvider"] = agent_provider
            if agent_model is not None:
                data["agentModel"] = agent_model
        return self.add("subagent/descriptor", clock(), data)

    def catalog(
        self, clock: Clock, child: SessionSpec, *, mode: str = "continuable", label: str | None
    ) -> int:
        data: dict[str, Any] = {
            "version": 0,
            "childId": child.id,
            "childCreatedAt": child.created_at,
            "mode": mode,
        }
        if label is not None:
            data["label"] = label
        return self.add("subagent/catalog", clock(), data)

    def end_seed(self, time: int, *, inherited: bool = True) -> int:
        return self.add("session/end-seed", time, {"inherited": True} if inherited else {})

    # -- writing ----------------------------------------------------------------------------

    def frame_plaintexts(self, target: int = 1) -> list[bytes]:
        """Body plaintexts: one per flushed batch, merged up to ``target`` bytes."""
        cuts = [*self.batches, self.seq] if self.batches else [self.seq]
        pieces: list[bytes] = []
        start = 0
        for cut in cuts:
            if cut > start:
                pieces.append(b"".join(self.lines[start:cut]))
            start = cut
        merged: list[bytes] = []
        for piece in pieces:
            if merged and len(merged[-1]) + len(piece) <= target:
                merged[-1] += piece
            else:
                merged.append(piece)
        return merged

    def publish(self, root: Path, *, frame_target: int = 1) -> Path:
        """Write this session through the library writer; returns its session dir."""
        session_dir = ensure_session_dir(root, project_dir_name(self.cwd), encode_segment(self.id))
        body = Body(frames=[zframes.encode(p) for p in self.frame_plaintexts(frame_target)])
        publish(session_dir, self.header_line(), body, keep_lock=False)
        return session_dir


def write_log_file(
    path: Path,
    header_line: bytes,
    bodies: list[bytes],
    *,
    encoding: str = "zstd",
) -> Path:
    """Write a generation file directly (any name, any version): for foreign and bad inputs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not header_line.endswith(b"\n"):
        header_line += b"\n"
    if encoding == "plain":
        path.write_bytes(header_line + b"".join(bodies))
    else:
        path.write_bytes(b"".join(zframes.encode(p) for p in [header_line, *bodies] if p))
    return path


def write_spec_as(spec: SessionSpec, root: Path, version: int, *, encoding: str = "zstd") -> Path:
    """Write a spec under an older (or future) generation name with that header version."""
    header = orjson.loads(spec.header_line())
    header["version"] = version
    if version < 2:
        header.pop("isSeeded", None)
    session_dir = root / project_dir_name(spec.cwd) / encode_segment(spec.id)
    name = canonical_name(version, "zstd" if encoding == "zstd" else "plain")
    return write_log_file(
        session_dir / name, orjson.dumps(header), spec.frame_plaintexts(), encoding=encoding
    )
