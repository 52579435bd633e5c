"""The zstd container: structural frame scan, per-frame decoding, frame encoding (format §5).

The scan walks frame headers and block headers without decompressing, exactly as DSH does, so
the end of the committed part is decided by structure, never by a decoder that may hide a torn
tail or stop silently at the first frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import zstandard

from .errors import CorruptLog

ZSTD_MAGIC = 0xFD2FB528
COMPRESSION_LEVEL = 3
TARGET_FRAME_BYTES = 64 * 1024
MAX_BLOCK_SIZE = 128 * 1024
_MAGIC_BYTES = ZSTD_MAGIC.to_bytes(4, "little")

_DECOMPRESSOR = zstandard.ZstdDecompressor()


@dataclass(frozen=True, slots=True)
class Frame:
    start: int
    end: int
    checksum: bool

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class FrameScan:
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
    buf = memoryview(data)
    size = len(buf)
    frames: list[Frame] = []
    pos = 0
    while pos < size and (limit is None or len(frames) < limit):
        start = pos
        index = len(frames)
        if size - pos < 4:
            # A torn write leaves a prefix of the magic; other short bytes are garbage.
            if not _MAGIC_BYTES.startswith(bytes(buf[pos:])):
                raise _corrupt("bad frame magic", pos, index)
            return FrameScan(tuple(frames), start, size)
        magic = int.from_bytes(buf[pos : pos + 4], "little")
        if magic != ZSTD_MAGIC:
            kind = "skippable frame" if 0x184D2A50 <= magic <= 0x184D2A5F else "bad frame magic"
            raise _corrupt(kind, pos, index)
        pos += 4
        if pos >= size:
            return FrameScan(tuple(frames), start, size)
        descriptor = buf[pos]
        if descriptor & 0x18:
            raise _corrupt("reserved frame header bits set", pos, index)
        single_segment = bool(descriptor & 0x20)
        header_len = 0 if single_segment else 1
        header_len += (0, 1, 2, 4)[descriptor & 3]
        fcs_flag = descriptor >> 6
        header_len += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        pos += 1 + header_len
        if pos > size:
            return FrameScan(tuple(frames), start, size)
        while True:
            if size - pos < 3:
                return FrameScan(tuple(frames), start, size)
            block = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
            last = block & 1
            block_type = (block >> 1) & 3
            if block_type == 3:
                raise _corrupt("reserved block type", pos, index)
            if block >> 3 > MAX_BLOCK_SIZE:
                # Beyond the format's Block_Maximum_Size: a damaged header, not a torn frame
                # (a writer repairing a "torn tail" here would truncate committed frames).
                raise _corrupt("block larger than 128 KiB", pos, index)
            payload = 1 if block_type == 1 else block >> 3
            pos += 3 + payload
            if pos > size:
                return FrameScan(tuple(frames), start, size)
            if last:
                break
        checksum = bool(descriptor & 4)
        if checksum:
            pos += 4
            if pos > size:
                return FrameScan(tuple(frames), start, size)
        frames.append(Frame(start, pos, checksum))
    return FrameScan(tuple(frames), None, size)


def decode(data: bytes | memoryview, frame: Frame, index: int = 0) -> bytes:
    """Plaintext of one complete frame; the content checksum is verified by libzstd."""
    obj = _DECOMPRESSOR.decompressobj()
    try:
        out = obj.decompress(data[frame.start : frame.end])
    except zstandard.ZstdError as exc:
        raise _corrupt(f"frame does not decode ({exc})", frame.start, index) from None
    if not obj.eof or obj.unused_data:
        raise _corrupt("frame does not end where its structure says", frame.start, index)
    return bytes(out)


def decode_torn(data: bytes | memoryview, start: int, index: int = 0) -> bytes:
    """Whatever plaintext an incomplete final frame yields (flush mode); may be empty.

    A torn write leaves a prefix of a valid frame, which decodes without error; after a power
    loss the tail may also be zero-filled, which does not decode and recovers nothing. But a
    "torn frame" that does not decode and holds another frame's magic is a damaged header or
    block size in a middle frame (a bit flip that makes it claim the rest of the file):
    corruption, never a torn tail that a writer would truncate together with later frames.
    """
    obj = _DECOMPRESSOR.decompressobj()
    try:
        return bytes(obj.decompress(data[start:]))
    except zstandard.ZstdError as exc:
        if bytes(data).find(_MAGIC_BYTES, start + 1) != -1:
            raise _corrupt(
                f"incomplete frame does not decode and is followed by frames ({exc})",
                start,
                index,
            ) from None
        return b""


def encode(plaintext: bytes) -> bytes:
    """One complete checksummed frame, as every frame dsh-fork writes must be."""
    return zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=True).compress(
        plaintext
    )


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
