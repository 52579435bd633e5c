"""`dsh-fork doctor` (semantics §7; scenarios §10.1 and §10.5)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import NON_CANONICAL_NAMES, run_cli, tree_digest

from dsh_fork import frames as zframes
from dsh_fork import reader, validation
from dsh_fork.discovery import Root
from dsh_fork.doctor import doctor
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file, write_spec_as
from dsh_fork.generations import CURRENT_NAME

BLOG = "session-41279f7e-cbd2-4124-8b98-f51118f00bc9"
SAMPLE_FORK = "session-e21c3b20-65d7-49b5-bdf1-25916b70425f"


def spec_of(session_id: str, **kwargs: Any) -> SessionSpec:
    return SessionSpec(id=session_id, created_at=kwargs.pop("created_at", 1_000), **kwargs)


def published(root: Path, clock: Clock, session_id: str = "session-a", **kwargs: Any) -> Path:
    spec = spec_of(session_id, **kwargs)
    spec.turn(clock)
    return spec.publish(root)


def doctor_json(root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """(exit code, the report document): the same fields whether the run found errors or
    not; PARTIAL's ``error`` stands beside them."""
    result = run_cli("--root", root, "doctor", *args, "--json")
    value: dict[str, Any] = result.json()
    assert value.pop("schemaVersion") == 1
    if result.exit_code == 10:
        assert value.pop("error")["code"] == "PARTIAL"
        return 10, value
    assert "error" not in value, value
    return result.exit_code, value


def codes(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(f["severity"], f["scope"], f["code"]) for f in report["findings"]]


# -- clean roots ------------------------------------------------------------------------------


def test_a_clean_fixture_root_is_exit_0(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    generate(root, sessions=2, agents=2, depth=2, turns=2)
    before = tree_digest(root)
    status, report = doctor_json(root)
    assert status == 0
    assert report == {
        "root": str(root),
        "encoding": "zstd",
        "sessions": 14,
        "findings": [],
        "counts": {"error": 0, "warning": 0, "info": 0},
    }
    human = run_cli("--root", root, "doctor")
    assert human.exit_code == 0
    assert human.stderr == ""
    assert human.stdout.endswith("No findings.\n")
    assert tree_digest(root) == before


def test_the_samples_report_the_blog_open_turn_and_the_unrelinked_fork(
    samples_root: Path,
) -> None:
    """The samples' fork child has no subagent copies yet (their README: the state relink
    repairs): doctor says so, with the count relink --dry-run plans (three reviewers/lint and
    one below them)."""
    status, report = doctor_json(samples_root)
    assert status == 0
    assert report["sessions"] == 8
    found = [(f["severity"], f["session"], f["code"], f.get("seq")) for f in report["findings"]]
    assert found == [
        ("info", BLOG, "OPEN_TURN", 7),
        ("warning", SAMPLE_FORK, "FORK_TREE_MISSING", None),
    ]
    assert report["findings"][1]["message"].startswith(
        "lacks 4 subagents (3 direct, 1 below them) of its branch"
    )


def test_doctor_is_read_only_and_creates_no_lock(root: Path, clock: Clock) -> None:
    session_dir = published(root, clock)
    (session_dir / "session.lock").unlink()
    before = tree_digest(root)
    assert run_cli("--root", root, "doctor").exit_code == 0
    assert tree_digest(root) == before
    assert not (session_dir / "session.lock").exists()


# -- root rules -------------------------------------------------------------------------------


def test_flat_file_is_a_root_error(root: Path, clock: Clock) -> None:
    session_dir = published(root, clock, cwd="/fx")
    flat = session_dir.parent / "abc.jsonl.zstd"
    flat.write_bytes(b"")
    (root / "stray-file").write_bytes(b"")  # files directly in the root are ignored
    (session_dir.parent / "loose-file").write_bytes(b"")
    status, report = doctor_json(root)
    assert status == 10
    assert report["findings"] == [
        {
            "severity": "error",
            "scope": "root",
            "path": str(flat),
            "code": "FLAT_FILE",
            "message": f"{flat} is a retired flat-layout session file; DSH refuses the root",
        }
    ]


def test_mixed_encoding_is_a_root_error(root: Path, clock: Clock) -> None:
    published(root, clock)
    spec = spec_of("session-plain", cwd="/other")
    spec.turn(clock)
    plain = write_spec_as(spec, root, 4, encoding="plain")
    status, report = doctor_json(root)
    assert status == 10
    assert report["encoding"] == "mixed"
    assert codes(report) == [("error", "root", "ENCODING_MIXED")]
    assert str(plain) in report["findings"][0]["message"]


def test_duplicate_id_is_a_root_error(root: Path, clock: Clock) -> None:
    published(root, clock, cwd="/a")
    published(root, clock, cwd="/b")
    status, report = doctor_json(root)
    assert status == 10
    assert report["findings"] == [
        {
            "severity": "error",
            "scope": "root",
            "session": "session-a",
            "code": "DUPLICATE_ID",
            "message": "session session-a appears in 2 project directories (--a--, --b--); DSH "
            "refuses to list the root",
        }
    ]
    assert report["sessions"] == 2


def test_path_mismatch_is_a_root_error(root: Path, clock: Clock) -> None:
    session_dir = published(root, clock, cwd="/a")
    moved = root / "--a--" / "renamed"
    os.rename(session_dir, moved)
    status, report = doctor_json(root)
    assert status == 10
    assert [(f["code"], f["session"], f["path"]) for f in report["findings"]] == [
        ("PATH_MISMATCH", "session-a", str(moved / CURRENT_NAME))
    ]
    assert report["findings"][0]["message"] == (
        "the log lives in --a--/renamed but its header binds it to --a--/session-a; DSH refuses "
        "the root"
    )


def test_version_mismatch_is_reported_and_the_rest_checked(root: Path, clock: Clock) -> None:
    header = orjson.dumps(
        {"type": "session", "version": 3, "id": "session-v", "createdAt": 1, "cwd": "/fx"}
        | {"isSeeded": False, "delegationDepth": 0}
    )
    path = write_log_file(root / "--fx--" / "session-v" / CURRENT_NAME, header, [])
    spec = spec_of("session-other", cwd="/fx")
    spec.turn(clock)
    spec.add("plugin/thing", clock(), {})
    spec.publish(root)
    status, report = doctor_json(root)
    assert status == 10
    assert [(f["scope"], f["code"], f.get("session")) for f in report["findings"]] == [
        ("root", "VERSION_MISMATCH", "session-v"),
        ("session", "UNKNOWN_EVENT", "session-other"),
    ]
    assert report["findings"][0]["path"] == str(path)


def test_leftover_temps_and_empty_dirs_are_info(root: Path, clock: Clock) -> None:
    session_dir = published(root, clock)
    temp = session_dir / "session.v4.jsonl.zstd.3f9a0c1b2d4e.tmp"
    temp.write_bytes(b"x")
    empty = session_dir.parent / "leftover"
    empty.mkdir()
    (empty / "session.v04.jsonl.zstd").write_bytes(b"")
    status, report = doctor_json(root)
    assert status == 0
    assert [(f["severity"], f["code"], f["path"]) for f in report["findings"]] == [
        ("info", "EMPTY_DIR", str(empty)),
        ("info", "LEFTOVER_TEMP", str(temp)),
    ]
    assert report["findings"][0]["message"] == (
        "leftover holds no canonical generation, so it is not a session (ignored files: "
        "session.v04.jsonl.zstd)"
    )
    assert report["sessions"] == 1


# -- per session ------------------------------------------------------------------------------


def test_corrupt_and_future_sessions_are_findings(root: Path, clock: Clock) -> None:
    bad = published(root, clock, "session-bad")
    data = bytearray((bad / CURRENT_NAME).read_bytes())
    frame = zframes.scan(bytes(data)).frames[1]
    data[frame.end - 1] ^= 0xFF
    (bad / CURRENT_NAME).write_bytes(bytes(data))
    future = spec_of("session-new")
    future.turn(clock)
    write_spec_as(future, root, 9)
    status, report = doctor_json(root)
    assert status == 10
    assert [(f["severity"], f["session"], f["code"]) for f in report["findings"]] == [
        ("error", "session-bad", "CORRUPT_LOG"),
        ("warning", "session-new", "FUTURE_GENERATION"),
    ]


def test_header_invalid(root: Path) -> None:
    header = orjson.dumps(
        {"type": "session", "version": 4, "id": "session-h", "createdAt": 1, "cwd": "/fx"}
        | {"isSeeded": False, "delegationDepth": 0, "title": "retired"}
    )
    write_log_file(root / "--fx--" / "session-h" / CURRENT_NAME, header, [])
    status, report = doctor_json(root)
    assert status == 10
    assert codes(report) == [("error", "session", "HEADER_INVALID")]
    assert report["findings"][0]["session"] == "session-h"


def test_lock_held_is_info_and_excuses_a_torn_tail(
    root: Path, clock: Clock, hold_lock: Any
) -> None:
    session_dir = published(root, clock)
    frame = zframes.encode(b'{"type":"agent-preset/selected","seq":6,"time":1,"data":{}}\n')
    with open(session_dir / CURRENT_NAME, "ab") as handle:
        handle.write(frame[:5])
    status, report = doctor_json(root)
    assert (status, codes(report)) == (0, [("warning", "session", "TORN_TAIL")])
    hold_lock(session_dir)
    status, report = doctor_json(root)
    assert status == 0
    assert codes(report) == [
        ("info", "session", "TORN_TAIL"),
        ("info", "session", "LOCK_HELD"),
    ]
    assert report["findings"][0]["message"].endswith("(a live writer holds the lock)")


def test_stale_generation_is_a_warning(root: Path, clock: Clock) -> None:
    session_dir = published(root, clock)
    older = spec_of("session-a")
    older.turn(clock)
    older.turn(clock)
    write_spec_as(older, root, 3)
    os.utime(session_dir / CURRENT_NAME, ns=(10**18, 10**18))
    status, report = doctor_json(root)
    assert (status, codes(report)) == (0, [("warning", "session", "STALE_GENERATION")])


# -- lineage ----------------------------------------------------------------------------------


def test_lineage_orphan_depth_and_catalog(root: Path, clock: Clock) -> None:
    parent = spec_of("session-p")
    kid = spec_of("session-kid", parent="session-p", origin="subagent", depth=2)
    kid.descriptor(clock, "kid")
    kid.turn(clock)
    lost = spec_of("session-lost", parent="session-p", origin="subagent", depth=1)
    lost.descriptor(clock, "lost")
    stranger = spec_of("session-stranger")
    stranger.turn(clock)
    parent.turn(clock)
    parent.catalog(clock, kid, label="kid")
    missing = parent.catalog(clock, spec_of("session-gone"), label="gone")
    foreign = parent.catalog(clock, stranger, label="not mine")
    orphan = spec_of("session-orphan", parent="session-nowhere", is_seeded=True)
    orphan.turn(clock)
    orphan.end_seed(clock())
    for spec in (parent, kid, lost, stranger, orphan):
        spec.publish(root)
    status, report = doctor_json(root)
    assert status == 0
    found = [(f["session"], f["code"], f.get("seq")) for f in report["findings"]]
    assert found == [
        ("session-kid", "DEPTH", None),
        ("session-orphan", "ORPHAN", None),
        ("session-p", "NOT_CATALOGUED", None),
        ("session-p", "CATALOGUED_MISSING", missing),
        ("session-p", "CATALOG_MISMATCH", foreign),
    ]


def test_lineage_cycles_are_errors(root: Path, clock: Clock) -> None:
    for session_id, parent in (("session-x", "session-y"), ("session-y", "session-x")):
        spec = spec_of(session_id, parent=parent, origin="subagent", depth=1)
        spec.descriptor(clock, session_id)
        spec.turn(clock)
        spec.publish(root)
    selfish = spec_of("session-self", parent="session-self", origin="subagent", depth=1)
    selfish.descriptor(clock, "self")
    selfish.publish(root)
    status, report = doctor_json(root)
    assert status == 10
    cycles = [(f["session"], f["message"]) for f in report["findings"] if f["code"] == "CYCLE"]
    assert cycles == [
        ("session-self", "lineage cycle: session-self → session-self"),
        ("session-x", "lineage cycle: session-x → session-y → session-x"),
        ("session-y", "lineage cycle: session-y → session-x → session-y"),
    ]


# -- named sessions and output ----------------------------------------------------------------


def test_named_sessions_only_plus_root_rules(root: Path, clock: Clock) -> None:
    published(root, clock, "session-a")
    spec = spec_of("session-b")
    spec.turn(clock)
    spec.add("plugin/thing", clock(), {})
    spec.publish(root)
    (root / "--fixture-project--" / "flat.jsonl").write_bytes(b"")
    status, report = doctor_json(root, "session-a")
    assert status == 10
    assert report["sessions"] == 1
    assert codes(report) == [("error", "root", "FLAT_FILE")]
    status, report = doctor_json(root, "session-b", "session-a")
    assert report["sessions"] == 2
    assert codes(report) == [("error", "root", "FLAT_FILE"), ("error", "session", "UNKNOWN_EVENT")]


def test_named_missing_session_is_3(root: Path, clock: Clock) -> None:
    published(root, clock)
    result = run_cli("--root", root, "doctor", "session-a", "session-nope")
    assert result.exit_code == 3
    assert result.stderr == f"Error: no session 'session-nope' in {root}\n"
    assert result.stdout == ""


def test_named_session_by_path_and_future_generation(root: Path, clock: Clock) -> None:
    future = spec_of("session-new")
    future.turn(clock)
    path = write_spec_as(future, root, 9)
    status, report = doctor_json(root, str(path.parent))
    assert status == 0
    assert codes(report) == [("warning", "session", "FUTURE_GENERATION")]


def test_partial_output_names_each_failure(root: Path, clock: Clock) -> None:
    spec = spec_of("session-b")
    spec.turn(clock)
    seq = spec.add("plugin/thing", clock(), {})
    spec.publish(root)
    (root / "--fixture-project--" / "flat.jsonl").write_bytes(b"")
    result = run_cli("--root", root, "doctor", "--json")
    assert result.exit_code == 10
    error = result.json()["error"]
    assert error["message"] == "doctor found 2 errors (1 root rule findings, 1 of 1 sessions)"
    assert error["failed"] == [
        {
            "id": "root",
            "code": "FLAT_FILE",
            "message": f"{root}/--fixture-project--/flat.jsonl is a retired flat-layout session "
            "file; DSH refuses the root",
        },
        {
            "id": "session-b",
            "code": "UNKNOWN_EVENT",
            "message": "unknown event type 'plugin/thing' without ignorable: true (DSH refuses "
            "the whole log as written by a newer harness)",
        },
    ]
    assert result.json()["counts"] == {"error": 2, "warning": 0, "info": 0}
    human = run_cli("--root", root, "doctor")
    assert human.exit_code == 10
    assert human.stderr.splitlines() == [
        "Error: doctor found 2 errors (1 root rule findings, 1 of 1 sessions)",
        f"  failed: root (FLAT_FILE): {error['failed'][0]['message']}",
        f"  failed: session-b (UNKNOWN_EVENT): {error['failed'][1]['message']}",
    ]
    lines = human.stdout.splitlines()
    assert lines[0] == "Doctor"
    assert "Root" in lines and "Session session-b" in lines
    assert any(line.split()[:3] == ["error", "UNKNOWN_EVENT", str(seq)] for line in lines if line)


def test_help_has_an_example() -> None:
    result = run_cli("doctor", "--help")
    assert result.exit_code == 0
    assert "  dsh-fork " in result.stdout


def test_the_generation_scan_fixture_set(root: Path, clock: Clock) -> None:
    """Semantics §10.1: the peer plugin's generation-scan fixtures, read by doctor."""
    parent = spec_of("parent", cwd="/fx")
    parent.turn(clock)

    def child(session_id: str, cwd: str = "/fx", parent_id: str = "parent") -> SessionSpec:
        spec = spec_of(session_id, cwd=cwd, parent=parent_id, origin="subagent", depth=1)
        spec.descriptor(clock, session_id)
        spec.turn(clock)
        return spec

    child("child-a").publish(root)
    write_spec_as(child("child-b"), root, 3)
    write_spec_as(child("child-g"), root, 0)
    write_spec_as(child("child-f"), root, 9)
    d_new = child("child-d")
    d_new.turn(clock)
    d_dir = d_new.publish(root)
    d_old = write_spec_as(child("child-d"), root, 3)
    os.utime(d_old, ns=((d_dir / CURRENT_NAME).stat().st_mtime_ns + 10**9,) * 2)
    child("child-c", parent_id="other").publish(root)
    e_dir = root / "--fx--" / "child-e"
    e_dir.mkdir()
    (e_dir / "session.v4.jsonl.txt").write_bytes(b"")
    h_dir = root / "--fx--" / "child-h"
    h_dir.mkdir()
    for name in NON_CANONICAL_NAMES:
        (h_dir / name).write_bytes(b"")
    child("child-x", cwd="/other").publish(root)
    (root / "--fx--" / "loose-file").write_bytes(b"")
    (root / "stray").write_bytes(b"")
    for kid in ("child-a", "child-b", "child-d", "child-f", "child-x"):
        parent.catalog(clock, spec_of(kid), label=kid)
    parent.publish(root)

    status, report = doctor_json(root)
    assert status == 0
    assert report["sessions"] == 8
    found = [
        (f["severity"], f.get("session") or Path(f["path"]).name, f["code"])
        for f in report["findings"]
    ]
    assert found == [
        ("info", "child-e", "EMPTY_DIR"),
        ("info", "session.v4.jsonl.zstd.repair", "LEFTOVER_TEMP"),
        ("info", "session.v4.jsonl.zstd.tmp", "LEFTOVER_TEMP"),
        ("info", "child-h", "EMPTY_DIR"),
        ("info", "child-b", "OLD_GENERATION"),
        ("warning", "child-c", "ORPHAN"),
        ("warning", "child-d", "STALE_GENERATION"),
        ("warning", "child-f", "FUTURE_GENERATION"),
        ("info", "child-g", "OLD_GENERATION"),
        ("warning", "parent", "NOT_CATALOGUED"),
    ]
    not_catalogued = report["findings"][-1]["message"]
    assert not_catalogued.startswith("subagent child child-g is on disk")


def listings_of_each_dir(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times doctor lists each session dir of ``root`` (one run, no finding)."""
    listed: Counter[str] = Counter()
    real = os.scandir

    def counted(path: Any = ".") -> Any:
        listed[os.fspath(path)] += 1
        return real(path)

    monkeypatch.setattr(os, "scandir", counted)
    report = doctor(Root(root))
    monkeypatch.setattr(os, "scandir", real)
    assert report.findings == []
    return {str(p): listed[str(p)] for p in root.glob("*/*")}


def test_each_session_dir_is_listed_once_and_again_after_its_log_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One listing of a session dir answers every rule (its generations, its leftover temps,
    its lock). The read recipe lists it again after the log is read (format §13 step 2)."""
    root = tmp_path / "sessions"
    summary = generate(root, sessions=2, agents=2, depth=1, turns=1)
    assert summary.sessions == 6
    session_dir = next(p for p in root.glob("*/*") if p.name == summary.top_level[0])
    temp = session_dir / "session.v4.jsonl.zstd.0123456789ab.tmp"
    temp.write_bytes(b"x")
    report = doctor(Root(root))
    assert [(f.code, f.path) for f in report.findings] == [("LEFTOVER_TEMP", str(temp))]
    temp.unlink()

    assert list(listings_of_each_dir(root, monkeypatch).values()) == [2] * 6


def test_a_generation_published_during_the_run_is_still_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A higher generation appears in a session dir after the listing: the dir is listed
    again after the read, and the session is SESSION_STALE."""
    root = tmp_path / "sessions"
    summary = generate(root, sessions=1, agents=0, turns=1)
    session_dir = next(root.glob("*/*"))
    real = reader.open_log

    def publish_then_read(generation: Any, **options: Any) -> Any:
        higher = session_dir / "session.v5.jsonl.zstd"
        if not higher.exists():
            higher.write_bytes(b"")
        return real(generation, **options)

    monkeypatch.setattr(validation, "open_log", publish_then_read)
    report = doctor(Root(root))
    assert [(f.session, f.code) for f in report.findings] == [
        (summary.top_level[0], "SESSION_STALE")
    ]
