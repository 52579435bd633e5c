"""Bad input, fuzzed (issue 5, guarantee 4): parsers and whole commands on damaged logs.

Hypothesis drives the header and event parsers with arbitrary bytes and arbitrary JSON, and
every command (inspect, doctor, list-agents, fork, relink) through the CLI on damaged copies
of a real log, the foreign sample home: truncations, bit flips, wrong checksums, garbage,
and single lines replaced by bad JSON, lone surrogates, huge numbers, wrong types, seq gaps
and repeats, unknown event types with and without ``ignorable``. The outcome is always a
typed error or a finding: no exit 1 (INTERNAL is a bug here, and no I/O fails), no
traceback, and no byte written by a read-only command or published from a corrupt source
(``run_cli``'s source guard checks every run). The cases run are counted in the summary.

``DSH_FORK_FUZZ=deep`` selects the long randomized profile (``hypothesis_profiles``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis_profiles  # noqa: F401  (registers and loads the Hypothesis profile)
import pytest
from conftest import SAMPLES, require_samples, run_cli
from hypothesis import given
from hypothesis import strategies as st
from safetykit import count

from dsh_fork import frames as zframes
from dsh_fork.discovery import Root
from dsh_fork.errors import ALL_ERRORS, DshForkError
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.inspect import inspect_arg
from dsh_fork.kinds import read_evidence, read_own_descriptor
from dsh_fork.records import LineError, parse_event, parse_header, parse_line, parse_v0_line
from dsh_fork.validation import validate_dir

SHOP = "session-f768064f-9585-47ad-a39e-ed24c2c063fe"
FORK = "session-e21c3b20-65d7-49b5-bdf1-25916b70425f"
REVIEWER = "session-d665c9a1-1a6a-4509-ab7c-9c6ab8934931"
PROJECT = "--home-ana-shop--"
TARGETS = (FORK, SHOP, REVIEWER)
CONTRACT_EXITS = {0, 2, 3, 4, 5, 6, 7, 8, 9, 10}
DEEP = os.environ.get("DSH_FORK_FUZZ") == "deep"
FUZZ_CHILD = "fuzz-child"

# -- arbitrary JSON and lines -----------------------------------------------------------------

HUGE = st.sampled_from(
    [2**53, 2**53 - 1, -(2**53), 2**64, 10**400, -0.0, 1e308, 5.0, 0.5, -1, math.pi]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | HUGE
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TYPES = st.sampled_from(
    [
        "turn/start",
        "turn/end",
        "step/start",
        "user/message",
        "assistant/message",
        "tool/result",
        "session/end-seed",
        "subagent/catalog",
        "subagent/descriptor",
        "session/title",
        "agent-preset/selected",
        "x-unknown/thing",
        "",
    ]
)


def _envelope(draw: st.DrawFn, seq: int) -> dict[str, Any]:
    """An event envelope with each field right, wrong or missing."""
    event: dict[str, Any] = {}
    if draw(st.integers(0, 5)):
        event["type"] = draw(TYPES | JSON)
    event["seq"] = draw(st.sampled_from([seq, seq + 1, seq - 1, str(seq), float(seq)]) | JSON)
    if draw(st.booleans()):
        event["time"] = draw(st.integers(0, 2**41) | JSON)
    if draw(st.integers(0, 4)):
        event["data"] = draw(JSON)
    if draw(st.integers(0, 2)) == 0:
        event["ignorable"] = draw(st.sampled_from([True, False, None, 1, "yes"]))
    if draw(st.integers(0, 3)) == 0:
        event[draw(st.sampled_from(["surfaceOp", "sourceEventSeqs", "extra"]))] = draw(JSON)
    return event


LITERALS = [
    b'{"type":',
    b"not json at all",
    b"[]",
    b"null",
    b'"a string"',
    b'{"type":"turn/start","seq":0,"time":NaN,"data":{}}',
    b'{"type":"turn/start","seq":0,"time":Infinity,"data":{}}',
    b'{"type":"user/message","seq":SEQ,"time":1,"data":{"t":"\\ud800 lone"}}',
    b'{"type":"user/message","seq":SEQ,"time":1,"data":{"t":"\xed\xa0\x80 raw"}}',
    b'{"type":"user/message","seq":SEQ,"time":1,"data":{"t":"\xff\xfe bad utf-8"}}',
    b'{"type":"x/unknown","seq":SEQ,"time":1,"data":{}}',
    b'{"type":"x/unknown","seq":SEQ,"time":1,"data":{},"ignorable":true}',
    b'{"type":"x/unknown","seq":SEQ,"time":1,"data":{},"ignorable":false}',
    b'{"type":"turn/end","seq":SEQ,"time":1e400,"data":{}}',
    b'{"type":"turn/end","seq":SEQ,"time":-0,"data":{}}',
    b'{"type":"turn/end","seq":1' + b"0" * 400 + b',"time":1,"data":{}}',
    b'{"type":"session/end-seed","seq":SEQ,"time":1,"data":{"inherited":true}}',
    b'{"type":"subagent/catalog","seq":SEQ,"time":1,"data":{"version":0,"childId":5}}',
    b"[" * 5000 + b"]" * 5000,
    b'{"type":"text-chunks","seq0":SEQ,"time0":1,"data":{}}',
]


@st.composite
def lines(draw: st.DrawFn, seq: int = 0) -> bytes:
    """One bad (or good) line in place of event ``seq``."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.sampled_from(LITERALS)).replace(b"SEQ", str(seq).encode())
    if kind == 1:
        return draw(st.binary(min_size=1, max_size=60).filter(lambda b: b"\n" not in b))
    return _dumps(_envelope(draw, seq), ascii_only=draw(st.booleans()))


def _dumps(value: Any, *, ascii_only: bool) -> bytes:
    """JSON as JavaScript would write it, big integers and lone surrogates included (raw, as
    invalid UTF-8, when not ASCII-escaped)."""
    text = json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass")


# -- the parsers ------------------------------------------------------------------------------


def _typed(exc: BaseException) -> bool:
    return isinstance(exc, ALL_ERRORS) and type(exc).__name__ != "InternalError"


@given(line=st.binary(max_size=200) | lines(seq=3))
def test_parse_line_gives_a_value_or_a_line_error(line: bytes) -> None:
    count("fuzz: parse_line")
    with contextlib.suppress(LineError):
        parse_line(line)


@given(line=lines(seq=3), expected=st.sampled_from([3, None]))
def test_the_event_parser_raises_only_corrupt_log(line: bytes, expected: int | None) -> None:
    count("fuzz: event parser")
    for parse in (lambda: parse_event(line, expected), lambda: parse_v0_line(line, 3)):
        try:
            parse()
        except DshForkError as exc:
            assert _typed(exc) and exc.exit_code == 9, exc


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    base: dict[str, Any] = {
        "type": "session",
        "version": 4,
        "id": "session-x",
        "createdAt": 1768000000000,
        "cwd": "/home/u/proj",
        "isSeeded": False,
        "delegationDepth": 0,
    }
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from([*base, "parentSession", "origin", "seedLength", "owner"]))
        if draw(st.booleans()):
            base.pop(key, None)
        else:
            base[key] = draw(JSON | st.sampled_from([4, 3, 0, 9, "4", "", "relative/cwd"]))
    if draw(st.integers(0, 5)) == 0:
        return draw(lines())
    return _dumps(base, ascii_only=draw(st.booleans()))


@given(line=headers(), version=st.integers(0, 6))
def test_the_header_parser_raises_only_typed_errors(line: bytes, version: int) -> None:
    count("fuzz: header parser")
    try:
        header = parse_header(line, version)
    except DshForkError as exc:
        assert _typed(exc) and exc.exit_code in (8, 9), exc
    else:
        assert header.id and header.version == version


# -- whole commands on damaged copies of a real log -------------------------------------------


class Damage:
    """One damaged copy of a sample log (shown by target and kind, not by its bytes)."""

    def __init__(self, target: str, kind: str, apply: bytes) -> None:
        self.target = target
        self.kind = kind
        self.apply = apply

    def __repr__(self) -> str:
        return f"Damage({self.target}, {self.kind})"


def _log_path(root: Path, session_id: str) -> Path:
    return root / PROJECT / session_id / CURRENT_NAME


def _reframe(data: bytes, index: int, line: bytes) -> bytes:
    """The file with line ``index`` (0 = header) replaced; one frame per original frame."""
    scan = zframes.scan(data)
    plain = [zframes.decode(data, f) for f in scan.frames]
    out: list[bytes] = []
    position = 0
    for text in plain:
        frame_lines = text.split(b"\n")[:-1]
        for j in range(len(frame_lines)):
            if position == index:
                frame_lines[j] = line
            position += 1
        out.append(zframes.encode(b"".join(x + b"\n" for x in frame_lines)))
    return b"".join(out)


@st.composite
def damages(draw: st.DrawFn) -> Damage:
    target = draw(st.sampled_from(TARGETS))
    data = (SAMPLES / "home" / "sessions" / PROJECT / target / CURRENT_NAME).read_bytes()
    frames = zframes.scan(data).frames
    kind = draw(
        st.sampled_from(["truncate", "flip", "checksum", "garbage", "line", "header", "random"])
    )
    if kind == "random":
        blob = draw(st.binary(max_size=300))
        if draw(st.booleans()):
            blob = data[:4] + blob  # past the magic, into the frame header
        return Damage(target, f"{len(blob)} random bytes", blob)
    if kind == "truncate":
        cut = draw(st.integers(0, len(data) - 1))
        return Damage(target, f"truncate at {cut}", data[:cut])
    if kind == "flip":
        position = draw(st.integers(0, len(data) - 1))
        bit = draw(st.integers(0, 7))
        damaged = bytearray(data)
        damaged[position] ^= 1 << bit
        return Damage(target, f"flip bit {bit} of byte {position}", bytes(damaged))
    if kind == "checksum":
        frame = draw(st.sampled_from(frames))
        damaged = bytearray(data)
        damaged[frame.end - 1 - draw(st.integers(0, 3))] ^= 0xFF
        return Damage(target, f"checksum of the frame at {frame.start}", bytes(damaged))
    if kind == "garbage":
        extra = draw(st.binary(min_size=1, max_size=40))
        where = draw(st.sampled_from([len(data), *(f.end for f in frames)]))
        return Damage(target, f"garbage at {where}", data[:where] + extra + data[where:])
    events = sum(zframes.decode(data, f).count(b"\n") for f in frames) - 1
    if kind == "header":
        return Damage(target, "header", _reframe(data, 0, draw(headers())))
    seq = draw(st.integers(0, events - 1))
    line = draw(lines(seq=seq))
    return Damage(target, f"event {seq} := {line[:60]!r}", _reframe(data, seq + 1, line))


@pytest.fixture(scope="module")
def sample_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One private copy of the foreign sample home; each example copies it again. The
    damage tests need it; a checkout without ``../shared`` skips them with the reason."""
    require_samples()
    target = tmp_path_factory.mktemp("samples") / "home"
    shutil.copytree(SAMPLES / "home", target)
    for path in target.rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    return target / "sessions"


@pytest.fixture
def fuzz_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def _check(result: Any, argv: list[str], what: str) -> None:
    """A contract exit code; an error is one line on stderr, or one JSON error document."""
    assert result.exit_code in CONTRACT_EXITS, f"{what}: exit {result.exit_code}: {result.stderr}"
    assert "Traceback" not in result.stderr, what
    assert "internal error" not in result.stderr + result.stdout, what
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    if "--json" in argv:
        document = result.json()  # exactly one JSON document
        assert ("error" in document) == (result.exit_code != 0), what
        assert errors == [], what
    else:
        assert len(errors) == (0 if result.exit_code == 0 else 1), f"{what}: {result.stderr}"


@given(damage=damages())
def test_every_command_on_a_damaged_log_ends_in_a_contract_code(
    damage: Damage, sample_root: Path, fuzz_dir: Path
) -> None:
    root = fuzz_dir / "case" / "sessions"
    if root.parent.exists():
        shutil.rmtree(root.parent)
    shutil.copytree(sample_root, root)
    _log_path(root, damage.target).write_bytes(damage.apply)
    what = repr(damage)

    for argv in (
        ["inspect", damage.target, "--events"],
        ["inspect", damage.target, "--json"],
        ["doctor"],
        ["list-agents", SHOP, "--recursive"],
        ["fork", damage.target, "--dry-run"],
        ["relink", FORK, "--dry-run"],
    ):
        _check(run_cli("--root", root, *argv), argv, f"{what}: {argv}")

    argv = ["fork", damage.target, "--id", FUZZ_CHILD, "--no-agents"]
    forked = run_cli("--root", root, *argv)
    _check(forked, argv, f"{what}: fork")
    assert Root(root).exists(FUZZ_CHILD) == (forked.exit_code == 0), f"{what}: {forked.stderr}"
    argv = ["relink", FORK, "--json"]
    relinked = run_cli("--root", root, *argv)
    _check(relinked, argv, f"{what}: relink")
    if relinked.exit_code in (0, 10):
        outcome = relinked.json()
        summary = outcome  # a partial run's document is the summary, with its error beside
        failed = {item["id"] for item in summary["failed"]}
        assert not failed & {c["source"] for c in summary["copied"]}, what
    count("fuzz: commands on damaged logs", 8)


@given(damage=damages())
def test_the_kind_rules_end_read_of_a_damaged_log_answers_as_the_whole_read(
    damage: Damage, sample_root: Path, fuzz_dir: Path
) -> None:
    """The kind rule reads a child's log from its end for its own descriptor
    (``kinds.read_own_descriptor``): on a damaged log it answers or says unreadable, never
    raises, and wherever the whole read accepts the log it gives the whole read's answer."""
    root = fuzz_dir / "case" / "sessions"
    if root.parent.exists():
        shutil.rmtree(root.parent)
    shutil.copytree(sample_root, root)
    _log_path(root, damage.target).write_bytes(damage.apply)
    entry = Root(root).entry(damage.target)
    if entry is None or entry.header is None:
        return  # no header: no kind to settle

    end = read_own_descriptor(entry)
    whole = read_evidence(entry)
    if whole is not None:
        assert end is whole.own_descriptor, repr(damage)
    count("fuzz: the kind rule's end read")


# -- every truncation of a real log -----------------------------------------------------------


def _cuts(data: bytes) -> list[int]:
    """Every byte offset in the deep profile; else every frame and block edge (±2) and every
    fifth byte."""
    if DEEP:
        return list(range(len(data)))
    edges: set[int] = set(range(0, len(data), 5))
    for frame in zframes.scan(data).frames:
        for edge in (frame.start, frame.end):
            edges.update(range(edge - 2, edge + 3))
    return sorted(c for c in edges if 0 <= c < len(data))


def test_every_truncation_of_a_real_log_reads_its_complete_frames(
    sample_root: Path, tmp_path: Path
) -> None:
    """The fork child of the sample home cut at each offset: inspect reads exactly its complete
    frames (the rest is a torn tail) or reports the log corrupt; doctor makes it a finding;
    fork forks what is complete or refuses — never another exception."""
    root = tmp_path / "sessions"
    shutil.copytree(sample_root, root)
    path = _log_path(root, FORK)
    data = path.read_bytes()
    cuts = _cuts(data)
    for cut in cuts:
        path.write_bytes(data[:cut])
        complete = zframes.scan(data[:cut]).committed_end
        try:
            report = inspect_arg(FORK, str(root), events=False, env={})
        except DshForkError as exc:
            assert _typed(exc) and exc.exit_code in (3, 9), (cut, exc)
        else:
            view = report.to_json()
            torn = view["tornTail"]
            assert (torn is None) == (complete == cut), cut
        findings = validate_dir(path.parent)
        assert (complete == 0) <= any(f.code == "CORRUPT_LOG" for f in findings), cut
        try:
            fork_session(FORK, str(root), ForkOptions(dry_run=True))
        except DshForkError as exc:
            assert _typed(exc) and exc.exit_code in (3, 4, 9), (cut, exc)
    count("fuzz: truncations through inspect, doctor, fork", len(cuts))
