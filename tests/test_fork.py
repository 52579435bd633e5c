"""`dsh-fork fork` (semantics §3, scenarios §10.3): boundaries, the child's exact shape, errors.

Sources are built event by event with ``SessionSpec``; each turn of ``spec.turn`` is six events
(turn/start, user/message, request/header, step/start, step/end, turn/end), so a source of three
turns has its turn/end events at seqs 5, 11 and 17.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import log_events, log_header, log_lines, run_cli, tree_digest, tree_listing

from dsh_fork import frames as zframes
from dsh_fork.discovery import Root
from dsh_fork.errors import (
    CorruptLog,
    InvalidBoundary,
    OpenTurn,
    SessionAlreadyExists,
    SessionNotFound,
    UnsupportedFormat,
    UsageError,
)
from dsh_fork.fixtures import Clock, SessionSpec, write_spec_as
from dsh_fork.fork import ForkOptions, ForkResult, fork_session
from dsh_fork.generations import CURRENT_NAME, list_generations
from dsh_fork.locking import probe
from dsh_fork.model import MODEL_TYPES, facts_of
from dsh_fork.reader import open_log
from dsh_fork.times import iso_ms
from dsh_fork.validation import validate_dir

SRC = "session-source"
CWD = "/home/u/proj"
NOW = 1_800_000_000_000


def three_turns(clock: Clock, *, id: str = SRC, cwd: str | None = CWD, **kw: Any) -> SessionSpec:
    spec = SessionSpec(id=id, created_at=clock(), cwd=cwd, **kw)
    for _ in range(3):
        spec.turn(clock)
        spec.flush()
    return spec


def lib_fork(
    root: Path,
    source: str = SRC,
    *,
    at: int | None = None,
    child_id: str | None = "child",
    dry_run: bool = False,
    now: int = NOW,
) -> ForkResult:
    return fork_session(
        source,
        str(root),
        ForkOptions(at=at, child_id=child_id, agents=False, dry_run=dry_run),
        clock=lambda: now,
        new_id=lambda: "session-generated",
    )


def log_of(root: Path, session_id: str) -> Path:
    session_dir = Root(root).find(session_id)
    return session_dir / CURRENT_NAME


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def marker(seq: int, time: int) -> bytes:
    return orjson.dumps(
        {"type": "session/end-seed", "seq": seq, "time": time, "data": {"inherited": True}}
    )


def error_findings(session_dir: Path) -> list[str]:
    return [f"{f.code}: {f.message}" for f in validate_dir(session_dir) if f.severity == "error"]


def raw_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return [data[f.start : f.end] for f in zframes.scan(data).frames]


# -- the child's shape --------------------------------------------------------------------------


def test_fork_at_the_last_turn_copies_every_line_and_appends_the_marker(
    root: Path, clock: Clock
) -> None:
    spec = three_turns(clock, agent_preset="code")
    source_dir = spec.publish(root)
    source_log = source_dir / CURRENT_NAME
    before = sha256(source_log)

    result = lib_fork(root)

    child_log = root / "--home-u-proj--" / "child" / CURRENT_NAME
    assert result.path == child_log
    lines = log_lines(child_log)
    expected_header = (
        b'{"type":"session","version":4,"id":"child","createdAt":1800000000000,'
        b'"cwd":"/home/u/proj","parentSession":"session-source","isSeeded":true,'
        b'"delegationDepth":0,"agentPreset":"code"}'
    )
    assert lines[0] == expected_header
    source_lines = log_lines(source_log)
    assert lines[1:19] == source_lines[1:19]
    assert lines[19:] == [marker(18, orjson.loads(source_lines[18])["time"])]
    assert sha256(source_log) == before
    facts = facts_of(open_log(list_generations(child_log.parent)[-1], collect=MODEL_TYPES))
    assert facts.cut == 18
    assert error_findings(child_log.parent) == []
    assert result.to_json() == {
        "child": {
            "id": "child",
            "path": str(child_log),
            "projectDir": str(root / "--home-u-proj--"),
            "parentSession": SRC,
            "boundary": 17,
            "inheritedEvents": 18,
            "agentPreset": "code",
            "createdAt": NOW,
            "createdAtIso": iso_ms(NOW),
            "title": None,
            "sourceTitle": None,
        },
        "agents": None,
        "dryRun": False,
        "framesCopied": 3,
        "framesReencoded": 0,
        "workspace": no_registry(root, "child"),
    }
    assert probe(child_log.parent) == "free"


def test_compressed_frames_inside_the_prefix_are_copied_verbatim(root: Path, clock: Clock) -> None:
    spec = three_turns(clock)
    source_dir = spec.publish(root)

    result = lib_fork(root, at=11)

    source_frames = raw_frames(source_dir / CURRENT_NAME)
    child_frames = raw_frames(result.path or Path())
    assert child_frames[1:3] == source_frames[1:3]
    assert (result.frames_copied, result.frames_reencoded) == (2, 0)
    assert len(child_frames) == 4  # header, two verbatim frames, the marker's own frame


def test_only_the_frame_holding_the_boundary_is_reencoded(root: Path, clock: Clock) -> None:
    spec = three_turns(clock)
    source_dir = spec.publish(root, frame_target=10**9)  # one frame holds all three turns
    source_log = source_dir / CURRENT_NAME

    result = lib_fork(root, at=11)

    assert (result.frames_copied, result.frames_reencoded) == (0, 1)
    assert log_lines(result.path or Path())[1:13] == log_lines(source_log)[1:13]
    data = (result.path or Path()).read_bytes()
    frames = zframes.scan(data).frames
    assert len(frames) == 2
    tail = zframes.decode(data, frames[1]).split(b"\n")[:-1]
    assert tail[-1] == marker(12, orjson.loads(log_lines(source_log)[12])["time"])


def test_fork_at_an_earlier_turn_end_copies_the_prefix_only(root: Path, clock: Clock) -> None:
    spec = three_turns(clock)
    spec.publish(root)
    boundary_time = orjson.loads(spec.lines[5])["time"]

    result = lib_fork(root, at=5)

    events = log_events(result.path or Path())
    assert [e["seq"] for e in events] == list(range(7))
    assert events[6] == {
        "type": "session/end-seed",
        "seq": 6,
        "time": boundary_time,
        "data": {"inherited": True},
    }
    assert result.child.inherited_events == 6


def test_a_source_without_cwd_forks_into_no_cwd(root: Path, clock: Clock) -> None:
    three_turns(clock, cwd=None).publish(root)

    result = lib_fork(root)

    assert result.path == root / "_no-cwd" / "child" / CURRENT_NAME
    assert "cwd" not in log_header(result.path)
    assert error_findings(result.path.parent) == []


def test_the_generated_child_id_is_used_when_none_is_given(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)

    result = lib_fork(root, child_id=None)

    assert result.child.id == "session-generated"
    assert log_header(result.path or Path())["id"] == "session-generated"


# -- boundaries ---------------------------------------------------------------------------------


def test_a_seq_inside_a_turn_is_open_turn_naming_the_nearest_boundaries(
    root: Path, clock: Clock
) -> None:
    three_turns(clock).publish(root)
    before = tree_digest(root)

    with pytest.raises(OpenTurn) as caught:
        lib_fork(root, at=8)

    assert caught.value.message == (
        "boundary 8 lies inside open turn 2 (started at seq 6); nearest valid boundaries: 5, 11"
        "; give --close-turn to fork there and close the turn"
    )
    assert caught.value.to_json() == {
        "code": "OPEN_TURN",
        "message": caught.value.message,
        "requested": 8,
        "validBoundaries": [5, 11],
        "openTurn": {"turn": 2, "startSeq": 6},
        "session": SRC,
    }
    assert tree_digest(root) == before


def test_a_user_message_inside_a_turn_is_refused_on_the_command_line(
    root: Path, clock: Clock
) -> None:
    three_turns(clock).publish(root)

    result = run_cli("fork", SRC, "--at", "7", "--root", root)

    assert result.exit_code == 4
    assert result.stderr == (
        "Error: boundary 7 lies inside open turn 2 (started at seq 6); "
        "nearest valid boundaries: 5, 11; give --close-turn to fork there and close the turn\n"
    )
    assert result.stdout == ""


@pytest.mark.parametrize("at", [18, 1000, -1])
def test_a_seq_that_does_not_exist_is_invalid_boundary(root: Path, clock: Clock, at: int) -> None:
    three_turns(clock).publish(root)

    result = run_cli("--root", root, "fork", SRC, "--at", str(at), "--json")

    assert result.exit_code == 4
    assert result.json() == {
        "schemaVersion": 1,
        "error": {
            "code": "INVALID_BOUNDARY",
            "message": f"boundary {at} does not exist: valid seqs are 0..17",
            "requested": at,
            "eventCount": 18,
            "session": SRC,
        },
    }
    assert [p.name for p in (root / "--home-u-proj--").iterdir()] == [SRC]


def test_a_non_numeric_at_is_a_usage_error(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)

    result = run_cli("--root", root, "fork", SRC, "--at", "abc")

    assert result.exit_code == 2


def test_a_source_ending_inside_an_open_turn_is_refused_without_at(
    root: Path, clock: Clock
) -> None:
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD)
    spec.turn(clock)
    spec.turn(clock)
    spec.open_turn(clock)
    spec.publish(root)
    before = tree_digest(root)

    result = run_cli("--root", root, "fork", SRC)

    assert result.exit_code == 4
    assert result.stderr == (
        "Error: boundary 13 (the source's last event) lies inside open turn 3 (started at "
        "seq 12); nearest valid boundaries: 11; last turn/end: 11; give --close-turn to fork "
        "there and close the turn\n"
    )
    assert tree_digest(root) == before
    ok = lib_fork(root, at=11)
    assert ok.child.inherited_events == 12


def test_an_open_first_turn_has_no_boundary_but_an_event_before_it_is_one(
    root: Path, clock: Clock
) -> None:
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD, parent="p", origin="subagent")
    spec.descriptor(clock, "helper")
    spec.open_turn(clock)
    spec.publish(root)

    with pytest.raises(OpenTurn) as caught:
        lib_fork(root)
    assert caught.value.message == (
        "boundary 2 (the source's last event) lies inside open turn 1 (started at seq 1); "
        "nearest valid boundaries: 0; no turn has ended yet; give --close-turn to fork there "
        "and close the turn"
    )

    result = lib_fork(root, at=0)
    assert [e["type"] for e in log_events(result.path or Path())] == [
        "subagent/descriptor",
        "session/end-seed",
    ]


def test_a_trailing_title_is_a_valid_default_boundary(root: Path, clock: Clock) -> None:
    spec = three_turns(clock)
    title_seq = spec.title(clock, "renamed")
    spec.publish(root)

    result = lib_fork(root)
    assert result.child.boundary == title_seq
    assert log_events(result.path or Path())[title_seq]["type"] == "session/title"

    on_title = lib_fork(root, at=title_seq, child_id="child-2")
    assert on_title.child.boundary == title_seq


def test_a_fork_child_holding_relink_catalog_facts_forks_again_at_its_end(
    root: Path, clock: Clock
) -> None:
    parent = three_turns(clock, id="session-parent")
    parent.publish(root)
    child = SessionSpec(id=SRC, created_at=clock(), cwd=CWD, parent=parent.id, is_seeded=True)
    for line in parent.lines:
        child.add_raw(line)
    child.end_seed(orjson.loads(parent.lines[-1])["time"])
    copy = SessionSpec(id="session-copy", created_at=clock(), cwd=CWD, parent=SRC)
    child.catalog(clock, copy, label="child 1")
    child.publish(root)

    result = lib_fork(root, child_id="grandchild")

    events = log_events(result.path or Path())
    assert [e["type"] for e in events[18:]] == [
        "session/end-seed",
        "subagent/catalog",
        "session/end-seed",
    ]
    assert error_findings((result.path or Path()).parent) == []


def test_an_empty_source_gives_a_child_holding_only_the_marker(root: Path, clock: Clock) -> None:
    SessionSpec(id=SRC, created_at=clock(), cwd=CWD).publish(root)

    result = lib_fork(root)

    assert log_events(result.path or Path()) == [
        {"type": "session/end-seed", "seq": 0, "time": NOW, "data": {"inherited": True}}
    ]
    assert (result.child.boundary, result.child.inherited_events) == (None, 0)
    assert error_findings((result.path or Path()).parent) == []
    with pytest.raises(InvalidBoundary, match="boundary 0 does not exist: the source has no"):
        lib_fork(root, at=0, child_id="other")


# -- forks of forks, presets, inherited markers and inbox --------------------------------------


def test_fork_of_a_fork_inside_and_after_the_inherited_prefix(root: Path, clock: Clock) -> None:
    three_turns(clock, id="session-top").publish(root)
    first = lib_fork(root, "session-top", at=11, child_id=SRC)
    assert first.child.inherited_events == 12

    inside = lib_fork(root, at=5, child_id="inside")
    inside_events = log_events(inside.path or Path())
    assert [e["seq"] for e in inside_events if e["type"] == "session/end-seed"] == [6]

    after = lib_fork(root, child_id="after")
    after_path = after.path or Path()
    markers = [e["seq"] for e in log_events(after_path) if e["type"] == "session/end-seed"]
    assert markers == [12, 13]
    facts = facts_of(open_log(list_generations(after_path.parent)[-1], collect=MODEL_TYPES))
    assert facts.cut == 13
    assert log_header(after_path)["parentSession"] == SRC
    assert error_findings(after_path.parent) == []
    assert error_findings((inside.path or Path()).parent) == []


def test_preset_is_the_last_selection_inside_the_prefix_else_the_header(
    root: Path, clock: Clock
) -> None:
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD, agent_preset="a")
    spec.turn(clock)
    spec.add("agent-preset/selected", clock(), {"agentPreset": "b"})
    spec.turn(clock)
    spec.add("agent-preset/selected", clock(), {"agentPreset": "c"})
    spec.turn(clock)
    spec.publish(root)

    assert lib_fork(root, child_id="all").child.agent_preset == "c"
    assert log_header(log_of(root, "all"))["agentPreset"] == "c"
    assert lib_fork(root, at=12, child_id="before-c").child.agent_preset == "b"
    assert log_header(log_of(root, "before-c"))["agentPreset"] == "b"
    assert lib_fork(root, at=5, child_id="header-only").child.agent_preset == "a"


def test_no_preset_anywhere_leaves_the_key_out(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)

    result = lib_fork(root)

    assert list(log_header(result.path or Path())) == [
        "type",
        "version",
        "id",
        "createdAt",
        "cwd",
        "parentSession",
        "isSeeded",
        "delegationDepth",
    ]


def test_delivery_markers_naming_the_source_stay_valid_in_the_child(
    root: Path, clock: Clock
) -> None:
    spec = three_turns(clock)
    data = {"sessionId": SRC, "sessionFormatVersion": 4, "throughSeq": 17}
    spec.add("session-log-deepseek/delivery-accepted", clock(), data)
    source_dir = spec.publish(root)
    assert error_findings(source_dir) == []

    result = lib_fork(root)

    assert log_events(result.path or Path())[18]["data"]["sessionId"] == SRC
    assert error_findings((result.path or Path()).parent) == []


def test_an_inherited_pending_inbox_item_is_listed_for_the_child(root: Path, clock: Clock) -> None:
    spec = three_turns(clock)
    queued = {"id": "m-1", "role": "user", "source": {"kind": "user"}, "content": []}
    spec.add(
        "agent/inbox/spliced",
        clock(),
        {"target": "next-turn", "start": 0, "inserted": [queued]},
    )
    spec.publish(root)

    result = lib_fork(root)

    child_log = open_log(list_generations((result.path or Path()).parent)[-1], collect=MODEL_TYPES)
    facts = facts_of(child_log)
    assert facts.pending_inbox(through=facts.cut - 1) == [queued]
    report = run_cli("--root", root, "inspect", "child", "--json")
    assert report.exit_code == 0
    assert report.json()["pendingInbox"] == [queued]


# -- refusals -----------------------------------------------------------------------------------


def test_an_existing_child_id_in_another_project_dir_is_refused(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)
    SessionSpec(id="taken", created_at=clock(), cwd="/other").publish(root)
    before = tree_digest(root)

    result = run_cli("--root", root, "fork", SRC, "--id", "taken", "--no-agents")

    assert result.exit_code == 5
    assert result.stderr == "Error: a session 'taken' already exists in --other--\n"
    assert tree_digest(root) == before


def test_ids_are_path_encoded_never_used_raw(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)

    result = lib_fork(root, child_id="..")

    assert result.path == root / "--home-u-proj--" / "~002E~002E" / CURRENT_NAME
    assert Root(root).find("..") == root / "--home-u-proj--" / "~002E~002E"
    assert log_header(result.path)["id"] == ".."
    assert error_findings(result.path.parent) == []
    with pytest.raises(SessionAlreadyExists):
        lib_fork(root, child_id="..")


def test_an_id_with_a_lone_surrogate_is_encoded_as_dsh_would(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)

    result = lib_fork(root, child_id="ab\ud800c")

    assert result.path == root / "--home-u-proj--" / "ab~D800c" / CURRENT_NAME
    assert b'"id":"ab\\ud800c"' in log_lines(result.path)[0]
    assert Root(root).find("ab\ud800c") == result.path.parent
    assert error_findings(result.path.parent) == []


def test_an_empty_child_id_is_a_usage_error(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)

    result = run_cli("--root", root, "fork", SRC, "--id", "", "--no-agents")

    assert result.exit_code == 2
    assert result.stderr == "Error: the child id must not be empty\n"
    with pytest.raises(UsageError):
        lib_fork(root, child_id="")


@pytest.mark.parametrize(
    ("child_id", "message"),
    [
        ("x" * 256, "the child id is too long for a directory name (255 bytes once encoded)"),
        ("é" * 52, "the child id is too long for a directory name (255 bytes once encoded)"),
    ],
)
def test_a_child_id_that_cannot_name_a_directory_is_refused(
    root: Path, clock: Clock, child_id: str, message: str
) -> None:
    three_turns(clock).publish(root)
    before = tree_digest(root)

    with pytest.raises(UsageError) as caught:
        lib_fork(root, child_id=child_id)

    assert caught.value.message == message
    assert tree_digest(root) == before
    assert lib_fork(root, child_id="x" * 255).child.inherited_events == 18


def test_an_unknown_source_is_not_found(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)

    result = run_cli("--root", root, "fork", "session-nope", "--json")

    assert result.exit_code == 3
    assert result.json()["error"]["code"] == "SESSION_NOT_FOUND"
    with pytest.raises(SessionNotFound):
        lib_fork(root, "session-nope")


def test_a_v3_source_is_refused_with_the_dsh_hint(root: Path, clock: Clock) -> None:
    spec = three_turns(clock)
    write_spec_as(spec, root, 3)
    before = tree_digest(root)

    result = run_cli("--root", root, "fork", SRC, "--no-agents", "--json")

    assert result.exit_code == 8
    error = result.json()["error"]
    assert error["code"] == "UNSUPPORTED_FORMAT"
    assert error["version"] == 3
    assert error["hint"] == "open the session once in DSH, which migrates it to v4"
    assert "open the session once in DSH" in error["message"]
    assert tree_digest(root) == before


def test_a_v9_source_is_refused(root: Path, clock: Clock) -> None:
    write_spec_as(three_turns(clock), root, 9)

    with pytest.raises(UnsupportedFormat, match="v9"):
        lib_fork(root)


def test_a_zstd_root_holding_one_plain_session_is_not_writable(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)
    write_spec_as(three_turns(clock, id="session-plain"), root, 4, encoding="plain")
    before = tree_digest(root)

    result = run_cli("--root", root, "fork", SRC, "--no-agents")

    assert result.exit_code == 8
    assert result.stderr == (
        f"Error: the root {root} is mixed; dsh-fork writes only into a zstd root\n"
    )
    assert tree_digest(root) == before


@pytest.mark.parametrize("damage", ["bit flip", "garbage"])
def test_a_corrupt_source_is_refused(root: Path, clock: Clock, damage: str) -> None:
    source_log = three_turns(clock).publish(root) / CURRENT_NAME
    data = bytearray(source_log.read_bytes())
    if damage == "bit flip":
        frame = zframes.scan(bytes(data)).frames[2]
        data[(frame.start + frame.end) // 2] ^= 0x10
    else:
        data += b"not a zstd frame at all"
    source_log.write_bytes(bytes(data))
    before = tree_digest(root)

    with pytest.raises(CorruptLog):
        lib_fork(root)
    result = run_cli("--root", root, "fork", SRC, "--no-agents")
    assert result.exit_code == 9
    assert tree_digest(root) == before


# -- the source is only read ----------------------------------------------------------------


def test_a_live_source_is_forked_without_touching_its_lock(
    root: Path, clock: Clock, hold_lock: Any
) -> None:
    source_dir = three_turns(clock).publish(root)
    holder = hold_lock(source_dir)

    result = lib_fork(root)

    assert result.child.inherited_events == 18
    assert probe(source_dir) == "held"
    holder.release()


def test_a_source_without_a_lock_file_still_has_none_afterwards(root: Path, clock: Clock) -> None:
    source_dir = three_turns(clock).publish(root)
    (source_dir / "session.lock").unlink()

    lib_fork(root)

    assert sorted(p.name for p in source_dir.iterdir()) == [CURRENT_NAME]


def test_a_torn_tail_is_left_out_with_a_warning(root: Path, clock: Clock) -> None:
    source_log = three_turns(clock).publish(root) / CURRENT_NAME
    torn = zframes.encode(b'{"type":"turn/start","seq":18,"time":1,"data":{"turn":4}}\n')
    with open(source_log, "ab") as handle:
        handle.write(torn[: len(torn) // 2])
    size = source_log.stat().st_size

    result = run_cli("--root", root, "fork", SRC, "--id", "child", "--no-agents", "--json")

    assert result.exit_code == 0
    assert result.json()["child"]["boundary"] == 17
    assert result.stderr.startswith("Warning: the source has a torn tail (")
    assert source_log.stat().st_size == size


# -- dry run and output -------------------------------------------------------------------------


def no_registry(root: Path, child: str | None) -> dict[str, Any]:
    """The workspace part of a fork's result in a home without a registry (docs/workspaces.md)."""
    registry = root.parent / "storages" / "workspace.json"
    reason = f"no workspace registry at {registry} (DSH sorts sessions into workspaces on its "
    reason += "first start)"
    return {
        "session": child,
        "status": "skipped",
        "workspace": None,
        "title": None,
        "path": None,
        "reason": reason,
        "archived": False,
    }


def test_dry_run_writes_nothing_and_names_the_plan(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)
    before = tree_listing(root)

    result = run_cli("--root", root, "fork", SRC, "--at", "11", "--dry-run", "--no-agents")

    assert result.exit_code == 0
    assert tree_listing(root) == before
    assert result.stdout.splitlines() == [
        f"Dry run: would fork {SRC} at seq 11 into a new session-<uuid4> id",
        f"  path: {root / '--home-u-proj--'}/<new id>/",
        "  events copied: 12 (+ end-seed marker)",
        "  frames: 2 copied verbatim, 0 re-encoded",
        "  agent preset: -",
        "  title: none (the source has no title)",
        "  agents: not copied (--no-agents)",
        f"  workspace: skipped: {no_registry(root, None)['reason']}",
        "Nothing was written.",
    ]


def test_dry_run_json_with_a_given_id(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)
    before = tree_listing(root)

    result = run_cli(
        "fork", SRC, "--id", "planned", "--dry-run", "--no-agents", "--json", "--root", root
    )

    assert result.exit_code == 0
    assert tree_listing(root) == before
    assert result.json() == {
        "schemaVersion": 1,
        "child": {
            "id": "planned",
            "path": str(root / "--home-u-proj--" / "planned" / CURRENT_NAME),
            "projectDir": str(root / "--home-u-proj--"),
            "parentSession": SRC,
            "boundary": 17,
            "inheritedEvents": 18,
            "agentPreset": None,
            "createdAt": None,
            "createdAtIso": None,
            "title": None,
            "sourceTitle": None,
        },
        "agents": None,
        "dryRun": True,
        "framesCopied": 3,
        "framesReencoded": 0,
        "workspace": no_registry(root, "planned"),
    }


def test_dry_run_reports_the_same_errors_as_a_real_run(root: Path, clock: Clock) -> None:
    three_turns(clock).publish(root)
    before = tree_listing(root)

    result = run_cli("--root", root, "fork", SRC, "--at", "8", "--dry-run", "--no-agents")

    assert result.exit_code == 4
    assert tree_listing(root) == before


def test_human_output_of_a_fork(root: Path, clock: Clock) -> None:
    three_turns(clock, agent_preset="code").publish(root)

    result = run_cli("--root", root, "fork", SRC, "--id", "child", "--no-agents")

    assert result.exit_code == 0
    child_log = root / "--home-u-proj--" / "child" / CURRENT_NAME
    created = log_header(child_log)["createdAt"]
    lines = result.stdout.splitlines()
    assert lines[0] == f"Forked {SRC} at seq 17 into child"
    assert lines[1:6] == [
        f"  path: {child_log}",
        "  events copied: 18 (+ end-seed marker)",
        "  frames: 3 copied verbatim, 0 re-encoded",
        "  agent preset: code",
        "  title: none (the source has no title)",
    ]
    assert lines[6] == f"  created: {iso_ms(created)} ({created})"
    assert lines[7:] == [
        "  agents: not copied (--no-agents)",
        f"  workspace: skipped: {no_registry(root, 'child')['reason']}",
    ]
    assert result.stderr == ""


def test_a_source_given_as_a_path_forks_into_its_root(root: Path, clock: Clock) -> None:
    source_dir = three_turns(clock).publish(root)

    result = run_cli("fork", source_dir / CURRENT_NAME, "--id", "child", "--no-agents", "--json")

    assert result.exit_code == 0
    assert result.json()["child"]["path"] == str(root / "--home-u-proj--" / "child" / CURRENT_NAME)


def test_help_shows_an_example() -> None:
    result = run_cli("fork", "--help")

    assert result.exit_code == 0
    assert "  dsh-fork fork " in result.stdout
