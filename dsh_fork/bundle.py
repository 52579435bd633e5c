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
schema is ``UNSUPPORTED_FORMAT``. Reading is streamed, one member at a time; a log above
``HELD_BYTES`` goes into an unnamed spool file and is checked from it in windows, as a large
log of a root is read, so memory stays bounded whatever the logs weigh.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import orjson
from msgspec import Struct

from . import __version__, tarstream
from . import archivedocs as docs
from . import frames as zframes
from .errors import CorruptLog, DshForkError, UnsupportedFormat, UsageError
from .generations import CURRENT_NAME, SUPPORTED_VERSION, Generation
from .layout import encode_segment, is_absolute_cwd, project_dir_name
from .model import Facts
from .reader import header_line
from .records import Header, parse_header
from .sessionlog import Committed, FramedLog
from .source import FileBytes, identity_of, stale
from .tarstream import Compression, Entry, Source, TarReader

MANIFEST_NAME = "manifest.json"
SESSIONS_DIR = "sessions"
SCHEMA_VERSION = 1
KIND: Final = "dsh-fork-bundle"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
"""About 20,000 sessions (a manifest entry is about 800 bytes)."""
MAX_NAME_BYTES = 255
MAX_EXPANSION = 4
EXPANSION_SLACK = 1024 * 1024

Role = Literal["top", "subagent", "fork"]
_SUFFIXES: tuple[tuple[tuple[str, ...], Compression], ...] = (
    ((".tar.gz", ".tgz"), "gz"),
    ((".tar.xz", ".txz"), "xz"),
    ((".tar.bz2", ".tbz2", ".tbz"), "bz2"),
    ((".tar.zst", ".tar.zstd", ".tzst"), "zst"),
    ((".tar",), "none"),
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


BundleSession = docs.BundleSession
"""One session of a bundle as its manifest records it: the manifest's own entry, made once
where its facts are known (``export``, or ``session_of`` reading a manifest)."""

Manifest = docs.Manifest
"""What a bundle holds: the family of ``top``, parents before children (``new_manifest``,
``parse_manifest``); export writes it into the archive and prints it as it is."""


def session_of(value: Any, where: str) -> BundleSession:
    """A manifest's session entry, checked; ``sessionDir`` is the id's dir name, whatever
    the entry says, as is every name import derives."""
    if not isinstance(value, dict):
        raise _bad(where, "a session entry is not an object")
    file = value.get("file")
    if not isinstance(file, dict):
        raise _bad(where, "a session entry has no file object")
    try:
        ident = _text(value, "id")
        session = BundleSession(
            id=ident,
            role=_role(value.get("role")),
            parent_session=_text(value, "parentSession", optional=True),
            origin=_text(value, "origin", optional=True),
            cwd=_text(value, "cwd", optional=True),
            project_dir=_text(value, "projectDir"),
            session_dir=encode_segment(ident) if ident else "",  # "": refused below
            generation=_count(value, "generation"),
            created_at=_count(value, "createdAt"),
            is_seeded=_flag(value, "isSeeded"),
            delegation_depth=_count(value, "delegationDepth"),
            events=_count(value, "events"),
            cut=_count(value, "cut"),
            lock_held=_flag(value, "lockHeld"),
            file=docs.BundleFile(
                path=_text(file, "path"), size=_count(file, "size"), sha256=_text(file, "sha256")
            ),
        )
    except (KeyError, TypeError) as exc:
        raise _bad(where, f"session entry: {exc}") from None
    logged = session.file
    if session.id == "":
        raise _bad(where, "a session entry has an empty id")
    if len(session.session_dir.encode()) > MAX_NAME_BYTES:
        raise _bad(where, f"{session.id[:40]}…: the id is too long for a directory name")
    if session.cwd is not None and not (session.cwd and is_absolute_cwd(session.cwd)):
        raise _bad(where, f"{session.id}: cwd {session.cwd!r} is not an absolute path")
    if session.project_dir != project_dir_name(session.cwd):
        raise _bad(where, f"{session.id}: projectDir does not match its cwd")
    if logged.path != member_name(session.project_dir, session.id):
        raise _bad(where, f"{session.id}: unexpected file path {logged.path!r}")
    if len(logged.sha256) != 64 or any(c not in "0123456789abcdef" for c in logged.sha256):
        raise _bad(where, f"{session.id}: sha256 is not 64 lowercase hex digits")
    return session


def encoded(manifest: Manifest) -> bytes:
    """manifest.json, as export writes it into the archive."""
    return msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n"


def parse_manifest(data: bytes, where: str) -> Manifest:
    """A manifest, checked: its schema, and a family in which every parent comes first."""
    _check_shape(data, where)
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
        manifest = Manifest(
            schema_version=schema,
            kind=KIND,
            dsh_fork_version=_text(value, "dshForkVersion"),
            format_version=_count(value, "formatVersion"),
            created_at=_count(value, "createdAt"),
            top=_text(value, "top"),
            forks=_flag(value, "forks"),
            total_bytes=0,  # the sum of the sizes of its logs, below
            sessions=[session_of(s, where) for s in raw_sessions],
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
    manifest.total_bytes = sum(s.file.size for s in manifest.sessions)
    return manifest


class _Head(Struct):
    kind: Any = None
    schemaVersion: Any = None  # noqa: N815  (the document's own name)


class _FileShape(Struct):
    path: Any
    size: Any
    sha256: Any


class _SessionShape(Struct):
    """Every key a session entry must have: an array of anything else (``[{}, {}, …]``) is
    refused at its first element, before it is built whole."""

    id: Any
    role: Any
    parentSession: Any  # noqa: N815
    cwd: Any
    projectDir: Any  # noqa: N815
    generation: Any
    createdAt: Any  # noqa: N815
    isSeeded: Any  # noqa: N815
    delegationDepth: Any  # noqa: N815
    events: Any
    cut: Any
    lockHeld: Any  # noqa: N815
    file: _FileShape


class _Shape(Struct):
    sessions: list[_SessionShape]


def _check_shape(data: bytes, where: str) -> None:
    """The manifest's shape, checked as it is decoded: memory stays near the size of the
    manifest (as small objects a few million ``{}`` would take gigabytes). A manifest of a newer
    schema is named as such before its shape is held to this one."""
    try:
        head = msgspec.json.decode(data, type=_Head)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise _bad(where, "manifest.json is not a dsh-fork bundle manifest") from None
    schema = head.schemaVersion
    if head.kind != KIND or type(schema) is not int or schema > SCHEMA_VERSION:
        return  # named by the full parse
    try:
        msgspec.json.decode(data, type=_Shape)
    except msgspec.ValidationError as exc:
        raise _bad(where, f"manifest: {exc}") from None
    except msgspec.DecodeError:
        raise _bad(where, "manifest.json is not JSON") from None


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
        if session.role == "subagent" and session.origin not in ("subagent", None):
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
        total_bytes=sum(s.file.size for s in sessions),
        sessions=sessions,
    )


# -- reading an archive -------------------------------------------------------------------------


HELD_BYTES = 4 * 1024 * 1024
"""A member up to this size is held in memory; a larger one goes into an unnamed spool file
(``spool``) and is read from it in windows, as a large log of the root is: memory stays
bounded whatever a bundle's logs weigh."""

Spool = Callable[[], int]
"""Makes an unnamed file, open for reading and writing, to hold one large member."""


class SpoolBytes(FileBytes):
    """A member in an unnamed spool file, read on demand. Nothing else names the file, so a
    copy of its frames (``FileRun``) is checked by the file's size alone."""

    def check(self) -> None:
        if os.fstat(self.fd).st_size != len(self):
            raise stale(self.path)


MemberData = bytes | SpoolBytes


class Member(Struct):
    """One verified log of a bundle: its manifest entry and its bytes (held, or in a spool
    file read on demand)."""

    session: BundleSession
    data: MemberData


def read_manifest(source: Source, compression: Compression | None = None) -> Manifest:
    """The manifest alone (the first member): cheap, for a preview."""
    source.rewind()
    tar = TarReader(tarstream.decompressing(source.raw(), compression), source.name)
    return _first_manifest(tar, source.name)


def members(
    source: Source,
    manifest: Manifest | None = None,
    compression: Compression | None = None,
    spool: Spool | None = None,
) -> Iterator[Member]:
    """Every log of the bundle in archive order, each checked against the manifest (size,
    sha256, then the log itself: a complete v4 log whose header names the listed id, cwd and
    parent). Anything the manifest does not list, a member that is not a regular file, a name
    given twice, a missing member, a truncated archive and more than padding after the
    archive's end are ``CORRUPT_LOG``. Every read is bounded (``tarstream``): a member is read
    only after its size matched the manifest's, and the manifest's sizes fit the archive.
    A member above ``HELD_BYTES`` is written into a file ``spool`` makes (held in memory
    without one), valid until the next member is asked for."""
    where = source.name
    source.rewind()
    tar = TarReader(tarstream.decompressing(source.raw(), compression), where)
    found = _first_manifest(tar, where)
    if manifest is not None and found != manifest:
        raise _bad(where, "the manifest changed since it was read")
    _check_sizes(found, source, where)
    expected = {s.file.path: s for s in found.sessions}
    order = [s.file.path for s in found.sessions]
    seen: set[str] = {MANIFEST_NAME}
    position = 0
    while (entry := tar.next()) is not None:
        if entry.name in seen:
            raise _bad(where, f"{entry.name} is in the archive twice")
        seen.add(entry.name)
        session = expected.get(entry.name)
        if session is None:
            raise _bad(where, f"unexpected member {entry.name!r}")
        if entry.kind != "file":
            raise _bad(where, f"{entry.name} is not a regular file")
        if order[position] != entry.name:
            raise _bad(where, f"{entry.name} is out of order")
        position += 1
        data = _member_bytes(tar, entry, session, where, spool)
        try:
            yield Member(session, data)
        finally:
            if isinstance(data, SpoolBytes):
                data.close()
    if position != len(order):
        raise _bad(where, f"{order[position]} is missing (the archive ends before it)")
    tar.finish()


def _check_sizes(manifest: Manifest, source: Source, where: str) -> None:
    """The logs a manifest declares must fit in the archive: they are zstd data, which no
    outer compression shrinks much, so a bundle whose logs add up to many times its own size
    is a decompression bomb, and memory stays bounded by what the archive can hold."""
    size = source.size if source.size is not None else 0
    limit = MAX_EXPANSION * size + EXPANSION_SLACK
    if manifest.total_bytes > limit:
        raise _bad(
            where,
            f"the manifest declares {manifest.total_bytes} bytes of logs, more than an archive "
            f"of {size} bytes can hold",
        )


def _member_bytes(
    tar: TarReader, entry: Entry, session: BundleSession, where: str, spool: Spool | None
) -> MemberData:
    """The member's bytes, their sha256 held to the manifest's: held, or (large, with a
    ``spool``) written into an unnamed file and read from it on demand."""
    if entry.size != session.file.size:
        raise _bad(
            where, f"{entry.name}: {entry.size} bytes, the manifest says {session.file.size}"
        )
    digest = hashlib.sha256()
    if spool is None or entry.size <= HELD_BYTES:
        chunks: list[bytes] = []
        for chunk in tar.content(entry):
            digest.update(chunk)
            chunks.append(chunk)
        data: MemberData = b"".join(chunks)
    else:
        fd = spool()
        try:
            for chunk in tar.content(entry):
                digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            identity = identity_of(os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        data = SpoolBytes(fd, Path(f"{where}:{entry.name}"), identity)
    if digest.hexdigest() != session.file.sha256:
        if isinstance(data, FileBytes):
            data.close()
        raise _bad(where, f"{entry.name}: sha256 differs from the manifest (tampered or damaged)")
    return data


def _first_manifest(tar: TarReader, where: str) -> Manifest:
    entry = tar.next()
    if entry is None or entry.name != MANIFEST_NAME:
        raise _bad(where, f"the archive does not start with {MANIFEST_NAME}")
    if entry.kind != "file":
        raise _bad(where, f"{MANIFEST_NAME} is not a regular file")
    if entry.size > MAX_MANIFEST_BYTES:
        raise tarstream.too_large(where, MANIFEST_NAME, entry.size, MAX_MANIFEST_BYTES)
    return parse_manifest(b"".join(tar.content(entry)), where)


# -- checking a log ---------------------------------------------------------------------------


FACT_TYPES = frozenset(
    ("session/end-seed", "subagent/catalog", "subagent/descriptor", "agent-preset/selected")
)
"""The events an import folds into a log's facts, the only ones parsed whole: its cut (held to
the manifest), its catalog and descriptor (the kind rule, a copy's descriptor and catalog
fact), its preset (a copy's header). Every other line is checked by its envelope alone, as
every command reads a log: a turn's events, half of a log's lines, are not parsed."""


class CheckedLog(Struct):
    """What verifying a bundled log learned: its header, where the header frame ends, its
    event count, the time of its last event, and its facts (``FACT_TYPES``)."""

    header: Header
    header_end: int
    event_count: int
    last_time: int | None
    facts: Facts


def check_log(member: Member, where: str) -> CheckedLog:
    """Verify a bundled log from its bytes and hold it to its manifest entry.

    The log is read as every command reads one (``reader``'s frame index over the bundled
    bytes): every frame decoded (libzstd checks its checksum), every line's envelope checked,
    seqs dense from 0, a record that continues into the next frame read as DSH reads it, and
    only the events the facts need parsed whole. A torn tail is damage here: export writes
    only complete frames. Memory is bounded by one frame's plaintext beside the bytes.
    """
    session = member.session
    label = f"{where}:{session.file.path}"
    data = member.data
    try:
        scan = zframes.scan_file(data) if isinstance(data, SpoolBytes) else zframes.scan(data)
        if not scan.frames or scan.torn_start is not None:
            raise CorruptLog(f"{label}: ends in a torn frame")
        header = parse_header(
            header_line(data, scan.frames[0], label), SUPPORTED_VERSION, where=label
        )
        generation = Generation(Path(label), SUPPORTED_VERSION, "zstd")
        identity = (0, 0, len(data), 0, 0)
        held = b"" if isinstance(data, SpoolBytes) else data
        committed = Committed(
            generation, held, identity, header, scan.frames[0].end, scan.frames[1:], None
        )
        log = FramedLog(
            committed,
            wanted=FACT_TYPES,
            source=data if isinstance(data, SpoolBytes) else None,
        )
        log.build_index()
        seq = log.event_count
        last_time = log.event(seq - 1).time if seq else None
    except DshForkError as exc:
        raise _bad(where, f"{session.file.path}: {exc.message}") from None
    facts = Facts(header, 0)
    for event in log.collected:
        facts.add(event)
    facts.event_count = seq
    expected = (session.id, session.cwd, session.parent_session, session.origin)
    if (header.id, header.cwd, header.parent_session, header.origin) != expected:
        raise _bad(where, f"{session.file.path}: its header does not match the manifest")
    if seq != session.events or facts.cut != session.cut:
        raise _bad(where, f"{session.file.path}: event count or cut differs from the manifest")
    return CheckedLog(header, scan.frames[0].end, seq, last_time, facts)


def check_kind(session: BundleSession, log: CheckedLog, parent: Facts | None, where: str) -> None:
    """A session listed as a subagent without ``origin`` is one only by the logs (dsh-world
    §4, ``kinds.delegation``): its parent's log (``parent``, verified before it) catalogues
    it, or it holds its own descriptor. Listed so without either, it is a user fork the
    manifest misnames, and an import under new ids would make a subagent of it."""
    if session.role != "subagent" or session.origin == "subagent":
        return
    from .kinds import Evidence, delegation

    catalogued = parent is not None and session.id in Evidence.of(parent).catalogued
    own = Evidence.of(log.facts).own_descriptor
    if delegation(log.header, own_descriptor=own, catalogued_by_parent=catalogued) is None:
        raise _bad(
            where,
            f"{session.file.path}: listed as a subagent without origin, but neither its parent's "
            "catalog nor its own descriptor makes it a delegation child",
        )


def digest_of(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def pieces_of(data: MemberData, start: int = 0) -> Iterator[bytes | memoryview]:
    """Bytes ``start..`` of a member in pieces of at most ``PIECE_BYTES`` (a held member is
    sliced, a spooled one read a piece at a time)."""
    end = len(data)
    for pos in range(start, end, tarstream.PIECE_BYTES):
        stop = min(end, pos + tarstream.PIECE_BYTES)
        yield data.read(pos, stop) if isinstance(data, SpoolBytes) else memoryview(data)[pos:stop]
