"""The bundle: one tar archive holding a family of sessions and a manifest that describes it.

Layout (members in this order):
- ``manifest.json``: ids, parent links, generations, cwd, project dir, size and sha256 of every
  log, the format version, the dsh-fork version and the manifest's own schema version;
- ``sessions/<project dir>/<session dir>/session.v4.jsonl.zstd`` for each session, parents before
  children, each the bytes a stable read saw (its committed part).

The archive is compressed when its name says so (``.tar.gz``/``.tgz``, ``.tar.xz``/``.txz``,
``.tar.bz2``/``.tbz2``, ``.tar.zst``/``.tzst``); reading detects the compression from the
content. Everything wrong with a bundle's content (truncated, tampered, a member that is not a
regular file, a manifest that does not match the logs) is ``CORRUPT_LOG``; a manifest of a newer
schema is ``UNSUPPORTED_FORMAT``. Reading is streamed, one member at a time, so memory stays
bounded by the largest log, as it is for every other command.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import io
import lzma
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal

import orjson
import zstandard
from msgspec import Struct

from . import __version__
from . import frames as zframes
from .errors import CorruptLog, DshForkError, UnsupportedFormat, UsageError
from .generations import CURRENT_NAME, SUPPORTED_VERSION
from .layout import encode_segment, is_absolute_cwd, project_dir_name
from .model import MODEL_TYPES, Facts
from .records import Header, parse_event, parse_header

MANIFEST_NAME = "manifest.json"
SESSIONS_DIR = "sessions"
SCHEMA_VERSION = 1
KIND = "dsh-fork-bundle"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MEMBER_MODE = 0o600
READ_CHUNK = 1024 * 1024
MAX_NAME_BYTES = 255
MAX_EXPANSION = 4
EXPANSION_SLACK = 1024 * 1024

Compression = Literal["none", "gz", "xz", "bz2", "zst"]
Role = Literal["top", "subagent", "fork"]
_SUFFIXES: tuple[tuple[tuple[str, ...], Compression], ...] = (
    ((".tar.gz", ".tgz"), "gz"),
    ((".tar.xz", ".txz"), "xz"),
    ((".tar.bz2", ".tbz2", ".tbz"), "bz2"),
    ((".tar.zst", ".tar.zstd", ".tzst"), "zst"),
    ((".tar",), "none"),
)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ARCHIVE_ERRORS = (
    tarfile.TarError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    zstandard.ZstdError,
    ValueError,
)


def compression_of(name: str) -> Compression:
    """The compression a file name asks for; a name without a tar suffix is a usage error."""
    lower = name.lower()
    for suffixes, kind in _SUFFIXES:
        if lower.endswith(suffixes):
            return kind
    raise UsageError(
        f"{name}: name the archive .tar, .tar.gz, .tgz, .tar.xz, .tar.bz2 or .tar.zst",
        path=name,
    )


def member_name(project_dir: str, session_id: str) -> str:
    """Where a session's log lies in the archive: the root layout under ``sessions/``."""
    return f"{SESSIONS_DIR}/{project_dir}/{encode_segment(session_id)}/{CURRENT_NAME}"


# -- the manifest -----------------------------------------------------------------------------


class BundleSession(Struct, frozen=True):
    """One session of a bundle as its manifest records it."""

    id: str
    role: Role
    parent_session: str | None
    origin: str | None
    cwd: str | None
    project_dir: str
    generation: int
    created_at: int
    is_seeded: bool
    delegation_depth: int
    events: int
    cut: int
    member: str
    size: int
    sha256: str
    lock_held: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": self.role,
            "parentSession": self.parent_session,
            "origin": self.origin,
            "cwd": self.cwd,
            "projectDir": self.project_dir,
            "sessionDir": encode_segment(self.id),
            "generation": self.generation,
            "createdAt": self.created_at,
            "isSeeded": self.is_seeded,
            "delegationDepth": self.delegation_depth,
            "events": self.events,
            "cut": self.cut,
            "lockHeld": self.lock_held,
            "file": {"path": self.member, "size": self.size, "sha256": self.sha256},
        }

    @classmethod
    def from_json(cls, value: Any, where: str) -> BundleSession:
        if not isinstance(value, dict):
            raise _bad(where, "a session entry is not an object")
        file = value.get("file")
        if not isinstance(file, dict):
            raise _bad(where, "a session entry has no file object")
        try:
            session = cls(
                id=_text(value, "id"),
                role=_role(value.get("role")),
                parent_session=_text(value, "parentSession", optional=True),
                origin=_text(value, "origin", optional=True),
                cwd=_text(value, "cwd", optional=True),
                project_dir=_text(value, "projectDir"),
                generation=_count(value, "generation"),
                created_at=_count(value, "createdAt"),
                is_seeded=_flag(value, "isSeeded"),
                delegation_depth=_count(value, "delegationDepth"),
                events=_count(value, "events"),
                cut=_count(value, "cut"),
                member=_text(file, "path"),
                size=_count(file, "size"),
                sha256=_text(file, "sha256"),
                lock_held=_flag(value, "lockHeld"),
            )
        except (KeyError, TypeError) as exc:
            raise _bad(where, f"session entry: {exc}") from None
        if session.id == "":
            raise _bad(where, "a session entry has an empty id")
        if len(encode_segment(session.id).encode()) > MAX_NAME_BYTES:
            raise _bad(where, f"{session.id[:40]}…: the id is too long for a directory name")
        if session.cwd is not None and not (session.cwd and is_absolute_cwd(session.cwd)):
            raise _bad(where, f"{session.id}: cwd {session.cwd!r} is not an absolute path")
        if session.project_dir != project_dir_name(session.cwd):
            raise _bad(where, f"{session.id}: projectDir does not match its cwd")
        if session.member != member_name(session.project_dir, session.id):
            raise _bad(where, f"{session.id}: unexpected file path {session.member!r}")
        if len(session.sha256) != 64 or any(c not in "0123456789abcdef" for c in session.sha256):
            raise _bad(where, f"{session.id}: sha256 is not 64 lowercase hex digits")
        return session


class Manifest(Struct, frozen=True):
    """What a bundle holds: the family of ``top``, parents before children."""

    schema_version: int
    kind: str
    dsh_fork_version: str
    format_version: int
    created_at: int
    top: str
    forks: bool
    sessions: tuple[BundleSession, ...]

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.sessions)

    def to_json(self) -> dict[str, Any]:
        return {
            "schemaVersion": self.schema_version,
            "kind": self.kind,
            "dshForkVersion": self.dsh_fork_version,
            "formatVersion": self.format_version,
            "createdAt": self.created_at,
            "top": self.top,
            "forks": self.forks,
            "totalBytes": self.total_bytes,
            "sessions": [s.to_json() for s in self.sessions],
        }

    def encoded(self) -> bytes:
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2) + b"\n"

    @classmethod
    def parse(cls, data: bytes, where: str) -> Manifest:
        """A manifest, checked: its schema, and a family in which every parent comes first."""
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _bad(where, "manifest.json is not JSON") from None
        if not isinstance(value, dict) or value.get("kind") != KIND:
            raise _bad(where, "manifest.json is not a dsh-fork bundle manifest")
        schema = value.get("schemaVersion")
        if type(schema) is not int or schema < 1:
            raise _bad(where, "manifest.json has no valid schemaVersion")
        if schema > SCHEMA_VERSION:
            raise UnsupportedFormat(
                f"{where}: bundle manifest schema {schema} is newer than {SCHEMA_VERSION} "
                "(written by a newer dsh-fork)",
                version=schema,
                path=where,
            )
        raw_sessions = value.get("sessions")
        if not isinstance(raw_sessions, list) or not raw_sessions:
            raise _bad(where, "manifest.json lists no sessions")
        try:
            manifest = cls(
                schema_version=schema,
                kind=KIND,
                dsh_fork_version=_text(value, "dshForkVersion"),
                format_version=_count(value, "formatVersion"),
                created_at=_count(value, "createdAt"),
                top=_text(value, "top"),
                forks=_flag(value, "forks"),
                sessions=tuple(BundleSession.from_json(s, where) for s in raw_sessions),
            )
        except (KeyError, TypeError) as exc:
            raise _bad(where, f"manifest: {exc}") from None
        if manifest.format_version != SUPPORTED_VERSION:
            raise UnsupportedFormat(
                f"{where}: the bundle holds format v{manifest.format_version}; dsh-fork "
                f"imports v{SUPPORTED_VERSION}",
                version=manifest.format_version,
            )
        _check_family(manifest, where)
        return manifest


def _check_family(manifest: Manifest, where: str) -> None:
    seen: set[str] = set()
    for index, session in enumerate(manifest.sessions):
        if session.id in seen:
            raise _bad(where, f"{session.id} is listed twice")
        if session.generation != SUPPORTED_VERSION:
            raise _bad(where, f"{session.id}: generation {session.generation} in a v4 bundle")
        if index == 0:
            if session.id != manifest.top or session.role != "top":
                raise _bad(where, "the first session is not the bundle's top session")
        elif session.role == "top" or session.parent_session not in seen:
            raise _bad(where, f"{session.id}: its parent is not listed before it")
        if session.role == "subagent" and session.origin != "subagent":
            raise _bad(where, f"{session.id}: listed as a subagent, but its origin is not")
        if session.role == "fork" and (session.origin is not None or not session.is_seeded):
            raise _bad(where, f"{session.id}: listed as a fork child, but it is not one")
        seen.add(session.id)


def _bad(where: str, what: str) -> CorruptLog:
    return CorruptLog(f"{where}: {what}", path=where)


def _text(value: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    item = value.get(key) if optional else value[key]
    if item is None and optional:
        return None
    if not isinstance(item, str):
        raise TypeError(f"{key} is not a string")
    return item


def _count(value: dict[str, Any], key: str) -> int:
    item = value[key]
    if type(item) is not int or item < 0:
        raise TypeError(f"{key} is not a non-negative integer")
    return item


def _flag(value: dict[str, Any], key: str) -> bool:
    item = value[key]
    if type(item) is not bool:
        raise TypeError(f"{key} is not a boolean")
    return item


def _role(value: Any) -> Role:
    if value == "top":
        return "top"
    if value == "subagent":
        return "subagent"
    if value == "fork":
        return "fork"
    raise TypeError("role is not top, subagent or fork")


def new_manifest(top: str, forks: bool, created_at: int, sessions: list[BundleSession]) -> Manifest:
    return Manifest(
        schema_version=SCHEMA_VERSION,
        kind=KIND,
        dsh_fork_version=__version__,
        format_version=SUPPORTED_VERSION,
        created_at=created_at,
        top=top,
        forks=forks,
        sessions=tuple(sessions),
    )


# -- writing an archive -------------------------------------------------------------------------


@contextlib.contextmanager
def archive_writer(target: IO[bytes], compression: Compression) -> Iterator[tarfile.TarFile]:
    """A streaming tar writer over ``target`` (which the caller closes), PAX format."""
    if compression == "zst":
        stream: Any = zstandard.ZstdCompressor(level=10, write_checksum=True).stream_writer(
            target, closefd=False
        )
        try:
            with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                yield tar
        finally:
            stream.flush(zstandard.FLUSH_FRAME)
            stream.close()
        return
    mode: Any = "w|" if compression == "none" else f"w|{compression}"
    with tarfile.open(fileobj=target, mode=mode, format=tarfile.PAX_FORMAT) as tar:
        yield tar


def add_member(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    """A regular file 0600 owned by nobody in particular: nothing of this machine leaks."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = MEMBER_MODE
    info.mtime = mtime
    info.type = tarfile.REGTYPE
    tar.addfile(info, io.BytesIO(data))


# -- reading an archive -------------------------------------------------------------------------


class Member(Struct):
    """One verified log of a bundle: its manifest entry and its bytes."""

    session: BundleSession
    data: bytes


def read_manifest(path: Path) -> Manifest:
    """The manifest alone (the first member): cheap, for a preview."""
    with _open_archive(path, drain=False) as tar:
        return _first_manifest(tar, str(path))


def members(path: Path, manifest: Manifest | None = None) -> Iterator[Member]:
    """Every log of the bundle in archive order, each checked against the manifest (size,
    sha256, then the log itself: a complete v4 log whose header names the listed id, cwd and
    parent). Anything the manifest does not list, a member that is not a regular file, a
    missing member and a truncated archive are ``CORRUPT_LOG``."""
    where = str(path)
    with _open_archive(path) as tar:
        found = _first_manifest(tar, where)
        if manifest is not None and found != manifest:
            raise _bad(where, "the manifest changed since it was read")
        _check_sizes(found, path, where)
        expected = {s.member: s for s in found.sessions}
        order = [s.member for s in found.sessions]
        position = 0
        try:
            while (info := tar.next()) is not None:
                session = expected.get(info.name)
                if session is None:
                    raise _bad(where, f"unexpected member {info.name!r}")
                if not info.isreg():
                    raise _bad(where, f"{info.name} is not a regular file")
                if order[position] != info.name:
                    raise _bad(where, f"{info.name} is out of order or listed twice")
                position += 1
                yield Member(session, _member_bytes(tar, info, session, where))
        except _ARCHIVE_ERRORS as exc:
            raise _bad(where, f"damaged or truncated archive ({exc})") from None
        except OSError as exc:  # bz2 and gzip report damaged streams as OSError
            raise _bad(where, f"damaged or truncated archive ({exc})") from None
        if position != len(order):
            raise _bad(where, f"{order[position]} is missing (the archive ends before it)")


def _check_sizes(manifest: Manifest, path: Path, where: str) -> None:
    """The logs a manifest declares must fit in the archive: they are zstd data, which no
    outer compression shrinks much, so a bundle whose logs add up to many times its own size
    is a decompression bomb, and memory stays bounded by what the archive can hold."""
    limit = MAX_EXPANSION * path.stat().st_size + EXPANSION_SLACK
    if manifest.total_bytes > limit:
        raise _bad(
            where,
            f"the manifest declares {manifest.total_bytes} bytes of logs, more than an archive "
            f"of {path.stat().st_size} bytes can hold",
        )


def _member_bytes(
    tar: tarfile.TarFile, info: tarfile.TarInfo, session: BundleSession, where: str
) -> bytes:
    if info.size != session.size:
        raise _bad(where, f"{info.name}: {info.size} bytes, the manifest says {session.size}")
    handle = tar.extractfile(info)
    if handle is None:
        raise _bad(where, f"{info.name} is not a regular file")
    digest = hashlib.sha256()
    chunks: list[bytes] = []
    while True:
        chunk = handle.read(READ_CHUNK)
        if not chunk:
            break
        digest.update(chunk)
        chunks.append(chunk)
    data = b"".join(chunks)
    if len(data) != session.size:
        raise _bad(where, f"{info.name} is truncated ({len(data)} of {session.size} bytes)")
    if digest.hexdigest() != session.sha256:
        raise _bad(where, f"{info.name}: sha256 differs from the manifest (tampered or damaged)")
    return data


def _first_manifest(tar: tarfile.TarFile, where: str) -> Manifest:
    try:
        info = tar.next()
        if info is None or info.name != MANIFEST_NAME:
            raise _bad(where, f"the archive does not start with {MANIFEST_NAME}")
        if not info.isreg() or info.size > MAX_MANIFEST_BYTES:
            raise _bad(where, f"{MANIFEST_NAME} is not a regular file of a sane size")
        handle = tar.extractfile(info)
        assert handle is not None
        data = handle.read()
    except _ARCHIVE_ERRORS as exc:
        raise _bad(where, f"not a readable tar archive ({exc})") from None
    except OSError as exc:
        raise _bad(where, f"not a readable tar archive ({exc})") from None
    if len(data) != info.size:
        raise _bad(where, f"{MANIFEST_NAME} is truncated")
    return Manifest.parse(data, where)


@contextlib.contextmanager
def _open_archive(path: Path, *, drain: bool = True) -> Iterator[tarfile.TarFile]:
    """A streaming reader; the compression is read from the content, not from the name.

    The decompressor is ours, not tarfile's, and is read to its very end once the members are
    read (``_drain``), so a cut through the compressed stream's last bytes (a gzip trailer, an
    unfinished zstd frame) is damage too, even when every member came out whole.
    """
    if path.is_dir() or not path.exists():
        raise UsageError(f"{path}: no such archive file", path=str(path))
    try:
        handle = open(path, "rb")  # noqa: SIM115  (closed below, after the tar reader)
    except OSError as exc:
        raise UsageError(f"{path}: cannot open ({exc.strerror})", path=str(path)) from None
    try:
        source = _decompressing(handle)
        try:
            tar = tarfile.open(fileobj=source, mode="r|")  # noqa: SIM115
        except _ARCHIVE_ERRORS as exc:
            raise _bad(str(path), f"not a readable tar archive ({exc})") from None
        except OSError as exc:
            raise _bad(str(path), f"not a readable tar archive ({exc})") from None
        with tar:
            yield tar
            if drain:
                _drain(source, str(path))
    finally:
        handle.close()


def _decompressing(handle: io.BufferedReader) -> io.BufferedIOBase:
    magic = handle.read(6)
    handle.seek(0)
    if magic.startswith(_ZSTD_MAGIC):
        return io.BufferedReader(_ZstdReader(handle))
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=handle, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(handle)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(handle)
    return handle


def _drain(source: io.BufferedIOBase, where: str) -> None:
    """Read what follows the tar's end (padding): a damaged compressed stream shows here."""
    try:
        while source.read(READ_CHUNK):
            pass
    except (*_ARCHIVE_ERRORS, OSError) as exc:
        raise _bad(where, f"damaged or truncated archive ({exc})") from None


class _ZstdReader(io.RawIOBase):
    """Streamed zstd decoding of one or more frames that refuses a stream ending mid-frame
    (python-zstandard's stream reader returns what it has and says nothing)."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._decoder = zstandard.ZstdDecompressor().decompressobj()
        self._pending = b""
        self._started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending:
            chunk = self._handle.read(READ_CHUNK)
            if not chunk:
                if self._started and not self._decoder.eof:
                    raise EOFError("the zstd stream ends inside a frame")
                return 0
            self._pending = self._feed(chunk)
        size = min(len(view), len(self._pending))
        view[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _feed(self, chunk: bytes) -> bytes:
        out = b""
        while chunk:
            if self._decoder.eof:
                self._decoder = zstandard.ZstdDecompressor().decompressobj()
            self._started = True
            out += self._decoder.decompress(chunk)
            chunk = self._decoder.unused_data if self._decoder.eof else b""
        return out


# -- checking a log ---------------------------------------------------------------------------


class CheckedLog(Struct):
    """What verifying a bundled log learned: its header, where the header frame ends, its
    event count, the time of its last event, and its facts (``model.MODEL_TYPES``)."""

    header: Header
    header_end: int
    event_count: int
    last_time: int | None
    facts: Facts


def check_log(member: Member, where: str) -> CheckedLog:
    """Verify a bundled log from its bytes and hold it to its manifest entry.

    Every frame is decoded (libzstd checks its checksum) and every line parsed, seqs dense
    from 0; a record may continue into the next frame, as DSH reads it. A torn tail is damage
    here: export writes only complete frames. Memory is bounded by one frame's plaintext.
    """
    session = member.session
    label = f"{where}:{session.member}"
    data = member.data
    try:
        scan = zframes.scan(data)
        if not scan.frames or scan.torn_start is not None:
            raise CorruptLog(f"{label}: ends in a torn frame")
        first = zframes.decode(data, scan.frames[0], 0)
        if not first or first.find(b"\n") != len(first) - 1:
            raise CorruptLog(f"{label}: the first frame is not exactly one header line")
        header = parse_header(first[:-1], SUPPORTED_VERSION, where=label)
        facts = Facts(header, 0)
        seq, last_time, carry = 0, None, b""
        for index, frame in enumerate(scan.frames[1:], 1):
            text = carry + zframes.decode(data, frame, index)
            end = text.rfind(b"\n") + 1
            carry = text[end:]
            for line in text[: end - 1].split(b"\n") if end else ():
                if not line:
                    raise CorruptLog(f"{label}: empty line after seq {seq - 1}")
                event = parse_event(line, seq, where=label)
                if event.type in MODEL_TYPES:
                    facts.add(event)
                last_time = event.time
                seq += 1
        if carry:
            raise CorruptLog(f"{label}: the last record is not complete")
    except DshForkError as exc:
        raise _bad(where, f"{session.member}: {exc.message}") from None
    facts.event_count = seq
    expected = (session.id, session.cwd, session.parent_session, session.origin)
    if (header.id, header.cwd, header.parent_session, header.origin) != expected:
        raise _bad(where, f"{session.member}: its header does not match the manifest")
    if seq != session.events or facts.cut != session.cut:
        raise _bad(where, f"{session.member}: event count or cut differs from the manifest")
    return CheckedLog(header, scan.frames[0].end, seq, last_time, facts)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
