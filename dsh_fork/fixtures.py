"""Realistic, deterministic DSH roots for tests, the demo and benchmarks (semantics §8).

Two layers: ``SessionSpec`` builds one session's lines event by event (what the tests use to
state a scenario exactly), and ``generate`` builds a whole root of sessions with subagent trees
(what ``dsh-fork fixture`` writes). Both publish through the library writer.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from msgspec import UNSET, Struct, field

from . import archivedocs as docs
from . import frames as zframes
from .durable import ensure_session_dir
from .errors import Partial, UsageError
from .generations import canonical_name
from .layout import encode_segment, project_dir_name
from .progress import SILENT, Progress
from .records import dumps_record, encode_header
from .results import SCHEMA_VERSION, Documented
from .writer import Body, publish

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


# -- whole roots ----------------------------------------------------------------------------


class FixtureSummary(Documented, Struct):
    """What ``generate`` wrote; ``to_document`` is the ``fixture --json`` document."""

    root: Path
    sessions: int
    per_depth: dict[int, int]
    top_level: list[str]
    forks: list[str] = field(default_factory=list)
    legacy_forks: list[str] = field(default_factory=list)
    old_generation: list[str] = field(default_factory=list)
    open_turns: list[str] = field(default_factory=list)
    torn_tails: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    registry: Path | None = None
    """The workspace registry written beside the root (``workspaces``), else None."""

    def partial(self) -> Partial | None:
        """A fixture is written whole or the command fails."""
        return None

    def to_document(self) -> docs.FixtureDocument:
        return docs.FixtureDocument(
            schema_version=SCHEMA_VERSION,
            root=str(self.root.absolute()),
            sessions=self.sessions,
            per_depth={str(d): n for d, n in sorted(self.per_depth.items())},
            top_level=self.top_level,
            forks=self.forks,
            legacy_forks=self.legacy_forks,
            old_generation=self.old_generation,
            open_turns=self.open_turns,
            torn_tails=self.torn_tails,
            registry=UNSET if self.registry is None else str(self.registry.absolute()),
        )


def planted_phrase(top: int, path: str, turn: int) -> str:
    """The phrase ``generate(phrases=True)`` ends a user message with: top-level session
    ``top`` (0-based), the subagent at ``path`` ("" for the top itself, "1.2" for the second
    child of its first child), turn ``turn``. Said in no other message of the root."""
    where = f"a{path.replace('.', '_')}" if path else "top"
    return f"planted q{top}x {where} turn{turn}z"


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(_WORDS, k=words))


class _Tree(Struct):
    """The state one ``generate`` run shares while it builds its session trees."""

    ids: Ids
    rng: random.Random
    clock: Clock
    agents: int
    depth: int
    turns: int
    words: int
    tools: bool
    open_turns: bool
    phrases: bool = False
    top_index: int = 0
    specs: list[SessionSpec] = field(default_factory=list)
    per_depth: dict[int, int] = field(default_factory=dict)
    children: dict[str, list[SessionSpec]] = field(default_factory=dict)
    opened: list[str] = field(default_factory=list)

    def build(
        self, spec: SessionSpec, level: int, path: str, *, catalog: bool = True, last: bool = False
    ) -> None:
        """One session and, inside the turn that spawns them, its subagents (recursively).

        As DSH writes it: the agent ``tool/call``, the child's whole life, then the parent's
        ``subagent/catalog`` fact and the ``tool/result``, in the spawning step. The spawning
        turn is turn 2 (turn 1 with fewer turns), so turn 1's ``turn/end`` is a fork boundary
        before any child. ``catalog=False`` writes no facts (a v3 log has none).
        """
        self.per_depth[level] = self.per_depth.get(level, 0) + 1
        self.specs.append(spec)
        if level > 0:
            spec.descriptor(self.clock, f"agent {path}")
            spec.flush()
        spawns = self.agents if level < self.depth else 0
        spawn_turn = min(2, self.turns)
        kids: list[SessionSpec] = []

        def spawn(k: int) -> SessionSpec:
            child_path = f"{path}.{k + 1}" if path else str(k + 1)
            child = SessionSpec(
                id=self.ids(),
                created_at=self.clock(),
                cwd=spec.cwd,
                parent=spec.id,
                origin="subagent",
                depth=level + 1,
            )
            self.build(child, level + 1, child_path, catalog=catalog, last=k == spawns - 1)
            if catalog:
                spec.catalog(self.clock, child, label=f"agent {child_path}")
            kids.append(child)
            return child

        if spawns and spawn_turn == 0:  # no turns at all: the facts stand on their own
            for k in range(spawns):
                spawn(k)
            spec.flush()
        for number in range(1, self.turns + 1):
            text = _text(self.rng, self.words)
            if self.phrases:
                text += " " + planted_phrase(self.top_index, path, number)
            if spawns and number == spawn_turn:
                prefix = f"agent {path}." if path else "agent "
                labels = [f"{prefix}{k + 1}" for k in range(spawns)]
                spec.tool_turn(self.clock, text, "agent", labels, on_call=spawn)
            elif self.tools:
                spec.tool_turn(self.clock, text, "bash", [_text(self.rng, 3)])
            else:
                spec.turn(self.clock, text)
            spec.flush()
            if number == 1 and level == 0:
                spec.title(self.clock, _text(self.rng, 3))
                spec.flush()
        self.children[spec.id] = kids
        if self.open_turns and level > 0 and last:  # crashed mid-turn, after completed ones
            spec.open_turn(self.clock, _text(self.rng, 4))
            spec.flush()
            self.opened.append(spec.id)


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
    tools: bool = False,
    forks: int = 0,
    fork_depth: int = 1,
    relinked: bool = False,
    legacy: bool = False,
    open_turns: bool = False,
    torn_tails: bool = False,
    old_generation: int = 0,
    workspaces: bool = False,
    phrases: bool = False,
    progress: Progress = SILENT,
) -> FixtureSummary:
    """Write a deterministic root; OUT_ROOT must not exist or be empty (semantics §8).

    Beyond the plain trees: ``tools`` gives every turn an assistant step with a tool call;
    ``forks`` fork children of each top-level session, each forked again down a chain of
    ``fork_depth`` (through the library's own ``fork``, with the subagents copied when
    ``relinked``); ``legacy`` one fork child per top-level session holding copies an older
    tool made (no catalog facts, the last copy without its own descriptor); ``open_turns``
    leaves the last subagent of each parent inside an open turn; ``torn_tails`` tears the log
    tail of each top-level tree's last leaf; ``old_generation`` adds top-level trees stored as
    v3 files (no catalog facts). ``workspaces`` gives each top-level tree a real project
    folder inside the home (the root's parent) as its cwd, and writes DSH's workspace registry
    there: initialised, one workspace per project listing its top-level session (the forks
    join through ``fork``, as they would from DSH).
    ``phrases`` ends each user message of the v4 trees with a phrase said nowhere else
    (``planted_phrase``), for ``search``.
    """
    if out_root.exists() and (not out_root.is_dir() or any(out_root.iterdir())):
        raise UsageError(f"{out_root} exists and is not an empty directory", path=str(out_root))
    if min(sessions, agents, depth, turns, forks, old_generation) < 0 or fork_depth < 1:
        raise UsageError("fixture counts must not be negative (and a fork chain is ≥ 1 long)")
    tree = _Tree(
        Ids(seed),
        random.Random(seed),
        Clock(),
        agents,
        depth,
        turns,
        words,
        tools,
        open_turns,
        phrases,
    )
    top_level: list[str] = []
    legacy_ids: list[str] = []
    tops: list[SessionSpec] = []
    leaves: list[SessionSpec] = []
    cwd_of = _project_folders(out_root) if workspaces else _plain_cwd
    progress.stage(
        "sessions written", _count(sessions, old_generation, agents, depth, turns, legacy)
    )
    for i in range(sessions):
        spec = SessionSpec(id=tree.ids(), created_at=tree.clock(), cwd=cwd_of(f"project-{i}"))
        top_level.append(spec.id)
        tree.top_index = i
        tree.build(spec, 0, "")
        if legacy and tree.children[spec.id]:
            made = _legacy_fork(spec, tree.children[spec.id], tree.ids, tree.clock)
            legacy_ids += [s.id for s in made if s.origin is None]
            tree.specs += made
        _write_tree(tree, out_root, 4, frame_target, progress, tops, leaves, spec)
    old: list[str] = []
    old_tree = _Tree(tree.ids, tree.rng, tree.clock, agents, depth, turns, words, False, False)
    for i in range(old_generation):
        spec = SessionSpec(id=tree.ids(), created_at=tree.clock(), cwd=cwd_of(f"old-{i}"))
        old.append(spec.id)
        old_tree.build(spec, 0, "", catalog=False)
        _write_tree(old_tree, out_root, 3, frame_target, progress, tops, [], spec)
    for level, count in old_tree.per_depth.items():
        tree.per_depth[level] = tree.per_depth.get(level, 0) + count
    registry = None
    if workspaces:
        registry = write_registry(out_root.parent, tops)
    fork_ids: list[str] = []
    if forks:
        fork_ids = _forks(out_root, top_level, forks, fork_depth, relinked, tree.ids, tree.clock)
    torn: list[str] = []
    if torn_tails:
        torn = _tear(out_root, leaves, tree.clock)
    total = sum(1 for _ in out_root.glob("*/*"))
    return FixtureSummary(
        out_root,
        total,
        tree.per_depth,
        top_level,
        forks=fork_ids,
        legacy_forks=legacy_ids,
        old_generation=old,
        open_turns=tree.opened,
        torn_tails=torn,
        registry=registry,
    )


def _count(sessions: int, old: int, agents: int, depth: int, turns: int, legacy: bool) -> int:
    """How many sessions ``generate`` writes before its forks, known before the first is
    built (the progress total): each tree has ``agents ** level`` sessions at each level; a
    legacy fork holds the fork child and a copy of each direct child that ended a turn."""
    tree, width = 0, 1
    for _ in range(depth + 1):
        tree, width = tree + width, width * agents
    forked = 1 + (agents if turns else 0) if legacy and agents and depth else 0
    return sessions * (tree + forked) + old * tree


def _write_tree(
    tree: _Tree,
    out_root: Path,
    version: int,
    frame_target: int,
    progress: Progress,
    tops: list[SessionSpec],
    leaves: list[SessionSpec],
    top: SessionSpec,
) -> None:
    """Write the sessions one top-level tree made, then let their events go: a root of any
    size is written holding one tree at a time. What the later steps need stays: the top
    (for the registry) and the tree's last leaf (for a torn tail), without their events but
    with their length (``SessionSpec.written``)."""
    for spec in tree.specs:
        if version == 4:
            spec.publish(out_root, frame_target=frame_target)
        else:
            write_spec_as(spec, out_root, version)
        progress.advance()
    leaf = top
    while tree.children.get(leaf.id):
        leaf = tree.children[leaf.id][-1]
    for spec in tree.specs:
        spec.written = spec.seq
        spec.lines = []
        spec.batches = []
    tops.append(top)
    leaves.append(leaf)
    tree.specs = []
    tree.children = {}


def _plain_cwd(name: str) -> str:
    return f"/fixture/{name}"


def _project_folders(out_root: Path) -> Callable[[str], str]:
    """Real project folders inside the home (``<home>/projects/<name>``), made as they are
    named, so that the membership rule (``realpath(cwd)`` is the record's path) holds."""
    base = Path(os.path.realpath(out_root.parent)) / "projects"

    def cwd(name: str) -> str:
        (base / name).mkdir(parents=True, exist_ok=True)
        return str(base / name)

    return cwd


_WORKSPACE_IDS = uuid.UUID("0b5e7d1c-4a3f-4e2b-9c8d-7f6e5d4c3b2a")


def write_registry(home: Path, tops: list[SessionSpec]) -> Path:
    """DSH's workspace registry (dsh-world §1.1), initialised: one workspace per cwd of
    ``tops`` (their order), listing those sessions newest first, as DSH's first start sorts
    them. Written in DSH's own format (``registry.dumps``), mode 0600."""
    from .registry import FILE_NAME, STORAGES, UNIT_NAME, UNIT_VERSION, dumps
    from .times import iso_ms

    stamp = iso_ms(FIXTURE_EPOCH_MS)
    table: dict[str, dict[str, Any]] = {}
    for spec in tops:
        assert spec.cwd is not None
        key = str(uuid.uuid5(_WORKSPACE_IDS, spec.cwd))
        record = table.setdefault(
            key,
            {
                "path": spec.cwd,
                "title": os.path.basename(spec.cwd),
                "sessionIds": [],
                "createdAt": stamp,
                "updatedAt": stamp,
            },
        )
        record["sessionIds"].insert(0, spec.id)
    doc = {
        "unit": {"name": UNIT_NAME, "version": UNIT_VERSION},
        "global": {
            "initialized": True,
            "workspaceIds": list(table),
            "archivedSessionIds": [],
            "pinnedSessionIds": [],
            **({"defaultWorkspaceId": next(iter(table))} if table else {}),
        },
        "tables": {"workspaces": table},
    }
    storages = home / STORAGES
    storages.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = storages / FILE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(dumps(doc))
    return path


def _legacy_fork(
    top: SessionSpec, kids: list[SessionSpec], ids: Ids, clock: Clock
) -> list[SessionSpec]:
    """A fork child of ``top`` at its last event, with the copies an older tool made of its
    direct children: their events through their last ``turn/end``, the marker, their
    descriptor again (not the last copy), and no catalog fact in the fork child."""
    fork = SessionSpec(
        id=ids(), created_at=clock(), cwd=top.cwd, parent=top.id, depth=0, is_seeded=True
    )
    fork.lines = list(top.lines)
    fork.end_seed(_time(top.lines[-1]))
    fork.flush()
    out = [fork]
    for index, kid in enumerate(kids):
        ends = [i for i, line in enumerate(kid.lines) if b'"type":"turn/end"' in line]
        if not ends:
            continue
        copy = SessionSpec(
            id=ids(),
            created_at=clock(),
            cwd=kid.cwd,
            parent=fork.id,
            origin="subagent",
            depth=1,
            is_seeded=True,
        )
        copy.lines = list(kid.lines[: ends[-1] + 1])
        copy.end_seed(_time(copy.lines[-1]))
        if index < len(kids) - 1:
            copy.add("subagent/descriptor", copy.created_at, orjson.loads(kid.lines[0])["data"])
        copy.flush()
        out.append(copy)
    return out


def _time(line: bytes) -> int:
    value: int = orjson.loads(line)["time"]
    return value


def _forks(
    root: Path,
    top_level: list[str],
    count: int,
    chain: int,
    relinked: bool,
    ids: Ids,
    clock: Clock,
) -> list[str]:
    """Fork children through the library's ``fork`` (deterministic clock and ids, no
    operation log): ``count`` per top-level session, each the head of a chain of ``chain``
    forks of forks."""
    from .discovery import Root
    from .fork import ForkOptions, fork
    from .sessionarg import locate

    made: list[str] = []
    for top in top_level:
        for _ in range(count):
            source = top
            for _ in range(chain):
                child_id = ids()
                located = locate(source, str(root), {})
                options = ForkOptions(child_id=child_id, agents=relinked)
                fork(Root(root), located, options, clock=clock, new_id=ids)
                made.append(child_id)
                source = child_id
    return made


def _tear(root: Path, leaves: list[SessionSpec], clock: Clock) -> list[str]:
    """Append half a frame to the log of each top-level tree's last leaf (its last
    descendant; the top itself without subagents): a torn tail DSH would truncate."""
    torn: list[str] = []
    for spec in leaves:
        session_dir = root / project_dir_name(spec.cwd) / encode_segment(spec.id)
        title = {"title": "torn", "messageSeqs": [], "source": {"kind": "user"}}
        line = _line("session/title", spec.written, clock(), title, {})
        path = session_dir / canonical_name(4, "zstd")
        frame = zframes.encode(line)
        with open(path, "ab") as handle:
            handle.write(frame[: len(frame) // 2])
        torn.append(spec.id)
    return torn


def tree_sizes(out_root: Path) -> int:
    """Number of session dirs under a root (for summaries and tests)."""
    return sum(1 for p in out_root.glob("*/*") if os.path.isdir(p))


# -- logs DSH refuses (salvage) ----------------------------------------------------------------

DAMAGES = ("gap", "repeat", "restart", "tear", "bad-line", "bad-frame", "open-turn")
"""What ``damage`` appends: a seq gap, a seq repeated, a second writer's seqs from 0, a record
torn mid-log, a line that is not JSON, a frame that does not decode, and (``open-turn``) a
turn left open before a seq gap."""


def damage(log: Path, kind: str, clock: Clock) -> int:
    """Append to the v4 zstd log ``log`` a defect DSH refuses, then a whole turn after it (so
    readable-looking events lie beyond the defect); returns how many events DSH would read
    before the defect. The log's own bytes are kept: frames are only appended."""
    if kind not in DAMAGES:
        raise UsageError(f"unknown damage {kind!r}; choose from {', '.join(DAMAGES)}")
    data = log.read_bytes()
    scan = zframes.scan(data)
    plaintexts = zframes.decode_all(data, scan.frames[1:], 1)
    lines = b"".join(plaintexts).splitlines()
    count = len(lines)
    turn = 1 + sum(1 for line in lines if b'"type":"turn/start"' in line)

    def whole_turn(first_seq: int, number: int) -> bytes:
        spec = SessionSpec(id="damage", created_at=0)
        spec.lines = [b""] * first_seq
        spec.turns = number - 1
        spec.turn(clock, f"after the {kind}")
        return b"".join(spec.lines[first_seq:])

    frames: list[bytes] = []
    good = count
    if kind == "gap":
        frames.append(whole_turn(count + 3, turn))
    elif kind == "repeat":
        frames.append(whole_turn(count - 1, turn))
    elif kind == "restart":
        frames.append(whole_turn(0, 1))
    elif kind == "tear":
        torn = whole_turn(count, turn)[: len(whole_turn(count, turn)) // 3]
        frames += [torn, whole_turn(count, turn)]
        good = count + torn.count(b"\n")  # its whole lines read, the torn one joins the next
    elif kind == "bad-line":
        start = whole_turn(count, turn)
        first = start.split(b"\n", 1)[0] + b"\n"
        frames.append(first + b"{not json\n" + start[len(first) :])
        good = count + 1
    elif kind == "open-turn":
        opened = SessionSpec(id="damage", created_at=0)
        opened.lines = [b""] * count
        opened.turns = turn - 1
        opened.open_turn(clock, "left open")
        frames.append(b"".join(opened.lines[count:]))
        good = opened.seq
        frames.append(whole_turn(good + 2, turn + 1))
    encoded = [zframes.encode(frame) for frame in frames]
    if kind == "bad-frame":
        frame = bytearray(zframes.encode(whole_turn(count, turn)))
        frame[-1] ^= 0xFF  # its content checksum no longer matches
        encoded = [bytes(frame), zframes.encode(whole_turn(count, turn))]
    with open(log, "ab") as handle:
        handle.write(b"".join(encoded))
    return good
