"""How often a fork with subagents reads each log and lists the root: each stage hands what it
learnt to the next (docs/design.md, "The data path of each command"), so a regression that
makes a stage ask the root again, or read a log again, fails here. No timing is measured."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import frame_count, tree_listing
from relinkkit import CWD, fork_of, session_path, subagent

from dsh_fork import frames as zframes
from dsh_fork import reader
from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import CURRENT_NAME


class Watched:
    """The reads of a run: ``reader.open_log`` per log file, ``os.scandir`` per dir, and the
    frames of each log file read in pieces that are decoded (``frames.map_frames``)."""

    def __init__(self) -> None:
        self.logs: Counter[Path] = Counter()
        self.dirs: Counter[str] = Counter()
        self.decoded: Counter[Path] = Counter()


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[Watched]:
    seen = Watched()
    real_open_log = reader.open_log
    real_scandir = os.scandir

    def open_log(generation: Any, **options: Any) -> Any:
        seen.logs[Path(generation.path)] += 1
        return real_open_log(generation, **options)

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int):
            seen.dirs[os.fspath(path)] += 1
        return real_scandir(path)

    real_map_frames = zframes.map_frames

    def map_frames(data: Any, frames: Any, then: Any, first_index: int = 0) -> Any:
        path = getattr(data, "path", None)

        def counted(pieces: Any) -> Any:
            if path is not None:
                seen.decoded[Path(path)] += 1
            return then(pieces)

        return real_map_frames(data, frames, counted, first_index)

    monkeypatch.setattr(zframes, "map_frames", map_frames)
    # every module that took ``open_log`` by name, as the run imports them
    for name, module in list(sys.modules.items()):
        if name.startswith("dsh_fork") and getattr(module, "open_log", None) is real_open_log:
            monkeypatch.setattr(module, "open_log", open_log)
    monkeypatch.setattr(reader, "open_log", open_log)
    monkeypatch.setattr(os, "scandir", scandir)
    yield seen


def log_of(root: Path, session_id: str) -> Path:
    return Root(root).find(session_id) / CURRENT_NAME


def test_a_fork_with_agents_reads_each_log_once_and_each_copy_back_once(
    tmp_path: Path, watched: Watched
) -> None:
    """A fork of a session with two agents, each with two of its own (7 source logs): every
    source log is read once (the top by the fork, each agent by the plan), every copy is read
    back once after the walk, and a log the walk appends catalog facts to (the fork child,
    each copy that has copies under it) is read under its lock by the append that guards
    the write: the fork child only then, for the check after the walk takes the catalog the
    append left. The root and its project dir are listed by the lookup, the
    listing, the check that the child's id is free and the look under the child's lock for
    sessions published meanwhile: once each."""
    root = tmp_path / "root"
    tree = generate(root, sessions=1, agents=2, depth=2, turns=2, seed=7)
    sources = {entry.session_dir / CURRENT_NAME for entry in Root(root).entries()}
    assert len(sources) == 7
    top = tree.top_level[0]

    watched.logs.clear()
    watched.dirs.clear()
    result = fork_session(
        top,
        str(root),
        ForkOptions(child_id="session-child"),
        oplog_path=tmp_path / "oplog",
    )

    logs, dirs = dict(watched.logs), dict(watched.dirs)  # before the checks below look
    assert result.agents is not None and len(result.agents.copied) == 6
    assert result.agents.unresumable == [] and result.failure is None
    child = log_of(root, "session-child")
    copies = {row["copy"]: row["parent"] for row in result.agents.copied}
    parents = {parent for parent in copies.values() if parent != "session-child"}
    assert len(parents) == 2
    expected: Counter[Path] = Counter()
    expected.update({path: 1 for path in sources})
    expected.update({log_of(root, copy_id): 1 for copy_id in copies})  # read back
    expected.update({log_of(root, parent): 1 for parent in parents})  # the append's read
    expected.update({child: 1})  # the append of its catalog facts; the check takes its catalog
    assert logs == dict(expected)
    project = child.parent.parent
    assert dirs[str(root)] == 4
    assert dirs[str(project)] == 2
    written = sources | {child} | {log_of(root, copy_id) for copy_id in copies}
    assert sorted(p for p in tree_listing(root) if p.endswith(".zstd")) == sorted(
        str(p.relative_to(root)) for p in written
    )


def test_a_lookup_by_prefix_lists_the_root_and_the_session_dir_once(
    tmp_path: Path, watched: Watched
) -> None:
    """The lookup of a unique id prefix lists the root and each project dir once, and the
    dir of the session it finds once: the expansion hands on the dirs and generations it
    found."""
    from dsh_fork.sessionarg import locate

    root = tmp_path / "root"
    tree = generate(root, sessions=1, agents=2, depth=1, turns=1, seed=3)
    top = tree.top_level[0]
    session_dir = Root(root).find(top)
    watched.dirs.clear()

    located = locate(top.removeprefix("session-")[:8], str(root))

    assert located.session_dir == session_dir
    assert located.generation.path == session_dir / CURRENT_NAME
    assert watched.dirs[str(root)] == 1
    assert watched.dirs[str(session_dir.parent)] == 1
    assert watched.dirs[str(session_dir)] == 1


def test_a_fork_reads_the_earlier_forks_of_its_source_only_after_their_cut(
    tmp_path: Path, watched: Watched
) -> None:
    """A source forked twice by a user, and once by DSH for a subagent that lacks ``origin``:
    the new fork asks of each whether it is a delegation child (dsh-world §4).
    The answer lies after its cut (an own descriptor), so each earlier fork's log is decoded
    from its end down to its cut's frame, never its inherited history again; the delegation
    child is still told apart (its descriptor) and copied with the source's subagent."""
    root = tmp_path / "root"
    clock = Clock()
    source = SessionSpec(id="session-S", created_at=clock(), cwd=CWD)
    source.turn(clock, "spawn a helper")
    helper = subagent(clock, "helper-1", source)
    source.catalog(clock, helper, label="helper")
    source.flush()
    delegated = fork_of(source, "agent-D", clock())  # DSH forked a subagent for it
    delegated.turns = source.turns
    delegated.descriptor(clock, "forked reviewer")
    delegated.turn(clock, "review")
    delegated.flush()
    for k in range(30):  # a long history, one frame per turn, as DSH flushes it
        source.turn(clock, f"turn {k}")
        source.flush()
    forks = []
    for fork_id in ("session-U1", "session-U2"):
        fork = fork_of(source, fork_id, clock())
        fork.batches = list(source.batches)  # the inherited frames, then its own
        fork.turns = source.turns
        fork.turn(clock, "work of the fork")
        fork.flush()
        forks.append(fork)
    for spec in (source, helper, delegated, *forks):
        spec.publish(root)
    users = [session_path(root, fork) for fork in forks]
    assert all(frame_count(path) > 30 for path in users)
    watched.logs.clear()
    watched.decoded.clear()

    result = fork_session("session-S", str(root), ForkOptions(child_id="session-child"))

    assert result.agents is not None and result.failure is None
    assert sorted(row["source"] for row in result.agents.copied) == ["agent-D", "helper-1"]
    for path in users:  # the last frame holds the cut and the own events: the rule stops there
        assert watched.logs[path] == 0
        assert watched.decoded[path] == 1
