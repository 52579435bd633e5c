"""fork with its subagent tree (semantics §3.1 step 9, §3.3): relink runs in the same process,
under the child's lock, and its failures make the fork PARTIAL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import SAMPLES, log_events, log_header, run_cli, tree_listing

from dsh_fork.discovery import Root
from dsh_fork.errors import Partial
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, Ids, SessionSpec, write_spec_as
from dsh_fork.fork import ForkOptions, ForkResult, fork_session
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.locking import probe
from dsh_fork.validation import validate_dir

CWD = "/home/u/proj"
PARENT = "session-parent"


def lib_fork(
    root: Path,
    source: str,
    *,
    at: int | None = None,
    child_id: str | None = "child",
    dry_run: bool = False,
    agents: bool = True,
    oplog: Path | None = None,
) -> ForkResult:
    return fork_session(
        source,
        str(root),
        ForkOptions(at=at, child_id=child_id, agents=agents, dry_run=dry_run),
        clock=Clock(1_800_000_000_000),
        new_id=Ids(99),
        oplog_path=oplog,
    )


def all_errors(root: Path) -> list[str]:
    """Error findings of every session of the root."""
    return [
        f"{entry.id}: {f.code}: {f.message}"
        for entry in Root(root).entries()
        for f in validate_dir(entry.session_dir)
        if f.severity == "error"
    ]


def own_catalog(path: Path) -> list[dict[str, Any]]:
    events = log_events(path)
    cut = max(e["seq"] for e in events if e["type"] == "session/end-seed")
    return [e["data"] for e in events if e["type"] == "subagent/catalog" and e["seq"] >= cut]


def child_spec(clock: Clock, child_id: str, *, label: str | None = "helper") -> SessionSpec:
    spec = SessionSpec(
        id=child_id, created_at=clock(), cwd=CWD, parent=PARENT, origin="subagent", depth=1
    )
    spec.descriptor(clock, label)
    spec.turn(clock)
    return spec


def test_the_subagent_tree_is_copied_under_the_child(root: Path) -> None:
    summary = generate(root, sessions=1, agents=2, depth=2, turns=2, seed=1)
    top = summary.top_level[0]
    oplog = root.parent / "relink.log"
    before = {e.id: e.session_dir for e in Root(root).entries()}

    result = lib_fork(root, top, oplog=oplog)

    assert result.agents is not None
    copied = result.agents.to_json()["copied"]
    assert len(copied) == 6
    direct = [item for item in copied if item["parent"] == "child"]
    assert [item["depth"] for item in direct] == [1, 1]
    child_log = result.path or Path()
    assert [fact["childId"] for fact in own_catalog(child_log)] == [i["copy"] for i in direct]
    for item in copied:
        copy_dir = Root(root).find(item["copy"])
        header = log_header(copy_dir / CURRENT_NAME)
        assert header["parentSession"] == item["parent"]
        assert header["origin"] == "subagent"
        assert header["delegationDepth"] == item["depth"]
        assert probe(copy_dir) == "free"
    assert probe(child_log.parent) == "free"
    assert all_errors(root) == []
    assert {e.id for e in Root(root).entries()} >= set(before)
    messages = [orjson.loads(line)["message"] for line in oplog.read_bytes().splitlines()]
    assert messages[0] == "copying subagent tree"
    assert messages[-1] == "copied subagent tree"


def test_children_spawned_after_the_boundary_are_unrelated(root: Path) -> None:
    summary = generate(root, sessions=1, agents=2, depth=1, turns=2, seed=1)
    top = summary.top_level[0]
    first_turn_end = 5  # the top session starts with turn 1 (seqs 0..5), then its catalog facts

    result = lib_fork(root, top, at=first_turn_end)

    assert result.agents is not None
    as_json = result.agents.to_json()
    assert as_json["copied"] == []
    assert len(as_json["unrelated"]) == 2
    assert own_catalog(result.path or Path()) == []


def test_no_agents_copies_nothing(root: Path) -> None:
    summary = generate(root, sessions=1, agents=2, depth=1, turns=2, seed=1)
    sessions = len(Root(root).entries())

    result = lib_fork(root, summary.top_level[0], agents=False)

    assert result.agents is None
    assert result.to_json()["agents"] is None
    assert len(Root(root).entries()) == sessions + 1


def test_an_uncatalogable_copy_makes_the_fork_partial(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id=PARENT, created_at=clock(), cwd=CWD)
    parent.turn(clock)
    good = child_spec(clock, "session-good")
    nameless = child_spec(clock, "session-nameless", label=None)
    parent.catalog(clock, good, label="helper")
    parent.turn(clock)
    for spec in (parent, good, nameless):
        spec.publish(root)

    result = run_cli(
        "--root", root, "fork", PARENT, "--id", "child", "--json", env={"DSH_HOME": ""}
    )

    assert result.exit_code == 10
    document = result.json()
    error = document["error"]
    assert error["code"] == "PARTIAL"
    assert error["message"] == (
        f"forked {PARENT} into child, but the subagent copy is partial: 1 of 2 items failed"
    )
    assert len(error["failed"]) == 1
    assert error["failed"][0]["code"] == "UNCATALOGABLE"
    assert "next" not in error  # a rerun cannot catalogue it: no command to suggest
    assert document["child"]["id"] == "child"
    agents = document["agents"]
    assert [item["source"] for item in agents["copied"]] == ["session-good"]
    assert agents["uncatalogable"][0]["source"] == "session-nameless"
    assert len(Root(root).children_of("child")) == 1  # nothing written for the nameless one
    child_dir = Root(root).find("child")
    assert [fact["childId"] for fact in own_catalog(child_dir / CURRENT_NAME)] == [
        item["copy"] for item in agents["copied"] if item["source"] == "session-good"
    ]
    assert probe(child_dir) == "free"
    assert (root.parent / "dsh-fork-relink.log").exists()


def test_a_child_below_v4_is_a_failed_item_and_the_others_are_copied(
    root: Path, clock: Clock
) -> None:
    parent = SessionSpec(id=PARENT, created_at=clock(), cwd=CWD)
    parent.turn(clock)
    good = child_spec(clock, "session-good")
    old = child_spec(clock, "session-old")
    parent.turn(clock)
    parent.publish(root)
    good.publish(root)
    write_spec_as(old, root, 3)

    planned = lib_fork(root, PARENT, dry_run=True).partial()
    assert planned is not None and planned.next_command is None
    assert planned.message == "dry run: the subagent copy would be partial: 1 of 2 items failed"
    assert not Root(root).exists("child")

    forked = lib_fork(root, PARENT)
    partial = forked.partial()

    assert isinstance(partial, Partial)
    assert partial.failed == [
        {
            "id": "session-old",
            "code": "UNSUPPORTED_FORMAT",
            "message": partial.failed[0]["message"],
        }
    ]
    assert "open the session once in DSH" in partial.failed[0]["message"]
    assert partial.next_command == "dsh-fork relink child"
    result = forked.to_json()
    assert [item["source"] for item in result["agents"]["copied"]] == ["session-good"]
    assert result["child"]["inheritedEvents"] == 12
    assert Root(root).exists("child")

    # The partial fork prints in full (the child's id and path), then what failed and the
    # command that finishes the work.
    shown = run_cli("--root", root, "fork", PARENT, "--id", "again", env={"DSH_HOME": ""})
    assert shown.exit_code == 10
    lines = shown.stdout.splitlines()
    assert lines[0] == f"Forked {PARENT} at seq 11 into again"
    assert lines[1] == f"  path: {Root(root).find('again') / CURRENT_NAME}"
    assert shown.stderr.splitlines() == [
        f"Error: forked {PARENT} into again, but the subagent copy is partial: 1 of 2 items failed",
        f"  failed: session-old (UNSUPPORTED_FORMAT): {partial.failed[0]['message']}",
        "Next: run `dsh-fork relink again`",
    ]


def test_dry_run_plans_the_agents_and_writes_nothing(root: Path) -> None:
    summary = generate(root, sessions=1, agents=2, depth=2, turns=2, seed=1)
    top = summary.top_level[0]
    before = tree_listing(root)
    oplog = root.parent / "dsh-fork-relink.log"

    result = run_cli("--root", root, "fork", top, "--dry-run", "--json", env={"DSH_HOME": ""})

    assert result.exit_code == 0
    assert tree_listing(root) == before
    assert not oplog.exists()
    plan = result.json()
    assert plan["dryRun"] is True
    assert plan["child"]["id"] is None
    planned = plan["agents"]["copied"]
    assert [item["copy"] for item in planned] == [None] * 6

    real = lib_fork(root, top, child_id=None)
    assert real.agents is not None
    done = real.agents.to_json()["copied"]
    assert [(i["source"], i["depth"]) for i in done] == [(i["source"], i["depth"]) for i in planned]


def test_dry_run_human_output_lists_the_agents_it_would_copy(root: Path) -> None:
    summary = generate(root, sessions=1, agents=2, depth=1, turns=2, seed=1)
    top = summary.top_level[0]
    children = [e.id for e in Root(root).children_of(top)]

    result = run_cli("--root", root, "fork", top, "--dry-run", env={"DSH_HOME": ""})

    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "  agents: would copy 2, skipped 0, unrelated 0, uncatalogable 0, failed 0" in lines
    assert [line for line in lines if line.startswith("  would copy ")] == [
        f"  would copy {child} (depth 1)" for child in children
    ]
    assert lines[-1] == "Nothing was written."


def test_human_output_of_a_fork_with_agents(root: Path) -> None:
    summary = generate(root, sessions=1, agents=1, depth=1, turns=2, seed=1)
    top = summary.top_level[0]
    (source_child,) = [e.id for e in Root(root).children_of(top)]

    result = run_cli("--root", root, "fork", top, "--id", "child", env={"DSH_HOME": ""})

    assert result.exit_code == 0
    (copy,) = [e.id for e in Root(root).children_of("child")]
    lines = result.stdout.splitlines()
    assert "  agents: copied 1, skipped 0, unrelated 0, uncatalogable 0, failed 0" in lines
    assert lines[-2] == f"  copied {source_child} as {copy} (depth 1)"
    assert lines[-1].startswith("  workspace: skipped: no workspace registry at ")


def test_a_running_child_is_skipped_and_the_fork_succeeds(
    root: Path, clock: Clock, hold_lock: Any
) -> None:
    parent = SessionSpec(id=PARENT, created_at=clock(), cwd=CWD)
    parent.turn(clock)
    busy = child_spec(clock, "session-busy")
    parent.turn(clock)
    parent.publish(root)
    holder = hold_lock(busy.publish(root))

    result = lib_fork(root, PARENT)

    assert result.agents is not None
    assert result.agents.to_json()["skipped"] == [{"id": "session-busy", "reason": "running"}]
    holder.release()


def test_a_fork_of_a_fork_copies_the_copies(root: Path) -> None:
    summary = generate(root, sessions=1, agents=2, depth=1, turns=2, seed=1)
    first = lib_fork(root, summary.top_level[0], child_id="first")
    assert first.agents is not None
    first_copies = [item["copy"] for item in first.agents.to_json()["copied"]]

    second = lib_fork(root, "first", child_id="second")

    assert second.agents is not None
    copied = second.agents.to_json()["copied"]
    assert [item["source"] for item in copied] == first_copies
    assert [f["childId"] for f in own_catalog(second.path or Path())] == [
        item["copy"] for item in copied
    ]
    markers = [
        e["seq"] for e in log_events(second.path or Path()) if e["type"] == "session/end-seed"
    ]
    assert len(markers) == 2
    assert all_errors(root) == []


def test_a_foreign_dsh_home_forks_with_the_subagents_its_facts_name(samples_root: Path) -> None:
    facts = orjson.loads((SAMPLES / "facts.json").read_bytes())
    shop = facts["sessions"]["shop"]
    expected = facts["relinkOfFork"]
    boundary = facts["sessions"]["fork of shop"]["cut"] - 1

    result = lib_fork(samples_root, shop["id"], at=boundary)

    assert result.agents is not None
    summary = result.agents.to_json()
    direct = sorted(item["source"] for item in summary["copied"] if item["depth"] == 1)
    assert direct == sorted(expected["belongs"])
    grand = {item["source"] for item in summary["copied"] if item["depth"] == 2}
    assert grand == {g for kids in expected["grandchildren"].values() for g in kids}
    assert summary["unrelated"] == expected["unrelated"]
    assert log_header(result.path or Path())["agentPreset"] == "code"
    assert all_errors(samples_root) == []


def test_fork_hands_relink_its_fork_point_and_never_re_reads_the_child(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child just written is opened once, by the append of its catalog facts under its
    lock, and not at all when there is nothing to append."""
    from dsh_fork import appending, reader, relink, relinkplan

    opened: list[Path] = []
    real = reader.open_log

    def spy(generation: Any, **options: Any) -> Any:
        opened.append(generation.path)
        return real(generation, **options)

    for module in (appending, relink, relinkplan):
        monkeypatch.setattr(module, "open_log", spy)
    with_agents = generate(root / "a", sessions=1, agents=2, depth=1, turns=2, seed=1)
    without = generate(root / "b", sessions=1, agents=0, depth=0, turns=2, seed=2)

    first = lib_fork(root / "a", with_agents.top_level[0], child_id="with")
    second = lib_fork(root / "b", without.top_level[0], child_id="without")

    assert first.agents is not None and len(first.agents.copied) == 2
    assert second.agents is not None and second.agents.copied == []
    assert first.path is not None and opened.count(first.path) == 1
    assert second.path not in opened


def test_the_seeded_writer_rules_are_the_same_for_a_fork_child_and_a_copy(root: Path) -> None:
    """One writer: the marker takes the last inherited event's time, the preset is the one in
    force at the end of the prefix, and the header keys come in one order."""
    clock = Clock()
    parent = SessionSpec(id=PARENT, created_at=clock(), cwd=CWD, agent_preset="plan")
    parent.add("agent-preset/selected", clock(), {"agentPreset": "code"})
    parent.turn(clock)
    kid = SessionSpec(
        id="session-kid", created_at=clock(), cwd=CWD, parent=PARENT, origin="subagent", depth=1
    )
    kid.descriptor(clock, "helper")
    kid.add("agent-preset/selected", clock(), {"agentPreset": "review"})
    kid.turn(clock)
    parent.catalog(clock, kid, label="helper")
    parent.turn(clock)
    parent.publish(root)
    kid.publish(root)

    result = lib_fork(root, PARENT)

    assert result.agents is not None
    [copy_id] = [item["copy"] for item in result.agents.copied]
    for session_id, source, preset in (("child", parent, "code"), (copy_id, kid, "review")):
        path = Root(root).find(session_id) / CURRENT_NAME
        header = log_header(path)
        assert header["agentPreset"] == preset
        events = log_events(path)
        marker = events[source.seq]
        assert marker["type"] == "session/end-seed"
        assert marker["time"] == orjson.loads(source.lines[-1])["time"]
