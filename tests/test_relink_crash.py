"""relink is resumable (semantics §4.5): whatever durable step a run dies after — a copy's
temp file, its link, a catalog frame half written — the next run completes the tree with no
duplicate copy and no duplicate catalog fact, and a third run changes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import log_lines, tree_digest
from relinkkit import (
    CWD,
    assert_clean,
    fork_of,
    legacy_copy,
    log_of,
    own_catalog,
    run,
    subagent,
    without_ids,
)

from dsh_fork import faults
from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.reader import current_generation, open_log

SOURCES = ("c1", "c2", "c3")


def build(root: Path) -> None:
    """P with three children (c1 has a grandchild g1); C, a fork of P, already holds an
    uncatalogued legacy copy of c3 without its own descriptor."""
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
    fork = fork_of(parent, "session-C", clock())
    legacy = legacy_copy(c3, "legacy-c3", fork, clock(), own_descriptor=False)
    for spec in (parent, c1, g1, c2, c3, fork, legacy):
        spec.publish(root)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "sessions"
    build(root)
    return root


def fresh(pristine: Path, target: Path) -> Path:
    shutil.copytree(pristine, target)
    return target


def lines_of(root: Path, session_id: str) -> list[bytes]:
    return log_lines(log_of(root, session_id))[1:]


def source_of(root: Path, copy_id: str, candidates: tuple[str, ...]) -> str:
    """The one candidate whose lines through its last turn/end start the copy, byte for byte."""
    copy = lines_of(root, copy_id)
    matches = []
    for candidate in candidates:
        source = lines_of(root, candidate)
        last = max(i for i, line in enumerate(source) if b'"turn/end"' in line)
        if copy[: last + 1] == source[: last + 1]:
            matches.append(candidate)
    assert len(matches) == 1, (copy_id, matches)
    return matches[0]


def assert_complete(root: Path, originals: dict[str, str]) -> None:
    """The finished tree: one copy per source, each catalogued exactly once, g1 copied under
    c1's copy, no torn tail anywhere, originals untouched, every log valid."""
    copies = [e.id or "" for e in Root(root).children_of("session-C")]
    assert len(copies) == 3, copies
    by_source = {source_of(root, copy, SOURCES): copy for copy in copies}
    assert sorted(by_source) == list(SOURCES)
    assert by_source["c3"] == "legacy-c3"
    facts = own_catalog(log_of(root, "session-C"))
    assert sorted(f["childId"] for f in facts) == sorted(copies)
    grand = [e.id or "" for e in Root(root).children_of(by_source["c1"])]
    assert len(grand) == 1 and source_of(root, grand[0], ("g1",)) == "g1"
    assert [f["childId"] for f in own_catalog(log_of(root, by_source["c1"]))] == grand
    legacy_types = [line for line in lines_of(root, "legacy-c3") if b"subagent/descriptor" in line]
    assert len(legacy_types) == 2  # the inherited one and the repaired own one
    for entry in Root(root).entries():
        generation = current_generation(entry.session_dir)
        assert generation is not None
        assert open_log(generation).torn is None, entry.id
    for key, digest in originals.items():
        assert tree_digest(root)[key] == digest, key
    assert_clean(root)


def original_digests(root: Path) -> dict[str, str]:
    """Digests of the logs relink must never write: the parent and its children."""
    originals = {"session-P", "c1", "g1", "c2", "c3"}
    return {
        key: digest
        for key, digest in tree_digest(root).items()
        if Path(key).name == CURRENT_NAME and Path(key).parent.name in originals
    }


def count_steps(pristine: Path, target: Path) -> int:
    root = fresh(pristine, target)
    with faults.install("crash", 0) as plan:
        summary = run(root, "session-C")
    assert len(summary.copied) == 3 and summary.ok
    kinds = {kind for kind, _ in plan.log}
    assert {"mkdir", "lock", "create", "write", "fsync", "link", "fsync-dir", "append"} <= kinds
    return plan.count


@pytest.mark.parametrize("action", ["crash", "tear"])
def test_a_run_dying_after_any_step_is_completed_by_the_next(
    pristine: Path, tmp_path: Path, action: str
) -> None:
    total = count_steps(pristine, tmp_path / "count")
    originals = original_digests(pristine)
    assert total > 30
    for k in range(1, total + 1):
        root = fresh(pristine, tmp_path / f"{action}-{k}")
        with pytest.raises(faults.InjectedCrash), faults.install(action, k):
            run(root, "session-C")
        plan = run(root, "session-C", dry_run=True)
        resumed = run(root, "session-C")
        assert resumed.ok, (k, resumed.to_json())
        assert without_ids(plan.to_json(), plan) == without_ids(resumed.to_json(), resumed), k
        assert_complete(root, originals)
        settled = tree_digest(root)
        again = run(root, "session-C")
        assert again.copied == [] and again.catalogued == [] and again.descriptors_repaired == []
        assert tree_digest(root) == settled, k
        shutil.rmtree(root)


def test_a_killed_process_is_completed_by_the_next_run(pristine: Path, tmp_path: Path) -> None:
    """Real process death (SIGKILL through DSH_FORK_FAULT) in the middle of the run: the
    kernel drops every lock, the rerun through the CLI finishes the tree."""
    total = count_steps(pristine, tmp_path / "count")
    originals = original_digests(pristine)
    for k in (total // 3, total - 2):
        root = fresh(pristine, tmp_path / f"kill-{k}")
        argv = [sys.executable, "-m", "dsh_fork", "--root", str(root), "relink", "session-C"]
        killed = subprocess.run(
            argv, env={**os.environ, faults.ENV_VAR: f"kill:{k}"}, capture_output=True, check=False
        )
        assert killed.returncode == -9, killed.stderr
        resumed = subprocess.run(argv, capture_output=True, check=False)
        assert resumed.returncode == 0, resumed.stderr
        assert_complete(root, originals)
