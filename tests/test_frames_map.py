"""Frames mapped one by one (``frames.map_frames``), and the one-pass index.

Callers see exactly what a sequential decode gives them: the same values in order, the same
defect raised at the same frame.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from dsh_fork import frames as zframes
from dsh_fork.errors import CorruptLog
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import Generation
from dsh_fork.reader import open_log


def forty_frames(root: Path, clock: Clock) -> tuple[Generation, list[bytes]]:
    """A v4 log of a header frame and 40 batches of three titles each."""
    spec = SessionSpec(id="forty", created_at=clock())
    for k in range(40):
        for _ in range(3):
            spec.add("session/title", clock(), {"title": f"t{spec.seq} {k}", "messageSeqs": []})
        spec.flush()
    session_dir = spec.publish(root)
    return Generation(session_dir / "session.v4.jsonl.zstd", 4, "zstd"), spec.lines


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


def test_mapped_frames_equal_a_sequential_decode(root: Path, clock: Clock) -> None:
    gen, lines = forty_frames(root, clock)
    data = gen.path.read_bytes()
    frames = zframes.scan(data).frames[1:]
    mapped = list(zframes.map_frames(data, frames, _whole, 1))
    assert [p for _, p in mapped] == [zframes.decode(data, f, i + 1) for i, f in enumerate(frames)]
    assert b"".join(p for _, p in mapped) == b"".join(lines)


@pytest.mark.parametrize("damaged", [3, 38])
def test_a_damaged_frame_raises_where_a_sequential_pass_raises(
    root: Path, clock: Clock, damaged: int
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


def test_a_frame_missing_a_line_is_refused_at_open(root: Path, clock: Clock) -> None:
    """A frame keeping its first and last line but losing one between is found by the
    index pass, not later when a fork copies it."""
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
