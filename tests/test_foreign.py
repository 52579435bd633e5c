"""The foreign DSH roots: read as DSH's own read path reads them.

``../shared/foreign`` holds roots dsh-fork did not write (byte cases after DSH's persistence
tests, two peer tools' fixtures, DSH's own preview and example logs, re-created bug reports)
and ``verdicts.json``, DSH v4's own verdict for each: ACCEPTED with the events it restores, or
REJECTED. Every judged case is checked here through the library, the expectations each group's
source states are checked one by one, and ``agree.py`` runs once as a user runs it. The roots
are read in place (reading never writes); forks work on copies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import FOREIGN, require_foreign

from dsh_fork import frames as zframes
from dsh_fork.agents import list_agents
from dsh_fork.discovery import Root
from dsh_fork.doctor import doctor
from dsh_fork.errors import CorruptLog, DshForkError, UnsupportedFormat
from dsh_fork.fixtures import Clock
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import list_generations
from dsh_fork.inspect import InspectReport, inspect_session
from dsh_fork.model import MODEL_TYPES, facts_of
from dsh_fork.reader import open_log
from dsh_fork.records import PACKED_TYPES, parse_line
from dsh_fork.sessionarg import locate

require_foreign()
ROOTS = FOREIGN / "roots"
VERDICTS: dict[str, dict[str, Any]] = orjson.loads((FOREIGN / "verdicts.json").read_bytes())


def _judged(key: str, verdict: dict[str, Any]) -> bool:
    return not verdict.get("unscored") and verdict["verdict"] in ("ACCEPTED", "REJECTED")


def _whole_root(key: str, verdict: dict[str, Any]) -> bool:
    return "/" not in key or "multiple project directories" in verdict.get("error", "")


SESSIONS = sorted(k for k, v in VERDICTS.items() if _judged(k, v) and not _whole_root(k, v))
REFUSED_ROOTS = sorted(
    {k.split("/")[0] for k, v in VERDICTS.items() if _judged(k, v)}
    - {k.split("/")[0] for k in SESSIONS}
)
ALL_ROOTS = sorted(p.name for p in ROOTS.iterdir() if p.is_dir())


def inspect_dir(session_dir: Path) -> InspectReport:
    root = session_dir.parent.parent
    return inspect_session(locate(str(session_dir), str(root)), events=False)


def errors_of(report: InspectReport) -> list[str]:
    return [f"{f.code}: {f.message}" for f in report.findings if f.severity == "error"]


def session_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if p.is_dir())


# -- DSH's verdicts -----------------------------------------------------------------------------


@pytest.mark.parametrize("key", SESSIONS)
def test_each_session_dsh_judged_reads_as_dsh_reads_it(key: str) -> None:
    """Accepted: the same number of events and no error. Rejected: refused or an error."""
    verdict = VERDICTS[key]
    try:
        report = inspect_dir(ROOTS / key)
    except DshForkError as exc:
        assert verdict["verdict"] == "REJECTED", f"DSH accepts it; dsh-fork: {exc.message}"
        return
    errors = errors_of(report)
    if verdict["verdict"] == "ACCEPTED":
        assert not errors
        assert report.log.event_count == verdict["events"]
        assert len(report.log.recovered) == verdict.get("recoveredTail", 0)
        if "tornTruncateTo" in verdict:
            assert report.log.torn is not None
            assert report.log.torn.offset == verdict["tornTruncateTo"]
    else:
        assert errors, f"DSH rejects it: {verdict['error']}"


@pytest.mark.parametrize("name", REFUSED_ROOTS)
def test_each_root_dsh_refuses_whole_is_refused_by_doctor_as_a_root(name: str) -> None:
    report = doctor(Root(ROOTS / name))
    assert [f for f in report.errors if f.scope == "root"]


def test_agree_py_agrees_on_every_judged_case() -> None:
    """The scorer beside the roots, run as its README says, with this checkout's command."""
    command = str(Path(sys.executable).parent / "dsh-fork")
    proc = subprocess.run(
        [sys.executable, str(FOREIGN / "agree.py")],
        capture_output=True,
        text=True,
        env={**os.environ, "DSH_FORK": command},
        timeout=600,
        check=False,
    )
    last = proc.stdout.strip().splitlines()[-1]
    judged = last.split(" on ")[1].split(" ")[0]
    agreed, total = judged.split("/")
    assert proc.returncode == 0 and agreed == total, proc.stdout


LISTING_SKIPS = {
    "empty-file": "CORRUPT_LOG",
    "partial-only": "CORRUPT_LOG",
    "two-lines-header": "CORRUPT_LOG",
    "bad-checksum-header": "CORRUPT_LOG",
    "not-header": "HEADER_INVALID",
}


@pytest.mark.parametrize(("case", "code"), sorted(LISTING_SKIPS.items()))
def test_a_session_dsh_listing_skips_is_that_sessions_error_in_doctor_and_inspect(
    case: str, code: str
) -> None:
    """DSH's list() skips it and open() refuses it: one session's error, the same line from
    doctor and inspect (exit 9), never a root finding and never silence."""
    root = ROOTS / f"zs-v4--{case}--root"
    [finding] = doctor(Root(root)).errors
    assert (finding.scope, finding.code) == ("session", code)
    [session_dir] = session_dirs(root)
    with pytest.raises(CorruptLog) as caught:
        inspect_dir(session_dir)
    assert caught.value.exit_code == 9 and caught.value.message == finding.message


# -- every root, read as a user would ------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_ROOTS)
def test_every_foreign_root_is_read_without_a_traceback(name: str) -> None:
    """doctor, inspect and list-agents either report or refuse with a contract error."""
    root = ROOTS / name
    report = doctor(Root(root))
    assert report.sessions >= 0
    for session_dir in session_dirs(root):
        if not list_generations(session_dir):
            continue
        try:
            inspected = inspect_dir(session_dir)
            list_agents(locate(str(session_dir), str(root)), recursive=True)
        except DshForkError:
            continue
        assert inspected.log.event_count == len(list(inspected.log.events()))


# -- what each group's source expects -----------------------------------------------------------

SURGEON = ROOTS / "surgeon--root" / "--tmp-dsh-session-surgeon-fixtures--"


def test_surgeon_healthy_packed_expands_its_packed_row() -> None:
    """2 frames, the header frame holds only the header, one packed row → 4 text deltas,
    seqs 0..9."""
    gen = list_generations(SURGEON / "session-synthetic-healthy-packed")[-1]
    log = open_log(gen)
    assert gen.version == 0 and len(zframes.scan(log.data).frames) == 2
    header_frame = zframes.decode(log.data, zframes.scan(log.data).frames[0])
    assert header_frame.count(b"\n") == 1 and orjson.loads(header_frame)["type"] == "session"
    assert [e.seq for e in log.events()] == list(range(10))
    deltas = [e for e in log.events() if e.raw is None]  # packed-row members
    assert len(deltas) == 4 and {e.data["chunk"]["type"] for e in deltas} == {"text-delta"}
    report = inspect_dir(gen.path.parent)
    assert report.frames is not None and report.frames.count == 2


def test_surgeon_torn_tail_at_byte_335_with_3_recoverable_lines() -> None:
    report = inspect_dir(SURGEON / "session-synthetic-torn-tail")
    torn = report.log.torn
    assert torn is not None and torn.offset == 335 and len(torn.recovered) == 3
    assert report.recoverable_lines == 3 and len(report.log.recovered) == 3


def test_surgeon_committed_seq_gap_is_an_error() -> None:
    with pytest.raises(CorruptLog, match="seq 9 where 6 was expected"):
        inspect_dir(SURGEON / "session-synthetic-seq-gap-committed")


def test_surgeon_lone_surrogate_is_kept_as_is_and_flagged() -> None:
    report = inspect_dir(SURGEON / "session-synthetic-lone-surrogate")
    assert "LINE_ENCODING" in [f.code for f in report.findings]
    assert not errors_of(report)
    lenient = [e for e in report.log.events() if e.lenient]
    assert lenient and all(e.raw is not None and b"\\ud" in e.raw.lower() for e in lenient)


def test_surgeon_orphan_temp_is_listed_never_read_as_the_log() -> None:
    report = inspect_dir(SURGEON / "session-synthetic-orphan-tmp")
    assert report.log.generation.name == "session.jsonl.zstd"
    assert report.ignored_files == ["session.jsonl.zstd.tmp"]


def test_a_packed_row_inside_a_v4_log_is_corrupt_and_named_so() -> None:
    session = ROOTS / "packed4--root" / SURGEON.name / "session-synthetic-healthy-packed"
    with pytest.raises(CorruptLog, match="event 3 is a packed text-chunks row"):
        inspect_dir(session)


def test_relgen_reads_the_highest_canonical_generation() -> None:
    """child-d is read from v4; the non-canonical file is ignored; v9 is refused."""
    for name in ("relgen--root/--ws--", "relgenfix--sessions/_no-cwd"):
        base = ROOTS / name
        assert locate(str(base / "child-d"), str(base.parent)).generation.version == 4
        assert list_generations(base / "child-e") == []
        with pytest.raises(UnsupportedFormat):
            inspect_dir(base / "child-f")


def test_relgenfix_parent_has_exactly_the_children_a_b_d_f_g() -> None:
    root = Root(ROOTS / "relgenfix--sessions")
    assert sorted(e.id or "" for e in root.children_of("parent")) == [
        "child-a",
        "child-b",
        "child-d",
        "child-f",
        "child-g",
    ]


@pytest.mark.parametrize("variant", ["as-written", "parent-with-turn"])
def test_copytree_windows_cwd_is_refused_as_dsh_refuses_it(variant: str) -> None:
    """DSH on POSIX refuses cwd C:/ws: "first line is not a session header"."""
    project = ROOTS / f"copytree--{variant}--root" / "--C-ws--"
    for session_dir in session_dirs(project.parent):
        if session_dir.parent != project:
            continue
        with pytest.raises(CorruptLog, match="cwd 'C:/ws' is not absolute"):
            inspect_dir(session_dir)


@pytest.mark.parametrize("name", ["vfs3--root", "vfs4--root"])
def test_vfs_preview_root_is_valid_and_its_panel_shows_two_subagents(name: str) -> None:
    root = ROOTS / name
    dirs = session_dirs(root)
    assert len(dirs) == 3
    for session_dir in dirs:
        report = inspect_dir(session_dir)
        assert not errors_of(report), session_dir.name
        if report.log.header.is_seeded:  # the seeded child's cut is its last tagged marker
            assert report.facts.cut == report.facts.tagged_markers[-1] == 169
    tree = list_agents(locate("preview-showcase", str(root)), recursive=False)
    assert [(row.id, row.in_panel) for row in tree.children] == [
        ("preview-architecture-review", True),
        ("preview-follow-up-builder", True),
    ]


PREVIEW_REFUSALS = {
    "refuse-compressed-beside-raw": "bad frame magic",  # the root is refused too (mixed)
    "refuse-corrupt": "is not JSON",
    "refuse-future": "newer than v4",
    "refuse-id-other": "PATH_MISMATCH",
    "refuse-torn-tail": "no complete header line",
    "refuse-unknown-required": "UNKNOWN_EVENT",
    "refuse-version-2-in-v3": "does not match the file name",
}


@pytest.mark.parametrize("case", sorted(PREVIEW_REFUSALS))
def test_each_preview_refusal_is_refused(case: str) -> None:
    session_dir = ROOTS / f"preview--{case}--sessions" / "project" / "example"
    try:
        said = errors_of(inspect_dir(session_dir))
    except DshForkError as exc:
        said = [exc.message]
    assert any(PREVIEW_REFUSALS[case] in line for line in said), said


def test_preview_highest_generation_is_used() -> None:
    session_dir = ROOTS / "preview--highest-generation--sessions" / "project" / "example"
    assert inspect_dir(session_dir).log.generation.name == "session.v4.jsonl"


@pytest.mark.parametrize(
    ("case", "panel"),
    [
        ("catalog-current-child", [("child", True, "one-shot")]),
        ("catalog-missing-descriptor", [("child", True, "unknown")]),
        ("catalog-other-origin", []),
        ("catalog-other-root", [("child", False, None)]),
    ],
)
def test_preview_migration_catalogs_same_directory_subagent_children_only(
    case: str, panel: list[tuple[str, bool, str | None]]
) -> None:
    """A v0 fact from the descriptor, a v1 ``unknown`` fact otherwise, and nothing else."""
    root = ROOTS / f"preview--{case}--sessions"
    tree = list_agents(locate("example", str(root)), recursive=False)
    assert [(row.id, row.in_panel, row.mode) for row in tree.children] == panel


UPSTREAM = sorted(name for name in ALL_ROOTS if name.startswith("upstream--"))


def _packed_expansion(session_dir: Path) -> int:
    """Events a v0 log holds: one per row, a packed row one per piece (format §9)."""
    lines = (session_dir / "session.jsonl").read_bytes().split(b"\n")[1:]
    total = 0
    for line in filter(None, lines):
        value, _ = parse_line(line)
        if value.get("type") in PACKED_TYPES:
            total += len(value["data"]["args" if value["type"] == "tool-call-chunks" else "texts"])
        else:
            total += 1
    return total


@pytest.mark.parametrize("name", UPSTREAM)
def test_dsh_0_1_1_example_logs_read_without_errors(name: str) -> None:
    """Every event count equals the packed-row expansion."""
    for session_dir in session_dirs(ROOTS / name):
        report = inspect_dir(session_dir)
        assert not errors_of(report), session_dir
        assert report.log.event_count == _packed_expansion(session_dir)


def test_dsh_0_1_1_seeded_cuts_are_42_and_36() -> None:
    cuts = sorted(
        cut
        for name in UPSTREAM
        for session_dir in session_dirs(ROOTS / name)
        if (cut := inspect_dir(session_dir).facts.cut)
    )
    assert cuts == [36, 42]


def test_dsh_0_1_1_list_agents_shows_the_ready_child() -> None:
    """DSH's own list_agents showed ``[ready] — Reply with CHILD_OK``."""
    root = ROOTS / "upstream--acp-agent__snapshots_subagent-list-agents--root"
    tree = list_agents(locate("11111111-1111-4111-8111-111111111111", str(root)), recursive=False)
    assert [(r.id, r.label, r.status, r.in_panel) for r in tree.children] == [
        ("33333333-3333-4333-8333-333333333333", "Reply with CHILD_OK", "idle", True)
    ]


@pytest.mark.parametrize("case", ["gap-then-turn-end", "gap-without-turn-end"])
def test_a_reused_seq_after_the_end_seed_is_refused(case: str) -> None:
    for session_dir in session_dirs(ROOTS / f"seqfork--{case}--root"):
        with pytest.raises(CorruptLog, match="seq 12 where 13 was expected"):
            inspect_dir(session_dir)


def test_a_seeded_v3_child_is_valid_without_a_seeded_mismatch() -> None:
    report = inspect_dir(ROOTS / "v3seeded--root" / "_no-cwd" / "c")
    assert not errors_of(report) and report.facts.cut == report.facts.tagged_markers[-1]


# -- a fork of each accepted v4 session ----------------------------------------------------------

FORKABLE = [
    k
    for k in SESSIONS
    if VERDICTS[k]["verdict"] == "ACCEPTED"
    and (ROOTS / k / "session.v4.jsonl.zstd").exists()
    and not list(ROOTS.joinpath(k).glob("session.v[5-9]*"))
]


@pytest.mark.parametrize("key", FORKABLE)
def test_a_fork_of_each_accepted_v4_session_inherits_what_dsh_sees(
    tmp_path: Path, key: str
) -> None:
    """The child is accepted, and its inherited lines are exactly the source's events DSH
    restores (the kept lines of a torn tail included) up to the fork's boundary."""
    name, rest = key.split("/", 1)
    root = tmp_path / name
    shutil.copytree(ROOTS / name, root)
    source = root / rest
    before = open_log(list_generations(source)[-1], collect=MODEL_TYPES)
    seen = [e.raw for e in before.events()]
    assert len(seen) == VERDICTS[key]["events"]
    turn_ends = facts_of(before).turn_ends
    # The default boundary is the last event; an open last turn forks at its last turn/end.
    at = turn_ends[-1] if facts_of(before).open_turn is not None and turn_ends else None
    result = fork_session(
        str(source),
        str(root),
        ForkOptions(at=at, child_id="forked-child", agents=False),
        clock=Clock(),
    )
    assert result.path is not None
    child = inspect_dir(result.path.parent)
    assert not errors_of(child)
    inherited = result.child.inherited_events
    if turn_ends and turn_ends[-1] == len(seen) - 1:  # a completed last turn: all of it
        assert inherited == len(seen)
    assert 0 <= inherited <= len(seen)
    assert [e.raw for e in child.log.events()][:inherited] == seen[:inherited]
    own = 1 if result.child.title is None else 2  # the marker, and the fork's title when it has one
    assert child.facts.cut == inherited and child.log.event_count == inherited + own


def test_the_fast_header_form_agrees_with_header_of_on_every_foreign_header() -> None:
    """Each foreign log's first line, under its file name's version: what msgspec's fast
    form accepts, ``header_of`` accepts with the same values (``records._fast_header``)."""
    from dsh_fork import records

    seen = taken = 0
    for log in sorted(ROOTS.glob("*/*/*/session.v*.jsonl.zstd")):
        version = next((g.version for g in list_generations(log.parent) if g.path == log), None)
        if version is None or version < 2:
            continue
        data = log.read_bytes()
        try:
            scan = zframes.scan(data)
            if not scan.frames:
                continue
            line = zframes.decode(data, scan.frames[0]).split(b"\n", 1)[0]
        except DshForkError:
            continue
        seen += 1
        fast = records._fast_header(line, version)
        if fast is None:
            continue
        taken += 1
        value, _ = parse_line(line)
        assert records.header_of(value, line, version) == fast, log
    assert seen and taken  # the foreign headers do reach the fast form
