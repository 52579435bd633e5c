"""Forks of forks (semantics §1.5 "Fork chains", §2.6 copy cut K, §4.2–§4.4): in whatever
order forks are made and relinked, every fork child ends with exactly its branch's subagent
tree — each lineage once, depths right, every parent cataloguing its copies once in its own
range — and one more run copies and appends nothing. Every tree is built with the fixture
generator (``generate``); forks of the generated roots go through the library's own fork.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import cli_launcher
import orjson
import pytest
from conftest import log_events, log_lines, tree_digest
from relinkkit import (
    assert_clean,
    assert_every_fork_complete,
    plugin_scenario,
    subagent_tree,
    top_of,
    tree_size,
)
from safetykit import crash_state_problems, files_under, snapshot

from dsh_fork import faults
from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import FixtureSummary, generate
from dsh_fork.fixtures import Clock
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.relink import relink, relink_all
from dsh_fork.relinkresult import RelinkAllResult

TREE = {"sessions": 1, "agents": 2, "depth": 2, "turns": 2, "seed": 11}
"""One top session, two agents, each with two agents of its own: six subagents."""


def lib_fork(root: Path, source: str, child_id: str, *, agents: bool = True) -> None:
    result = fork_session(
        source,
        str(root),
        ForkOptions(child_id=child_id, agents=agents),
        env={},
    )
    assert result.agents is None or result.agents.ok, result.agents


def lib_relink(root: Path, fork_id: str) -> None:
    located = Root(root)
    summary = relink(located, located.find(fork_id))
    assert summary.ok, summary.to_json()


def relink_everything(root: Path) -> RelinkAllResult:
    result = relink_all(Root(root))
    assert result.failed == [], result.failed
    return result


def assert_settled(root: Path) -> None:
    """One more ``relink --all`` copies nothing, appends nothing, writes nothing."""
    before = tree_digest(root)
    again = relink_everything(root)
    for summary in again.results:
        assert (summary.copied, summary.catalogued, summary.descriptors_repaired) == ([], [], [])
    assert tree_digest(root) == before


def generated(root: Path, **options: object) -> FixtureSummary:
    summary = generate(root, **{**TREE, **options})  # type: ignore[arg-type]
    assert tree_size(subagent_tree(root, summary.top_level[0])) == 6
    return summary


def test_relink_c_then_fork_c_keeps_the_grandchildren(root: Path) -> None:
    summary = generated(root, forks=1)
    top, c = summary.top_level[0], summary.forks[0]
    want = subagent_tree(root, top)

    lib_relink(root, c)
    lib_fork(root, c, "session-C2")

    assert subagent_tree(root, c) == want
    assert subagent_tree(root, "session-C2") == want  # the grandchildren's copies included
    assert_every_fork_complete(root)
    assert_settled(root)


def test_forks_of_c_made_before_it_was_relinked_are_filled_by_relink_all(root: Path) -> None:
    summary = generated(root, forks=1)
    c = summary.forks[0]
    lib_fork(root, c, "session-C2", agents=False)
    lib_fork(root, c, "session-C2b", agents=False)
    lib_fork(root, "session-C2", "session-C3", agents=False)

    result = relink_everything(root)

    assert [s.fork_child for s in result.results] == [c, "session-C2", "session-C2b", "session-C3"]
    assert [len(s.copied) for s in result.results] == [6, 6, 6, 6]
    assert all(s.unrelated == [] for s in result.results)
    assert_every_fork_complete(root)
    assert_settled(root)


def test_the_child_relinked_before_its_parent(root: Path) -> None:
    summary = generated(root, forks=1)
    top, c = summary.top_level[0], summary.forks[0]
    want = subagent_tree(root, top)
    lib_fork(root, c, "session-C2", agents=False)

    lib_relink(root, "session-C2")  # from the originals: C has no copies yet
    assert subagent_tree(root, "session-C2") == want
    lib_relink(root, c)
    assert subagent_tree(root, c) == want
    assert_settled(root)

    lib_fork(root, "session-C2", "session-C3")  # from C2's copies
    lib_fork(root, c, "session-C4")  # from C's copies
    assert_every_fork_complete(root)
    assert_settled(root)


@pytest.mark.parametrize("relinked", [True, False], ids=["forked-with-agents", "relinked-after"])
def test_a_chain_of_three_forks(root: Path, relinked: bool) -> None:
    summary = generated(root, forks=1, fork_depth=3, relinked=relinked)
    chain = summary.forks
    assert [top_of(root, f) for f in chain] == [summary.top_level[0]] * 3
    if not relinked:
        relink_everything(root)
    assert_every_fork_complete(root)
    assert_settled(root)


def test_a_legacy_fork_and_its_forks(root: Path) -> None:
    """An older tool's uncatalogued copies are catalogued and repaired, never doubled; a
    fork of that fork copies from them."""
    summary = generated(root, legacy=True)
    [legacy] = summary.legacy_forks
    lib_fork(root, legacy, "session-L2", agents=False)

    relink_everything(root)

    # The legacy copies of the two direct children are kept (they had no grandchildren),
    # and the grandchildren are copied under them.
    assert_every_fork_complete(root)
    assert_settled(root)


def test_open_last_turns_are_copied_up_to_their_start(root: Path) -> None:
    """The copy cut K: a child that crashed inside its last turn is copied up to that
    turn's ``turn/start`` (everything before it, trailing facts included), and a copy of
    that copy again finds its own children."""
    summary = generated(root, forks=1, open_turns=True)
    c = summary.forks[0]
    lib_relink(root, c)
    lib_fork(root, c, "session-C2")
    assert_every_fork_complete(root)
    located = Root(root)
    copies = [
        e.generation.path
        for e in located.entries()
        if e.generation is not None and e.header is not None and e.header.is_seeded
    ]
    assert len(summary.open_turns) == 3  # the last agent of each parent
    for opened in summary.open_turns:
        entry = located.entry(opened)
        assert entry is not None and entry.generation is not None
        original = log_lines(entry.generation.path)[1:]
        start = max(
            e["seq"] for e in log_events(entry.generation.path) if e["type"] == "turn/start"
        )
        of_it = [p for p in copies if log_lines(p)[1 : start + 1] == original[:start]]
        assert len(of_it) == 2  # under C, and under C2 (a copy of C's copy)
        for path in of_it:
            events = log_events(path)
            assert events[start]["type"] == "session/end-seed"  # the open turn stayed out
            assert events[start]["data"] == {"inherited": True}
            assert original[start] not in log_lines(path)
    assert_settled(root)


def test_two_relink_all_at_once_never_duplicate(root: Path) -> None:
    """Two real processes: each takes every fork child's lock in turn; the one that comes
    second lists the copies from disk under the lock and copies nothing twice."""
    generate(root, sessions=3, agents=2, depth=2, turns=2, seed=5, forks=2, fork_depth=2)
    command = [sys.executable, "-m", "dsh_fork", "--root", str(root), "relink", "--all", "--json"]
    env = {**os.environ, "DSH_HOME": str(root.parent)}
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, env=env) for _ in range(2)]
    outputs = [run.communicate(timeout=120)[0] for run in runs]

    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode in (0, 10), output
        document = orjson.loads(output)
        failed = document["error"]["failed"] if "error" in document else document["failed"]
        assert {item["code"] for item in failed} <= {"SESSION_LOCKED"}, failed
    assert_every_fork_complete(root)
    assert_settled(root)


# -- crash and kill at every step, then rerun --------------------------------------------------


def chain_root(root: Path) -> FixtureSummary:
    """A small chain: T → agent 1 → agent 1.1; C a fork of T, C2 a fork of C; nothing
    relinked."""
    return generate(root, sessions=1, agents=1, depth=2, turns=1, seed=3, forks=1, fork_depth=2)


def sound_after_crash(root: Path, pristine: Path) -> list[str]:
    """The crashed state: originals unchanged or grown by whole frames, every session valid
    and unlocked, nothing DSH would read half made (only our own temps may remain)."""
    return crash_state_problems(
        root,
        snapshot(pristine),
        (),
        files_under(pristine),
        torn_ok=False,
        own_temps_ok=True,
    )


def steps_of(root: Path, run: object) -> int:
    with faults.install("crash", 0) as plan:
        assert callable(run)
        run()
    return len(plan.log)


def test_relink_all_crashing_at_any_step_is_finished_by_a_rerun(tmp_path: Path) -> None:
    """Crash after every durable step; an append is also torn (half a catalog frame)."""
    pristine = tmp_path / "pristine" / "sessions"
    chain_root(pristine)
    reference = tmp_path / "reference" / "sessions"
    shutil.copytree(pristine, reference)
    with faults.install("crash", 0) as counted:
        relink_all(Root(reference))
    assert len(counted.log) >= 20
    assert_every_fork_complete(reference)
    points = [("crash", k) for k in range(1, len(counted.log) + 1)]
    points += [("tear", k) for k, (kind, _) in enumerate(counted.log, 1) if kind == "append"]
    for action, k in points:
        root = tmp_path / f"{action}-{k}" / "sessions"
        shutil.copytree(pristine, root)
        with pytest.raises(faults.InjectedCrash), faults.install(action, k):
            relink_all(Root(root))
        problems = crash_state_problems(
            root, snapshot(pristine), (), files_under(pristine), torn_ok=True, own_temps_ok=True
        )
        assert problems == [], (action, k)
        relink_everything(root)
        assert_every_fork_complete(root)
        assert_settled(root)
        shutil.rmtree(root.parent)


def test_fork_of_a_relinked_fork_crashing_at_any_step_is_finished_by_a_rerun(
    tmp_path: Path,
) -> None:
    """The rerun of a fork that died: the fork again when the child never appeared, else
    relink of the child."""
    pristine = tmp_path / "pristine" / "sessions"
    summary = chain_root(pristine)
    relink_everything(pristine)
    source = summary.forks[-1]
    reference = tmp_path / "reference" / "sessions"
    shutil.copytree(pristine, reference)
    steps = steps_of(reference, lambda: lib_fork(reference, source, "session-new"))
    for k in range(1, steps + 1):
        root = tmp_path / f"crash-{k}" / "sessions"
        shutil.copytree(pristine, root)
        with pytest.raises(faults.InjectedCrash), faults.install("crash", k):
            lib_fork(root, source, "session-new")
        assert sound_after_crash(root, pristine) == [], k
        if Root(root).exists("session-new"):
            lib_relink(root, "session-new")
        else:
            lib_fork(root, source, "session-new")
        assert_every_fork_complete(root)
        assert_settled(root)
        shutil.rmtree(root.parent)


@pytest.mark.parametrize("fraction", [3, 2])
def test_a_killed_relink_all_process_is_finished_by_a_rerun(tmp_path: Path, fraction: int) -> None:
    root = tmp_path / "sessions"
    chain_root(root)
    probe = tmp_path / "probe" / "sessions"
    shutil.copytree(root, probe)
    at = steps_of(probe, lambda: relink_all(Root(probe))) // fraction
    command = cli_launcher.argv("--root", str(root), "relink", "--all")  # the fault seam on
    env = {**os.environ, "DSH_HOME": str(tmp_path), faults.ENV_VAR: f"kill:{at}"}
    killed = subprocess.run(command, env=env, capture_output=True, check=False)
    assert killed.returncode == -9
    del env[faults.ENV_VAR]
    rerun = subprocess.run(command, env=env, capture_output=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert_every_fork_complete(root)
    assert_settled(root)
    assert_clean(root)


def test_relink_all_names_a_session_it_cannot_read_and_no_tree_names(root: Path) -> None:
    """A log whose header cannot be read may have been anything; no catalog fact of any
    fork's branch names it, so it is a warning naming it, not a failure: no rerun of relink
    can read it (doctor reports it as an error)."""
    summary = generated(root, forks=2)
    broken, fine = summary.forks
    broken_dir = Root(root).find(broken)
    log = broken_dir / "session.v4.jsonl.zstd"
    log.write_bytes(b"not a zstd frame at all")

    result = relink_all(Root(root))

    assert [s.fork_child for s in result.results] == [fine]
    assert subagent_tree(root, fine) == subagent_tree(root, summary.top_level[0])
    assert result.failed == [] and result.partial() is None
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith(f"{broken_dir.name} cannot be read (")
    assert "no fork's tree names it" in result.warnings[0]


def test_relink_all_fails_on_an_unreadable_subagent_of_a_forks_tree(root: Path) -> None:
    """A subagent the fork's branch catalogues but whose header cannot be read is part of
    the tree: a failed item of that fork child (exit 10), with no "Next:" (a rerun cannot
    read it either)."""
    summary = generated(root, forks=1)
    (fork,) = summary.forks
    parent = Root(root).entry(fork)
    assert parent is not None and parent.parent is not None
    child = Root(root).children_of(parent.parent)[0]
    assert child.id is not None
    (child.session_dir / "session.v4.jsonl.zstd").write_bytes(b"not a zstd frame at all")

    result = relink_all(Root(root))

    assert [(f["id"], f["code"], f["forkChild"]) for f in result.failed] == [
        (child.id, "CORRUPT_LOG", fork)
    ]
    partial = result.partial()
    assert partial is not None and partial.exit_code == 10
    assert partial.message == "1 item failed in 1 of 1 fork child"
    assert partial.next_command is None


def test_the_plugin_scenario_relinked_then_forked_keeps_all_twelve(root: Path) -> None:
    """The issue's report on the spec's scenario (§10.4): relink C_A copies 12, and a fork of
    C_A then copies the same 12, the grandchild's copy at depth 2 included."""
    scenario = plugin_scenario(root, Clock())
    first = relink(Root(root), Root(root).find(scenario.fork.id))
    assert len(first.copied) == 12

    result = fork_session(
        scenario.fork.id,
        str(root),
        ForkOptions(child_id="session-C2"),
    )

    assert result.agents is not None
    copied = result.agents.copied
    assert [item["depth"] for item in copied].count(2) == 1 and len(copied) == 12
    assert result.agents.unrelated == []
    assert result.agents.skipped == [{"id": "a-open", "reason": "open"}]
    assert subagent_tree(root, "session-C2") == subagent_tree(root, scenario.fork.id)


def test_a_fork_of_an_early_fork_copies_nothing_its_ancestor_spawned_later(root: Path) -> None:
    """The top session spawns its agents after turn 1 and catalogues each of them there. A fork
    at turn 1's end has none of them; neither has a fork of that fork, although the first
    fork's own events (its title) are newer than every agent: an agent its parent catalogues
    outside the inherited prefix is never judged by its createdAt (semantics §1.5)."""
    top = generated(root).top_level[0]
    early = fork_session(top, str(root), ForkOptions(at=5, child_id="early"), env={})
    assert early.agents is not None and early.agents.copied == []
    assert early.child.title is not None  # the fork's own event, stamped now

    again = fork_session(
        "early",
        str(root),
        ForkOptions(child_id="again"),
        env={},
    )

    assert again.agents is not None
    assert (again.agents.copied, len(again.agents.unrelated)) == ([], 2)
    assert subagent_tree(root, "again") == subagent_tree(root, "early") == ()
    assert_settled(root)
