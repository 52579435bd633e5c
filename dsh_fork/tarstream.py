"""Reading an archive from untrusted bytes in bounded pieces: its source, its decompression
and its tar structure.

``tarfile`` reads a PAX header or a GNU long name whole, whatever size its header claims (a
32 KB archive can ask for 600 MB), and its stream mode keeps a decompressor that may hand back a
gigabyte for one read. Here every step has a bound fixed before anything is allocated:

- the source is a regular file opened without blocking (a FIFO is refused: a pipe is read only
  as ``-``, standard input) or standard input itself;
- the decompressors hand out at most the bytes asked for (zstd's stream reader, gzip's, bz2's,
  xz's), and a zstd stream cut inside a frame is damage, seen by walking its frame structure;
- a tar header block is 512 bytes; an extended header (PAX, GNU long name) may hold at most
  ``MAX_EXTENDED_BYTES``; a member is handed out in pieces of at most ``PIECE_BYTES``;
- after the end-of-archive marker at most ``MAX_TRAILING_BYTES`` of zeros may follow (tar pads
  its last record), so a stream followed by gigabytes of anything is refused, not decompressed.

Every refusal is ``CORRUPT_LOG`` (exit 9), a bound's refusal says "too large" and the bound.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import lzma
import os
import stat
import sys
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Any, Literal, Protocol

import zstandard
from msgspec import Struct

from .errors import CorruptLog, IoError, UsageError

Compression = Literal["none", "gz", "xz", "bz2", "zst"]
BLOCK = 512
PIECE_BYTES = 1 << 20
MAX_EXTENDED_BYTES = 64 * 1024
"""A PAX header or GNU long name: a bundle's names are under 600 bytes (its PAX headers hold a
path and nothing else), and this leaves room for any other tar's mtime and owner records."""
MAX_EXTENDED_RUN = 4
"""Extended headers in a row before one member (a PAX header and a GNU long name at most)."""
MAX_TRAILING_BYTES = 1 << 20
"""Zeros allowed after the end-of-archive marker: tar pads to its record (10 KiB by default,
1 MiB with the largest blocking factor people use)."""
MAX_WINDOW_SIZE = 32 * 1024 * 1024
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_MAGICS: tuple[tuple[bytes, Compression], ...] = (
    (_ZSTD_MAGIC, "zst"),
    (b"\x1f\x8b", "gz"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_DECODE_ERRORS = (EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError, OSError, ValueError)
"""What a damaged compressed stream raises (bz2 and gzip report some damage as OSError)."""


class Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def damaged(where: str, what: str) -> CorruptLog:
    return CorruptLog(f"{where}: {what}", path=where)


def too_large(where: str, what: str, size: int, limit: int) -> CorruptLog:
    return damaged(where, f"{what} of {size:,} bytes is too large (the limit is {limit:,})")


# -- the source ---------------------------------------------------------------------------------


class Source:
    """Where an archive's bytes come from: a regular file (read again for each pass from its
    start) or standard input's pipe (read once). ``size`` is a regular file's size."""

    def __init__(self, fd: int, name: str, size: int | None, *, owned: bool) -> None:
        self.fd = fd
        self.name = name
        self.size = size
        self._owned = owned

    @property
    def seekable(self) -> bool:
        return self.size is not None

    def rewind(self) -> None:
        if self.size is not None:
            os.lseek(self.fd, 0, os.SEEK_SET)

    def raw(self) -> IO[bytes]:
        """A buffered reader over the descriptor (which stays open when it is closed)."""
        return os.fdopen(self.fd, "rb", closefd=False)

    def close(self) -> None:
        if self._owned and self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


STDIN_NAME = "-"


def open_source(name: str, path: os.PathLike[str] | str) -> Source:
    """Open an archive for reading without ever blocking: ``-`` is standard input (a pipe or a
    redirected file, never a terminal); any other name must be a regular file. A named FIFO is
    refused with a hint to pipe it into ``-``: opening it would wait for a writer forever."""
    if name == STDIN_NAME:
        return _stdin()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such archive file", path=str(path)) from None
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise UsageError(f"{path}: no such archive file", path=str(path)) from None
        raise IoError.of(exc, "read", where=path) from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise IoError.of(exc, "read", where=path) from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISFIFO(st.st_mode):
            raise UsageError(
                f"{path} is a FIFO: an archive is read from a pipe only as '-' "
                f"(e.g. dsh-fork import - < {path})",
                path=str(path),
            )
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UsageError(f"{path}: no such archive file ({kind})", path=str(path))
    return Source(fd, str(path), st.st_size, owned=True)


def _stdin() -> Source:
    fd = sys.stdin.fileno() if sys.stdin is not None else 0
    try:
        st = os.fstat(fd)
    except OSError:
        raise UsageError("standard input is closed: nothing to import") from None
    if os.isatty(fd):
        raise UsageError("refusing to read an archive from a terminal: pipe one into '-'")
    size = st.st_size if stat.S_ISREG(st.st_mode) else None
    if size is not None:
        os.lseek(fd, 0, os.SEEK_SET)
    return Source(fd, "<stdin>", size, owned=False)


# -- decompression ------------------------------------------------------------------------------


def detect(head: bytes) -> Compression:
    """The compression a stream's first bytes (its magic number) show; tar has none."""
    for magic, kind in _MAGICS:
        if head.startswith(magic):
            return kind
    return "none"


class _Prefixed:
    """A stream whose first bytes were read to detect its compression, handed back first."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def read(self, size: int = -1, /) -> bytes:
        if not self._head:
            return self._rest.read(size)
        cut = len(self._head) if size < 0 else size
        head, self._head = self._head[:cut], self._head[cut:]
        return head  # a short read: every reader of it asks again

    def readable(self) -> bool:
        return True


def _head(raw: IO[bytes]) -> bytes:
    head = b""
    while len(head) < 6:
        chunk = raw.read(6 - len(head))
        if not chunk:
            break
        head += chunk
    return head


def decompressing(raw: IO[bytes], compression: Compression | None) -> Reader:
    """A reader of the plain tar stream whose ``read(n)`` never returns more than ``n`` bytes,
    whatever the compressed bytes claim; ``compression`` None detects it from the content."""
    head = _head(raw)
    kind = detect(head) if compression is None else compression
    source: Any = _Prefixed(head, raw)
    if kind == "zst":
        walk = _ZstdWalk(source)
        decoder = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW_SIZE)
        reader: Any = decoder.stream_reader(
            walk,  # type: ignore[arg-type]  # any object with read()
            read_size=PIECE_BYTES,
            read_across_frames=True,
        )
        return _Checked(reader, walk)
    if kind == "gz":
        return gzip.GzipFile(fileobj=source, mode="rb")
    if kind == "bz2":
        return bz2.BZ2File(source)
    if kind == "xz":
        return lzma.LZMAFile(source)
    return source  # type: ignore[no-any-return]


class _Checked:
    """zstd's stream reader, which says nothing of a stream cut inside a frame: its source's
    frame walk is asked at the stream's end."""

    def __init__(self, reader: Any, walk: _ZstdWalk) -> None:
        self._reader = reader
        self._walk = walk

    def read(self, size: int = -1, /) -> bytes:
        data: bytes = self._reader.read(size)
        if not data and size != 0:
            self._walk.finish()
        return data


class _ZstdWalk:
    """The compressed bytes passed on unchanged while their frame structure (format §5: frame
    header, block headers, checksum) is followed, so that the stream's end is known to fall
    between frames. Only headers are parsed; block contents are counted, not read."""

    def __init__(self, source: Reader) -> None:
        self._source = source
        self._buf = b""  # a header not yet complete
        self._skip = 0  # content bytes still to pass
        self._state = "magic"
        self._checksum = False
        self._ended = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        data = self._source.read(size if size > 0 else PIECE_BYTES)
        if not data:
            self._ended = True
            return b""
        self._walk(memoryview(data))
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def finish(self) -> None:
        if self._ended and (self._state != "magic" or self._buf or self._skip):
            raise EOFError("the zstd stream ends inside a frame")

    def _walk(self, data: memoryview) -> None:
        pos = 0
        while pos < len(data):
            if self._skip:
                step = min(self._skip, len(data) - pos)
                self._skip -= step
                pos += step
                continue
            need = self._needed()
            take = min(need - len(self._buf), len(data) - pos)
            self._buf += bytes(data[pos : pos + take])
            pos += take
            if len(self._buf) == need:
                self._advance()

    def _needed(self) -> int:
        if self._state == "magic":
            return 4
        if self._state == "descriptor":
            return 1
        if self._state == "header":
            return _frame_header_rest(self._buf[0]) + 1
        if self._state == "skippable":
            return 4
        return 3  # a block header

    def _advance(self) -> None:
        buf, self._buf = self._buf, b""
        if self._state == "magic":
            value = int.from_bytes(buf, "little")
            if buf == _ZSTD_MAGIC:
                self._state = "descriptor"
            elif value & 0xFFFFFFF0 == 0x184D2A50:
                self._state = "skippable"
            else:
                raise zstandard.ZstdError("not a zstd frame (bad magic number)")
        elif self._state == "descriptor":
            self._checksum = bool(buf[0] & 0x04)
            self._buf = buf
            self._state = "header"
            if _frame_header_rest(buf[0]) == 0:
                self._buf = b""
                self._state = "block"
        elif self._state == "header":
            self._state = "block"
        elif self._state == "skippable":
            self._skip = int.from_bytes(buf, "little")
            self._state = "magic"
        else:
            value = int.from_bytes(buf, "little")
            last, kind, size = value & 1, (value >> 1) & 3, value >> 3
            if kind == 3:
                raise zstandard.ZstdError("reserved zstd block type")
            self._skip = 1 if kind == 1 else size
            if last:
                self._state = "magic"
                self._skip += 4 if self._checksum else 0


def _frame_header_rest(descriptor: int) -> int:
    """Bytes of a zstd frame header after its descriptor: window, dictionary id, content size."""
    single = descriptor & 0x20
    fcs = (1 if single else 0, 2, 4, 8)[descriptor >> 6]
    return (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3] + fcs


# -- the tar structure --------------------------------------------------------------------------


Kind = Literal["file", "dir", "symlink", "hardlink", "other"]


class Entry(Struct):
    """One member as its header (and extended headers) describe it."""

    name: str
    size: int
    kind: Kind


class TarReader:
    """The members of a plain tar stream, one at a time; ``finish`` reads what follows the
    end-of-archive marker (zeros, at most ``MAX_TRAILING_BYTES``) to the stream's end."""

    def __init__(self, stream: Reader, where: str) -> None:
        self._stream = stream
        self._where = where
        self._left = 0  # content and padding of the current member not yet read
        self._ended = False

    def next(self) -> Entry | None:
        """The next member's entry, or None at the end-of-archive marker."""
        self._skip_rest()
        name: str | None = None
        size: int | None = None
        for _ in range(MAX_EXTENDED_RUN + 1):
            block = self._exact(BLOCK, allow_end=True)
            if block is None or block == bytes(BLOCK):
                self._ended = True
                return None
            kind, field_name, field_size = self._header(block)
            if kind in (b"x", b"g", b"L", b"K"):
                data = self._extended(field_size, kind)
                if kind == b"x":
                    pax = _pax(data, self._where)
                    name = pax.get("path", name)
                    if "size" in pax:
                        size = _pax_size(pax["size"], self._where)
                elif kind == b"L":
                    name = data.split(b"\x00", 1)[0].decode("utf-8", "surrogateescape")
                continue
            entry = Entry(
                name=field_name if name is None else name,
                size=field_size if size is None else size,
                kind=_kind(kind),
            )
            if entry.kind not in ("file", "other"):
                entry.size = 0  # dirs and links have no content in a tar, whatever they claim
            self._left = _padded(entry.size)
            return entry
        raise damaged(self._where, f"more than {MAX_EXTENDED_RUN} extended tar headers in a row")

    def content(self, entry: Entry) -> Iterator[bytes]:
        """The current member's bytes in pieces of at most ``PIECE_BYTES``."""
        remaining = entry.size
        while remaining:
            piece = self._exact(min(remaining, PIECE_BYTES))
            assert piece is not None
            remaining -= len(piece)
            self._left -= len(piece)
            yield piece
        self._skip_rest()

    def finish(self) -> None:
        """The end-of-archive marker is read; only zeros may follow, and not many."""
        if not self._ended:
            while self.next() is not None:
                pass
        seen = 0
        while True:
            chunk = self._read(min(PIECE_BYTES, MAX_TRAILING_BYTES + 1 - seen))
            if not chunk:
                return
            seen += len(chunk)
            if chunk.count(0) != len(chunk):
                raise damaged(self._where, "data follows the tar archive's end")
            if seen > MAX_TRAILING_BYTES:
                raise damaged(
                    self._where,
                    f"more than {MAX_TRAILING_BYTES:,} bytes follow the tar archive's end "
                    "(too large a padding)",
                )

    # -- steps --------------------------------------------------------------------------------

    def _skip_rest(self) -> None:
        while self._left:
            piece = self._exact(min(self._left, PIECE_BYTES))
            assert piece is not None
            self._left -= len(piece)

    def _read(self, size: int) -> bytes:
        try:
            return self._stream.read(size)
        except _DECODE_ERRORS as exc:
            raise damaged(self._where, f"damaged or truncated archive ({exc})") from None

    def _exact(self, size: int, *, allow_end: bool = False) -> bytes | None:
        parts: list[bytes] = []
        got = 0
        while got < size:
            chunk = self._read(size - got)
            if not chunk:
                if allow_end and got == 0:
                    return None
                raise damaged(self._where, "damaged or truncated archive (it ends inside a member)")
            parts.append(chunk)
            got += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _header(self, block: bytes) -> tuple[bytes, str, int]:
        stored = _octal(block[148:156])
        unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
        signed = unsigned - 2 * sum(b for b in block[:148] + block[156:] if b > 127)
        if stored is None or stored not in (unsigned, signed):
            raise damaged(self._where, "not a readable tar archive (bad header checksum)")
        size = _number(block[124:136])
        if size is None:
            raise damaged(self._where, "not a readable tar archive (bad member size)")
        name = block[0:100].split(b"\x00", 1)[0]
        if block[257:263] == b"ustar\x00":
            prefix = block[345:500].split(b"\x00", 1)[0]
            if prefix:
                name = prefix + b"/" + name
        return block[156:157], name.decode("utf-8", "surrogateescape"), size

    def _extended(self, size: int, kind: bytes) -> bytes:
        if size > MAX_EXTENDED_BYTES:
            what = "a GNU long name" if kind in (b"L", b"K") else "a tar extended (PAX) header"
            raise too_large(self._where, what, size, MAX_EXTENDED_BYTES)
        data = self._exact(_padded(size)) if size else b""
        assert data is not None
        return data[:size]


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _kind(flag: bytes) -> Kind:
    if flag in (b"0", b"\x00", b"7"):
        return "file"
    if flag == b"5":
        return "dir"
    if flag == b"2":
        return "symlink"
    if flag == b"1":
        return "hardlink"
    return "other"


def _octal(field: bytes) -> int | None:
    text = field.replace(b"\x00", b" ").strip()
    if not text or any(c not in b"01234567" for c in text):
        return None
    return int(text, 8)


def _number(field: bytes) -> int | None:
    """A numeric header field: octal, or GNU's base-256 (its first byte 0x80) for big sizes."""
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    if field[0] == 0xFF:
        return None  # negative
    return _octal(field)


def _pax(data: bytes, where: str) -> dict[str, str]:
    """The records of a PAX header, ``"<length> <key>=<value>\\n"`` each."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos, pos + 21)
        if space < 0 or not data[pos:space].isdigit():
            if data[pos:].count(0) == len(data) - pos:
                break
            raise damaged(where, "not a readable tar archive (bad PAX record)")
        length = int(data[pos:space])
        record = data[space + 1 : pos + length]
        if length <= space - pos or pos + length > len(data) or not record.endswith(b"\n"):
            raise damaged(where, "not a readable tar archive (bad PAX record)")
        key, sep, value = record[:-1].partition(b"=")
        if not sep:
            raise damaged(where, "not a readable tar archive (bad PAX record)")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _pax_size(text: str, where: str) -> int:
    if not text.isdigit() or len(text) > 20:
        raise damaged(where, "not a readable tar archive (bad PAX size)")
    return int(text)


# -- writing ------------------------------------------------------------------------------------

RECORD = 20 * BLOCK
META_LEVEL = 3
_STORED_WINDOW = 0x38
"""A zstd Window_Descriptor of 128 KiB (exponent 7: 2**17), the size of one raw block."""
_RAW_BLOCK = 128 * 1024


def stored_frame(size: int, pieces: Iterable[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """``size`` bytes given in ``pieces`` as one zstd frame of raw blocks (format §5's container,
    nothing compressed), in pieces that slice the given ones rather than copy them: a log is
    zstd already, so compressing it again costs CPU time and saves nothing. No checksum: the
    manifest's sha256 of every log is what import verifies. A piece is used before the next
    is asked for, so a reader may hand out one buffer again and again."""
    yield _ZSTD_MAGIC + bytes((0x00, _STORED_WINDOW))
    done = 0
    held = b""  # the start of a block cut by a piece's end (rare: pieces are whole blocks)
    for piece in pieces:
        view = memoryview(piece).cast("B")
        if held:
            cut = _RAW_BLOCK - len(held)
            block = bytes(held) + bytes(view[:cut])
            view = view[cut:]
            if len(block) < _RAW_BLOCK and done + len(block) < size:
                held = block
                continue
            held = b""
            done += len(block)
            yield _block_header(len(block), done >= size)
            yield block
        while len(view) >= _RAW_BLOCK or (view and done + len(view) >= size):
            block_view = view[:_RAW_BLOCK]
            view = view[len(block_view) :]
            done += len(block_view)
            yield _block_header(len(block_view), done >= size)
            yield block_view
        if view:
            held = bytes(view)
    if done != size:
        raise ValueError(f"a stored member of {size} bytes was given {done + len(held)}")
    if size == 0:
        yield _block_header(0, True)


def _block_header(length: int, last: bool) -> bytes:
    return ((length << 3) | int(last)).to_bytes(3, "little")


class _Counted:
    """A binary sink that counts what passes through it (the compressed bytes written)."""

    def __init__(self, target: IO[bytes]) -> None:
        self._target = target
        self.count = 0

    def write(self, data: bytes | memoryview) -> int:
        """All of ``data``: an unbuffered file may take a large write in parts."""
        view = memoryview(data).cast("B")
        while view:
            done = self._target.write(view)
            view = view[len(view) if done is None else done :]
        self.count += len(data)
        return len(data)

    def flush(self) -> None:
        self._target.flush()


class TarWriter:
    """A PAX tar stream written to ``target`` through ``compression``. Members' headers come
    from ``tarfile.TarInfo``; their contents are written as given, and with zstd a member added
    ``stored`` goes into frames of raw blocks instead of through the compressor. Each writer's
    output is a whole compressed stream, so the outputs of two writers may follow each other
    (zstd frames, gzip members, bz2 and xz streams concatenate)."""

    def __init__(self, target: IO[bytes], compression: Compression) -> None:
        self._out = _Counted(target)
        self._compression = compression
        self._written = 0
        self._meta: list[bytes] = []
        self._held = 0
        self._zstd = zstandard.ZstdCompressor(level=META_LEVEL, write_checksum=True)
        self._sink: Any = self._out
        if compression == "gz":
            self._sink = gzip.GzipFile(fileobj=self._out, mode="wb", mtime=0)
        elif compression == "bz2":
            self._sink = bz2.BZ2File(self._out, "wb")
        elif compression == "xz":
            self._sink = lzma.LZMAFile(self._out, "wb")  # type: ignore[arg-type]  # noqa: SIM115

    @property
    def bytes_out(self) -> int:
        """Bytes written to the target so far (all of them once closed)."""
        return self._out.count

    def add(self, name: str, data: bytes | memoryview, mtime: int, *, stored: bool = False) -> None:
        """A regular file 0600 owned by nobody in particular: nothing of this machine leaks."""
        self.add_pieces(name, len(data), (data,), mtime, stored=stored)

    def add_pieces(
        self,
        name: str,
        size: int,
        pieces: Iterable[bytes | memoryview],
        mtime: int,
        *,
        stored: bool = False,
    ) -> None:
        """``add`` of a member of ``size`` bytes given in pieces, each written before the next
        is asked for (a log is copied through one buffer, never held whole)."""
        import tarfile  # only a writer needs its header encoder

        info = tarfile.TarInfo(name)
        info.size = size
        info.mode = 0o600
        info.mtime = mtime
        info.type = tarfile.REGTYPE
        self._put(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        if stored and self._compression == "zst":
            self._flush_meta()
            for part in stored_frame(size, pieces):
                self._out.write(part)
            self._written += size
        else:
            done = 0
            for piece in pieces:
                done += len(piece)
                self._put(piece)
            if done != size:
                raise ValueError(f"a member of {size} bytes was given {done}")
        self._put(bytes(_padded(size) - size))

    def close(self, *, end: bool = True) -> None:
        """Finish the compressed stream; with ``end`` after the end-of-archive marker (two
        zero blocks), padded to a whole record as tar does."""
        if end:
            total = self._written + 2 * BLOCK
            self._put(bytes(2 * BLOCK + (-total % RECORD)))
        self._flush_meta()
        if self._sink is not self._out:
            self._sink.close()

    def _put(self, data: bytes | memoryview) -> None:
        if not data:
            return
        self._written += len(data)
        if self._compression == "zst":
            self._meta.append(bytes(data))
            self._held += len(data)
            if self._held >= PIECE_BYTES:
                self._flush_meta()
        else:
            self._sink.write(data)

    def _flush_meta(self) -> None:
        if self._meta:
            self._out.write(self._zstd.compress(b"".join(self._meta)))
            self._meta, self._held = [], 0
