"""doctor's memory grows by little per session (issue 33: about 1 KB per session beyond 10,000).

What a run keeps for each session once its turn has passed is what the listing read (the dir's
text and its header line) and the few lineage facts, never its paths, generations or parsed
header: a session the pass has checked goes back to that listed form, and so do the parent and
children its lineage rules read. Measured with ``tracemalloc`` at the last session of the pass,
when everything the run keeps is alive; the first run (on a small root) loads every module the
pass needs, so that no import is counted against the sessions.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from dsh_fork.discovery import Root
from dsh_fork.doctor import doctor
from dsh_fork.fixtureroot import generate

PER_SESSION_BYTES = 1_500
"""What the pass may hold per session at its end (the listed form takes about 800 bytes; a
pass that kept each parsed header, path and generation held about 2,500)."""


class LastSession:
    """A progress that reads the traced memory when the pass reaches its last session."""

    def __init__(self) -> None:
        self.stage_name = ""
        self.total = 0
        self.done = 0
        self.held: int | None = None

    def stage(self, what: str, total: int | None = None) -> None:
        self.stage_name, self.total, self.done = what, total or 0, 0

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self.stage_name == "sessions checked" and self.done == self.total:
            self.held = tracemalloc.get_traced_memory()[0]


def test_a_pass_keeps_little_per_session(tmp_path: Path) -> None:
    warm = tmp_path / "warm" / "sessions"
    generate(warm, sessions=2, agents=3, depth=1, turns=1, forks=1)
    doctor(Root(warm))
    root = tmp_path / "big" / "sessions"
    summary = generate(root, sessions=300, agents=3, depth=1, turns=1, seed=4)
    assert summary.sessions == 1_200
    progress = LastSession()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        report = doctor(Root(root), progress=progress)
    finally:
        tracemalloc.stop()
    assert report.sessions == 1_200
    assert report.findings == []
    assert progress.held is not None
    assert (progress.held - before) / report.sessions < PER_SESSION_BYTES
