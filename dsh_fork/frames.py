"""The zstd container: structural frame scan, per-frame decoding, frame encoding (format §5).

The scan walks frame headers and block headers without decompressing, exactly as DSH does, so
the end of the committed part is decided by structure, never by a decoder that may hide a torn
tail or stop silently at the first frame.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import TypeVar

import zstandard
from msgspec import Struct

from . import budget
from .errors import CorruptLog
from .source import WINDOW_BYTES, FileBytes

ZSTD_MAGIC = 0xFD2FB528
COMPRESSION_LEVEL = 3
TARGET_FRAME_BYTES = 64 * 1024
MAX_BLOCK_SIZE = 128 * 1024
_MAGIC_BYTES = ZSTD_MAGIC.to_bytes(4, "little")

MAX_FRAME_PLAINTEXT = budget.MAX_FRAME_PLAINTEXT
"""dsh-fork's bound on the plaintext of one frame (the format states none): a frame that decodes
to more is too large for the memory budget (``budget``). DSH's own frames hold one append batch
(kilobytes). Peak memory of a decode stays near this bound whatever the input: a 33 KB frame of
RLE blocks claiming a gigabyte is cut off here."""
MAX_HEADER_PLAINTEXT = budget.MAX_HEADER_PLAINTEXT
"""The bound on a header frame (one line of a few hundred bytes in every DSH log)."""
MAX_WHOLE_PLAINTEXT = budget.MAX_WHOLE_PLAINTEXT
"""The bound on the plaintext of a body read whole (v0/v1 logs, whose packed rows are expanded
in one piece); later generations are indexed frame by frame and need no total bound."""
MAX_WINDOW_SIZE = 32 * 1024 * 1024
"""The largest window a frame may ask of the decoder (libzstd's own default is 128 MiB; DSH's
level 3 uses 2 MiB, and even level 19 only 8 MiB)."""
_FEED = 64
"""Compressed bytes per step of the bounded streaming decode: at most 16 blocks, so the output
can overshoot the bound by 2 MiB at most before it is noticed."""

PIECES_MIN_PLAINTEXT = 4 * 1024 * 1024
"""A frame whose blocks may decode to more than this reaches ``map_frames``' reduction in
pieces as it decodes, so that the whole plaintext of a large frame is never held at once."""
PIECE_BYTES = 256 * 1024
"""The plaintext of such a frame is handed on about this many bytes at a time."""

_DECOMPRESSOR = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW_SIZE)
"""The one decompression context of every decode: its calls are one-shot, so they share it
(making a context per log cost more than decoding a small one), and no two threads decode."""
T = TypeVar("T")
Data = bytes | memoryview | FileBytes
"""A log's bytes: in memory, or read on demand from its descriptor in bounded windows."""
MAX_SCAN_FRAME = MAX_FRAME_PLAINTEXT + (1 << 20)
"""The longest frame a windowed scan reads whole: a frame that decodes within
``MAX_FRAME_PLAINTEXT`` is never longer (a raw block adds 3 bytes to 128 KiB)."""


class Frame(Struct, frozen=True):
    start: int
    end: int
    checksum: bool
    blocks: int = 1
    """Number of blocks: each decodes to at most 128 KiB, which bounds the plaintext."""

    @property
    def size(self) -> int:
        return self.end - self.start


class FrameScan(Struct, frozen=True):
    frames: tuple[Frame, ...]
    torn_start: int | None
    size: int

    @property
    def committed_end(self) -> int:
        return self.frames[-1].end if self.frames else 0


def _corrupt(message: str, offset: int, frame: int) -> CorruptLog:
    return CorruptLog(f"{message} at byte {offset} (frame {frame + 1})", offset=offset, frame=frame)


def scan(data: bytes | memoryview, limit: int | None = None) -> FrameScan:
    """Complete frame ranges and the start of a torn final frame, if any.

    ``limit`` stops after that many complete frames (header-only reads). Bad magic, skippable
    frames, reserved bits and reserved block types are corruption, not a torn tail.
    """
    return _scan(memoryview(data), limit, 0, 0)


def scan_file(source: FileBytes) -> FrameScan:
    """``scan`` of a whole file read in windows: each check reads only bytes before it, so a
    frame cut by a window's end looks torn and is scanned again from the next window; a
    frame longer than a window widens it, up to ``MAX_SCAN_FRAME``."""
    frames: list[Frame] = []
    size = len(source)
    pos = 0
    want = WINDOW_BYTES
    while pos < size:
        end = min(size, pos + want)
        part = _scan(memoryview(source.read(pos, end)), None, pos, len(frames))
        frames.extend(part.frames)
        if part.torn_start is None:
            pos, want = end, WINDOW_BYTES
            continue
        if end == size:
            return FrameScan(tuple(frames), part.torn_start, size)
        if part.torn_start == pos:
            if want >= MAX_SCAN_FRAME:
                raise _corrupt(f"frame longer than {MAX_SCAN_FRAME:,} bytes", pos, len(frames))
            want = min(2 * want, MAX_SCAN_FRAME)
        else:
            want = WINDOW_BYTES
        pos = part.torn_start
    return FrameScan(tuple(frames), None, size)


def _scan(buf: memoryview, limit: int | None, origin: int, first_index: int) -> FrameScan:
    """``scan`` of ``buf``, the file's bytes from offset ``origin`` on, whose first frame is
    frame ``first_index``: offsets and frame numbers (also in errors) are the file's."""
    size = len(buf)
    frames: list[Frame] = []
    pos = 0
    while pos < size and (limit is None or len(frames) < limit):
        start = pos
        index = first_index + len(frames)
        if size - pos < 4:
            # Fewer than 4 bytes cannot hold a magic: DSH takes them for a torn tail whatever
            # they are (a torn write leaves a prefix of the magic, a power loss zero bytes).
            return FrameScan(tuple(frames), origin + start, origin + size)
        magic = int.from_bytes(buf[pos : pos + 4], "little")
        if magic != ZSTD_MAGIC:
            kind = "skippable frame" if 0x184D2A50 <= magic <= 0x184D2A5F else "bad frame magic"
            raise _corrupt(kind, origin + pos, index)
        pos += 4
        if pos >= size:
            return FrameScan(tuple(frames), origin + start, origin + size)
        descriptor = buf[pos]
        if descriptor & 0x18:
            raise _corrupt("reserved frame header bits set", origin + pos, index)
        single_segment = bool(descriptor & 0x20)
        header_len = 0 if single_segment else 1
        header_len += (0, 1, 2, 4)[descriptor & 3]
        fcs_flag = descriptor >> 6
        header_len += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        pos += 1 + header_len
        if pos > size:
            return FrameScan(tuple(frames), origin + start, origin + size)
        blocks = 0
        while True:
            if size - pos < 3:
                return FrameScan(tuple(frames), origin + start, origin + size)
            block = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
            last = block & 1
            block_type = (block >> 1) & 3
            if block_type == 3:
                raise _corrupt("reserved block type", origin + pos, index)
            if block >> 3 > MAX_BLOCK_SIZE:
                # Beyond the format's Block_Maximum_Size: a damaged header, not a torn frame
                # (a writer repairing a "torn tail" here would truncate committed frames).
                raise _corrupt("block larger than 128 KiB", origin + pos, index)
            payload = 1 if block_type == 1 else block >> 3
            pos += 3 + payload
            blocks += 1
            if pos > size:
                return FrameScan(tuple(frames), origin + start, origin + size)
            if last:
                break
        checksum = bool(descriptor & 4)
        if checksum:
            pos += 4
            if pos > size:
                return FrameScan(tuple(frames), origin + start, origin + size)
        frames.append(Frame(origin + start, origin + pos, checksum, blocks))
    return FrameScan(tuple(frames), None, origin + size)


def decode(data: Data, frame: Frame, index: int = 0, limit: int = MAX_FRAME_PLAINTEXT) -> bytes:
    """Plaintext of one complete frame, at most ``limit`` bytes (else corruption); the content
    checksum is verified by libzstd."""
    view, origin = _window(data, frame.start, frame.end)
    return _decode_bounded(view, frame, index, limit, origin)


def head(data: Data, end: int) -> bytes | memoryview:
    """Bytes ``0..end-1`` of a log's bytes, held or read on demand."""
    if isinstance(data, FileBytes):
        return data.read(0, end)
    return memoryview(data)[:end]


def _window(data: Data, start: int, end: int) -> tuple[memoryview, int]:
    """The bytes holding ``start..end-1`` and the file offset of their first byte."""
    if isinstance(data, FileBytes):
        return memoryview(data.read(start, end)), start
    return memoryview(data), 0


def _windows(
    data: Data, frames: Sequence[Frame]
) -> Generator[tuple[memoryview, int, Sequence[Frame]], None, None]:
    """``frames`` in groups read together: all at once from memory, else a window of about
    ``WINDOW_BYTES`` at a time (a longer frame alone), so only one window is held."""
    if not isinstance(data, FileBytes):
        yield memoryview(data), 0, frames
        return
    k = 0
    while k < len(frames):
        start = frames[k].start
        stop = k + 1
        while stop < len(frames) and frames[stop].end - start <= WINDOW_BYTES:
            stop += 1
        yield memoryview(data.read(start, frames[stop - 1].end)), start, frames[k:stop]
        k = stop


def first_line(data: bytes) -> bytes | None:
    """The header line of a log whose first frame is whole in ``data`` and holds exactly one
    line, decoded by one libzstd call; None whenever that is not plainly so.

    A listing calls this once per session, so it skips the Python walk of ``scan``: libzstd
    decodes only a complete first frame (a torn one fails), verifies its checksum and refuses
    reserved block types and oversized blocks, as ``scan`` does; the magic and the two header
    bits libzstd does not refuse are checked here. The output stays within the header bound.
    Any doubt (no declared size, a declared size beyond the bound, a decode error, not one
    line) returns None, and the caller takes the structural path, which gives the verdict.
    """
    if len(data) < 6 or data[:4] != _MAGIC_BYTES or data[4] & 0x18:
        return None
    try:
        declared = zstandard.get_frame_parameters(data).content_size
        if declared == zstandard.CONTENTSIZE_UNKNOWN:
            plaintext = _DECOMPRESSOR.decompress(
                data, max_output_size=MAX_HEADER_PLAINTEXT, allow_extra_data=True
            )
        elif 0 < declared <= MAX_HEADER_PLAINTEXT:
            plaintext = _DECOMPRESSOR.decompress(data, allow_extra_data=True)
        else:
            return None
    except zstandard.ZstdError:
        return None
    if not plaintext or plaintext.find(b"\n") != len(plaintext) - 1:  # not one line
        return None
    return plaintext[:-1]


def decode_all(data: bytes, frames: Sequence[Frame], first_index: int = 0) -> list[bytes]:
    """Plaintexts of the complete ``frames`` of a small log held whole, in order: ``decode``
    of each (same bounds, same checks) without its per-call set-up. ``first_index`` is the
    index of ``frames[0]`` in the file; frame 0, the header frame, is held to the header
    bound."""
    view = memoryview(data)
    return [
        _decode_bounded(view, frame, k, MAX_HEADER_PLAINTEXT if k == 0 else MAX_FRAME_PLAINTEXT)
        for k, frame in enumerate(frames, first_index)
    ]


def _too_large(frame: Frame, index: int, limit: int) -> CorruptLog:
    return _corrupt(
        f"frame decodes to more than {limit:,} bytes: "
        + budget.too_large("a header frame" if limit == MAX_HEADER_PLAINTEXT else "a frame", limit),
        frame.start,
        index,
    )


def _fed(
    obj: zstandard.ZstdDecompressionObj,
    data: memoryview,
    pos: int,
    limit: int,
    too_large: Callable[[], CorruptLog],
) -> tuple[list[bytes], int]:
    """Feed ``data`` from ``pos`` on to the streaming decompressor ``obj`` a few bytes at a
    time until its frame ends or the data does: the pieces it gave and where feeding stopped.
    Output beyond ``limit`` raises ``too_large()`` within a few blocks, nothing of it kept."""
    parts: list[bytes] = []
    total = 0
    while pos < len(data) and not obj.eof:
        piece = obj.decompress(data[pos : pos + _FEED])
        pos += _FEED
        total += len(piece)
        if total > limit:
            parts.clear()
            raise too_large()
        parts.append(piece)
    return parts, pos


def _decode_stream(view: memoryview, frame: Frame, index: int, limit: int, origin: int) -> bytes:
    """The reference decode: a fresh streaming decompressor fed a few bytes at a time, so that
    output beyond ``limit`` is noticed within a few blocks and never accumulated."""
    obj = _DECOMPRESSOR.decompressobj()
    body = view[frame.start - origin : frame.end - origin]
    try:
        parts, pos = _fed(obj, body, 0, limit, lambda: _too_large(frame, index, limit))
    except zstandard.ZstdError as exc:
        raise _corrupt(f"frame does not decode ({exc})", frame.start, index) from None
    if not obj.eof or obj.unused_data or pos < len(body):
        raise _corrupt("frame does not end where its structure says", frame.start, index)
    return b"".join(parts)


def content_size(data: bytes | memoryview, frame: Frame, origin: int = 0) -> int | None:
    """The Frame_Content_Size field of a frame header, or None when the frame omits it
    (``data`` holds the file's bytes from offset ``origin`` on)."""
    descriptor = data[frame.start - origin + 4]
    single_segment = descriptor & 0x20
    fcs_flag = descriptor >> 6
    if fcs_flag == 0 and not single_segment:
        return None
    pos = frame.start - origin + 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    width = (1, 2, 4, 8)[fcs_flag]
    value = int.from_bytes(data[pos : pos + width], "little")
    return value + 256 if width == 2 else value


def decode_pieces(
    view: memoryview, frame: Frame, index: int, limit: int = MAX_FRAME_PLAINTEXT, origin: int = 0
) -> Generator[bytes, None, None]:
    """The plaintext of one frame in pieces of about ``PIECE_BYTES``, as the reference decode
    (``_decode_stream``) makes it: the same bound, the same checksum check by libzstd, the same
    defects named, raised when they are reached (the pieces before a defect were yielded)."""
    declared = content_size(view, frame, origin)
    if declared is not None and declared > limit:
        raise _too_large(frame, index, limit)
    obj = _DECOMPRESSOR.decompressobj()
    body = view[frame.start - origin : frame.end - origin]
    parts: list[bytes] = []
    held = 0
    total = 0
    pos = 0
    while pos < len(body) and not obj.eof:
        try:
            piece = obj.decompress(body[pos : pos + _FEED])
        except zstandard.ZstdError as exc:
            raise _corrupt(f"frame does not decode ({exc})", frame.start, index) from None
        pos += _FEED
        total += len(piece)
        if total > limit:
            parts.clear()
            raise _too_large(frame, index, limit)
        if piece:
            parts.append(piece)
            held += len(piece)
            if held >= PIECE_BYTES:
                joined = b"".join(parts)
                parts, held = [], 0  # before the yield: the parts are not held beside it
                yield joined
                del joined
    if not obj.eof or obj.unused_data or pos < len(body):
        raise _corrupt("frame does not end where its structure says", frame.start, index)
    if parts:
        yield b"".join(parts)


def _decode_bounded(
    view: memoryview,
    frame: Frame,
    index: int,
    limit: int = MAX_FRAME_PLAINTEXT,
    origin: int = 0,
) -> bytes:
    """``decode`` through libzstd's one-shot call, which runs without the GIL.

    The output buffer is sized by the frame's declared content size or, without one, by its
    block count (a block never decodes to more than 128 KiB), and never beyond ``limit``, so a
    damaged size field cannot make it allocate more. A declared size beyond the limit is
    corruption at once; a frame whose blocks could exceed it, or anything unusual (an empty
    declaration, a decoding error), goes to the bounded streaming reference, which also names
    the defect.
    """
    declared = content_size(view, frame, origin)
    if declared is not None and declared > limit:
        raise _too_large(frame, index, limit)
    cap = frame.blocks * MAX_BLOCK_SIZE
    if cap <= limit and (declared is None or 0 < declared <= cap):
        try:
            return _DECOMPRESSOR.decompress(
                view[frame.start - origin : frame.end - origin], max_output_size=cap
            )
        except zstandard.ZstdError:
            pass
    return _decode_stream(view, frame, index, limit, origin)


def decode_many(
    data: Data,
    frames: Sequence[Frame],
    first_index: int = 0,
    total_limit: int | None = None,
) -> Generator[bytes, None, None]:
    """Plaintexts of ``frames`` in order, each decoded and checksum-verified; one process.

    Each frame is bounded (``MAX_FRAME_PLAINTEXT``); a caller that keeps every plaintext
    (a legacy body expanded whole) also bounds their sum with ``total_limit``.
    """
    plaintexts = _map_part(_source(data), frames, _plain, first_index, pieces=False)
    if total_limit is None:
        return plaintexts
    return _bounded_total(plaintexts, frames, first_index, total_limit)


def _bounded_total(
    plaintexts: Generator[bytes, None, None], frames: Sequence[Frame], first: int, limit: int
) -> Generator[bytes, None, None]:
    total = 0
    with contextlib.closing(plaintexts):
        for k, plaintext in enumerate(plaintexts):
            total += len(plaintext)
            if total > limit:
                raise _corrupt(
                    f"the frames up to this one decode to more than {limit:,} bytes: "
                    + budget.too_large("a log read whole", limit),
                    frames[k].start,
                    first + k,
                )
            yield plaintext


def _plain(pieces: Iterable[bytes]) -> bytes:
    """A frame's plaintext as one object (given as one piece: returned as it is)."""
    return b"".join(pieces)


def _source(data: Data) -> memoryview | FileBytes:
    return data if isinstance(data, FileBytes) else memoryview(data)


def map_frames(
    data: Data,
    frames: Sequence[Frame],
    then: Callable[[Iterable[bytes]], T],
    first_index: int = 0,
) -> Generator[T, None, None]:
    """``then(pieces)`` of every frame in order, each frame decoded and checksum-verified
    as ``decode`` does. ``pieces`` is the frame's plaintext: one piece, or for a frame whose
    blocks may decode to more than ``PIECES_MIN_PLAINTEXT`` a few pieces read as they decode
    (``decode_pieces``), so ``then`` holds one piece at a time if it wishes; a defect of such
    a frame is raised while ``then`` reads it.

    ``first_index`` is the index of ``frames[0]`` in the file (for error messages).
    """
    return _map_part(_source(data), frames, then, first_index)


def _map_part(
    data: memoryview | FileBytes,
    frames: Sequence[Frame],
    then: Callable[[Iterable[bytes]], T],
    first_index: int,
    *,
    pieces: bool = True,
) -> Generator[T, None, None]:
    """``map_frames`` in this process; with ``pieces`` a large frame is given in pieces."""
    k = first_index
    for view, origin, group in _windows(data, frames):
        for frame in group:
            if pieces and frame.blocks * MAX_BLOCK_SIZE > PIECES_MIN_PLAINTEXT:
                yield then(decode_pieces(view, frame, k, MAX_FRAME_PLAINTEXT, origin))
            else:
                yield then((_decode_bounded(view, frame, k, MAX_FRAME_PLAINTEXT, origin),))
            k += 1


def decode_torn(data: Data, start: int, index: int = 0, limit: int = MAX_FRAME_PLAINTEXT) -> bytes:
    """Whatever plaintext an incomplete final frame yields (flush mode); may be empty.

    A torn write leaves a prefix of a valid frame, which decodes without error; after a power
    loss the tail may also be zero-filled, which does not decode and recovers nothing. But a
    "torn frame" that does not decode and holds another frame's magic is a damaged header or
    block size in a middle frame (a bit flip that makes it claim the rest of the file):
    corruption, never a torn tail that a writer would truncate together with later frames.
    Like every decode it is bounded: a torn frame yielding more than ``limit`` is corruption.
    A file read on demand holds its torn frame within one scan window (``scan_file``).
    """
    view, origin = _window(data, start, len(data))
    at = start
    start -= origin
    obj = _DECOMPRESSOR.decompressobj()

    def too_large() -> CorruptLog:
        return _corrupt(
            f"incomplete frame decodes to more than {limit:,} bytes: "
            + budget.too_large("a frame", limit),
            at,
            index,
        )

    try:
        parts, _ = _fed(obj, view, start, limit, too_large)
    except zstandard.ZstdError as exc:
        if bytes(view[start + 1 :]).find(_MAGIC_BYTES) != -1:
            raise _corrupt(
                f"incomplete frame does not decode and is followed by frames ({exc})",
                at,
                index,
            ) from None
        return b""
    return b"".join(parts)


def encode(plaintext: bytes) -> bytes:
    """One complete checksummed frame, as every frame dsh-fork writes must be.

    Every call shares one compression context, made on first use (making one costs about as
    much as compressing a small frame, and relink encodes two frames per copy). ``compress``
    is a one-shot call that starts each frame afresh; frames are only encoded on the thread
    that drafts them."""
    global _compressor
    if _compressor is None:
        _compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=True)
    return _compressor.compress(plaintext)


_compressor: zstandard.ZstdCompressor | None = None


def batch_lines(lines: list[bytes], target: int = TARGET_FRAME_BYTES) -> list[bytes]:
    """Group newline-terminated lines into frame plaintexts of about ``target`` bytes."""
    batches: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        current.append(line)
        size += len(line)
        if size >= target:
            batches.append(b"".join(current))
            current, size = [], 0
    if current:
        batches.append(b"".join(current))
    return batches
