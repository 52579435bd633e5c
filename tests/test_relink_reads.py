"""What a relink asks the file system about each copy it writes: the walk hands the check
after it (``resumable``) what it knew, so a regression that makes a stage look a copy up
again, stat its log once more or open its dir twice fails here. The checks that keep a copy
safe stay counted too: one lock probe and one re-list of its dir per copy read back, one
open of its dir through its parent's descriptor. No timing is measured."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_fork import fsdir, resumable
from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import generate
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import CURRENT_NAME, LOCK_NAME
from dsh_fork.relink import relink_arg


class Calls:
    """The calls of a run, by the name or path they were made with."""

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()
        self.dir_opens: Counter[str] = Counter()
        self.file_opens: Counter[str] = Counter()
        self.scandirs: Counter[str] = Counter()
        self.lookups: Counter[str] = Counter()
        self.euid = 0
        self.checking = False
        """Inside the check after the walk (``resumable.unresumable``)."""

    def snapshot(self) -> Calls:
        copy = Calls()
        for name in ("stats", "dir_opens", "file_opens", "scandirs", "lookups"):
            setattr(copy, name, Counter(getattr(self, name)))
        copy.euid = self.euid
        return copy


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """Counts every ``stat``, ``open``, ``scandir`` and ``geteuid`` of the run and every look
    of an id in a root's listing by the check after the walk. The run is made as root's
    (``geteuid`` is 0): a run as root hands what it makes over to the owner of the dir it is
    made in, the path where a new dir was opened twice; a dir owned by the user running the
    test is handed to that user, which any user may do."""
    seen = Calls()
    real_stat, real_open, real_scandir = os.stat, os.open, os.scandir
    real_entry = Root.entry
    real_unresumable = resumable.unresumable

    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(path, int):
            seen.stats[os.fspath(path)] += 1
        return real_stat(path, *args, **kwargs)

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if not isinstance(path, int):
            kind = seen.dir_opens if flags & os.O_DIRECTORY else seen.file_opens
            kind[os.fspath(path)] += 1
        return real_open(path, flags, *args, **kwargs)

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int):
            seen.scandirs[os.fspath(path)] += 1
        return real_scandir(path)

    def geteuid() -> int:
        seen.euid += 1
        return 0

    def unresumable(*args: Any, **kwargs: Any) -> Any:
        seen.checking = True
        try:
            return real_unresumable(*args, **kwargs)
        finally:
            seen.checking = False

    def entry(self: Root, session_id: str) -> Any:
        if seen.checking:
            seen.lookups[session_id] += 1
        return real_entry(self, session_id)

    fsdir.effective_uid.cache_clear()
    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "geteuid", geteuid)
    monkeypatch.setattr(Root, "entry", entry)
    monkeypatch.setattr(resumable, "unresumable", unresumable)
    try:
        yield seen
    finally:
        monkeypatch.undo()
        fsdir.effective_uid.cache_clear()  # the pretended uid is not kept for later tests


def named(counter: Counter[str], name: str) -> int:
    """The calls made with ``name`` as a path's last component or alone (relative to a held
    dir's descriptor)."""
    return sum(n for path, n in counter.items() if os.path.basename(path) == name)


def test_each_copy_is_written_and_read_back_with_what_the_walk_knew(
    tmp_path: Path, calls: Calls
) -> None:
    """A relink of a fork made without its agents, two agents with two of their own (6
    copies, two of them parents of the others): each copy's dir is made and opened once
    through its project dir's descriptor; its log is read back once after the walk (a
    parent's also once by the append of its catalog facts, under its lock), stat'ed before
    and after each read and not once more; each read re-lists its dir once; its lock is
    probed once; the check looks no copy up in the root's listing (the walk says where it
    wrote each); the effective uid is asked once for the whole run, not per file made."""
    root = tmp_path / "root"
    tree = generate(root, sessions=1, agents=2, depth=2, turns=2, seed=11)
    fork_session(tree.top_level[0], str(root), ForkOptions(child_id="session-fork", agents=False))
    fsdir.effective_uid.cache_clear()
    for counter in (calls.stats, calls.dir_opens, calls.file_opens, calls.scandirs):
        counter.clear()
    calls.lookups.clear()
    calls.euid = 0

    summary = relink_arg("session-fork", str(root))
    counted = calls.snapshot()  # before the checks below look

    assert summary.failed == [] and summary.unresumable == []
    copies = [row["copy"] for row in summary.copied]
    assert len(copies) == 6 and all(isinstance(copy, str) for copy in copies)
    parents = {row["parent"] for row in summary.copied}
    for copy_id in copies:
        copy_dir = Root(root).find(copy_id)
        log, lock = copy_dir / CURRENT_NAME, copy_dir / LOCK_NAME
        reads = 2 if copy_id in parents else 1  # a parent's: the append's, under its lock
        assert log.is_file()
        assert named(counted.dir_opens, copy_dir.name) == 1, copy_id
        assert counted.file_opens[str(log)] == reads, copy_id
        assert counted.stats[str(log)] == 2 * reads, copy_id
        assert counted.scandirs[str(copy_dir)] == reads, copy_id
        assert counted.file_opens[str(lock)] == 1, copy_id  # the probe: free, not held
        assert counted.lookups[copy_id] == 0, copy_id
    assert counted.euid == 1
