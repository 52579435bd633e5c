"""Reading one log (format §13): seq density, stable reads, selective parsing, random access,
prefixes, plain and older generations, torn tails."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import hypothesis_profiles  # noqa: F401  (registers and loads the Hypothesis profile)
import orjson
import pytest
import zstandard
from conftest import run_cli
from hypothesis import example, given
from hypothesis import strategies as st

from dsh_fork import frames as zframes
from dsh_fork import logindex, reader
from dsh_fork.appending import append
from dsh_fork.errors import CorruptLog, SessionStale, UnsupportedFormat
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file, write_spec_as
from dsh_fork.fsdir import open_regular
from dsh_fork.generations import Generation, list_generations
from dsh_fork.model import MODEL_TYPES
from dsh_fork.reader import open_log, parse_recovered, peek_fields, read_header
from dsh_fork.sessionlog import SessionLog


def stored_lines(log: SessionLog) -> list[bytes]:
    """The stored bytes of every event, each with its 0x0A."""
    out = []
    for event in log.events():
        assert event.raw is not None
        out.append(event.raw + b"\n")
    return out


def current(session_dir: Path) -> Generation:
    return list_generations(session_dir)[-1]


def ev(seq: int, event_type: str = "session/title", data: Any = None) -> bytes:
    body = {"title": f"t{seq}", "messageSeqs": []} if data is None else data
    return orjson.dumps({"type": event_type, "seq": seq, "time": 100 + seq, "data": body}) + b"\n"


def framed_spec(
    root: Path, clock: Clock, batches: list[int], **kw: Any
) -> tuple[Path, SessionSpec]:
    """A published session whose body frames hold ``batches[i]`` title events each."""
    spec = SessionSpec(id=kw.pop("id", "s"), created_at=clock(), **kw)
    for size in batches:
        for _ in range(size):
            spec.title(clock, f"title {spec.seq}")
        spec.flush()
    return spec.publish(root), spec


def write_raw_log(root: Path, bodies: list[bytes]) -> Generation:
    spec = SessionSpec(id="raw", created_at=1)
    path = root / "--fixture-project--" / "raw" / "session.v4.jsonl.zstd"
    write_log_file(path, spec.header_line(), bodies)
    return Generation(path, 4, "zstd")


def block_frame(lines: list[bytes]) -> bytes:
    """One checksummed frame with one zstd block per line: a cut after a block leaves
    complete, recoverable lines in the torn frame."""
    compressor = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    parts = []
    for line in lines:
        parts.append(compressor.compress(line))
        parts.append(compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
    parts.append(compressor.flush())
    return b"".join(parts)


# -- seqs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bodies", "message"),
    [
        ([ev(0) + ev(1) + ev(3)], "seq 3 where 2 was expected"),
        ([ev(0) + ev(1), ev(3) + ev(4)], "seq 3 where 2 was expected"),
        ([ev(0) + ev(1), ev(1) + ev(2)], "seq 1 where 2 was expected"),
        ([ev(1)], "seq 1 where 0 was expected"),
    ],
    ids=["gap-in-frame", "gap-across-frames", "repeat-across-frames", "not-from-zero"],
)
def test_a_seq_gap_is_corrupt(root: Path, bodies: list[bytes], message: str) -> None:
    with pytest.raises(CorruptLog, match=message):
        open_log(write_raw_log(root, bodies))


def test_a_seq_gap_before_a_later_turn_end_is_corrupt(root: Path) -> None:
    """DSH would drop a bad suffix only when no turn/end follows; dsh-fork always refuses."""
    turn = [
        ev(0, "turn/start", {"turn": 1}),
        ev(2, "user/message", {"x": 1}),
        ev(3, "turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    with pytest.raises(CorruptLog, match="seq 2 where 1 was expected"):
        open_log(write_raw_log(root, [b"".join(turn)]))


def test_a_header_only_log_has_no_events(root: Path, clock: Clock) -> None:
    session_dir, _ = framed_spec(root, clock, [])
    log = open_log(current(session_dir))
    assert (log.event_count, log.chunks, log.torn) == (0, [], None)
    assert list(log.events()) == []
    assert log.prefix(-1) == ([], b"")


# -- stable read ----------------------------------------------------------------------------


APPENDER = textwrap.dedent(
    """
    import os, sys
    path = sys.argv[1]
    for request in sys.stdin:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, bytes.fromhex(request.strip()))
        os.fsync(fd)
        os.close(fd)
        sys.stdout.write("appended\\n")
        sys.stdout.flush()
    """
)


class Appender:
    """A separate writer process that appends one frame to a log whenever it is asked."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def append(self, frame: bytes) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(frame.hex() + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "appended\n"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def appending_during_reads(
    monkeypatch: pytest.MonkeyPatch, appender: Appender, frames: list[bytes]
) -> list[int]:
    """Make the next ``len(frames)`` reads of a log race with the appender: each read opens
    the file, the other process appends a frame, then the read goes on."""
    pending = list(frames)
    opened: list[int] = []

    def racing_open(path: Path) -> int:
        fd = open_regular(path)
        opened.append(1)
        if pending:
            appender.append(pending.pop(0))
        return fd

    monkeypatch.setattr(reader, "open_fd", racing_open)
    return opened


def test_a_log_that_changes_once_is_read_again(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_dir, _ = framed_spec(root, clock, [2, 2])
    gen = current(session_dir)
    appender = Appender(gen.path)
    try:
        opened = appending_during_reads(monkeypatch, appender, [zframes.encode(ev(4) + ev(5))])
        log = open_log(gen)
    finally:
        appender.close()
    assert len(opened) == 2
    assert log.event_count == 6  # the retry read what the writer had appended
    assert log.identity[2] == gen.path.stat().st_size


def test_a_log_that_keeps_changing_is_stale(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_dir, _ = framed_spec(root, clock, [2, 2])
    gen = current(session_dir)
    appender = Appender(gen.path)
    try:
        frames = [zframes.encode(ev(4)), zframes.encode(ev(5))]
        opened = appending_during_reads(monkeypatch, appender, frames)
        with pytest.raises(SessionStale, match="changed while it was being read") as caught:
            open_log(gen)
    finally:
        appender.close()
    assert len(opened) == 2
    assert caught.value.exit_code == 7
    assert caught.value.details == {"path": str(gen.path)}


def test_a_new_generation_appearing_during_the_read_is_stale(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SessionSpec(id="old", created_at=clock())
    spec.turn(clock)
    v3 = write_spec_as(spec, root, 3)
    gen = Generation(v3, 3, "zstd")

    def migrating_open(path: Path) -> int:
        fd = open_regular(path)
        (v3.parent / "session.v4.jsonl.zstd").write_bytes(v3.read_bytes())
        return fd

    monkeypatch.setattr(reader, "open_fd", migrating_open)
    with pytest.raises(SessionStale, match="its generations changed while being read"):
        open_log(gen)


def test_a_log_that_disappears_is_stale(root: Path, clock: Clock) -> None:
    session_dir, _ = framed_spec(root, clock, [1])
    gen = current(session_dir)
    gen.path.unlink()
    with pytest.raises(SessionStale, match="disappeared"):
        open_log(gen)


# -- selective parsing ----------------------------------------------------------------------

TYPE_NAMES = [*sorted(MODEL_TYPES), "user/message", "tool/result", "x/unknown"]


@st.composite
def mentioning_logs(draw: st.DrawFn) -> list[tuple[str, Any, bool]]:
    """Events whose data mentions event type names in every position JSON allows; some are
    written by a writer that escapes ``/`` as ``\\/``."""
    events = []
    for _ in range(draw(st.integers(0, 25))):
        event_type = draw(st.sampled_from(TYPE_NAMES))
        mention = draw(st.sampled_from(TYPE_NAMES))
        data = draw(
            st.sampled_from(
                [
                    mention,
                    {"text": f'he said "{mention}" twice: "{mention}"'},
                    {mention: mention},
                    {"type": mention, "nested": [{"type": mention}]},
                    [mention, {"seq": 1, "type": mention}],
                    {"text": draw(st.text(max_size=20))},
                ]
            )
        )
        events.append((event_type, data, draw(st.booleans())))
    return events


@given(events=mentioning_logs(), wanted=st.sets(st.sampled_from(TYPE_NAMES)), cuts=st.data())
def test_collect_finds_exactly_the_events_of_a_full_parse(
    tmp_path_factory: pytest.TempPathFactory,
    events: list[tuple[str, Any, bool]],
    wanted: set[str],
    cuts: st.DataObject,
) -> None:
    root = tmp_path_factory.mktemp("collect")
    spec = SessionSpec(id="mentions", created_at=1)
    for event_type, data, escape_slashes in events:
        line = orjson.dumps({"type": event_type, "seq": spec.seq, "time": 5, "data": data})
        spec.add_raw(line.replace(b"/", b"\\/") if escape_slashes else line)
        if cuts.draw(st.booleans(), label="flush"):
            spec.flush()
    gen = current(spec.publish(root))
    full = [e for e in open_log(gen).events() if e.type in wanted]
    selective = open_log(gen, collect=wanted)
    assert [e.raw for e in selective.collected] == [e.raw for e in full]
    assert [e.raw for e in selective.events(wanted)] == [e.raw for e in full]
    assert [(e.seq, e.type, e.data) for e in selective.collected] == [
        (e.seq, e.type, e.data) for e in full
    ]


def test_collect_on_a_plain_log(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="plain", created_at=clock())
    spec.turn(clock, 'the text says "turn/end"')
    path = write_spec_as(spec, root, 4, encoding="plain")
    log = open_log(Generation(path, 4, "plain"), collect=["turn/end", "turn/start"])
    assert [e.type for e in log.collected] == ["turn/start", "turn/end"]


# -- random access and prefixes -------------------------------------------------------------


def test_event_by_seq_matches_the_full_iteration(root: Path, clock: Clock) -> None:
    session_dir, _ = framed_spec(root, clock, [1, 3, 2, 4])
    log = open_log(current(session_dir))
    everything = list(log.events())
    for seq in reversed(range(log.event_count)):
        assert log.event(seq).raw == everything[seq].raw
        assert log.event(seq).seq == seq
    for bad in (-1, log.event_count):
        with pytest.raises(IndexError):
            log.event(bad)


def test_raw_lines_between_two_seqs(root: Path, clock: Clock) -> None:
    session_dir, spec = framed_spec(root, clock, [1, 3, 2, 4])
    log = open_log(current(session_dir))
    for first in range(10):
        for last in range(first, 10):
            got = [line + b"\n" for line in log.raw_lines(first, last)]
            assert got == spec.lines[first : last + 1]


def decoded(frames: list[bytes]) -> bytes:
    data = b"".join(frames)
    return b"".join(zframes.decode(data, f) for f in zframes.scan(data).frames)


def test_prefix_returns_verbatim_frames_and_the_cut_frame_lines(root: Path, clock: Clock) -> None:
    session_dir, spec = framed_spec(root, clock, [1, 3, 2, 4])
    log = open_log(current(session_dir))
    frames = zframes.scan(log.data).frames[1:]
    ends = [0, 3, 5, 9]  # last seq of each frame
    for last in range(-1, log.event_count):
        verbatim, tail = log.prefix(last)
        whole = sum(1 for end in ends if end <= last)
        assert verbatim == [log.data[f.start : f.end] for f in frames[:whole]]
        assert decoded(verbatim) + tail == b"".join(spec.lines[: last + 1])
        if last == -1 or last in ends:
            assert tail == b""
        else:
            first_of_cut = ends[whole - 1] + 1 if whole else 0
            assert tail == b"".join(spec.lines[first_of_cut : last + 1])


# -- plain roots and older generations ------------------------------------------------------


def test_a_plain_log_is_readable_and_its_torn_line_reported(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="plain", created_at=clock())
    spec.turn(clock)
    path = write_spec_as(spec, root, 4, encoding="plain")
    assert path.name == "session.v4.jsonl"
    gen = Generation(path, 4, "plain")
    log = open_log(gen)
    assert stored_lines(log) == spec.lines
    assert log.event(2).raw == spec.lines[2][:-1]
    assert log.torn is None
    size = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(b'{"type":"turn/start","seq":')
    torn = open_log(gen)
    assert torn.event_count == len(spec.lines)
    assert torn.torn is not None
    assert (torn.torn.offset, torn.torn.size, torn.torn.recovered) == (size, 27, ())
    assert read_header(gen).id == "plain"


def test_a_plain_log_with_a_bad_line_is_corrupt(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="plain", created_at=clock())
    spec.turn(clock)
    spec.add_raw(b"{not json")
    spec.add("session/title", clock(), {"title": "t", "messageSeqs": []})
    path = write_spec_as(spec, root, 4, encoding="plain")
    with pytest.raises(CorruptLog, match="is not JSON"):
        open_log(Generation(path, 4, "plain"))


@pytest.mark.parametrize(("version", "encoding"), [(2, "zstd"), (3, "zstd"), (3, "plain")])
def test_v2_and_v3_logs_are_readable(root: Path, clock: Clock, version: int, encoding: str) -> None:
    spec = SessionSpec(id=f"v{version}", created_at=clock())
    spec.turn(clock)
    spec.flush()
    spec.turn(clock)
    path = write_spec_as(spec, root, version, encoding=encoding)
    log = open_log(Generation(path, version, "zstd" if encoding == "zstd" else "plain"))
    assert log.header.version == version
    assert stored_lines(log) == spec.lines


def test_v0_prefix_and_raw_lines_are_refused(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="v0", created_at=clock())
    spec.turn(clock)
    path = write_spec_as(spec, root, 0)
    log = open_log(Generation(path, 0, "zstd"))
    assert log.event_count == len(spec.lines)
    with pytest.raises(UnsupportedFormat):
        log.prefix(1)
    with pytest.raises(UnsupportedFormat):
        list(log.raw_lines(0, 1))


@pytest.mark.parametrize(("seed_length", "ok"), [(6, True), (7, False)])
def test_v0_seed_length_must_not_exceed_the_events(
    root: Path, clock: Clock, seed_length: int, ok: bool
) -> None:
    spec = SessionSpec(id="v0", created_at=clock())
    spec.turn(clock)
    fields = orjson.loads(spec.header_line())
    fields.update(version=0, seedLength=seed_length, parentSession="p")
    del fields["isSeeded"]
    path = write_log_file(
        root / "p" / "v0" / "session.jsonl.zstd", orjson.dumps(fields), spec.lines
    )
    if ok:
        assert open_log(Generation(path, 0, "zstd")).header.seed_length == 6
    else:
        with pytest.raises(CorruptLog, match="seedLength 7 exceeds the 6 events"):
            open_log(Generation(path, 0, "zstd"))


def test_a_future_generation_is_refused_before_reading(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="future", created_at=clock())
    path = write_spec_as(spec, root, 9)
    gen = Generation(path, 9, "zstd")
    for call in (open_log, read_header):
        with pytest.raises(UnsupportedFormat, match="generation v9 is newer than v4"):
            call(gen)
    assert peek_fields(gen) == {**orjson.loads(spec.header_line()), "version": 9}


# -- headers only ---------------------------------------------------------------------------


def test_read_header_reads_only_the_first_frame(root: Path, clock: Clock) -> None:
    session_dir, spec = framed_spec(root, clock, [2])
    gen = current(session_dir)
    with gen.path.open("ab") as handle:
        handle.write(b"garbage after the committed frames")
    assert read_header(gen).raw + b"\n" == spec.header_line()
    with pytest.raises(CorruptLog):
        open_log(gen)


def test_read_header_of_a_large_header_frame(root: Path) -> None:
    spec = SessionSpec(id="big", created_at=1, agent_preset="p" * 100_000)
    gen = current(spec.publish(root))
    assert read_header(gen).agent_preset == "p" * 100_000


@pytest.mark.parametrize(
    "data", [b"", b"\x28\xb5\x2f", b"not zstd at all"], ids=["empty", "torn", "garbage"]
)
def test_read_header_without_a_complete_header_is_corrupt(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "session.v4.jsonl.zstd"
    path.write_bytes(data)
    with pytest.raises(CorruptLog):
        read_header(Generation(path, 4, "zstd"))
    assert peek_fields(Generation(path, 4, "zstd")) is None


# -- torn tails -----------------------------------------------------------------------------


def torn_log(root: Path, clock: Clock, torn_lines: list[bytes], keep_blocks: int) -> SessionLog:
    """Two committed frames (seqs 0..2), then a frame of one block per line, cut after
    ``keep_blocks`` blocks."""
    session_dir, _ = framed_spec(root, clock, [2, 1])
    gen = current(session_dir)
    frame = block_frame(torn_lines)
    cuts = [len(block_frame(torn_lines[:k])) - 4 for k in range(1, len(torn_lines) + 1)]
    # A frame of k blocks ends in a 3-byte empty last block and a checksum; cutting the
    # complete frame just before those leaves k whole blocks.
    cut = cuts[keep_blocks - 1] - 3 if keep_blocks else 10
    with gen.path.open("ab") as handle:
        handle.write(frame[:cut])
    return open_log(gen)


def test_recovered_lines_of_a_torn_tail_are_events_as_dsh_keeps_them(
    root: Path, clock: Clock
) -> None:
    """DSH restores the complete lines of a torn final frame: 3 committed + 2 recovered."""
    lines = [ev(3), ev(4), ev(5)]
    log = torn_log(root, clock, lines, 2)
    assert log.event_count == 5
    assert [e.raw for e in log.events()][3:] == [ev(3)[:-1], ev(4)[:-1]]
    assert log.event(4).raw == ev(4)[:-1]
    assert list(log.raw_lines(2, 4))[1:] == [ev(3)[:-1], ev(4)[:-1]]
    assert log.torn is not None
    assert log.torn.recovered == (ev(3)[:-1], ev(4)[:-1])
    assert parse_recovered(log) == [ev(3)[:-1], ev(4)[:-1]]


def test_recovered_lines_stop_where_the_seqs_do_not_continue(root: Path, clock: Clock) -> None:
    log = torn_log(root, clock, [ev(3), ev(7), ev(5)], 3)
    assert log.torn is not None and len(log.torn.recovered) == 3
    assert parse_recovered(log) == [ev(3)[:-1]]
    log = torn_log(root / "b", clock, [b"{broken\n", ev(3)], 2)
    assert parse_recovered(log) == []
    log = torn_log(root / "c", clock, [ev(3).replace(b'"seq":3', b'"seq":true')], 1)
    assert parse_recovered(log) == []


def test_a_torn_tail_without_a_complete_block_recovers_nothing(root: Path, clock: Clock) -> None:
    log = torn_log(root, clock, [ev(3)], 0)
    assert log.torn is not None
    assert (log.torn.size, log.torn.recovered) == (10, ())
    assert parse_recovered(log) == []


def test_lone_surrogates_and_invalid_utf8_are_read_and_kept_as_stored(
    root: Path, clock: Clock
) -> None:
    spec = SessionSpec(id="odd-text", created_at=clock())
    spec.add("session/title", clock(), {"title": "a\ud800b", "messageSeqs": []})
    spec.add_raw(b'{"type":"session/title","seq":1,"time":5,"data":{"title":"caf\xe9"}}')
    log = open_log(current(spec.publish(root)))
    first, second = log.event(0), log.event(1)
    assert first.data["title"] == "a\ud800b" and first.lenient
    assert first.raw is not None and b'"a\\ud800b"' in first.raw
    assert second.data["title"] == "caf\ufffd" and second.lenient
    assert stored_lines(log) == spec.lines


# -- every line a fork copies is one DSH accepts ----------------------------------------------

BAD_MIDDLE_LINES: dict[str, Any] = {
    "a raw NUL line": lambda seq: b"\x00",
    "NUL bytes inside a string": lambda seq: ev(seq).replace(b'"title":"t', b'"title":"\x00t')[:-1],
    "not an object": lambda seq: b"[1,2]",
    "an object without a type": lambda seq: b'{"seq":%d,"time":1,"data":{}}' % seq,
    "not JSON": lambda seq: b'{"type":"session/title","seq":%d,' % seq,
    "a seq out of order": lambda seq: ev(seq + 4)[:-1],
}


@pytest.mark.parametrize("bad", list(BAD_MIDDLE_LINES.values()), ids=list(BAD_MIDDLE_LINES))
@pytest.mark.parametrize("before", [0, 30], ids=["first frame", "after 30 frames"])
def test_a_bad_line_inside_a_copied_frame_makes_fork_refuse_the_log(
    root: Path, bad: Any, before: int
) -> None:
    """A frame whose first and last lines are sound and the line between them is not: the
    log is refused (CORRUPT_LOG, exit 9) before fork copies a byte (``before`` one-line
    frames come first)."""
    frames = [ev(k) for k in range(before)]
    frames.append(ev(before) + bad(before + 1) + b"\n" + ev(before + 2))
    gen = write_raw_log(root, frames)
    with pytest.raises(CorruptLog):
        open_log(gen)
    result = run_cli("--root", root, "fork", "raw", "--id", "child", "--no-agents")
    assert result.exit_code == 9, result.stdout + result.stderr
    assert not (gen.path.parent.parent / "child").exists()


@pytest.mark.parametrize("keep_blocks", [0, 1, 2, 3])
def test_a_repair_before_an_append_keeps_every_event_dsh_recovers(
    root: Path, clock: Clock, keep_blocks: int
) -> None:
    """What the reader shows of a torn log (DSH's view) is exactly what the log holds once a
    write has repaired the tail: the append continues after the recovered events."""
    lines = [ev(3), ev(4), ev(5)]
    log = torn_log(root, clock, lines, keep_blocks)
    seen = [e.raw for e in log.events()]
    assert len(seen) == 3 + keep_blocks
    appended = append(log.session_dir, lambda _log, _facts: [("session/title", 9, {})])
    assert appended.repaired_tail and appended.first_seq == len(seen)
    after = open_log(current(log.session_dir))
    assert after.torn is None
    assert [e.raw for e in after.events()][: len(seen)] == seen
    assert after.event_count == len(seen) + 1


# -- a large frame is checked in pieces -------------------------------------------------------

_PIECE_LINES = st.lists(
    st.one_of(
        st.builds(lambda seq, kind: (seq, kind), st.integers(0, 40), st.sampled_from(("a", "b"))),
        st.sampled_from((b"", b"{", b"[1]", b'{"seq":1}')),
    ),
    min_size=1,
    max_size=30,
)


def _plaintext(items: list[Any]) -> bytes:
    """Dense lines of types a and b from seq 3, with ``(seq, kind)`` items as given seqs and
    raw byte items as defective lines."""
    lines = []
    for item in items:
        if isinstance(item, bytes):
            lines.append(item)
        else:
            seq, kind = item
            lines.append(orjson.dumps({"type": kind, "seq": seq, "time": 1, "data": {}}))
    return b"\n".join(lines) + b"\n"


@given(items=_PIECE_LINES, piece=st.integers(1, 200), dense=st.booleans())
@example(items=[(0, "a"), (5, "b")], piece=1, dense=False)  # a gap at a piece boundary
@example(items=[(0, "a"), b""], piece=1, dense=False)  # an empty last line, a piece alone
@example(items=[(4, "b"), (5, "b"), (6, "a")], piece=30, dense=False)
def test_a_frame_checked_in_pieces_gets_the_verdict_of_one_check(
    items: list[Any], piece: int, dense: bool
) -> None:
    """Past ``SUMMARY_PIECE`` a frame's lines are split and checked a piece at a time: the
    first seq, the line count and the candidate lines are those of one check of all lines,
    and so is the refusal of a gap, an empty line or a line that is no envelope, wherever
    the piece boundaries fall."""
    if dense:  # mostly valid frames: the seqs run on from 3
        items = [
            (3 + k, item[1]) if isinstance(item, tuple) else item for k, item in enumerate(items)
        ]
        items = [item for item in items if isinstance(item, tuple)] or [(3, "a")]
        items = [(3 + k, kind) for k, (_, kind) in enumerate(items)]
    plaintext = _plaintext(items)
    whole = logindex.summarizer(frozenset({"b"}))((plaintext,))
    saved = logindex.SUMMARY_PIECE
    logindex.SUMMARY_PIECE = piece
    try:
        pieces = logindex.summarizer(frozenset({"b"}))((plaintext,))
    finally:
        logindex.SUMMARY_PIECE = saved
    assert pieces == whole
    if dense:
        assert whole[0] == 3 and whole[1] == len(items)


@given(
    items=_PIECE_LINES,
    cuts=st.lists(st.integers(0, 2000), max_size=8),
    piece=st.integers(1, 200),
    keep_from=st.integers(0, 40),
    torn=st.booleans(),
)
@example(items=[(3, "b"), (4, "b")], cuts=[0, 5, 5], piece=1, keep_from=4, torn=False)
@example(items=[(3, "a")], cuts=[], piece=1, keep_from=0, torn=True)  # no line end at all
@example(items=[(0, "a"), b""], cuts=[], piece=1, keep_from=0, torn=True)  # found by deep fuzz
def test_a_frame_given_in_pieces_as_it_decodes_gets_the_verdict_of_one_piece(
    items: list[Any], cuts: list[int], piece: int, keep_from: int, torn: bool
) -> None:
    """A large frame reaches the summary in pieces cut anywhere, even inside a line or an
    empty piece (``frames.decode_pieces``): the verdict is that of the whole plaintext, and
    ``keep_from`` drops exactly the candidate lines below that seq, nothing else."""
    plaintext = _plaintext(items)
    if torn:
        # the last record has no line end (cutting one byte off an empty last line would
        # leave the line before it whole)
        plaintext = plaintext.rstrip(b"\n")
    bounds = sorted({min(c, len(plaintext)) for c in cuts} | {0, len(plaintext)})
    chunks = [plaintext[a:b] for a, b in itertools.pairwise(bounds)] or [b""]
    if cuts and cuts[0] % 2:
        chunks.insert(len(chunks) // 2, b"")  # an empty piece on the way
    whole = logindex.summarizer(frozenset({"b"}))((plaintext,))
    saved = logindex.SUMMARY_PIECE
    logindex.SUMMARY_PIECE = piece
    try:
        split = logindex.summarizer(frozenset({"b"}))(iter(chunks))
        kept = logindex.summarizer(frozenset({"b"}), keep_from)(iter(chunks))
    finally:
        logindex.SUMMARY_PIECE = saved
    assert split == whole
    if torn:
        assert whole == (-1, 0, [])
    first, count, hits = whole
    assert kept == (first, count, [(k, line) for k, line in hits if first + k >= keep_from])
    # a small frame decoded whole takes the one-group shortcut: the same verdict and lines
    assert logindex.summarizer(frozenset({"b"}), keep_from)((plaintext,)) == kept


def test_a_summary_of_no_plaintext_refuses_the_frame() -> None:
    """An empty frame holds no line: its summary sends it to the full pass, as before."""
    assert logindex.summarizer(frozenset({"b"}))((b"",)) == (-1, 0, [])
    assert logindex.summarizer(frozenset({"b"}))(iter([b"", b""])) == (-1, 0, [])


# -- a large frame is decoded in pieces -------------------------------------------------------


def _event_lines(count: int, pad: int = 0) -> list[bytes]:
    """Dense events from seq 0: every fifth of type b (the type collected), the rest a."""
    return [
        orjson.dumps(
            {"type": "b" if k % 5 == 0 else "a", "seq": k, "time": 1, "data": {"p": "x" * pad}}
        )
        for k in range(count)
    ]


def _frames_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every frame decoded in pieces of a few hundred bytes, as a frame of many MiB is."""
    monkeypatch.setattr(zframes, "PIECES_MIN_PLAINTEXT", 0)
    monkeypatch.setattr(zframes, "PIECE_BYTES", 300)


def _indexed(generation: Generation, collect_from: int = 0) -> tuple[Any, ...]:
    log = open_log(generation, collect=("b",), collect_from=collect_from)
    return (
        log.event_count,
        [(c.first_seq, c.count, [f.start for f in c.frames]) for c in log.chunks],
        [e.raw for e in log.collected],
    )


@pytest.mark.parametrize("collect_from", [0, 1, 700, 5000])
def test_a_log_whose_frames_decode_in_pieces_is_indexed_as_when_each_decodes_whole(
    root: Path, monkeypatch: pytest.MonkeyPatch, collect_from: int
) -> None:
    """The index and the collected events of a log are the same whether each frame is
    decoded whole or in pieces cut inside lines; ``collect_from`` keeps the same events."""
    lines = _event_lines(1200, pad=40)
    bodies = [b"".join(line + b"\n" for line in part) for part in (lines[:500], lines[500:])]
    generation = write_raw_log(root, bodies)
    whole = _indexed(generation, collect_from)
    _frames_in_pieces(monkeypatch)
    assert _indexed(generation, collect_from) == whole
    assert whole[0] == 1200
    assert [orjson.loads(raw)["seq"] for raw in whole[2]] == [
        k for k in range(0, 1200, 5) if k >= collect_from
    ]


def test_a_damaged_frame_decoded_in_pieces_is_refused_as_when_it_decodes_whole(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte changed anywhere in a body frame: the verdict (the same refusal, or the same
    index) does not depend on whether the frame was decoded in pieces."""
    lines = _event_lines(400, pad=20)
    generation = write_raw_log(root, [b"".join(line + b"\n" for line in lines)])
    original = generation.path.read_bytes()
    body = zframes.scan(original).frames[1]

    def verdict() -> Any:
        try:
            return _indexed(generation)
        except CorruptLog as exc:
            return str(exc)

    refused = 0
    for offset in range(body.start, body.end, max(1, body.size // 60)):
        damaged = bytearray(original)
        damaged[offset] ^= 0x5A
        generation.path.write_bytes(bytes(damaged))
        with monkeypatch.context() as patch:
            _frames_in_pieces(patch)
            in_pieces = verdict()
        assert in_pieces == verdict(), offset
        refused += isinstance(in_pieces, str)
    assert refused > 0


def test_a_large_frame_is_checked_without_holding_its_plaintext(root: Path) -> None:
    """A frame of 14 MiB of lines (within the 16 MiB cap) is indexed while a piece of it is
    held: the read peaks near 2 MB beyond the compressed log."""
    import tracemalloc

    lines = _event_lines(35_000, pad=380)
    plaintext = b"".join(line + b"\n" for line in lines)
    assert 14 << 20 < len(plaintext) < zframes.MAX_FRAME_PLAINTEXT
    generation = write_raw_log(root, [plaintext])
    compressed = generation.path.stat().st_size
    del lines, plaintext
    tracemalloc.start()
    try:
        log = open_log(generation, collect=("b",), collect_from=35_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert log.event_count == 35_000 and log.collected == []
    assert peak - compressed < 4 << 20, peak
