"""``dsh-fork fixture`` (semantics §8, §10.5): deterministic synthetic roots, and the checked-in
example home that ``make fixtures`` regenerates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import log_events, log_header, log_lines, run_cli

from dsh_fork import frames as zframes
from dsh_fork.discovery import Root
from dsh_fork.errors import UsageError
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import FIXTURE_EPOCH_MS
from dsh_fork.generations import CURRENT_NAME, LOCK_NAME, Generation
from dsh_fork.layout import encode_segment, project_key
from dsh_fork.model import MODEL_TYPES, CatalogEntry, facts_of
from dsh_fork.reader import open_log

EXAMPLE_HOME = Path(__file__).resolve().parent.parent / "fixtures" / "example-home" / "sessions"
# What ``make fixtures`` runs (Makefile), as arguments of ``generate``.
EXAMPLE_ARGS: dict[str, Any] = {"sessions": 2, "agents": 2, "depth": 2, "turns": 2, "seed": 7}


def frame_lines(path: Path) -> list[list[bytes]]:
    """The decompressed lines of each frame: content and frame boundaries, not bytes."""
    data = path.read_bytes()
    scan = zframes.scan(data)
    assert scan.torn_start is None
    return [zframes.decode(data, f).split(b"\n")[:-1] for f in scan.frames]


def snapshot(root: Path) -> dict[str, Any]:
    """Every file of a root: logs as per-frame lines, other files by content."""
    out: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            key = str(path.relative_to(root))
            out[key] = frame_lines(path) if path.name == CURRENT_NAME else path.read_bytes()
    return out


def test_the_same_seed_twice_gives_the_same_root(tmp_path: Path) -> None:
    generate(tmp_path / "one", sessions=2, agents=2, depth=2, turns=2, seed=3)
    generate(tmp_path / "two", sessions=2, agents=2, depth=2, turns=2, seed=3)
    first, second = snapshot(tmp_path / "one"), snapshot(tmp_path / "two")
    assert first == second
    assert len(first) == 2 * 14
    generate(tmp_path / "other", sessions=2, agents=2, depth=2, turns=2, seed=4)
    assert (
        snapshot(tmp_path / "other")
        .keys()
        .isdisjoint(k for k in first if "fixture-project" in k and LOCK_NAME not in k)
    )


def test_three_sessions_two_agents_depth_two_three_turns(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli(
        "fixture", out, "--sessions", "3", "--agents", "2", "--depth", "2", "--turns", "3"
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    root = Root(out)
    entries = root.entries()
    assert len(entries) == 3 * (1 + 2 + 4) == 21
    assert all(e.error is None and e.generation and e.generation.version == 4 for e in entries)
    top = sorted((e for e in entries if e.header and e.header.parent_session is None), key=key)
    assert [e.header.cwd for e in top if e.header] == [f"/fixture/project-{i}" for i in range(3)]
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote 21 sessions to {out} (depth 0: 3, depth 1: 6, depth 2: 12)"
    assert lines[1:] == [f"top-level session {e.id}" for e in top]
    depths = sorted(e.header.delegation_depth for e in entries if e.header)
    assert depths == [0] * 3 + [1] * 6 + [2] * 12
    for entry in entries:
        check_session(root, entry, turns=3, agents=2, max_depth=2)
    doctor = run_cli("doctor", "--root", out, "--json")
    assert doctor.exit_code == 0, doctor.stdout
    assert doctor.json()["counts"]["error"] == 0
    assert doctor.json()["sessions"] == 21


def key(entry: Any) -> tuple[int, str]:
    return (entry.created_at, entry.id or "")


def check_session(root: Root, entry: Any, *, turns: int, agents: int, max_depth: int) -> None:
    """One generated session against semantics §8.1."""
    header = entry.header
    path = entry.generation.path
    assert entry.session_dir == root.path / project_key(header.cwd) / encode_segment(header.id)
    assert sorted(p.name for p in entry.session_dir.iterdir()) == [LOCK_NAME, CURRENT_NAME]
    log = open_log(entry.generation, collect=MODEL_TYPES)
    facts = facts_of(log)
    events = log_events(path)
    [e["type"] for e in events]
    assert len(facts.turn_ends) == turns and facts.open_turn is None
    assert all(
        e["data"]["reason"] == {"kind": "completed"} for e in events if e["type"] == "turn/end"
    )
    reasons = [e["data"]["reason"] for e in events if e["type"] == "request/header"]
    assert reasons == ["initial"] + ["series"] * (turns - 1)
    spawning = header.delegation_depth < max_depth and agents > 0
    # Assistant steps only in the turn that spawns the subagents (turn 2, as DSH writes it).
    assistant_turns = {e["data"]["turn"] for e in events if e["type"] == "assistant/message"}
    assert assistant_turns == ({min(2, turns)} if spawning else set())
    assert all(e.get("surfaceOp") == "append" for e in events if e["type"] == "user/message")
    assert all(
        e["data"]["source"] == {"kind": "user"} for e in events if e["type"] == "user/message"
    )
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert all(e["time"] >= FIXTURE_EPOCH_MS for e in events)
    titles = [e for e in events if e["type"] == "session/title"]
    children = root.children_of(header.id)
    if header.delegation_depth == 0:
        assert header.origin is None and not header.is_seeded
        assert len(titles) == 1 and titles[0]["data"]["messageSeqs"] == []
    else:
        assert header.origin == "subagent" and header.is_seeded is False
        parent = next(e.header for e in root.entries() if e.id == header.parent_session)
        assert parent is not None
        assert parent.delegation_depth == header.delegation_depth - 1
        assert parent.cwd == header.cwd
        descriptor = events[0]
        assert descriptor["type"] == "subagent/descriptor"
        assert descriptor["data"]["version"] == 3
        assert descriptor["data"]["mode"] == "continuable"
        assert descriptor["data"]["provider"] == "in-process"
        assert descriptor["data"]["label"].startswith("agent ")
        assert (descriptor["data"]["agentProvider"], descriptor["data"]["agentModel"]) == (
            "fixture",
            "fixture-1",
        )
        assert titles == []
    if header.delegation_depth < max_depth:
        assert len(children) == agents
        catalog = facts.own_catalog()
        assert [c.child_id for c in catalog] == [c.id for c in children]
        spawn_start = next(seq for seq, is_end, n in facts.turn_marks if n == min(2, turns))
        spawn_end = facts.turn_ends[min(2, turns) - 1]
        for fact, child in zip(catalog, children, strict=True):
            # Inside the spawning turn, right after the agent call, before its result.
            assert spawn_start < fact.seq < spawn_end
            call, result = events[fact.seq - 1], events[fact.seq + 1]
            assert (call["type"], call["data"]["name"]) == ("tool/call", "agent")
            assert result["type"] == "tool/result"
            assert result["data"]["message"]["toolCallId"] == call["data"]["callId"]
            assert child.created_at < events[fact.seq]["time"]
            assert fact.data["version"] == 0
            assert fact.data["childCreatedAt"] == child.created_at
            preceding = log.event(fact.seq - 1).time
            assert preceding is not None and child.created_at > preceding
            assert fact.data["label"] == child_descriptor_label(child)
    else:
        assert children == [] and facts.own_catalog() == []
    # Header frame, then one frame per write batch; checksums on.
    data = path.read_bytes()
    scan = zframes.scan(data)
    assert all(f.checksum for f in scan.frames)
    assert len(scan.frames) == 1 + turns + (1 if header.delegation_depth else 0) + (
        1 if header.delegation_depth == 0 else 0
    )


def child_descriptor_label(child: Any) -> str:
    label: str = log_events(child.generation.path)[0]["data"]["label"]
    return label


def test_sessions_without_turns_still_get_their_agents(tmp_path: Path) -> None:
    summary = generate(tmp_path / "out", sessions=1, agents=3, depth=1, turns=0)
    assert summary.sessions == 4
    assert summary.per_depth == {0: 1, 1: 3}
    root = Root(tmp_path / "out")
    [top] = [e for e in root.entries() if e.header and e.header.delegation_depth == 0]
    assert len(root.children_of(top.id or "")) == 3


def test_defaults(tmp_path: Path) -> None:
    summary = generate(tmp_path / "out")
    assert (summary.sessions, summary.per_depth) == (3, {0: 1, 1: 2})
    assert len(summary.top_level) == 1


@pytest.mark.parametrize("occupant", ["file", "dir"])
def test_a_non_empty_out_root_is_refused(tmp_path: Path, occupant: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").mkdir() if occupant == "dir" else (out / "x").write_text("")
    result = run_cli("fixture", out)
    assert result.exit_code == 2
    assert result.stderr == f"Error: {out} exists and is not an empty directory\n"
    assert sorted(p.name for p in out.iterdir()) == ["x"]


def test_an_out_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_text("a file")
    with pytest.raises(UsageError):
        generate(out)
    assert run_cli("fixture", out).exit_code == 2
    assert out.read_text() == "a file"


def test_an_empty_out_root_is_filled(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert run_cli("fixture", out, "--agents", "0").exit_code == 0
    assert len(Root(out).entries()) == 1


@pytest.mark.parametrize("option", ["--sessions", "--agents", "--depth", "--turns"])
def test_negative_counts_are_usage_errors(tmp_path: Path, option: str) -> None:
    result = run_cli("fixture", tmp_path / "out", option, "-1")
    assert result.exit_code == 2
    assert not (tmp_path / "out").exists()


def test_help_shows_an_example() -> None:
    result = run_cli("fixture", "--help")
    assert result.exit_code == 0
    assert "  dsh-fork fixture " in result.stdout
    for option in ("--sessions", "--agents", "--depth", "--turns", "--seed"):
        assert option in result.stdout


# -- the checked-in example home ------------------------------------------------------------


def test_the_example_home_is_what_the_generator_writes(tmp_path: Path) -> None:
    """``make fixtures`` must reproduce fixtures/example-home exactly: same files, same
    decompressed lines, same frame boundaries (compressed bytes may differ across zstd)."""
    regenerated = tmp_path / "sessions"
    generate(regenerated, **EXAMPLE_ARGS)
    assert snapshot(EXAMPLE_HOME) == snapshot(regenerated)


def test_the_example_home_is_a_valid_tree(tmp_path: Path) -> None:
    root = Root(EXAMPLE_HOME)
    entries = root.entries()
    assert len(entries) == 2 * (1 + 2 + 4)
    for entry in entries:
        check_session(root, entry, turns=2, agents=2, max_depth=2)
    some = entries[0].generation
    assert some is not None
    assert log_header(some.path)["version"] == 4
    assert log_lines(some.path)[0].startswith(b'{"type":"session","version":4,')


# -- the options for real-world roots --------------------------------------------------------

EVERYTHING: dict[str, Any] = {
    "sessions": 2,
    "agents": 2,
    "depth": 2,
    "turns": 2,
    "seed": 9,
    "tools": True,
    "forks": 1,
    "fork_depth": 2,
    "relinked": True,
    "legacy": True,
    "open_turns": True,
    "old_generation": 1,
}


def test_every_option_writes_what_it_says_and_the_root_stays_valid(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = generate(out, **EVERYTHING, torn_tails=True)
    root = Root(out)
    by_id = {e.id: e for e in root.entries()}

    def gen(session_id: str | None) -> Generation:
        generation = by_id[session_id].generation
        assert generation is not None
        return generation

    # forks: one chain of two per top-level session, each holding the whole tree
    assert len(summary.forks) == 2 * 2
    for fork_id in summary.forks:
        header = by_id[fork_id].header
        assert header is not None and header.is_fork_child
        assert len(root.children_of(fork_id)) == 2
    # legacy: uncatalogued copies, the last one without its own descriptor
    assert len(summary.legacy_forks) == 2
    for legacy in summary.legacy_forks:
        copies = root.children_of(legacy)
        assert len(copies) == 2 and own_range_catalog(gen(legacy)) == []
        assert [own_descriptors(gen(c.id)) for c in copies] == [1, 0]
    # old generation: a v3 tree, no catalog facts
    [old] = summary.old_generation
    assert gen(old).name == "session.v3.jsonl.zstd"
    assert len(root.children_of(old)) == 2
    # open turns and torn tails
    assert summary.open_turns and summary.torn_tails
    for session_id in summary.open_turns:
        assert facts_of(open_log(gen(session_id), collect=MODEL_TYPES)).open_turn is not None
    for session_id in summary.torn_tails:
        assert open_log(gen(session_id)).torn is not None
    # tools: every turn of a top-level session has an assistant step and a tool call
    for top in summary.top_level:
        events = log_events(gen(top).path)
        turns = {e["data"]["turn"] for e in events if e["type"] == "turn/start"}
        calls = {e["data"]["turn"] for e in events if e["type"] == "tool/call"}
        assert turns == calls == {1, 2}
    doctor = run_cli("doctor", "--root", out, "--json")
    assert doctor.json()["counts"]["error"] == 0, doctor.stdout


def own_range_catalog(generation: Generation) -> list[CatalogEntry]:
    return facts_of(open_log(generation, collect=MODEL_TYPES)).own_catalog()


def own_descriptors(generation: Generation) -> int:
    return len(facts_of(open_log(generation, collect=MODEL_TYPES)).own_descriptors())


def test_the_options_are_deterministic_too(tmp_path: Path) -> None:
    generate(tmp_path / "one", **EVERYTHING)
    generate(tmp_path / "two", **EVERYTHING)
    assert snapshot(tmp_path / "one") == snapshot(tmp_path / "two")


def test_json_output_and_the_new_flags(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli(
        "fixture", out, "--forks", "1", "--fork-depth", "2", "--legacy", "--open-turns",
        "--tools", "--old-generation", "1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    document = result.json()
    assert list(document) == [
        "schemaVersion", "root", "sessions", "perDepth", "topLevel", "forks", "legacyForks",
        "oldGeneration", "openTurns", "tornTails",
    ]  # fmt: skip
    assert document["sessions"] == len(Root(out).entries())
    assert len(document["forks"]) == 2 and len(document["legacyForks"]) == 1
    assert document["perDepth"] == {"0": 2, "1": 4}
