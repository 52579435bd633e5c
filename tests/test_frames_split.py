"""Frames mapped by two processes, and the one-pass index (the speed work of issue 6).

A large log's frames are decoded by this process and a forked child (``frames.map_frames``);
whatever the split, callers must see exactly what a sequential pass gives them: the same
values in order, the same defect raised at the same frame, and no child left behind. The size
threshold is lowered so that small fixture logs take the split path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from dsh_fork import frames as zframes
from dsh_fork import parallel
from dsh_fork.errors import CorruptLog
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import Generation
from dsh_fork.reader import open_log


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every log of more than a few bytes is split between this process and a child."""
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 64)


def forty_frames(root: Path, clock: Clock) -> tuple[Generation, list[bytes]]:
    """A v4 log of a header frame and 40 batches of three titles each."""
    spec = SessionSpec(id="forty", created_at=clock())
    for k in range(40):
        for _ in range(3):
            spec.add("session/title", clock(), {"title": f"t{spec.seq} {k}", "messageSeqs": []})
        spec.flush()
    session_dir = spec.publish(root)
    return Generation(session_dir / "session.v4.jsonl.zstd", 4, "zstd"), spec.lines


def child_pids() -> set[int]:
    """This process's children, live or not yet reaped (Linux: from /proc)."""
    me = os.getpid()
    found: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.add(int(stat.parent.name))
    return found


@pytest.fixture
def no_children_left() -> Callable[[], bool]:
    """Whether every child started since the test began has been reaped."""
    before = child_pids()
    return lambda: not (child_pids() - before)


def _whole(pieces: Iterable[bytes]) -> tuple[int, bytes]:
    plaintext = b"".join(pieces)
    return len(plaintext), plaintext


def _size(pieces: Iterable[bytes]) -> int:
    return sum(map(len, pieces))


def flip_byte_in_frame(gen: Generation, frame_index: int) -> zframes.Frame:
    """Damage one compressed byte of a frame; its checksum no longer matches."""
    data = bytearray(gen.path.read_bytes())
    frame = zframes.scan(bytes(data)).frames[frame_index]
    data[frame.end - 6] ^= 0x40
    gen.path.write_bytes(bytes(data))
    return frame


def test_the_split_path_is_taken(
    split: None, root: Path, clock: Clock, no_children_left: Callable[[], bool]
) -> None:
    """A child can be started here (two cores, one thread), so the tests below split."""
    assert parallel.available()
    child = parallel.start(os.getpid)
    assert child is not None
    assert child.result() not in (None, os.getpid())
    assert no_children_left()


def test_mapped_frames_equal_a_sequential_decode(
    split: None, root: Path, clock: Clock, no_children_left: Callable[[], bool]
) -> None:
    gen, lines = forty_frames(root, clock)
    data = gen.path.read_bytes()
    frames = zframes.scan(data).frames[1:]
    mapped = list(zframes.map_frames(data, frames, _whole, 1))
    assert [p for _, p in mapped] == [zframes.decode(data, f, i + 1) for i, f in enumerate(frames)]
    assert b"".join(p for _, p in mapped) == b"".join(lines)
    assert no_children_left()


@pytest.mark.parametrize("damaged", [3, 38])  # a frame of this process's half, of the child's
def test_a_damaged_frame_raises_where_a_sequential_pass_raises(
    split: None, root: Path, clock: Clock, damaged: int, no_children_left: Callable[[], bool]
) -> None:
    gen, _ = forty_frames(root, clock)
    flip_byte_in_frame(gen, damaged)
    data = gen.path.read_bytes()
    frames = zframes.scan(data).frames[1:]
    with pytest.raises(CorruptLog) as sequential:
        for i, frame in enumerate(frames):
            zframes.decode(data, frame, i + 1)
    seen: list[int] = []
    with pytest.raises(CorruptLog) as mapped:
        for size in zframes.map_frames(data, frames, _size, 1):
            seen.append(size)
    assert mapped.value.message == sequential.value.message
    assert mapped.value.details == sequential.value.details
    assert len(seen) == damaged - 1  # every frame before the damaged one was delivered
    assert no_children_left()


def test_a_caller_that_stops_early_leaves_no_child(
    split: None, root: Path, clock: Clock, no_children_left: Callable[[], bool]
) -> None:
    gen, _ = forty_frames(root, clock)
    data = gen.path.read_bytes()
    mapped = zframes.map_frames(data, zframes.scan(data).frames[1:], _size, 1)
    next(mapped)
    mapped.close()
    assert no_children_left()


def test_an_index_built_by_two_processes_equals_one_built_by_one(
    split: None, root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen, lines = forty_frames(root, clock)
    both = open_log(gen, collect=["session/title"])
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1 << 40)
    one = open_log(gen, collect=["session/title"])
    assert both.event_count == one.event_count == len(lines)
    assert [(c.first_seq, c.count) for c in both.chunks] == [
        (c.first_seq, c.count) for c in one.chunks
    ]
    assert [ev.raw for ev in both.collected] == [ev.raw for ev in one.collected]


# -- the one-pass index of inspect and validation ---------------------------------------------


def test_a_deferred_index_is_built_by_the_first_full_pass(root: Path, clock: Clock) -> None:
    gen, lines = forty_frames(root, clock)
    log = open_log(gen, index=False)
    assert [ev.raw + b"\n" for ev in log.events() if ev.raw is not None] == lines
    eager = open_log(gen)
    assert log.event_count == eager.event_count == len(lines)
    assert [(c.first_seq, c.count) for c in log.chunks] == [
        (c.first_seq, c.count) for c in eager.chunks
    ]
    assert log.event(61).raw == lines[61][:-1]


def test_a_deferred_index_is_built_on_first_use_when_no_pass_ran(root: Path, clock: Clock) -> None:
    gen, lines = forty_frames(root, clock)
    log = open_log(gen, index=False)
    assert log.event_count == len(lines)
    assert log.event(0).raw == lines[0][:-1]


def test_a_deferred_index_names_an_empty_line_as_such(tmp_path: Path) -> None:
    header = (
        b'{"type":"session","version":4,"id":"s","createdAt":1,"cwd":"/p","isSeeded":false,'
        b'"delegationDepth":0}\n'
    )
    body = b'{"type":"x","seq":0,"time":1,"data":1}\n\n{"type":"x","seq":1,"time":1,"data":1}\n'
    path = tmp_path / "s" / "session.v4.jsonl.zstd"
    path.parent.mkdir()
    path.write_bytes(zframes.encode(header) + zframes.encode(body))
    log = open_log(Generation(path, 4, "zstd"), index=False)
    with pytest.raises(CorruptLog, match="empty line in frame 2"):
        list(log.events())


# -- every line a fork copies is checked ----------------------------------------------------


def test_a_frame_missing_a_line_is_refused_at_open_split_or_not(
    root: Path, clock: Clock, split: None
) -> None:
    """A frame keeping its first and last line but losing one between is found by the
    index pass (whichever process summarises it), not later when a fork copies it."""
    gen, _ = forty_frames(root, clock)
    data = gen.path.read_bytes()
    frames = zframes.scan(data).frames
    bodies = [zframes.decode(data, f) for f in frames]
    damaged = bodies[30].split(b"\n")
    del damaged[1]  # frame 31 keeps its first and last line: seqs 87 and 89
    bodies[30] = b"\n".join(damaged)
    gen.path.write_bytes(b"".join(zframes.encode(b) for b in bodies))
    with pytest.raises(CorruptLog, match="seq 89 where 88 was expected"):
        open_log(gen)
