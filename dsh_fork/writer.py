"""Durable writes: publishing a new session and appending whole frames (format §14).

A new session appears the way DSH materialises one: the canonical file name is created last, by
``link`` from a fully written and fsynced temp file, so a crash at any point leaves either no
session or a complete one. Appends are one checksummed frame each, under ``session.lock``, rolled
back on failure. Every step goes through ``faults`` so tests can fail or crash after any of them.

Every ``OSError`` the public functions meet (disk full, permission denied, read-only
filesystem, I/O error) leaves them as one ``IoError`` naming the path (``_io``), after the
step's own cleanup ran. Temp files carry a name of their own (``own_temp_name``), so a later
run, holding the session's lock, removes the temps a dead dsh-fork run left and never a temp
of DSH or of another tool.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from . import faults
from . import frames as zframes
from .catalog import catalog_problem
from .errors import (
    DshForkError,
    InternalError,
    IoError,
    SessionAlreadyExists,
    UnsupportedFormat,
    UsageError,
)
from .generations import CURRENT_NAME, LOCK_NAME, SUPPORTED_VERSION, list_generations
from .locking import SessionLock
from .model import MODEL_TYPES, Facts, facts_of
from .reader import SessionLog, open_log, parse_recovered
from .records import encode_event

DIR_MODE = 0o700
FILE_MODE = 0o600

OWN_RANGE_TYPES = frozenset(("session/end-seed", "subagent/catalog"))
"""What every append re-reads: the cut and the catalog, for the own-range uniqueness check."""

NewEvent = tuple[str, int, Any]
"""An event dsh-fork creates: (type, time, data); the writer gives it its seq."""

OWN_TEMP_SUFFIX = ".dsh-fork.tmp"
_OWN_TEMP = re.compile(re.escape(CURRENT_NAME) + r"\.[0-9a-f]{12}" + re.escape(OWN_TEMP_SUFFIX))

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _io(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """The one place where the writer meets an OSError: it leaves as an ``IoError``."""

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return function(*args, **kwargs)
        except IoError:
            raise
        except OSError as exc:
            raise IoError.of(exc) from exc

    return wrapper


def own_temp_name() -> str:
    """``session.v4.jsonl.zstd.<12 hex>.dsh-fork.tmp``: non-canonical, so DSH ignores it, and
    distinct from DSH's own ``<final>.<12 hex>.tmp``, so a sweep never takes a temp of DSH."""
    return f"{CURRENT_NAME}.{secrets.token_hex(6)}{OWN_TEMP_SUFFIX}"


def is_own_temp(name: str) -> bool:
    return _OWN_TEMP.fullmatch(name) is not None


# -- primitive steps ------------------------------------------------------------------------


def fsync_dir(path: Path) -> None:
    faults.step("fsync-dir", path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    faults.done("fsync-dir", path)


def _write_all(fd: int, data: bytes | memoryview, path: Path, kind: str = "write") -> None:
    """Write everything, looping over short writes; a ``tear`` plan writes half, then dies."""
    faults.step(kind, path)
    view = memoryview(data)
    torn = faults.tear_at(len(view))
    if torn is not None:
        view = view[:torn]
    while view:
        view = view[os.write(fd, view) :]
    faults.done(kind, path)


def _fsync(fd: int, path: Path) -> None:
    faults.step("fsync", path)
    os.fsync(fd)
    faults.done("fsync", path)


def _ensure_dir(path: Path, deferred: set[Path] | None = None) -> None:
    """Create one directory 0700 (fsyncing its parent), refusing to write through a symlink."""
    if path.is_symlink():
        raise UsageError(f"refusing to write through the symbolic link {path}", path=str(path))
    if path.is_dir():
        return
    faults.step("mkdir", path)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if path.is_symlink() or not path.is_dir():
            raise UsageError(f"{path} exists and is not a directory", path=str(path)) from None
        return
    faults.done("mkdir", path)
    if deferred is not None:
        deferred.add(path.parent)
    else:
        fsync_dir(path.parent)


def make_private_dirs(path: Path) -> None:
    """``mkdir -p`` with every created directory 0700 whatever the umask (DSH's mode);
    ``Path.mkdir(parents=True)`` would give the intermediate ones the umask's default."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, DIR_MODE)


@_io
def ensure_session_dir(
    root: Path, project: str, segment: str, *, deferred: set[Path] | None = None
) -> Path:
    """root/project/segment, each created 0700 if missing, none of them a symlink.

    With ``deferred``, the parents of created dirs are added to that set instead of being
    fsynced one by one; the caller fsyncs them (``sync_dirs``) before any durable record
    refers to the new sessions. A batch of copies then costs one project-dir fsync, not one
    per copy; a crash before it can only lose sessions nothing refers to yet.
    """
    if not root.exists():
        make_private_dirs(root.parent)
    for path in (root, root / project, root / project / segment):
        _ensure_dir(path, deferred)
    return root / project / segment


@_io
def sync_dirs(deferred: set[Path]) -> None:
    """fsync the directories collected by ``ensure_session_dir(deferred=...)``, deepest first."""
    for path in sorted(deferred, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(path)
    deferred.clear()


# -- publishing -----------------------------------------------------------------------------


@dataclass
class Body:
    """The events of a new session: whole compressed frames, then plaintext lines to frame."""

    frames: list[bytes] = field(default_factory=list)
    tail: bytes = b""

    def add_lines(self, lines: list[bytes]) -> None:
        self.tail += b"".join(lines)

    def encoded(self) -> list[bytes]:
        lines = [line + b"\n" for line in self.tail.split(b"\n")[:-1]]
        return self.frames + [zframes.encode(chunk) for chunk in zframes.batch_lines(lines)]


@dataclass
class Published:
    path: Path
    session_dir: Path
    size: int
    lock: SessionLock | None


@_io
def publish(session_dir: Path, header_line: bytes, body: Body, *, keep_lock: bool) -> Published:
    """Write a new session into an existing, empty session dir (format §14.1 steps 2–6).

    Once ``link`` has put the canonical name in place the session exists: a failing temp
    removal after it is no failure (the temp is an ignored name the next run sweeps), and a
    failing dir fsync raises an ``IoError`` that says the session was published.
    """
    _refuse_symlinks(session_dir)
    lock = SessionLock(session_dir).acquire()
    temp: Path | None = None
    try:
        if list_generations(session_dir):
            raise SessionAlreadyExists(
                f"{session_dir.name} already holds a session", path=str(session_dir)
            )
        _remove_own_temps(session_dir)
        final = session_dir / CURRENT_NAME
        temp = session_dir / own_temp_name()
        payload = [zframes.encode(header_line), *body.encoded()]
        faults.step("create", temp)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        faults.done("create", temp)
        try:
            for frame in payload:
                _write_all(fd, frame, temp)
            _fsync(fd, temp)
        finally:
            os.close(fd)
        _link_into_place(temp, final, session_dir)
        linked, temp = temp, None
        try:
            fsync_dir(session_dir)
        except OSError as exc:
            _unlink_temp(linked)
            raise IoError(
                f"published {final}, but syncing its directory failed ({exc.strerror}): the "
                "session exists and may not survive a system crash",
                errno=exc.errno,
                path=str(final),
                published=True,
            ) from exc
        _unlink_temp(linked)
        size = sum(len(f) for f in payload)
    except Exception:
        if temp is not None:
            _remove_quietly(temp)
        lock.release()
        raise
    except BaseException:
        # A simulated crash leaves its temp file behind, as a real one would; the kernel
        # would also drop the lock with the process, so a rerun in this process can take it.
        lock.release()
        raise
    if not keep_lock:
        lock.release()
    return Published(final, session_dir, size, lock if keep_lock else None)


def _link_into_place(temp: Path, final: Path, session_dir: Path) -> None:
    faults.step("link", final)
    try:
        os.link(temp, final)
    except FileExistsError:
        raise SessionAlreadyExists(f"{final} already exists", path=str(final)) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        if list_generations(session_dir):
            raise SessionAlreadyExists(f"{final} already exists", path=str(final)) from None
        os.rename(temp, final)
    faults.done("link", final)


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _unlink_temp(temp: Path) -> None:
    """Remove a linked temp; failing to is no failure (an ignored name, swept later)."""
    with contextlib.suppress(OSError):
        faults.step("unlink", temp)
        os.unlink(temp)
        faults.done("unlink", temp)


def _refuse_symlinks(session_dir: Path) -> None:
    """A session dir or project dir that is a symbolic link may lead out of the root."""
    for path in (session_dir, session_dir.parent):
        if path.is_symlink():
            raise UsageError(f"refusing to write through the symbolic link {path}", path=str(path))


def _remove_own_temps(session_dir: Path) -> list[str]:
    """Remove the temps dead dsh-fork runs left; the caller holds the dir's lock, so no live
    dsh-fork publish owns them. Best effort: a temp that stays is still an ignored name."""
    removed: list[str] = []
    try:
        names = os.listdir(session_dir)
    except OSError:
        return removed
    for name in names:
        if is_own_temp(name):
            with contextlib.suppress(OSError):
                os.unlink(session_dir / name)
                removed.append(name)
    return removed


def sweep_own_temps(session_dir: Path) -> list[str]:
    """Remove the temps dead dsh-fork runs left in a dir (a publish interrupted before its
    link leaves one in a dir that holds no session; one interrupted after it, beside the
    session), under the dir's lock; a dir whose lock is held, or that has no lock file, is
    left alone. The dir and its lock file stay: empty leftovers are harmless (format §14.1)
    and a lock file is never deleted (format §11.1)."""
    try:
        names = os.listdir(session_dir)
    except OSError:
        return []
    if LOCK_NAME not in names or not any(is_own_temp(n) for n in names):
        return []
    try:
        lock = SessionLock(session_dir).acquire()
    except (DshForkError, OSError):  # held, a symbolic link, unwritable: leave it
        return []
    try:
        return _remove_own_temps(session_dir)
    finally:
        lock.release()


# -- appending ------------------------------------------------------------------------------


@dataclass
class Appended:
    """What an append did: the seqs it wrote and whether it repaired a torn tail first."""

    first_seq: int
    count: int
    repaired_tail: bool
    log: SessionLog
    facts: Facts


Builder = Callable[[SessionLog, Facts], list[NewEvent]]


@_io
def append(
    session_dir: Path,
    build: Builder,
    *,
    lock: SessionLock | None = None,
    collect: frozenset[str] = MODEL_TYPES,
) -> Appended:
    """Re-read a v4 log under its lock, repair a torn tail, append what ``build`` returns.

    ``build`` sees the log as it is under the lock, so uniqueness decisions are never made on
    a stale read. An empty build appends nothing. ``collect`` names the event types ``build``
    needs in its facts; a narrow set keeps the re-read of a huge log cheap. The catalog and
    the end-seed markers are always collected: the uniqueness check of new catalog facts
    needs the own range.
    """
    collect = collect | OWN_RANGE_TYPES
    _refuse_symlinks(session_dir)
    own_lock = lock is None
    held = lock if lock is not None else SessionLock(session_dir).acquire()
    try:
        _remove_own_temps(session_dir)
        log = _read_for_write(session_dir, collect)
        repaired = False
        if log.torn is not None:
            _repair_torn_tail(log)
            repaired = True
            log = _read_for_write(session_dir, collect)
        facts = facts_of(log)
        new = build(log, facts)
        if not new:
            return Appended(log.event_count, 0, repaired, log, facts)
        lines = _encode_new(new, log.event_count, facts)
        _append_frame(log.path, b"".join(lines), len(log.data))
        return Appended(log.event_count, len(lines), repaired, log, facts)
    finally:
        if own_lock:
            held.release()


def _read_for_write(session_dir: Path, collect: frozenset[str]) -> SessionLog:
    generations = list_generations(session_dir)
    if not generations:
        raise InternalError(f"{session_dir} holds no session to append to")
    current = generations[-1]
    if current.path.is_symlink():
        raise UsageError(
            f"refusing to write through the symbolic link {current.path}", path=str(current.path)
        )
    if current.version != SUPPORTED_VERSION or current.encoding != "zstd":
        raise UnsupportedFormat(
            f"{session_dir.name}: only v4 zstd logs are written (found v{current.version} "
            f"{current.encoding})",
            version=current.version,
        )
    return open_log(current, collect=collect)


def _encode_new(new: list[NewEvent], first_seq: int, facts: Facts) -> list[bytes]:
    """Seqs from the event count; catalog facts checked against DSH's schema and uniqueness."""
    own_ids = {entry.child_id for entry in facts.own_catalog()}
    lines: list[bytes] = []
    for offset, (event_type, time, data) in enumerate(new):
        if event_type == "subagent/catalog":
            problem = catalog_problem(data)
            if problem is not None or data["childId"] in own_ids:
                raise InternalError(f"refusing to append an invalid catalog fact: {problem}")
            own_ids.add(data["childId"])
        lines.append(encode_event(event_type, first_seq + offset, time, data))
    return lines


def _append_frame(path: Path, plaintext: bytes, old_size: int) -> None:
    """One complete frame with O_APPEND and fsync; on failure truncate back and fsync."""
    frame = zframes.encode(plaintext)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        try:
            _write_all(fd, frame, path, "append")
            _fsync(fd, path)
        except Exception:
            os.ftruncate(fd, old_size)
            os.fsync(fd)
            raise
    finally:
        os.close(fd)


def _repair_torn_tail(log: SessionLog) -> None:
    """DSH's recovery (format §5.3): truncate at the torn frame, re-append recovered lines."""
    assert log.torn is not None
    recovered = parse_recovered(log)
    fd = os.open(log.path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        faults.step("truncate", log.path)
        os.ftruncate(fd, log.torn.offset)
        faults.done("truncate", log.path)
        _fsync(fd, log.path)
    finally:
        os.close(fd)
    if recovered:
        _append_frame(log.path, b"".join(line + b"\n" for line in recovered), log.torn.offset)
