"""Scenario building blocks for the relink and list-agents tests (semantics §10.4, §10.5).

Everything is written with the project's own fixture layer (``SessionSpec``); a fork child is
made the way DSH and ``dsh-fork fork`` make one: the parent's lines through a boundary,
byte for byte, then ``session/end-seed {"inherited": true}`` with the boundary's time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from conftest import log_events, log_header, log_lines
from safetykit import guarded

from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, Ids, SessionSpec
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import encode_segment, project_dir_name
from dsh_fork.locking import probe
from dsh_fork.relink import relink
from dsh_fork.relinkresult import RelinkSummary
from dsh_fork.validation import validate_dir

CWD = "/home/u/proj"
NOW = 1_800_000_000_000
"""The relink clock starts here, far after every fixture time."""


def time_of(spec: SessionSpec, seq: int) -> int:
    value: int = orjson.loads(spec.lines[seq])["time"]
    return value


def session_path(root: Path, spec: SessionSpec) -> Path:
    return root / project_dir_name(spec.cwd) / encode_segment(spec.id) / CURRENT_NAME


def subagent(
    clock: Clock,
    session_id: str,
    parent: SessionSpec | str,
    *,
    label: str | None = "helper",
    turns: int = 1,
    cwd: str = CWD,
    created_at: int | None = None,
    descriptor: bool = True,
    **descriptor_options: Any,
) -> SessionSpec:
    """A completed subagent child: a v3 descriptor, then ``turns`` turns."""
    parent_id = parent if isinstance(parent, str) else parent.id
    depth = 1 if isinstance(parent, str) else parent.depth + 1
    spec = SessionSpec(
        id=session_id,
        created_at=clock() if created_at is None else created_at,
        cwd=cwd,
        parent=parent_id,
        origin="subagent",
        depth=depth,
    )
    if descriptor:
        spec.descriptor(clock, label, **descriptor_options)
    for _ in range(turns):
        spec.turn(clock)
    spec.flush()
    return spec


def fork_of(
    parent: SessionSpec,
    fork_id: str,
    created_at: int,
    *,
    at: int | None = None,
    origin: str | None = None,
) -> SessionSpec:
    """A fork child of ``parent`` at boundary ``at`` (default: its last event)."""
    boundary = parent.seq - 1 if at is None else at
    spec = SessionSpec(
        id=fork_id,
        created_at=created_at,
        cwd=parent.cwd,
        parent=parent.id,
        origin=origin,
        depth=parent.depth if origin else 0,
        is_seeded=True,
    )
    spec.lines = list(parent.lines[: boundary + 1])
    spec.end_seed(time_of(parent, boundary))
    return spec


def legacy_copy(
    source: SessionSpec,
    copy_id: str,
    parent: SessionSpec,
    created_at: int,
    *,
    own_descriptor: bool = True,
) -> SessionSpec:
    """A copy made by an older tool: the source's lines through its last turn/end, the
    tagged marker, and (optionally) the descriptor again in its own range."""
    ends = [i for i, line in enumerate(source.lines) if b'"turn/end"' in line]
    last = ends[-1]
    spec = SessionSpec(
        id=copy_id,
        created_at=created_at,
        cwd=source.cwd,
        parent=parent.id,
        origin="subagent",
        depth=parent.depth + 1,
        is_seeded=True,
    )
    spec.lines = list(source.lines[: last + 1])
    spec.end_seed(time_of(source, last))
    if own_descriptor:
        descriptor = next(
            orjson.loads(line)["data"] for line in source.lines if b"subagent/descriptor" in line
        )
        spec.add("subagent/descriptor", created_at, descriptor)
    return spec


def run(root: Path, fork_id: str, **options: Any) -> RelinkSummary:
    """relink through the library with a deterministic clock and ids, under the source guard
    (``safetykit``): no generation file loses a byte, appends are whole frames (a run that
    dies may leave one torn), a dry run changes nothing."""
    located = Root(root)
    options.setdefault("clock", Clock(NOW, 1))
    options.setdefault("new_id", Ids(77))
    with guarded([root], read_only=bool(options.get("dry_run")), what=f"relink {fork_id}"):
        return relink(located, located.find(fork_id), **options)


# -- the peer plugin's copy-tree scenario (semantics §10.4) --------------------------------


@dataclass
class PluginScenario:
    parent: SessionSpec
    children: list[SessionSpec]
    open_child: SessionSpec
    grand: SessionSpec
    other: SessionSpec
    fork: SessionSpec


def plugin_scenario(root: Path, clock: Clock, *, children: int = 11) -> PluginScenario:
    """P_A with 11 completed children, one open child, a grandchild under child 01, a child
    of another session; its 12 facts before its last turn/end; C_A forked at that turn/end.
    ``children`` makes a smaller variant (the crash harness's cheap default)."""
    parent = SessionSpec(id="session-P_A", created_at=clock(), cwd=CWD)
    parent.turn(clock, "spawn the reviewers")
    parent.flush()
    kids: list[SessionSpec] = []
    grand: SessionSpec | None = None
    for k in range(1, children + 1):
        child_id = f"a-child-{k:02d}"
        child = SessionSpec(
            id=child_id, created_at=clock(), cwd=CWD, parent=parent.id, origin="subagent", depth=1
        )
        child.descriptor(
            clock,
            f"child {k}",
            provider="spawn",
            agent_provider="deepseek",
            agent_model="deepseek-chat",
        )
        if k == 1:
            grand = subagent(clock, "a-grand", child, label="grand")
        child.turn(clock, f"review part {k}")
        parent.catalog(clock, child, label=f"child {k}")
        kids.append(child)
    open_child = SessionSpec(
        id="a-open", created_at=clock(), cwd=CWD, parent=parent.id, origin="subagent", depth=1
    )
    open_child.descriptor(clock, "still working")
    open_child.open_turn(clock)
    parent.catalog(clock, open_child, label="still working")
    parent.flush()
    boundary = parent.turn(clock, "thanks")
    other_parent = SessionSpec(id="session-other", created_at=clock(), cwd=CWD)
    other_parent.turn(clock)
    other = subagent(clock, "z-other", other_parent)
    fork = fork_of(parent, "session-C_A", clock(), at=boundary)
    assert grand is not None
    for spec in (parent, *kids, open_child, grand, other_parent, other, fork):
        spec.publish(root)
    return PluginScenario(parent, kids, open_child, grand, other, fork)


def repair_tree(root: Path) -> None:
    """P with three children (c1 has a grandchild g1, c2 another cwd); C, a fork of P, holds
    an uncatalogued legacy copy of c3 without its own descriptor (relink repairs both)."""
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    c1 = subagent(clock, "c1", parent, label="one")
    g1 = subagent(clock, "g1", c1, label="grand")
    c1.turn(clock)
    c2 = subagent(clock, "c2", parent, label="two", cwd="/srv/other")
    c3 = subagent(clock, "c3", parent, label="three")
    for child in (c1, c2, c3):
        parent.catalog(clock, child, label=child.id)
    parent.turn(clock)
    fork_c = fork_of(parent, "session-C", clock())
    legacy = legacy_copy(c3, "legacy-c3", fork_c, clock(), own_descriptor=False)
    for spec in (parent, c1, g1, c2, c3, fork_c, legacy):
        spec.publish(root)


# -- reading results ------------------------------------------------------------------------


def digests(root: Path) -> dict[str, str]:
    """sha256 of every session log of the root, by session dir (relative)."""
    return {
        str(path.parent.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.glob("*/*/session.*"))
        if not path.name.endswith(".lock")
    }


def log_of(root: Path, session_id: str) -> Path:
    return Root(root).find(session_id) / CURRENT_NAME


def own_catalog(path: Path) -> list[dict[str, Any]]:
    events = log_events(path)
    markers = [e["seq"] for e in events if e["type"] == "session/end-seed" and e["data"]]
    cut = markers[-1] if markers else 0
    return [e["data"] for e in events if e["type"] == "subagent/catalog" and e["seq"] >= cut]


def children_on_disk(root: Path, parent_id: str) -> list[str]:
    return [e.id or "" for e in Root(root).children_of(parent_id)]


def errors_of(session_dir: Path) -> list[str]:
    return [f"{f.code}: {f.message}" for f in validate_dir(session_dir) if f.severity == "error"]


def assert_clean(root: Path) -> None:
    """Every session of the root passes the v4 checklist and no lock is held."""
    for entry in Root(root).entries():
        if entry.generation is None or entry.generation.version != 4:
            continue
        assert errors_of(entry.session_dir) == [], entry.id
        assert probe(entry.session_dir) != "held", entry.id


def oplog_lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@dataclass
class CopyView:
    """A copy as the tests look at it: its header, decompressed lines and events."""

    path: Path
    header: dict[str, Any]
    lines: list[bytes]
    events: list[dict[str, Any]] = field(default_factory=list)


def view(root: Path, session_id: str) -> CopyView:
    path = log_of(root, session_id)
    return CopyView(path, log_header(path), log_lines(path)[1:], log_events(path))


def without_ids(data: dict[str, Any], summary: RelinkSummary) -> dict[str, Any]:
    """A summary with new copy ids (and parents that are new copies) and warnings blanked:
    what a plan can know. A dry run's summary must equal the real run's after this."""
    copies = {c["copy"] for c in summary.copied}
    out = dict(data, dryRun=None, warnings=None)
    out["copied"] = [
        dict(c, copy=None, parent=None if c["parent"] in copies else c["parent"])
        for c in data["copied"]
    ]
    out["uncatalogable"] = [
        dict(u, id=None) if u["id"] in copies or u["id"] is None else u
        for u in data["uncatalogable"]
    ]
    return out


# -- whole subagent trees -------------------------------------------------------------------

Node = tuple[str, int, tuple[Any, ...]]
"""(label, depth, children): one subagent and its subtree, as the panel would show it."""


def _label(entry: Any) -> str:
    from dsh_fork.model import MODEL_TYPES, facts_of
    from dsh_fork.reader import open_log

    facts = facts_of(open_log(entry.generation, collect=MODEL_TYPES))
    descriptor = facts.descriptor()
    assert descriptor is not None and not descriptor.inherited_only, entry.id
    label: str = descriptor.data["label"]
    return label


def subagent_tree(root: Path, session_id: str) -> tuple[Node, ...]:
    """The whole subagent tree under a session as it is on disk, checked on the way down:
    every child's header names its parent, says ``origin: subagent`` and the parent's depth
    + 1; every parent catalogues each of its children exactly once in its own range, with the
    child's label, and catalogues nothing else; every child has its own descriptor."""
    located = Root(root)
    entry = located.entry(session_id)
    assert entry is not None and entry.header is not None, session_id
    return _subtree(located, session_id, entry.header.delegation_depth)


def _subtree(root: Root, session_id: str, depth: int) -> tuple[Node, ...]:
    kids = root.children_of(session_id)
    facts = own_catalog(root.find(session_id) / CURRENT_NAME)
    listed = [fact["childId"] for fact in facts]
    assert len(listed) == len(set(listed)), f"{session_id} catalogues a child twice: {listed}"
    assert sorted(listed) == sorted(k.id or "" for k in kids), (session_id, listed)
    labels = {fact["childId"]: fact.get("label") for fact in facts}
    nodes: list[Node] = []
    for kid in kids:
        header = kid.header
        assert header is not None and kid.id is not None
        assert (header.origin, header.parent_session) == ("subagent", session_id), kid.id
        assert header.delegation_depth == depth + 1, kid.id
        label = _label(kid)
        assert labels[kid.id] == label, kid.id
        nodes.append((label, depth + 1, _subtree(root, kid.id, depth + 1)))
    return tuple(sorted(nodes))


def tree_size(nodes: tuple[Node, ...]) -> int:
    return sum(1 + tree_size(children) for _, _, children in nodes)


def top_of(root: Path, session_id: str) -> str:
    """The session a fork child (or a fork of one) descends from: up its fork chain."""
    located = Root(root)
    current = session_id
    while True:
        entry = located.entry(current)
        assert entry is not None and entry.header is not None
        if not entry.header.is_fork_child or entry.header.parent_session is None:
            return current
        current = entry.header.parent_session


def assert_every_fork_complete(root: Path) -> None:
    """Every fork child of the root holds exactly its top session's subagent tree, and the
    root passes the v4 checklist with no lock held."""
    forks = [e.id or "" for e in Root(root).fork_children()]
    assert forks
    for fork_id in forks:
        want = subagent_tree(root, top_of(root, fork_id))
        assert subagent_tree(root, fork_id) == want, fork_id
    assert_clean(root)
