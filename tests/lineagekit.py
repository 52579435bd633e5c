"""Fork families for the tree, diff, du and turns tests, built with the library itself.

A fixture root (``generate``) gives a top session with a subagent tree; forks are made with
``fork_session`` (deterministic ids and clock), forks of forks on top, each relinked or not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SHARED

from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, Ids, SessionSpec, write_log_file
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import CURRENT_NAME, LOCK_NAME, list_generations
from dsh_fork.layout import session_dir
from dsh_fork.model import derive
from dsh_fork.reader import open_log
from dsh_fork.relink import relink

NOW = 1_800_000_000_000


@dataclass
class Family:
    """A root holding one fork family: ``top`` with its agents, forks A and B of it, and AA,
    a fork of A (a fork of a fork). Which of them have their subagent copies is the
    builder's choice."""

    root: Path
    top: str
    fork_a: str
    fork_b: str
    fork_aa: str
    cuts: dict[str, int]
    """Each fork's boundary (the ``--at`` it was made with)."""


def turn_ends(root: Path, session_id: str) -> list[int]:
    session_dir = Root(root).find(session_id)
    log = open_log(list_generations(session_dir)[-1], collect=("turn/start", "turn/end"))
    return derive(log.header, log.event_count, log.collected).turn_ends


def build_family(root: Path, *, relinked: bool, seed: int = 11) -> Family:
    """top (4 turns, 2 agents of 2 agents each, catalogued in turn 1), A = fork after
    turn 2, B = fork after turn 3, AA = fork of A at its end. With ``relinked`` every fork
    gets its copies in the same run (``fork`` copies the subagents), else none has any."""
    summary = generate(root, sessions=1, agents=2, depth=2, turns=4, seed=seed)
    top = summary.top_level[0]
    clock = Clock(NOW)
    ids = Ids(seed + 1000)
    ends = turn_ends(root, top)
    cuts: dict[str, int] = {}

    def fork(source: str, child: str, at: int | None) -> None:
        result = fork_session(
            source,
            str(root),
            ForkOptions(at=at, child_id=child, agents=relinked),
            clock=clock,
            new_id=ids,
            oplog_path=root.parent / "oplog",
        )
        assert result.child.boundary is not None
        cuts[child] = result.child.boundary

    fork(top, "fork-a", ends[1])
    fork(top, "fork-b", ends[2])
    fork("fork-a", "fork-aa", None)
    return Family(root, top, "fork-a", "fork-b", "fork-aa", cuts)


def relink_fork(family: Family, fork_id: str, seed: int = 99) -> None:
    """Relink one fork later (its copies made by ``relink``, not by ``fork``)."""
    root = Root(family.root)
    relink(
        root,
        root.find(fork_id),
        oplog_path=family.root.parent / "oplog",
        clock=Clock(NOW + 10_000_000),
        new_id=Ids(seed),
    )


FOREIGN = SHARED / "foreign" / "roots"
FOREIGN_ROOTS = sorted(p.name for p in FOREIGN.iterdir()) if FOREIGN.is_dir() else ["absent"]
"""The foreign roots' names, for parametrising (one placeholder, skipped, when absent)."""


def foreign_roots(name: str) -> Path:
    """One foreign root (read in place: the commands tested here never write); skipped with a
    visible reason when the shared data is not beside the checkout, a failure in CI."""
    if not FOREIGN.is_dir():
        message = f"the shared foreign roots are missing at {FOREIGN}"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return FOREIGN / name


def generate_oddities(root: Path, *, relinked: bool = True) -> None:
    """A generated root with every oddity the fixture generator makes: chains of forks
    (relinked or not), legacy copies, open turns, torn tails and v3 trees."""
    generate(
        root,
        sessions=2,
        agents=2,
        depth=2,
        turns=3,
        tools=True,
        forks=2,
        fork_depth=2,
        relinked=relinked,
        legacy=True,
        open_turns=True,
        torn_tails=True,
        old_generation=1,
        seed=5,
    )


def hostile(root: Path) -> None:
    """Dirs a listing must name, not skip, beside plain sessions."""
    clock = Clock()
    cwd = "/home/ana/hostile"

    def plain(session_id: str) -> Path:
        spec = SessionSpec(id=session_id, created_at=clock(), cwd=cwd)
        spec.turn(clock)
        spec.flush()
        where = session_dir(root, spec.id, spec.cwd)
        write_log_file(where / CURRENT_NAME, spec.header_line(), spec.frame_plaintexts())
        (where / LOCK_NAME).touch()
        return where

    for k in range(6):
        plain(f"session-plain-{k}")
    fifo = plain("session-fifo")
    (fifo / CURRENT_NAME).unlink()
    os.mkfifo(fifo / CURRENT_NAME)
    linked = plain("session-linked")
    target = linked.parent / "elsewhere.zstd"
    (linked / CURRENT_NAME).rename(target)
    (linked / CURRENT_NAME).symlink_to(target)
    damaged = plain("session-damaged")
    (damaged / CURRENT_NAME).write_bytes(b"\x28\xb5\x2f\xfd not a frame")
    future = plain("session-future")
    (future / "session.v9.jsonl.zstd").write_bytes((future / CURRENT_NAME).read_bytes())
    (plain("session-empty") / CURRENT_NAME).unlink()
    (root / "not-a-project").write_bytes(b"a file where a project dir belongs")
