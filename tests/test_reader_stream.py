"""A log read on demand from its descriptor (``open_log(stream=True)``, what fork reads) is the
log read whole: the same index, torn tail, events and defects, whatever the window size; its
verbatim run is copied file to file, and a source changed before the link is SESSION_STALE."""

from __future__ import annotations

import builtins
import errno
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import log_lines

from dsh_fork import frames as zframes
from dsh_fork.errors import CorruptLog, SessionStale
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import CURRENT_NAME, Generation
from dsh_fork.model import MODEL_TYPES
from dsh_fork.reader import open_log
from dsh_fork.sessionlog import FramedLog
from dsh_fork.source import FileRun

SRC = "session-source"
CWD = "/home/u/proj"
PROJECT = "--home-u-proj--"
NOW = 1_800_000_000_000


def ev(seq: int, event_type: str = "session/title", data: Any = None) -> bytes:
    body = {"title": f"t{seq}", "messageSeqs": []} if data is None else data
    return orjson.dumps({"type": event_type, "seq": seq, "time": 100 + seq, "data": body}) + b"\n"


def raw_log(root: Path, frames: list[bytes], tail: bytes = b"") -> Generation:
    """A v4 log of the fixture header, then ``frames`` (whole frames), then ``tail``."""
    spec = SessionSpec(id="raw", created_at=1)
    path = root / "--fixture-project--" / "raw" / CURRENT_NAME
    write_log_file(path, spec.header_line(), [])
    with builtins.open(path, "ab") as out:
        out.write(b"".join(frames) + tail)
    return Generation(path, 4, "zstd")


def summary(log: FramedLog) -> tuple[Any, ...]:
    lines = [line for k in range(len(log.chunks)) for line in log.chunk_lines(k)]
    return (
        [(c.frames, c.first_seq, c.count, c.first_frame, c.recovered) for c in log.chunks],
        log.torn,
        log.recovered,
        [(e.seq, e.type) for e in log.collected],
        lines,
    )


def with_window(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    monkeypatch.setattr(zframes, "WINDOW_BYTES", size)


TURN = [
    ev(0, "turn/start", {"turn": 1}),
    ev(1, "step/start", {"turn": 1, "step": 1}),
    ev(2, "turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
]
SHAPES = {
    "one-line-frames": [zframes.encode(line) for line in TURN] + [zframes.encode(ev(3))],
    "record-split-across-frames": [
        zframes.encode(TURN[0] + TURN[1][:9]),
        zframes.encode(TURN[1][9:]),
        zframes.encode(TURN[2] + ev(3)),
    ],
    "empty-frames": [
        zframes.encode(b"".join(TURN)),
        zframes.encode(b""),
        zframes.encode(ev(3)),
        zframes.encode(b""),
    ],
}


@pytest.mark.parametrize("window", [16, 97, 4 << 20], ids=["16B", "97B", "4MiB"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("torn", [False, True], ids=["whole", "torn-tail"])
def test_a_log_read_on_demand_is_the_log_read_whole(
    root: Path, monkeypatch: pytest.MonkeyPatch, window: int, shape: str, torn: bool
) -> None:
    tail = zframes.encode(ev(4) + ev(5))[:-7] if torn else b""
    gen = raw_log(root, SHAPES[shape], tail)
    whole = open_log(gen, collect=MODEL_TYPES)
    assert isinstance(whole, FramedLog)
    with_window(monkeypatch, window)
    streamed = open_log(gen, collect=MODEL_TYPES, stream=True)
    assert isinstance(streamed, FramedLog) and streamed.source is not None
    assert streamed.data == b""  # the file is never held
    assert summary(streamed) == summary(whole)
    for last in range(-1, streamed.event_count):
        run, count, cut = streamed.prefix_run(last)
        view, view_count, view_cut = whole.prefix_run(last)
        assert (count, cut) == (view_count, view_cut)
        assert (run.source.read(run.start, run.end) if isinstance(run, FileRun) else run) == view
        assert streamed.prefix(last) == whole.prefix(last)


@pytest.mark.parametrize("window", [16, 4 << 20], ids=["16B", "4MiB"])
@pytest.mark.parametrize(
    ("frames", "message"),
    [
        ([zframes.encode(ev(0) + ev(2))], "seq 2 where 1 was expected"),
        ([zframes.encode(ev(0)), zframes.encode(b"{oops\n")], "line"),
        ([zframes.encode(ev(0)), b"\x00" * 12, zframes.encode(ev(1))], "bad frame magic"),
    ],
    ids=["seq-gap", "bad-json", "bad-magic"],
)
def test_a_defect_read_on_demand_is_named_as_when_read_whole(
    root: Path, monkeypatch: pytest.MonkeyPatch, window: int, frames: list[bytes], message: str
) -> None:
    gen = raw_log(root, frames)
    with pytest.raises(CorruptLog, match=message) as whole:
        open_log(gen)
    with_window(monkeypatch, window)
    with pytest.raises(CorruptLog) as streamed:
        open_log(gen, stream=True)
    assert str(streamed.value) == str(whole.value)
    assert streamed.value.details == whole.value.details


# -- the copy ---------------------------------------------------------------------------------


def published_source(root: Path, clock: Clock) -> Path:
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD)
    for _ in range(3):
        spec.turn(clock)
        spec.flush()
    return spec.publish(root) / CURRENT_NAME


def lib_fork(root: Path) -> Any:
    return fork_session(
        SRC,
        str(root),
        ForkOptions(child_id="child", agents=False),
        clock=lambda: NOW,
    )


def test_without_copy_file_range_the_run_is_copied_by_reads_and_writes(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = published_source(root, clock)
    calls: list[int] = []

    def refuse(*args: Any, **kwargs: Any) -> int:
        calls.append(1)
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    result = lib_fork(root)
    assert calls == [1]
    child = result.path
    assert child is not None
    assert log_lines(child)[1:-1] == log_lines(source)[1:]
    src, dst = source.read_bytes(), child.read_bytes()
    head = zframes.scan(src, limit=1).frames[0].end
    own = zframes.scan(dst, limit=1).frames[0].end
    assert dst[own : own + len(src) - head] == src[head:]  # the body frames, byte for byte


def test_a_source_changed_during_the_copy_is_stale_and_no_child_appears(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = published_source(root, clock)
    copy = FileRun.copy_to

    def copy_then_append(run: FileRun, fd: int, count: int | None = None) -> None:
        copy(run, fd, count)
        with builtins.open(source, "ab") as out:  # a live writer appends meanwhile
            out.write(zframes.encode(ev(22)))

    monkeypatch.setattr(FileRun, "copy_to", copy_then_append)
    with pytest.raises(SessionStale, match="changed while it was being read") as caught:
        lib_fork(root)
    assert caught.value.exit_code == 7
    assert not (root / PROJECT / "child").exists()  # the dir made for it goes again
