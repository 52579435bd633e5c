"""Realistic, deterministic DSH roots for tests, the demo and benchmarks (semantics §8).

Two layers: ``SessionSpec`` builds one session's lines event by event (what the tests use to
state a scenario exactly), and ``generate`` builds a whole root of sessions with subagent trees
(what ``dsh-fork fixture`` writes). Both publish through the library writer.
"""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import frames as zframes
from .errors import UsageError
from .generations import canonical_name
from .layout import encode_segment, project_dir_name
from .records import dumps_record, encode_header
from .writer import Body, ensure_session_dir, publish

FIXTURE_EPOCH_MS = 1767225600000  # 2026-01-01T00:00:00Z
_WORDS = (
    "alpha beta gamma delta refactor parser module test build cache index frame header "
    "turn step tool call result reader writer lock fork branch merge review lint check "
    "deploy config option value error retry timeout schema record event log session agent "
    "copy naïve café 日本 テスト über → ✓"
).split(" ")


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


def _line(event_type: str, seq: int, time: int, data: Any, extra: dict[str, Any]) -> bytes:
    obj: dict[str, Any] = {"type": event_type, "seq": seq, "time": time, "data": data, **extra}
    return dumps_record(obj) + b"\n"


@dataclass
class SessionSpec:
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

    @property
    def seq(self) -> int:
        return len(self.lines)

    def add(self, event_type: str, time: int, data: Any, **extra: Any) -> int:
        """Append one event (extra envelope keys such as ``surfaceOp`` as keywords)."""
        seq = self.seq
        self.lines.append(_line(event_type, seq, time, data, extra))
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


# -- whole roots ----------------------------------------------------------------------------


@dataclass
class FixtureSummary:
    root: Path
    sessions: int
    per_depth: dict[int, int]
    top_level: list[str]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(_WORDS, k=words))


def generate(
    out_root: Path,
    *,
    sessions: int = 1,
    agents: int = 2,
    depth: int = 1,
    turns: int = 2,
    seed: int = 0,
    words: int = 12,
    frame_target: int = 1,
) -> FixtureSummary:
    """Write a deterministic v4 root; OUT_ROOT must not exist or be empty (semantics §8)."""
    if out_root.exists() and (not out_root.is_dir() or any(out_root.iterdir())):
        raise UsageError(f"{out_root} exists and is not an empty directory", path=str(out_root))
    if min(sessions, agents, depth, turns) < 0:
        raise UsageError("fixture counts must not be negative")
    ids = Ids(seed)
    rng = random.Random(seed)
    clock = Clock()
    per_depth: dict[int, int] = {}
    top_level: list[str] = []
    specs: list[SessionSpec] = []

    def build(spec: SessionSpec, level: int, path: str) -> None:
        per_depth[level] = per_depth.get(level, 0) + 1
        specs.append(spec)
        if level > 0:
            spec.descriptor(clock, f"agent {path}")
            spec.flush()
        children: list[tuple[SessionSpec, str]] = []
        # Children are catalogued after turn 1, or at once in a session without turns, so
        # every session above depth D has its M children whatever T is (semantics §8.1).
        for number in range(max(turns, 1)):
            if number < turns:
                spec.turn(clock, _text(rng, words))
                spec.flush()
            if number == 0 and level < depth:
                for k in range(agents):
                    child_path = f"{path}.{k + 1}" if path else str(k + 1)
                    child = SessionSpec(
                        id=ids(),
                        created_at=clock(),
                        cwd=spec.cwd,
                        parent=spec.id,
                        origin="subagent",
                        depth=level + 1,
                    )
                    spec.catalog(clock, child, label=f"agent {child_path}")
                    children.append((child, child_path))
                spec.flush()
            if number == 0 and level == 0:
                spec.title(clock, _text(rng, 3))
                spec.flush()
        for child, child_path in children:
            build(child, level + 1, child_path)

    for i in range(sessions):
        spec = SessionSpec(id=ids(), created_at=clock(), cwd=f"/fixture/project-{i}")
        top_level.append(spec.id)
        build(spec, 0, "")
    for spec in specs:
        spec.publish(out_root, frame_target=frame_target)
    return FixtureSummary(out_root, len(specs), per_depth, top_level)


def tree_sizes(out_root: Path) -> int:
    """Number of session dirs under a root (for summaries and tests)."""
    return sum(1 for p in out_root.glob("*/*") if os.path.isdir(p))
