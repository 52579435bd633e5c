"""The zstd container (format §5, semantics §10.2): structural scan, torn tails, corruption.

Logs are built with the project's fixture layer, then cut, flipped or extended byte by byte;
every outcome is checked against the decompressed lines the fixture wrote.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis_profiles  # noqa: F401  (registers and loads the Hypothesis profile)
import orjson
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from dsh_fork import frames as zframes
from dsh_fork import logindex, reader
from dsh_fork.errors import CorruptLog, DshForkError
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file
from dsh_fork.generations import Generation
from dsh_fork.reader import open_log
from dsh_fork.sessionlog import SessionLog

HEADER = (
    b'{"type":"session","version":4,"id":"s","createdAt":1,"cwd":"/p","isSeeded":false,'
    b'"delegationDepth":0}'
)


def event_line(seq: int, text: str = "x", event_type: str = "user/message") -> bytes:
    return orjson.dumps({"type": event_type, "seq": seq, "time": 1000 + seq, "data": text}) + b"\n"


def lines_of(first: int, count: int) -> bytes:
    return b"".join(event_line(first + k, f"event {first + k}") for k in range(count))


def gen_at(tmp_path: Path) -> Generation:
    path = tmp_path / "s" / "session.v4.jsonl.zstd"
    path.parent.mkdir(parents=True, exist_ok=True)
    return Generation(path, 4, "zstd")


def open_bytes(gen: Generation, data: bytes) -> SessionLog:
    gen.path.write_bytes(data)
    return open_log(gen)


def raw_events(log: SessionLog) -> list[bytes]:
    return [ev.raw + b"\n" for ev in log.events() if ev.raw is not None]


def twenty_frame_log(root: Path, clock: Clock) -> tuple[Generation, list[list[bytes]]]:
    """A published v4 log of 20 frames: the header and 19 batches of one to three events."""
    spec = SessionSpec(id="twenty", created_at=clock())
    batches: list[list[bytes]] = []
    for k in range(19):
        first = spec.seq
        for _ in range(1 + k % 3):
            spec.add("session/title", clock(), {"title": f"t{spec.seq}", "messageSeqs": []})
        spec.flush()
        batches.append(spec.lines[first:])
    session_dir = spec.publish(root)
    return Generation(session_dir / "session.v4.jsonl.zstd", 4, "zstd"), batches


# -- structural scan ----------------------------------------------------------------------


def test_scan_of_a_published_multi_frame_log(root: Path, clock: Clock) -> None:
    gen, batches = twenty_frame_log(root, clock)
    data = gen.path.read_bytes()
    scan = zframes.scan(data)
    assert len(scan.frames) == 20
    assert scan.torn_start is None
    assert scan.frames[0].start == 0
    assert scan.frames[-1].end == len(data) == scan.committed_end
    for before, after in zip(scan.frames, scan.frames[1:], strict=False):
        assert before.end == after.start
    assert all(frame.checksum for frame in scan.frames)
    assert zframes.decode(data, scan.frames[0]) == gen_header_line(gen)
    for index, (frame, batch) in enumerate(zip(scan.frames[1:], batches, strict=True)):
        assert zframes.decode(data, frame, index + 1) == b"".join(batch)


def gen_header_line(gen: Generation) -> bytes:
    data = gen.path.read_bytes()
    first = zframes.scan(data, limit=1).frames[0]
    return zframes.decode(data, first)


def test_scan_limited_to_one_frame_ignores_what_follows(tmp_path: Path) -> None:
    gen = gen_at(tmp_path)
    data = zframes.encode(HEADER + b"\n") + zframes.encode(lines_of(0, 2)) + b"garbage!"
    scan = zframes.scan(data, limit=1)
    assert len(scan.frames) == 1
    assert scan.torn_start is None
    with pytest.raises(CorruptLog, match="bad frame magic"):
        open_bytes(gen, data)


def test_every_byte_prefix_of_a_20_frame_log(root: Path, clock: Clock) -> None:
    """The committed part is exactly the complete frames; the rest is a torn tail."""
    gen, batches = twenty_frame_log(root, clock)
    data = gen.path.read_bytes()
    frames = zframes.scan(data).frames
    header_end = frames[0].end
    for size in range(len(data) + 1):
        prefix = data[:size]
        if size < header_end:
            with pytest.raises(CorruptLog, match="no complete frame"):
                open_bytes(gen, prefix)
            continue
        log = open_bytes(gen, prefix)
        complete = [f for f in frames[1:] if f.end <= size]
        expected = [line for batch in batches[: len(complete)] for line in batch]
        committed = complete[-1].end if complete else header_end
        if committed == size:
            assert log.torn is None
        else:
            assert log.torn is not None
            assert (log.torn.offset, log.torn.size) == (committed, size - committed)
            torn_lines = [line[:-1] for line in batches[len(complete)]]
            assert list(log.torn.recovered) == torn_lines[: len(log.torn.recovered)]
            # DSH keeps the torn frame's complete lines: they continue the seqs.
            expected += [line + b"\n" for line in log.torn.recovered]
        assert raw_events(log) == expected
        assert log.event_count == len(expected)


@st.composite
def logs(draw: st.DrawFn) -> tuple[bytes, list[list[bytes]]]:
    """A v4 log of random batches, each compressed with random zstd options."""
    batches: list[list[bytes]] = []
    seq = 0
    for _ in range(draw(st.integers(0, 6))):
        batch = []
        for _ in range(draw(st.integers(1, 4))):
            text = draw(st.text(max_size=40))
            batch.append(event_line(seq, text))
            seq += 1
        batches.append(batch)
    pieces = [zframes.encode(HEADER + b"\n")]
    for batch in batches:
        compressor = zstandard.ZstdCompressor(
            write_checksum=draw(st.booleans()), write_content_size=draw(st.booleans())
        )
        pieces.append(compressor.compress(b"".join(batch)))
    return b"".join(pieces), batches


@given(log=logs(), data=st.data())
def test_a_log_cut_anywhere_reads_its_complete_frames_or_reports_a_torn_tail(
    tmp_path: Path, log: tuple[bytes, list[list[bytes]]], data: st.DataObject
) -> None:
    whole, batches = log
    size = data.draw(st.integers(0, len(whole)), label="cut")
    gen = gen_at(tmp_path)
    frames = zframes.scan(whole).frames
    if size < frames[0].end:
        with pytest.raises(CorruptLog):
            open_bytes(gen, whole[:size])
        return
    result = open_bytes(gen, whole[:size])
    complete = [f for f in frames[1:] if f.end <= size]
    expected = [line for b in batches[: len(complete)] for line in b]
    if result.torn is not None:  # as DSH, the torn frame's complete lines are kept: a cut in
        # its checksum, or after a whole block, leaves some (the deep profile found one)
        torn_lines = [line[:-1] for line in batches[len(complete)]]
        assert list(result.torn.recovered) == torn_lines[: len(result.torn.recovered)]
        expected += [line + b"\n" for line in result.torn.recovered]
    assert raw_events(result) == expected
    committed = complete[-1].end if complete else frames[0].end
    assert (result.torn.offset if result.torn else size) == committed


@given(tail=st.binary(max_size=64))
def test_arbitrary_bytes_after_the_header_raise_only_documented_errors(
    tmp_path: Path, tail: bytes
) -> None:
    gen = gen_at(tmp_path)
    try:
        log = open_bytes(gen, zframes.encode(HEADER + b"\n") + tail)
        list(log.events())
    except DshForkError:
        pass


@given(blob=st.binary(max_size=200))
def test_the_scanner_on_arbitrary_bytes_raises_only_corrupt_log(blob: bytes) -> None:
    try:
        scan = zframes.scan(blob)
    except CorruptLog:
        return
    ends = [f.end for f in scan.frames]
    assert ends == sorted(ends)
    assert scan.committed_end <= len(blob)


# -- corruption, never a torn tail -----------------------------------------------------------


def valid_log() -> bytes:
    return b"".join(
        [
            zframes.encode(HEADER + b"\n"),
            zframes.encode(lines_of(0, 2)),
            zframes.encode(lines_of(2, 2)),
        ]
    )


@pytest.mark.parametrize(
    "garbage", [b"garbage bytes appended", b"\x00" * 16, b"\xff\xff\xff\xff\xff", b"\x00" * 4]
)
def test_garbage_appended_is_corrupt_not_torn(tmp_path: Path, garbage: bytes) -> None:
    with pytest.raises(CorruptLog):
        open_bytes(gen_at(tmp_path), valid_log() + garbage)


@pytest.mark.parametrize("tail", [b"g", b"\x00\x00", b"\x28\xb5\x2f", b"\xff\x00\x01"])
def test_a_tail_of_one_to_three_bytes_is_a_torn_tail(tmp_path: Path, tail: bytes) -> None:
    """Fewer than 4 bytes cannot hold a magic: DSH takes them for a torn tail, whatever they
    are (format §5.2 step 1), keeps every committed event and truncates the bytes."""
    data = valid_log()
    full = open_bytes(gen_at(tmp_path), data)
    log = open_bytes(gen_at(tmp_path / "t"), data + tail)
    assert log.torn is not None
    assert (log.torn.offset, log.torn.size, log.torn.recovered) == (len(data), len(tail), ())
    assert raw_events(log) == raw_events(full) and log.event_count == full.event_count


def test_bad_magic_names_offset_and_frame(tmp_path: Path) -> None:
    data = valid_log()
    with pytest.raises(CorruptLog) as caught:
        open_bytes(gen_at(tmp_path), data + b"JUNKJUNK")
    assert caught.value.details["offset"] == len(data)
    assert caught.value.details["frame"] == 3
    assert "bad frame magic" in caught.value.message


def block_frame(plaintexts: list[bytes]) -> bytes:
    """One frame with one compressed block per plaintext."""
    compressor = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    parts = []
    for text in plaintexts:
        parts.append(compressor.compress(text))
        parts.append(compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
    parts.append(compressor.flush())
    return b"".join(parts)


def test_a_damaged_torn_frame_recovers_nothing_but_stays_a_torn_tail(tmp_path: Path) -> None:
    """Damage inside the incomplete last frame is what DSH's flush-mode decode also meets:
    nothing is recovered, and the tail is still torn (a write truncates it)."""
    data = valid_log()
    texts = [event_line(4 + k, hashlib.sha256(bytes([k])).hexdigest() * 3) for k in range(3)]
    frame = bytearray(block_frame(texts))
    frame[20] ^= 0xFF  # inside the first block's compressed payload
    torn = bytes(frame[: len(frame) - 20])
    with pytest.raises(zstandard.ZstdError):
        zstandard.ZstdDecompressor().decompressobj().decompress(torn)
    log = open_bytes(gen_at(tmp_path), data + torn)
    assert log.torn is not None
    assert (log.torn.offset, log.torn.recovered) == (len(data), ())
    assert log.event_count == 4


def test_a_magic_prefix_alone_is_a_torn_tail(tmp_path: Path) -> None:
    data = valid_log()
    log = open_bytes(gen_at(tmp_path), data + b"\x28\xb5\x2f")
    assert log.torn is not None
    assert (log.torn.offset, log.torn.size, log.torn.recovered) == (len(data), 3, ())
    assert log.event_count == 4


def skippable(payload: bytes = b"skip") -> bytes:
    return (0x184D2A53).to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload


@pytest.mark.parametrize("where", ["first", "middle", "end"])
def test_a_skippable_frame_anywhere_is_corrupt(tmp_path: Path, where: str) -> None:
    header, body1, body2 = (
        zframes.encode(HEADER + b"\n"),
        zframes.encode(lines_of(0, 2)),
        zframes.encode(lines_of(2, 1)),
    )
    data = {
        "first": skippable() + header + body1 + body2,
        "middle": header + body1 + skippable() + body2,
        "end": header + body1 + body2 + skippable(),
    }[where]
    with pytest.raises(CorruptLog, match="skippable frame"):
        open_bytes(gen_at(tmp_path), data)
    with pytest.raises(CorruptLog, match="skippable frame"):
        zframes.scan(data)


@pytest.mark.parametrize("bit", [0x08, 0x10])
def test_reserved_frame_header_bits_are_corrupt(tmp_path: Path, bit: int) -> None:
    header, body = zframes.encode(HEADER + b"\n"), bytearray(zframes.encode(lines_of(0, 2)))
    body[4] |= bit
    with pytest.raises(CorruptLog, match="reserved frame header bits"):
        open_bytes(gen_at(tmp_path), header + bytes(body))


def test_reserved_block_type_is_corrupt(tmp_path: Path) -> None:
    block = (10 << 3) | (3 << 1) | 1
    frame = (
        zframes.ZSTD_MAGIC.to_bytes(4, "little") + bytes([0x00, 0x00]) + block.to_bytes(3, "little")
    )
    with pytest.raises(CorruptLog, match="reserved block type"):
        open_bytes(gen_at(tmp_path), zframes.encode(HEADER + b"\n") + frame + b"x" * 10)


def test_a_block_beyond_the_format_maximum_is_corrupt_not_torn(tmp_path: Path) -> None:
    block = ((128 * 1024 + 1) << 3) | 1
    frame = (
        zframes.ZSTD_MAGIC.to_bytes(4, "little") + bytes([0x00, 0x00]) + block.to_bytes(3, "little")
    )
    with pytest.raises(CorruptLog, match="block larger than 128 KiB"):
        open_bytes(gen_at(tmp_path), zframes.encode(HEADER + b"\n") + frame + b"x" * 10)


def test_every_bit_flip_in_a_middle_frame_is_corrupt_or_harmless(root: Path, clock: Clock) -> None:
    """Checksums (and the torn-frame decode) catch the damage; no flip yields other events
    or turns committed frames into a 'torn tail' that a writer would truncate."""
    gen, batches = twenty_frame_log(root, clock)
    data = gen.path.read_bytes()
    middle = zframes.scan(data).frames[10]
    expected = [line for batch in batches for line in batch]
    corrupt = 0
    for pos in range(middle.start, middle.end):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            try:
                log = open_bytes(gen, bytes(flipped))
            except CorruptLog:
                corrupt += 1
                continue
            assert log.torn is None, (pos - middle.start, bit)
            assert raw_events(log) == expected, (pos - middle.start, bit)
    # Only flips that leave the plaintext intact (e.g. a frame header flag) may pass.
    assert corrupt >= (middle.size - 6) * 8


def test_a_flipped_payload_bit_fails_the_checksum(tmp_path: Path) -> None:
    header = zframes.encode(HEADER + b"\n")
    body = bytearray(zframes.encode(lines_of(0, 3)))
    body[len(body) - 6] ^= 0x01
    with pytest.raises(CorruptLog, match="frame does not decode") as caught:
        open_bytes(gen_at(tmp_path), header + bytes(body) + zframes.encode(lines_of(3, 1)))
    assert caught.value.details == {"offset": len(header), "frame": 1}


# -- frame contents -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first_frame",
    [
        HEADER + b"\n" + lines_of(0, 1),
        HEADER,
        HEADER + b"\n\n",
        b"\n" + HEADER + b"\n",
    ],
    ids=["header-and-events", "no-newline", "trailing-empty-line", "leading-empty-line"],
)
def test_first_frame_must_be_exactly_one_header_line(tmp_path: Path, first_frame: bytes) -> None:
    data = zframes.encode(first_frame) + zframes.encode(lines_of(1, 1))
    with pytest.raises(CorruptLog, match="first frame is not exactly one header line"):
        open_bytes(gen_at(tmp_path), data)


def test_an_empty_header_line_is_corrupt(tmp_path: Path) -> None:
    data = zframes.encode(b"\n") + zframes.encode(lines_of(0, 1))
    with pytest.raises(CorruptLog, match="header is not JSON"):
        open_bytes(gen_at(tmp_path), data)


def test_a_whole_log_compressed_as_one_frame_is_corrupt(tmp_path: Path) -> None:
    with pytest.raises(CorruptLog, match="first frame is not exactly one header line"):
        open_bytes(gen_at(tmp_path), zframes.encode(HEADER + b"\n" + lines_of(0, 5)))


def test_committed_text_not_ending_in_newline_is_corrupt(tmp_path: Path) -> None:
    """The complete frames' plaintext must end on a line boundary (format §5.3)."""
    split = lines_of(0, 2)
    frames = [zframes.encode(HEADER + b"\n"), zframes.encode(split[:-5])]
    with pytest.raises(CorruptLog, match="torn JSONL record"):
        open_bytes(gen_at(tmp_path), b"".join(frames))


def test_a_record_split_across_two_complete_frames_is_read_as_dsh_reads_it(
    tmp_path: Path,
) -> None:
    """DSH concatenates the complete frames' plaintexts: a line may span a frame edge. The
    two frames form one run, copied whole or re-encoded, never cut at the edge."""
    split = lines_of(0, 3)
    cut = len(split) - 5
    data = b"".join(
        [
            zframes.encode(HEADER + b"\n"),
            zframes.encode(split[:cut]),
            zframes.encode(split[cut:]),
            zframes.encode(lines_of(3, 1)),
        ]
    )
    log = open_bytes(gen_at(tmp_path), data)
    assert b"".join(raw_events(log)) == split + lines_of(3, 1)
    assert [(len(c.frames), c.first_seq, c.count) for c in log.chunks] == [(2, 0, 3), (1, 3, 1)]
    run, whole, tail = log.prefix_run(1)
    assert (run, whole, tail) == (b"", 0, lines_of(0, 2))
    run, count, tail = log.prefix_run(2)
    assert count == 2 and tail == b""  # both frames of the run, copied as they are
    assert isinstance(run, memoryview)  # a view of the bytes read, never a copy
    assert b"".join(zframes.decode_many(run, zframes.scan(run).frames)) == split


@pytest.mark.parametrize(
    "body",
    [
        event_line(0) + b"\n" + event_line(1),
        b"\n" + event_line(0),
        event_line(0) + b"\n",
    ],
    ids=["between-lines", "frame-start", "frame-end"],
)
def test_an_empty_line_is_corrupt(tmp_path: Path, body: bytes) -> None:
    data = zframes.encode(HEADER + b"\n") + zframes.encode(body)
    with pytest.raises(CorruptLog, match="empty line"):
        open_bytes(gen_at(tmp_path), data)


@pytest.mark.parametrize("where", ["first", "middle", "last", "only"])
def test_an_empty_frame_adds_nothing(tmp_path: Path, where: str) -> None:
    """DSH reads an empty frame (and an empty raw block) as no text at all."""
    empty = [zframes.encode(b""), b"\x28\xb5\x2f\xfd\x00\x00\x01\x00\x00"]  # + raw block
    bodies = {
        "first": [*empty, zframes.encode(lines_of(0, 2))],
        "middle": [zframes.encode(lines_of(0, 1)), *empty, zframes.encode(lines_of(1, 1))],
        "last": [zframes.encode(lines_of(0, 2)), *empty],
        "only": empty,
    }[where]
    log = open_bytes(gen_at(tmp_path), zframes.encode(HEADER + b"\n") + b"".join(bodies))
    expected = b"" if where == "only" else lines_of(0, 2)
    assert (
        b"".join(raw_events(log)) == expected and log.event_count == len(expected.split(b"\n")) - 1
    )
    assert sum(len(c.frames) for c in log.chunks) == len(bodies)


def test_an_empty_file_is_corrupt(tmp_path: Path) -> None:
    with pytest.raises(CorruptLog, match="no complete frame"):
        open_bytes(gen_at(tmp_path), b"")


# -- frame header variants --------------------------------------------------------------------


def streamed(plaintext: bytes, checksum: bool = False) -> bytes:
    """A frame from a streaming compressor, which does not know the content size."""
    out = io.BytesIO()
    compressor = zstandard.ZstdCompressor(write_checksum=checksum)
    with compressor.stream_writer(out, closefd=False) as writer:
        writer.write(plaintext)
    return out.getvalue()


def big_lines(first: int) -> bytes:
    """About 70 KB of lines: the content size needs the 4-byte field."""
    return b"".join(event_line(first + k, f"{k:05d} " + "z" * 600) for k in range(110))


VARIANTS: dict[str, tuple[Callable[[bytes], bytes], bool, bool, int]] = {
    # name: (frame builder, checksum flag, single-segment flag, content-size flag)
    "checksum, content size": (
        lambda p: zstandard.ZstdCompressor(write_checksum=True).compress(p),
        True,
        True,
        0,
    ),
    "no checksum, content size": (
        lambda p: zstandard.ZstdCompressor(write_checksum=False).compress(p),
        False,
        True,
        0,
    ),
    "checksum, no content size": (
        lambda p: zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compress(
            p
        ),
        True,
        False,
        0,
    ),
    "streamed with checksum": (lambda p: streamed(p, checksum=True), True, False, 0),
    "streamed without checksum": (streamed, False, False, 0),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_frames_with_and_without_checksum_and_content_size(tmp_path: Path, name: str) -> None:
    build, checksum, single_segment, fcs_flag = VARIANTS[name]
    header = zframes.encode(HEADER + b"\n")
    small = build(lines_of(0, 3))
    large = build(big_lines(3))
    descriptor = small[4]
    assert bool(descriptor & 0x04) is checksum
    assert bool(descriptor & 0x20) is single_segment
    assert descriptor >> 6 == fcs_flag
    if large[4] >> 6:
        assert large[4] >> 6 == 2  # a 4-byte content size field
    data = header + small + large
    scan = zframes.scan(data)
    assert [(f.start, f.end) for f in scan.frames] == [
        (0, len(header)),
        (len(header), len(header) + len(small)),
        (len(header) + len(small), len(data)),
    ]
    assert [f.checksum for f in scan.frames[1:]] == [checksum, checksum]
    log = open_bytes(gen_at(tmp_path), data)
    assert raw_events(log) == orjson_lines(lines_of(0, 3) + big_lines(3))


def orjson_lines(text: bytes) -> list[bytes]:
    return [line + b"\n" for line in text.split(b"\n")[:-1]]


def test_content_size_field_of_two_bytes(tmp_path: Path) -> None:
    plaintext = lines_of(0, 8)
    assert 256 <= len(plaintext) <= 65791
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(plaintext)
    fcs_flag, single = frame[4] >> 6, bool(frame[4] & 0x20)
    assert (fcs_flag, single) == (1, True)
    log = open_bytes(gen_at(tmp_path), zframes.encode(HEADER + b"\n") + frame)
    assert raw_events(log) == orjson_lines(plaintext)


def handmade_frame(
    blocks: list[tuple[str, bytes, int]],
    *,
    fcs_bytes: int = 0,
    single_segment: bool = False,
    dict_id_bytes: int = 0,
) -> bytes:
    """A frame built field by field from raw and RLE blocks (no checksum: no xxhash here)."""
    total = sum(count for _, _, count in blocks)
    fcs_flag = {0: 0, 1: 0, 2: 1, 4: 2, 8: 3}[fcs_bytes]
    descriptor = (fcs_flag << 6) | (0x20 if single_segment else 0)
    descriptor |= {0: 0, 1: 1, 2: 2, 4: 3}[dict_id_bytes]
    out = bytearray(zframes.ZSTD_MAGIC.to_bytes(4, "little")) + bytes([descriptor])
    if not single_segment:
        out.append(0x00)  # window descriptor: 1 KiB
    out += bytes(dict_id_bytes)  # dictionary id 0: none
    if fcs_bytes:
        out += (total - 256 if fcs_bytes == 2 else total).to_bytes(fcs_bytes, "little")
    for i, (kind, payload, count) in enumerate(blocks):
        last = int(i == len(blocks) - 1)
        block_type = 0 if kind == "raw" else 1
        out += ((count << 3) | (block_type << 1) | last).to_bytes(3, "little") + payload
    return bytes(out)


@pytest.mark.parametrize(
    ("fcs_bytes", "single_segment", "dict_id_bytes", "rle"),
    [
        (0, False, 0, 200),
        (1, True, 0, 200),
        (2, False, 0, 300),
        (2, True, 0, 300),
        (4, False, 0, 200),
        (8, False, 0, 200),
        (8, True, 0, 200),
        (0, False, 1, 200),
        (0, False, 2, 200),
        (0, False, 4, 200),
    ],
)
def test_every_frame_header_length_and_rle_blocks(
    tmp_path: Path, fcs_bytes: int, single_segment: bool, dict_id_bytes: int, rle: int
) -> None:
    start = b'{"type":"user/message","seq":0,"time":1,"data":"'
    end = b'"}\n'
    blocks = [("raw", start, len(start)), ("rle", b"x", rle), ("raw", end, len(end))]
    frame = handmade_frame(
        blocks, fcs_bytes=fcs_bytes, single_segment=single_segment, dict_id_bytes=dict_id_bytes
    )
    header = zframes.encode(HEADER + b"\n")
    data = header + frame + zframes.encode(event_line(1))
    scan = zframes.scan(data)
    assert [(f.start, f.end, f.checksum) for f in scan.frames[1:]] == [
        (len(header), len(header) + len(frame), False),
        (len(header) + len(frame), len(data), True),
    ]
    log = open_bytes(gen_at(tmp_path), data)
    assert log.event(0).data == "x" * rle
    assert log.event_count == 2
    # Cut inside the RLE block's header or right after its single payload byte: torn.
    rle_at = frame.index(b"x", len(start))
    for cut in (rle_at - 1, rle_at):
        torn = open_bytes(gen_at(tmp_path), header + frame[:cut])
        assert torn.torn is not None and torn.torn.offset == len(header)


# -- writing frames -------------------------------------------------------------------------


def test_encode_writes_one_checksummed_frame(tmp_path: Path) -> None:
    frame = zframes.encode(lines_of(0, 2))
    scan = zframes.scan(frame)
    assert [(f.start, f.end, f.checksum) for f in scan.frames] == [(0, len(frame), True)]
    assert zframes.decode(frame, scan.frames[0]) == lines_of(0, 2)


@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=6))
def test_the_shared_context_encodes_each_frame_as_a_fresh_one_would(
    plaintexts: list[bytes],
) -> None:
    """``encode`` reuses one compression context: no frame may depend on the ones before."""
    fresh = [
        zstandard.ZstdCompressor(level=zframes.COMPRESSION_LEVEL, write_checksum=True).compress(p)
        for p in plaintexts
    ]
    assert [zframes.encode(p) for p in plaintexts] == fresh
    assert [zframes.encode(p) for p in reversed(plaintexts)] == fresh[::-1]


def test_a_log_is_read_and_frames_written_without_a_context_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making a zstd context costs about as much as a small log: reading logs and encoding
    frames makes none once the module's are there."""
    zframes.encode(b"warm\n")  # the shared compression context, made on first use
    made: list[str] = []
    real_d, real_c = zstandard.ZstdDecompressor, zstandard.ZstdCompressor

    def decompressor(*args: Any, **kwargs: Any) -> zstandard.ZstdDecompressor:
        made.append("decompressor")
        return real_d(*args, **kwargs)

    def compressor(*args: Any, **kwargs: Any) -> zstandard.ZstdCompressor:
        made.append("compressor")
        return real_c(*args, **kwargs)

    monkeypatch.setattr(zstandard, "ZstdDecompressor", decompressor)
    monkeypatch.setattr(zstandard, "ZstdCompressor", compressor)
    for k in range(3):
        path = write_log_file(gen_at(tmp_path / str(k)).path, HEADER, [lines_of(0, 2)])
        log = open_log(Generation(path, 4, "zstd"))
        assert log.event_count == 2
        assert zframes.encode(lines_of(0, 2)) == zframes.encode(lines_of(0, 2))
    assert made == []


def test_batch_lines_groups_whole_lines_up_to_the_target() -> None:
    lines = [event_line(k, "y" * 30) for k in range(10)]
    batches = zframes.batch_lines(lines, target=len(lines[0]) * 3)
    assert b"".join(batches) == b"".join(lines)
    assert [b.count(b"\n") for b in batches] == [3, 3, 3, 1]
    assert all(b.endswith(b"\n") for b in batches)
    assert zframes.batch_lines([]) == []


def test_write_log_file_frames_the_header_alone(tmp_path: Path) -> None:
    path = write_log_file(tmp_path / "x" / "session.v4.jsonl.zstd", HEADER, [lines_of(0, 2)])
    data = path.read_bytes()
    scan = zframes.scan(data)
    assert len(scan.frames) == 2
    assert zframes.decode(data, scan.frames[0]) == HEADER + b"\n"


def test_a_record_spanning_frames_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory stays bounded when no frame ends a line: past the bound the log is corrupt."""
    record = lines_of(0, 1)
    pieces = [record[k : k + 10] for k in range(0, len(record), 10)]
    data = zframes.encode(HEADER + b"\n") + b"".join(zframes.encode(p) for p in pieces)
    assert len(open_bytes(gen_at(tmp_path), data).chunks[0].frames) == len(pieces)
    monkeypatch.setattr(logindex, "MAX_RUN_BYTES", 25)
    with pytest.raises(CorruptLog, match=r"a record spans frames 2\.\.4, more than"):
        open_bytes(gen_at(tmp_path), data)


def structural_header_line(data: bytes) -> bytes | str:
    """The header line by the structural walk alone (scan, bounded decode, one-line check),
    or the kind of failure: the reference for the one-call path of a listing."""
    try:
        scan = zframes.scan(data, limit=1)
        if not scan.frames:
            return "torn"
        return reader._header_line(data, scan.frames[0], "log")
    except CorruptLog:
        return "corrupt"


def header_variants() -> dict[str, bytes]:
    line = HEADER + b"\n"
    body = zframes.encode(lines_of(1, 2))
    made = {name: build(line) + body for name, (build, _, _, _) in VARIANTS.items()}
    made["encode"] = zframes.encode(line) + body
    made["two lines"] = zframes.encode(line + lines_of(0, 1)) + body
    made["no newline"] = zframes.encode(HEADER) + body
    made["empty frame"] = zframes.encode(b"") + body
    made["raw blocks"] = (
        zstandard.ZstdCompressor(level=-5, write_checksum=True).compress(bytes(range(256)) + b"\n")
        + body
    )
    return made


@pytest.mark.parametrize("name", list(header_variants()))
def test_the_one_call_header_read_never_differs_from_the_structural_walk(name: str) -> None:
    """Every cut and every bit flip of the header frame: the one-call path either declines
    (None, the walk then decides) or gives the very line the walk gives; it never reads a
    header where the walk finds a torn or corrupt frame."""
    data = header_variants()[name]
    first_end = zframes.scan(data, limit=1).frames[0].end
    damaged = [data[:cut] for cut in range(first_end + 3)]
    for k in range(first_end * 8):
        flipped = bytearray(data)
        flipped[k // 8] ^= 1 << (k % 8)
        damaged.append(bytes(flipped))
    flipped = bytearray(data)
    flipped[4] |= 0x10  # the unused header bit: libzstd ignores it, the walk refuses it
    damaged.append(bytes(flipped))
    for blob in [data, *damaged]:
        fast = zframes.first_line(blob)
        if fast is not None:
            assert fast == structural_header_line(blob), blob
    whole = structural_header_line(data)
    assert zframes.first_line(data) == (whole if isinstance(whole, bytes) else None)


def test_listing_reads_the_same_header_either_way(tmp_path: Path) -> None:
    """reader.read_header_line on a file gives the structural walk's line or its error."""
    gen = gen_at(tmp_path)
    for name, data in header_variants().items():
        gen.path.write_bytes(data)
        expected = structural_header_line(data)
        try:
            got: bytes | str = reader.read_header_line(gen.path, "zstd")
        except CorruptLog:
            got = "corrupt"
        assert got == expected, name
