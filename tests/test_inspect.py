"""`dsh-fork inspect` (semantics §1.7, §6; scenarios §10.1, §10.2, §10.5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import run_cli
from test_cli_startup import probe

from dsh_fork import frames as zframes
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file, write_spec_as
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.inspect import format_ranges

SAMPLE_FORK = "session-e21c3b20-65d7-49b5-bdf1-25916b70425f"
SAMPLE_SHOP = "session-f768064f-9585-47ad-a39e-ed24c2c063fe"


def inspect_json(root: Path, *args: str) -> dict[str, Any]:
    result = run_cli("--root", root, "inspect", *args, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    value: dict[str, Any] = result.json()
    return value


def spec_of(session_id: str = "session-s", **kwargs: Any) -> SessionSpec:
    return SessionSpec(id=session_id, created_at=1_000, **kwargs)


# -- the foreign samples ----------------------------------------------------------------------


def test_sample_fork_child_shows_cut_parent_and_boundaries(samples_root: Path) -> None:
    report = inspect_json(samples_root, SAMPLE_FORK)
    assert report["session"] == SAMPLE_FORK
    assert report["inheritance"] == {
        "cut": 31,
        "isSeeded": True,
        "parentSession": SAMPLE_SHOP,
        "parentExists": True,
        "markers": [31],
        "lastInheritedTime": 1767600054086,
        "lastInheritedTimeIso": "2026-01-05T08:00:54.086Z",
    }
    assert report["events"]["total"] == 32
    assert report["turns"] == {"completed": 2, "open": None}
    assert report["boundaries"] == {"ranges": [[11, 12], [30, 31]], "turnEnds": [11, 30]}
    assert report["frames"]["count"] == 3
    assert report["frames"]["headerFrameOk"] is True
    assert report["catalog"] == []  # the parent's facts are inherited: an empty panel
    assert report["preset"] == "code"
    assert report["lock"] == "free"
    assert report["pathBinding"] == {"ok": True, "problem": None}
    assert report["findings"] == []
    assert report["counts"] == {"error": 0, "warning": 0, "info": 0}
    assert "eventList" not in report


def test_sample_parent_lists_its_own_catalog(samples_root: Path) -> None:
    report = inspect_json(samples_root, SAMPLE_SHOP)
    assert [row["childId"] for row in report["catalog"]] == [
        "session-d665c9a1-1a6a-4509-ab7c-9c6ab8934931",
        "session-4ac99b91-552f-44cd-92b4-7a9271995c60",
        "session-6628560c-6024-4a97-aa66-d24b4d4081cd",
        "session-4749828d-d96e-459d-b8e4-4d88ef94670e",
    ]
    assert report["boundaries"]["turnEnds"] == [11, 30, 44]
    assert report["frames"]["count"] == 6


def test_sample_open_turn(samples_root: Path) -> None:
    report = inspect_json(samples_root, "session-41279f7e-cbd2-4124-8b98-f51118f00bc9")
    assert report["turns"] == {
        "completed": 1,
        "open": {"turn": 2, "startSeq": 7, "openStep": 1, "unresolvedCalls": []},
    }
    assert report["boundaries"]["ranges"] == [[6, 6]]
    assert [(f["severity"], f["code"]) for f in report["findings"]] == [("info", "OPEN_TURN")]


def test_plain_output_when_piped(samples_root: Path) -> None:
    result = run_cli("inspect", SAMPLE_FORK, "--root", samples_root)  # --root after the command
    assert result.exit_code == 0
    assert result.stderr == ""
    out = result.stdout
    assert "\x1b[" not in out
    assert out.startswith(f"Session {SAMPLE_FORK}\n")
    assert "  cut                      31\n" in out
    assert f"  parentSession            {SAMPLE_SHOP} (exists)\n" in out
    assert "  fork boundaries          11-12, 30-31\n" in out
    assert "  isSeeded                 true\n" in out
    assert out.endswith("Findings: none\n")


def test_events_one_line_per_event(samples_root: Path) -> None:
    result = run_cli("--root", samples_root, "inspect", SAMPLE_FORK, "--events")
    assert result.exit_code == 0
    listing = result.stdout.split("Event list\n", 1)[1].splitlines()
    assert len(listing) == 32
    assert listing[0].split() == ["0", "2026-01-05T08:00:00.844Z", "turn/start", "turn", "1"]
    assert listing[11].endswith("turn/end                      turn 1 completed")
    assert listing[31].endswith("session/end-seed              inherited (fork cut)")
    assert listing[18].endswith(
        "subagent/catalog              session-d665c9a1-1a6a-4509-ab7c-9c6ab8934931 "
        "continuable 'frontend reviewer'"
    )
    report = inspect_json(samples_root, SAMPLE_FORK, "--events")
    assert [e["seq"] for e in report["eventList"]] == list(range(32))
    assert all(len(e["summary"]) <= 80 for e in report["eventList"])
    assert report["eventList"][2] == {
        "seq": 2,
        "type": "user/message",
        "time": 1767600002396,
        "summary": "user: Audit the checkout flow.",
    }


# -- built scenarios --------------------------------------------------------------------------


def test_fork_of_a_fork_shows_the_ancestor_markers(root: Path, clock: Clock) -> None:
    spec = spec_of(parent="session-p", is_seeded=True)
    spec.turn(clock)
    first = spec.end_seed(clock())
    spec.turn(clock)
    second = spec.end_seed(clock())
    spec.title(clock, "after the cut")
    spec.publish(root)
    report = inspect_json(root, spec.id)
    assert report["inheritance"]["markers"] == [first, second]
    assert report["inheritance"]["cut"] == second
    assert report["inheritance"]["parentExists"] is False
    assert report["boundaries"]["ranges"] == [[5, 6], [12, 14]]
    assert report["title"] == "after the cut"


def test_a_header_naming_the_empty_parent_is_read_by_every_command(
    root: Path, clock: Clock
) -> None:
    """``parentSession`` is any string, never resolved on read (format §7.2): an empty one
    names no session dir, so no command looks one up (inspect ended in an internal error)."""
    spec = spec_of(parent="")
    spec.turn(clock)
    spec.publish(root)
    report = inspect_json(root, spec.id)
    assert report["inheritance"]["parentSession"] == ""
    assert report["inheritance"]["parentExists"] is False
    for argv in (
        ["inspect", spec.id, "--events"],
        ["tree", "--json"],
        ["list", "--json"],
        ["du", "--json"],
        ["doctor", "--json"],
        ["list-agents", spec.id, "--json"],
        ["fork", spec.id, "--dry-run", "--json"],
    ):
        result = run_cli("--root", root, *argv)
        assert result.exit_code == 0, (argv, result.stderr)


def test_torn_tail_shows_offset_and_recoverable_lines(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    session_dir = spec.publish(root)
    path = session_dir / CURRENT_NAME
    size = path.stat().st_size
    tail = zframes.encode(
        b'{"type":"agent-preset/selected","seq":6,"time":1,"data":{"agentPreset":"a"}}\n'
        b'{"type":"agent-preset/selected","seq":7,"time":2,"data":{"agentPreset":"b"}}\n'
    )
    with open(path, "ab") as handle:
        handle.write(tail[:-4])  # the checksum is missing: both lines decode
    report = inspect_json(root, spec.id)
    assert report["tornTail"] == {
        "offset": size,
        "bytes": len(tail) - 4,
        "completeLines": 2,
        "recoverableLines": 2,
    }
    # DSH keeps the torn frame's complete lines (8 events, not 6): so does every command.
    assert report["events"]["total"] == 8
    assert report["preset"] == "b"
    assert [f["code"] for f in report["findings"]] == ["TORN_TAIL"]
    human = run_cli("--root", root, "inspect", spec.id).stdout
    assert f"  torn tail      at byte {size}, {len(tail) - 4} bytes, 2 complete lines " in human


def test_events_decode_source_seq_ranges(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)  # seqs 0..5
    spec.turn(clock)  # seqs 6..11
    spec.turn(clock, steps=0)  # seqs 12..15 (no step)
    spec.lines.pop()  # reopen turn 3 to add a replacing tool result inside it
    replace = {"op": "replace", "startSeq": 3, "endSeq": 9}
    spec.add(
        "tool/result",
        clock(),
        {"message": {"role": "tool", "content": [{"type": "text", "text": "summary"}]}},
        surfaceOp=replace,
        sourceEventSeqs=[[3, 6], 9, 11],
    )
    spec.add("turn/end", clock(), {"turn": 3, "reason": {"kind": "completed"}})
    spec.publish(root)
    report = inspect_json(root, spec.id, "--events")
    line = report["eventList"][15]
    assert line["summary"] == "tool: summary ← 3-6, 9, 11"
    human = run_cli("--root", root, "inspect", spec.id, "--events").stdout.splitlines()
    assert human[-2].split() == [
        "15",
        line_time(human[-2]),
        "tool/result",
        "tool:",
        "summary",
        "←",
        "3-6,",
        "9,",
        "11",
    ]


def line_time(line: str) -> str:
    return line.split()[1]


def test_format_ranges() -> None:
    assert format_ranges([3, 4, 5, 6, 9, 11, 12]) == "3-6, 9, 11-12"
    assert format_ranges([5, 2]) == "5, 2"
    assert format_ranges([]) == ""


def test_duplicate_own_catalog_id_is_an_error_finding_exit_0(root: Path, clock: Clock) -> None:
    child = spec_of("session-kid")
    spec = spec_of()
    spec.turn(clock)
    first = spec.catalog(clock, child, label="kid")
    second = spec.catalog(clock, child, label="kid")
    spec.publish(root)
    result = run_cli("--root", root, "inspect", spec.id, "--json")
    assert result.exit_code == 0
    report = result.json()
    assert report["findings"] == [
        {
            "severity": "error",
            "code": "CATALOG_DUPLICATE",
            "message": f"duplicate own-range catalog childId session-kid (first at seq {first})",
            "seq": second,
        }
    ]
    assert [row["seq"] for row in report["catalog"]] == [first, second]
    human = run_cli("--root", root, "inspect", spec.id)
    assert human.exit_code == 0
    assert "error     CATALOG_DUPLICATE" in human.stdout


def test_unknown_event_is_a_finding_not_a_failure(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    seq = spec.add("plugin/new-thing", clock(), {})
    spec.add("plugin/quiet", clock(), {}, ignorable=True)
    spec.publish(root)
    report = inspect_json(root, spec.id)
    assert [(f["code"], f["seq"]) for f in report["findings"]] == [("UNKNOWN_EVENT", seq)]
    assert report["events"]["byType"]["plugin/new-thing"] == 1


def test_open_turn_with_unresolved_call(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    start = spec.add("turn/start", clock(), {"turn": 2})
    spec.add("step/start", clock(), {"turn": 2, "step": 1})
    message = {
        "role": "assistant",
        "content": [{"type": "tool-call", "id": "c7", "name": "bash", "arguments": "{}"}],
    }
    spec.add(
        "assistant/message",
        clock(),
        {"turn": 2, "step": 1, "message": message},
        surfaceOp="append",
    )
    spec.publish(root)
    report = inspect_json(root, spec.id)
    assert report["turns"]["open"] == {
        "turn": 2,
        "startSeq": start,
        "openStep": 1,
        "unresolvedCalls": ["c7"],
    }
    assert report["boundaries"]["ranges"] == [[5, 5]]
    human = run_cli("--root", root, "inspect", spec.id).stdout
    assert (
        f"  open turn                turn 2 (started at seq {start}), open step 1, unresolved "
        "tool calls: c7\n" in human
    )


def test_inherited_pending_inbox(root: Path, clock: Clock) -> None:
    spec = spec_of(parent="session-p", is_seeded=True)
    spec.turn(clock)
    item = {"role": "user", "content": [{"type": "text", "text": "later"}]}
    spec.add(
        "agent/inbox/spliced", clock(), {"target": "next-turn", "start": 0, "inserted": [item]}
    )
    spec.end_seed(clock())
    spec.publish(root)
    report = inspect_json(root, spec.id)
    assert report["pendingInbox"] == [item]


def test_descriptor_inherited_only_is_flagged(root: Path, clock: Clock) -> None:
    spec = spec_of(parent="session-p", is_seeded=True, origin="subagent", depth=1)
    seq = spec.descriptor(clock, "reviewer")
    spec.turn(clock)
    spec.end_seed(clock())
    spec.publish(root)
    report = inspect_json(root, spec.id)
    assert report["descriptor"] == {
        "seq": seq,
        "version": 3,
        "mode": "continuable",
        "label": "reviewer",
        "provider": "in-process",
        "inheritedOnly": True,
    }
    assert [f["code"] for f in report["findings"]] == ["DESCRIPTOR"]
    human = run_cli("--root", root, "inspect", spec.id).stdout
    assert "'reviewer' (descriptor inherited only)" in human


def test_long_boundary_lists_are_shortened(root: Path, clock: Clock) -> None:
    spec = spec_of()
    for _ in range(25):
        spec.turn(clock, steps=0)
        spec.title(clock, "t")
    spec.publish(root)
    report = inspect_json(root, spec.id)
    assert len(report["boundaries"]["ranges"]) == 25
    assert len(report["boundaries"]["turnEnds"]) == 25
    human = run_cli("--root", root, "inspect", spec.id).stdout
    line = next(x for x in human.splitlines() if x.startswith("  turn/end seqs"))
    ends = [str(s) for s in report["boundaries"]["turnEnds"]]
    assert line.endswith(f"{', '.join(ends[:10])}, … (5 more) …, {', '.join(ends[-10:])}")


def test_lock_held_is_shown(root: Path, clock: Clock, hold_lock: Any) -> None:
    spec = spec_of()
    spec.turn(clock)
    session_dir = spec.publish(root)
    hold_lock(session_dir)
    assert inspect_json(root, spec.id)["lock"] == "held"


def test_lock_absent(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    session_dir = spec.publish(root)
    (session_dir / "session.lock").unlink()
    assert inspect_json(root, spec.id)["lock"] == "absent"


def test_stale_generation_warns_on_stderr(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    spec.turn(clock)
    session_dir = spec.publish(root)
    older = spec_of()
    older.turn(clock)
    v3 = write_spec_as(older, root, 3)
    os.utime(v3, ns=((session_dir / CURRENT_NAME).stat().st_mtime_ns + 10**9,) * 2)
    (session_dir / "session.v4.jsonl.zstd.0123456789ab.tmp").write_bytes(b"")
    result = run_cli("--root", root, "inspect", spec.id, "--json")
    assert result.exit_code == 0
    message = (
        "session.v3.jsonl.zstd has a newer mtime than the chosen session.v4.jsonl.zstd; "
        "DSH reads only the highest generation"
    )
    assert result.stderr == f"Warning: {message}\n"
    report = result.json()
    assert [
        (g["file"], g["chosen"], g["events"], g["turnEnds"]) for g in report["generations"]
    ] == [
        ("session.v3.jsonl.zstd", False, 6, 1),
        ("session.v4.jsonl.zstd", True, 12, 2),
    ]
    assert report["ignoredFiles"] == ["session.v4.jsonl.zstd.0123456789ab.tmp"]
    assert report["findings"][-1] == {
        "severity": "warning",
        "code": "STALE_GENERATION",
        "message": message,
    }


# -- failures ---------------------------------------------------------------------------------


def test_missing_session_is_3(root: Path) -> None:
    root.mkdir(parents=True)
    result = run_cli("--root", root, "inspect", "session-nope")
    assert result.exit_code == 3
    assert result.stderr == f"Error: no session 'session-nope' in {root}\n"
    result = run_cli("--root", root, "inspect", "session-nope", "--json")
    assert result.exit_code == 3
    assert result.json() == {
        "schemaVersion": 1,
        "error": {
            "code": "SESSION_NOT_FOUND",
            "message": f"no session 'session-nope' in {root}",
            "session": "session-nope",
        },
    }


def test_dir_with_only_non_canonical_names_is_3(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    session_dir = spec.publish(root)
    data = (session_dir / CURRENT_NAME).read_bytes()
    for name in ("session.v0.jsonl.zstd", "session.V4.jsonl.zstd", "session.v4.jsonl.zstd.tmp"):
        (session_dir / name).write_bytes(data)
    (session_dir / CURRENT_NAME).rename(session_dir / "session.v04.jsonl.zstd")
    result = run_cli("--root", root, "inspect", str(session_dir))
    assert result.exit_code == 3
    assert result.stderr == f"Error: {session_dir} holds no session log\n"


def test_ambiguous_id_is_3(root: Path, clock: Clock) -> None:
    for cwd in ("/a", "/b"):
        spec = spec_of(cwd=cwd)
        spec.turn(clock)
        spec.publish(root)
    result = run_cli("--root", root, "inspect", "session-s")
    assert result.exit_code == 3
    assert "ambiguous id 'session-s' in 2 project directories; pass a path" in result.stderr


def test_future_generation_is_8_with_files_and_header_version(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    spec.publish(root)
    v9 = write_spec_as(spec, root, 9)
    result = run_cli("--root", root, "inspect", spec.id, "--json")
    assert result.exit_code == 8
    error = result.json()["error"]
    assert error["code"] == "UNSUPPORTED_FORMAT"
    assert error["files"] == ["session.lock", "session.v4.jsonl.zstd", "session.v9.jsonl.zstd"]
    assert error["headerVersion"] == 9
    assert error["path"] == str(v9)
    human = run_cli("--root", root, "inspect", spec.id)
    assert human.exit_code == 8
    assert human.stderr == (
        f"Error: {v9}: generation v9 is newer than v4 (written by a newer harness); files: "
        "session.lock, session.v4.jsonl.zstd, session.v9.jsonl.zstd; header version 9\n"
    )


def test_corrupt_committed_part_is_9_and_says_where(root: Path, clock: Clock) -> None:
    spec = spec_of()
    spec.turn(clock)
    spec.flush()
    spec.turn(clock)
    session_dir = spec.publish(root)
    path = session_dir / CURRENT_NAME
    data = bytearray(path.read_bytes())
    frame = zframes.scan(bytes(data)).frames[1]
    data[frame.end - 2] ^= 0xFF  # inside the checksum
    path.write_bytes(bytes(data))
    result = run_cli("--root", root, "inspect", spec.id)
    assert result.exit_code == 9
    assert result.stderr.startswith(f"Error: {path}: frame does not decode")
    assert result.stderr.endswith(f"at byte {frame.start} (frame 2)\n")
    assert result.stdout == ""


def test_version_mismatch_is_9(root: Path) -> None:
    header = orjson.dumps(
        {"type": "session", "version": 3, "id": "s", "createdAt": 1, "cwd": "/p"}
        | {"isSeeded": False, "delegationDepth": 0}
    )
    path = write_log_file(root / "--p--" / "s" / CURRENT_NAME, header, [])
    result = run_cli("--root", root, "inspect", "s")
    assert result.exit_code == 9
    assert result.stderr == (f"Error: {path}: header version 3 does not match the file name (v4)\n")


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_has_an_example(flag: str) -> None:
    result = run_cli("inspect", flag)
    assert result.exit_code == 0
    assert "  dsh-fork inspect " in result.stdout


def test_older_and_plain_generations_are_read(root: Path, clock: Clock) -> None:
    old = spec_of("session-old")
    old.turn(clock)
    write_spec_as(old, root, 3)
    report = inspect_json(root, "session-old")
    assert report["generation"] == {
        "version": 3,
        "file": "session.v3.jsonl.zstd",
        "encoding": "zstd",
    }
    assert report["turns"]["completed"] == 1
    assert [(f["severity"], f["code"]) for f in report["findings"]] == [("info", "OLD_GENERATION")]
    plain = spec_of("session-plain", cwd="/plain")
    plain.turn(clock)
    write_spec_as(plain, root, 4, encoding="plain")
    report = inspect_json(root, "session-plain")
    assert report["frames"] is None
    assert report["rootEncoding"] == "mixed"
    assert report["events"]["total"] == 6
    human = run_cli("--root", root, "inspect", "session-plain").stdout
    assert "  frames         plain text log (no frames)\n" in human


def test_v0_packed_rows_are_expanded(root: Path, clock: Clock) -> None:
    spec = spec_of("session-v0")
    spec.add("turn/start", clock(), {"turn": 1})
    spec.add_raw(
        b'{"type":"text-chunks","seq0":1,"time0":500,"data":{"turn":1,"step":1,"index":0,'
        b'"dt":[4,-1],"texts":["Hel","lo"," world"]}}'
    )
    spec.lines.append(b'{"type":"turn/end","seq":4,"time":600,"data":{"turn":1}}\n')
    write_spec_as(spec, root, 0)
    report = inspect_json(root, "session-v0", "--events")
    assert report["events"]["byType"] == {"assistant/chunk": 3, "turn/end": 1, "turn/start": 1}
    assert [e["time"] for e in report["eventList"]] == [
        report["eventList"][0]["time"],
        500,
        504,
        503,
        600,
    ]
    assert report["boundaries"]["turnEnds"] == [4]


UNNEEDED_AT_START = (
    "pickle",
    "dsh_fork.envelopes",
    "dsh_fork.catalog",
    "dsh_fork.turns",
)


def test_inspecting_a_small_log_imports_nothing_it_does_not_use(root: Path, clock: Clock) -> None:
    """Start-up: the envelope check serves only the copied-line check of fork,
    pickle only a log split between two processes, the catalog rules only a log with catalog
    facts or descriptors, the turn summaries only ``--turns``."""
    spec = spec_of("session-small")
    spec.turn(clock)
    spec.publish(root)
    code = probe(f"'loaded: ' + str([m for m in {UNNEEDED_AT_START!r} if m in sys.modules])")
    proc = subprocess.run(
        [sys.executable, "-c", code, "--root", str(root), "inspect", "session-small"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.stderr.strip().splitlines()[-1] == "loaded: []", proc.stderr
