"""Whole deterministic DSH roots for tests, the demo and benchmarks (semantics §8): what
``dsh-fork fixture`` writes.

``generate`` builds a root of sessions with subagent trees, made with ``fixtures.SessionSpec``
and published through the library writer, one tree at a time; optionally forks (through the
library's own ``fork``), legacy copies, open turns, torn tails, v3 generations and DSH's
workspace registry.
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
from .errors import Partial, UsageError
from .fixtures import FIXTURE_EPOCH_MS, Clock, Ids, SessionSpec, event_line, write_spec_as
from .generations import canonical_name
from .layout import encode_segment, project_dir_name
from .progress import SILENT, Progress
from .results import SCHEMA_VERSION, Documented

_WORDS = (
    "alpha beta gamma delta refactor parser module test build cache index frame header "
    "turn step tool call result reader writer lock fork branch merge review lint check "
    "deploy config option value error retry timeout schema record event log session agent "
    "copy naïve café 日本 テスト über → ✓"
).split(" ")


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
        line = event_line("session/title", spec.written, clock(), title, {})
        path = session_dir / canonical_name(4, "zstd")
        frame = zframes.encode(line)
        with open(path, "ab") as handle:
            handle.write(frame[: len(frame) // 2])
        torn.append(spec.id)
    return torn
