"""``export``: a session and its family into one bundle (see ``bundle`` for the format).

The family is the session, its whole subagent tree and, with ``forks``, its fork children and
their trees, found through header ``parentSession`` as every other command finds them.

Each log is read once: its committed part is described (header, events, size, sha256) from
the very bytes that go into the archive. Those are written at once, member by member, into an
unnamed spool file; the manifest, known only at the end, is then written first and the spool
copied after it (by the kernel where it can). Every part is a whole compressed stream of its
own (zstd frames, gzip members, bz2 and xz streams may follow each other), so the result is
one archive, and memory holds one log at a time. With zstd a log is stored as it is, in raw
blocks: it is zstd already, and the manifest's sha256 is what import verifies.

A family member that cannot be read (no permission, a FIFO, device or link where its log
should be, a session dir or project dir that is a symbolic link, a damaged log) refuses the
export, every such member named; with ``skip_unreadable`` the rest is written, the export is
PARTIAL (exit 10) and names what it left out, and the descendants of a member left out are
left out with it (an archive lists every parent before its children). A session dir of a
family member's project dir that cannot be read at all may be a family member too (its header
is what would say so): it is named the same way.

A live session (its lock held) is exported as of its read, with a warning. The archive is
written to a temp file beside the output and linked into place, so it appears complete or not
at all; ``-`` writes it to standard output once everything has been read.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from msgspec import Struct, field

from . import archivedocs as docs
from . import bundle
from . import frames as zframes
from .bundle import BundleSession, Manifest, Role
from .discovery import Root
from .errors import (
    CorruptLog,
    DshForkError,
    IoError,
    Partial,
    SessionNotFound,
    UnsupportedFormat,
    UsageError,
)
from .errors import unsupported_below_v4 as below_v4
from .generations import SUPPORTED_VERSION, list_generations, select
from .ids import ClockMs, now_ms
from .kinds import EVIDENCE_TYPES, Evidence, delegation
from .layout import decode_segment, encode_segment, expand_home, project_dir_name
from .locking import running
from .model import derive
from .progress import SILENT, Progress
from .reader import check_version, open_log
from .results import SCHEMA_VERSION, Documented
from .sessionarg import Located, locate
from .sessionentry import SessionEntry
from .sessionlog import SessionLog
from .source import FileBytes, copy_range, stale
from .tarstream import STDIN_NAME, Compression, TarWriter

TEMP_SUFFIX = ".dsh-fork.tmp"
STDOUT = STDIN_NAME
COPY_PIECE = 1 << 20


LeftOut = docs.LeftOut
"""A family member the export could not read, or left out with its parent."""


class ExportResult(Documented, Struct):
    """What an export wrote: the archive, the manifest inside it, and what it left out."""

    path: Path
    compression: Compression
    archive_bytes: int
    manifest: Manifest
    warnings: list[str] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)

    def partial(self) -> Partial | None:
        """PARTIAL when members were left out (``skip_unreadable``), each named."""
        if not self.left_out:
            return None
        failed = [
            {"id": item.id or item.path, "code": item.code, "message": item.message}
            for item in self.left_out
        ]
        total = len(self.manifest.sessions) + len(failed)
        return Partial(f"{len(failed)} of {total} sessions were left out", failed, self)

    def to_document(self) -> docs.ExportDocument:
        return docs.ExportDocument(
            schema_version=SCHEMA_VERSION,
            archive=docs.Archive(str(self.path), self.compression, self.archive_bytes),
            manifest=self.manifest,
            left_out=self.left_out,
        )


class ExportOptions(Struct, frozen=True):
    """What the user chose about the archive, handed whole from the command to ``export``:
    ``forks`` adds the session's fork children and their trees; ``skip_unreadable`` writes
    what can be read and names the rest (PARTIAL) instead of refusing; ``compression`` is
    ``--format`` (None: from the file's name, zstd on standard output)."""

    forks: bool = False
    skip_unreadable: bool = False
    compression: Compression | None = None


def export_session(
    session_arg: str,
    output: str,
    root_option: str | None,
    options: ExportOptions = ExportOptions(),
    *,
    env: Mapping[str, str] | None = None,
    clock: ClockMs = now_ms,
    stdout: IO[bytes] | None = None,
    progress: Progress = SILENT,
) -> ExportResult:
    """Resolve SESSION and write its family into the archive ``output`` (``-``: ``stdout``);
    ``progress`` is told of the bytes of each log archived ("bytes archived")."""
    located = locate(session_arg, root_option, env)
    located.root.progress = progress
    target = Path(STDOUT) if output == STDOUT else expand_home(output).absolute()
    return export(located, target, options, clock=clock, stdout=stdout)


def export(
    located: Located,
    target: Path,
    options: ExportOptions,
    *,
    clock: ClockMs = now_ms,
    stdout: IO[bytes] | None = None,
) -> ExportResult:
    to_stdout = str(target) == STDOUT
    kind = _compression(target, options.compression, to_stdout)
    if not to_stdout:
        _check_target(located.root, target)
    warnings = list(located.warnings)
    created_at = clock()
    mtime = created_at // 1000
    spool_dir = None if to_stdout else target.parent
    with tempfile.TemporaryFile(dir=spool_dir, buffering=0) as spool:
        logs = TarWriter(spool, kind)
        walk = _Walk(located, options.forks, logs, mtime, warnings)
        walk.run()
        if walk.left_out and not options.skip_unreadable:
            raise _refusal(walk.left_out)
        logs.close()
        spool.flush()
        sessions = walk.sessions
        manifest = bundle.new_manifest(sessions[0].id, options.forks, created_at, sessions)
        if to_stdout:
            handle = stdout if stdout is not None else os.fdopen(1, "wb", closefd=False)
            size = _assemble(handle, kind, manifest, spool, mtime)
            handle.flush()
        else:
            size = _write(target, kind, manifest, spool, mtime)
    return ExportResult(target, kind, size, manifest, warnings, walk.left_out)


def _compression(target: Path, named: Compression | None, to_stdout: bool) -> Compression:
    """``--format`` or the file's name; standard output is zstd unless named otherwise."""
    if to_stdout:
        return "zst" if named is None else named
    by_name = bundle.compression_of(target.name)
    if named is not None and named != by_name:
        raise UsageError(
            f"{target.name}: the name says {by_name}, --format says {named}; make them agree",
            path=str(target),
        )
    return by_name


def _check_target(root: Root, target: Path) -> None:
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target} already exists; remove it or choose another name")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent} is not a directory", path=str(target.parent))
    with contextlib.suppress(ValueError):
        target.resolve().relative_to(root.path.resolve())
        raise UsageError(f"{target} lies inside the sessions root {root.path}; write it elsewhere")


def _refusal(left_out: list[LeftOut]) -> DshForkError:
    """One error naming every member that cannot be read; its code is the first one's."""
    first = left_out[0]
    names = "; ".join(f"{item.id or item.path}: {item.message}" for item in left_out)
    count = f"{len(left_out)} session" + ("s" * (len(left_out) > 1))
    message = (
        f"{count} of the family cannot be read, nothing was written "
        f"(--skip-unreadable writes the rest): {names}"
    )
    for error_type in (IoError, CorruptLog, UnsupportedFormat):
        if error_type.code == first.code:
            return error_type(message, path=first.path)
    return IoError(message, path=first.path)


class _Walk:
    """The family, parents before children (a lineage cycle is followed once), each member
    read once and written into the spool as it is found."""

    def __init__(
        self, located: Located, forks: bool, logs: TarWriter, mtime: int, warnings: list[str]
    ) -> None:
        self.root = located.root
        self.located = located
        self.forks = forks
        self.logs = logs
        self.mtime = mtime
        self.warnings = warnings
        self.sessions: list[BundleSession] = []
        self.left_out: list[LeftOut] = []
        self._named: set[str] = set()  # dirs already described or left out
        self._evidence: dict[str, Evidence] = {}  # what each log read says for the kind rule

    def run(self) -> None:
        self.root.entries()  # read first ("sessions read"): the family is found in them
        (self.root.progress or SILENT).stage("bytes archived")
        top = self.located.session_dir
        session = self._read(top, "top")  # the top cannot be left out: its error is the run's
        seen = {session.id: top}
        queue: list[tuple[str, bool]] = [(session.id, True)]
        project_dirs = {top.parent}
        while queue:
            parent, exported = queue.pop(0)
            for entry, role in self._kids(parent):
                child_id = entry.id
                if child_id is None:
                    continue
                if child_id in seen:
                    if seen[child_id] != entry.session_dir:  # a root DSH itself refuses
                        raise SessionNotFound(
                            f"ambiguous id {child_id!r}: {seen[child_id]} and {entry.session_dir}",
                            session=child_id,
                        )
                    continue  # a lineage cycle: followed once
                seen[child_id] = entry.session_dir
                project_dirs.add(entry.session_dir.parent)
                if exported:
                    ok = self._member(entry, role)
                else:
                    message = f"its parent {parent} is left out"
                    self._leave(child_id, entry.session_dir, "SKIPPED", message)
                    ok = False
                queue.append((child_id, ok))
            if not queue:
                queue = self._unreadable_near(project_dirs, seen)

    def _kids(self, parent: str) -> list[tuple[SessionEntry, Role | None]]:
        """The parent's children that go with it, in (createdAt, id) order: its subagents by
        header, and each child its header calls a fork that the rule of dsh-world §4
        (``kinds.delegation``) makes a delegation child — catalogued by the parent's log
        (read before its children), or holding its own descriptor (read for that alone,
        unless ``forks`` exports it anyway: its role, None here, is then settled by the read
        that archives it). A fork child whose log cannot be read may be either: it is named
        as left out, never dropped in silence."""
        above = self._evidence.get(parent)
        catalogued = above.catalogued if above is not None else frozenset()
        kids: list[tuple[SessionEntry, Role | None]] = [
            (e, "subagent") for e in self.root.children_of(parent)
        ]
        for entry in self.root.forks_of(parent):
            assert entry.header is not None  # a fork child by its header
            if delegation(
                entry.header,
                own_descriptor=False,
                catalogued_by_parent=(entry.header.id in catalogued),
            ):
                kids.append((entry, "subagent"))
            elif self.forks:
                kids.append((entry, None))
            else:
                own = self._own_descriptor(entry)
                if isinstance(own, DshForkError):
                    message = f"{own.message} (so it cannot be told whether it is a subagent)"
                    self._leave(entry.id, entry.session_dir, own.code, message)
                elif own:
                    kids.append((entry, "subagent"))
        return sorted(kids, key=lambda kid: (kid[0].created_at, kid[0].id or ""))

    def _own_descriptor(self, entry: SessionEntry) -> bool | DshForkError:
        """Whether a fork child by its header holds its own ``subagent/descriptor`` (a read of
        its log for the rule alone: a user fork is not exported without ``forks``)."""
        generation = entry.generation
        if generation is None:
            return IoError(f"{entry.session_dir} holds no session log that can be read")
        try:
            log = open_log(generation, collect=EVIDENCE_TYPES, stream=True)
        except DshForkError as exc:
            return exc
        except OSError as exc:
            return IoError.of(exc, "read", where=entry.session_dir)
        try:
            return Evidence.of(derive(log.header, log.event_count, log.collected)).own_descriptor
        finally:
            if isinstance(log.content, FileBytes):
                log.content.close()

    def _member(self, entry: SessionEntry, role: Role | None) -> bool:
        """Read and write one member; False (and named) when it cannot be read."""
        if entry.error is not None:
            self._leave(entry.id, entry.session_dir, entry.error.code, entry.error.message)
            return False
        try:
            self._read(entry.session_dir, role)
        except DshForkError as exc:
            self._leave(entry.id, entry.session_dir, exc.code, exc.message)
            return False
        except OSError as exc:
            error = IoError.of(exc, "read", where=entry.session_dir)
            self._leave(entry.id, entry.session_dir, error.code, error.message)
            return False
        return True

    def _leave(self, session_id: str | None, session_dir: Path, code: str, message: str) -> None:
        self._named.add(str(session_dir))
        self.left_out.append(LeftOut(session_id, str(session_dir), code, message))

    def _unreadable_near(
        self, project_dirs: set[Path], seen: dict[str, Path]
    ) -> list[tuple[str, bool]]:
        """Session dirs of the family's project dirs that cannot be read at all: named, and
        their ids (from their dir names) walked on, so that their children are named too."""
        found: list[tuple[str, bool]] = []
        for entry in self.root.unreadable():
            session_dir = entry.session_dir
            if session_dir.parent not in project_dirs or str(session_dir) in self._named:
                continue
            session_id = entry.id or decode_segment(session_dir.name)
            error = entry.error or IoError(f"{session_dir} cannot be read")
            self._leave(session_id, session_dir, error.code, error.message)
            if session_id is not None and session_id not in seen:
                seen[session_id] = session_dir
                found.append((session_id, False))
        return found

    def _read(self, session_dir: Path, role: Role | None) -> BundleSession:
        """One read of the highest generation: checked, described, and its committed part
        written."""
        _refuse_links(session_dir)
        generation = select(list_generations(session_dir))
        if generation is None:
            raise UsageError(f"{session_dir} holds no session log", path=str(session_dir))
        check_version(generation)
        if generation.version < SUPPORTED_VERSION:
            raise below_v4(f"{session_dir.name}", generation.version, path=str(generation.path))
        if generation.encoding != "zstd":
            raise UnsupportedFormat(
                f"{generation.path}: plain logs are not exported (a bundle holds v4 zstd logs)",
                path=str(generation.path),
            )
        log = open_log(generation, collect=EVIDENCE_TYPES)
        try:
            return self._store(session_dir, role, generation.version, log)
        finally:
            if isinstance(log.content, FileBytes):
                log.content.close()  # the descriptor a large log is read through

    def _store(
        self, session_dir: Path, role: Role | None, version: int, log: SessionLog
    ) -> BundleSession:
        """The committed part of ``log`` into the spool, hashed as it is written: the bytes
        pass through one buffer (a log is never held whole), read once more from the
        descriptor the check read (held in memory when small: not read again). A role None
        (a fork child by its header, exported with ``forks``) is settled by this log's own
        descriptor (dsh-world §4; its parent's catalog was asked first)."""
        header = log.header
        facts = derive(header, log.event_count, log.collected)
        evidence = Evidence.of(facts)
        self._evidence[header.id] = evidence
        if role is None:
            why = delegation(
                header, own_descriptor=evidence.own_descriptor, catalogued_by_parent=False
            )
            role = "fork" if why is None else "subagent"
        committed = log.size if log.torn is None else log.torn.offset
        lock_held = running(session_dir)
        if lock_held:
            self.warnings.append(
                f"{header.id} is running (its lock is held): exported as of a stable read of "
                f"{committed} bytes; later appends are not in the bundle"
            )
        if log.torn is not None:
            self.warnings.append(
                f"{header.id} has a torn tail of {log.torn.size} bytes: only its complete "
                "frames are exported"
            )
        project = project_dir_name(header.cwd)
        member = bundle.member_name(project, header.id)
        digest = hashlib.sha256()
        progress = self.root.progress or SILENT

        def pieces() -> Iterator[memoryview]:
            for piece in _pieces(log.content, committed):
                digest.update(piece)
                yield piece
                progress.advance(len(piece))

        self.logs.add_pieces(member, committed, pieces(), self.mtime, stored=True)
        session = BundleSession(
            id=header.id,
            role=role,
            parent_session=header.parent_session,
            origin=header.origin,
            cwd=header.cwd,
            project_dir=project,
            session_dir=encode_segment(header.id),
            generation=version,
            created_at=header.created_at,
            is_seeded=header.is_seeded,
            delegation_depth=header.delegation_depth,
            events=log.event_count,
            cut=facts.cut,
            lock_held=lock_held,
            file=docs.BundleFile(member, committed, digest.hexdigest()),
        )
        self._named.add(str(session_dir))
        self.sessions.append(session)
        return session


def _pieces(content: zframes.Data, end: int) -> Iterator[memoryview]:
    """Bytes ``0..end-1`` of a log in pieces of ``COPY_PIECE``: slices of the bytes held, or
    read from the descriptor into one buffer used again for every piece (a piece is used
    before the next is read). A file shorter than its read is SESSION_STALE."""
    if not isinstance(content, FileBytes):
        view = memoryview(content)[:end]
        for pos in range(0, end, COPY_PIECE):
            yield view[pos : pos + COPY_PIECE]
        return
    buffer = memoryview(bytearray(COPY_PIECE))
    pos = 0
    while pos < end:
        done = os.preadv(content.fd, [buffer[: min(COPY_PIECE, end - pos)]], pos)
        if done <= 0:
            raise stale(content.path)
        yield buffer[:done]
        pos += done


def _refuse_links(session_dir: Path) -> None:
    """Nothing reached through a symbolic link is packed: not a session dir, not its project
    dir (the log itself is opened without following one)."""
    for path in (session_dir, session_dir.parent):
        try:
            mode = os.lstat(path).st_mode
        except OSError as exc:
            raise IoError.of(exc, "read", where=path) from None
        if stat.S_ISLNK(mode):
            raise IoError(
                f"{path} is a symbolic link: export never packs what a link leads to",
                errno=errno.ELOOP,
                path=str(path),
            )


def _assemble(
    handle: IO[bytes], kind: Compression, manifest: Manifest, spool: IO[bytes], mtime: int
) -> int:
    """The manifest's part, then the spool's: one archive. Returns the bytes written."""
    head = TarWriter(handle, kind)
    head.add(bundle.MANIFEST_NAME, bundle.encoded(manifest), mtime)
    head.close(end=False)
    handle.flush()
    size = os.fstat(spool.fileno()).st_size
    try:
        fd = handle.fileno()
    except (AttributeError, io.UnsupportedOperation):
        spool.seek(0)
        while piece := spool.read(COPY_PIECE):
            handle.write(piece)
    else:
        copy_range(spool.fileno(), fd, 0, size, lambda: _spool_ended(spool))
    return head.bytes_out + size


def _spool_ended(spool: IO[bytes]) -> Exception:
    return IoError(f"the export's spool file ended early ({spool.name})")


def _write(
    target: Path, kind: Compression, manifest: Manifest, spool: IO[bytes], mtime: int
) -> int:
    temp = target.with_name(f"{target.name}.{os.urandom(6).hex()}{TEMP_SUFFIX}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise IoError.of(exc) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            _assemble(handle, kind, manifest, spool, mtime)
            os.fsync(handle.fileno())
        _link(temp, target)
        size = target.stat().st_size
    except FileExistsError:
        raise UsageError(f"{target} already exists; remove it or choose another name") from None
    except DshForkError:
        raise
    except OSError as exc:
        raise IoError.of(exc) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    return size


def _link(temp: Path, target: Path) -> None:
    """``link`` never replaces an existing file; where it is unsupported, ``rename`` after
    re-checking that nothing appeared under the name (the writer's fallback)."""
    try:
        os.link(temp, target)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        if target.exists() or target.is_symlink():
            raise FileExistsError(errno.EEXIST, "exists", str(target)) from None
        os.rename(temp, target)
