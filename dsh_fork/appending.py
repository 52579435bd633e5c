"""Appending whole frames to an existing v4 log (format §5.3, §14): the only change dsh-fork ever
makes to a log it did not write in one piece.

``append`` re-reads the log under its ``session.lock``, repairs a torn tail the way DSH does,
asks its caller what to add given the log as it is under the lock, and writes one checksummed
frame with ``O_APPEND``, truncated back on failure. The log is reached through the locked
dir's descriptor and must be the very file that was read: a log with more than one hard link
is never changed in place. Apart from publishing (``writer``) because the two share only their
primitive steps (``durable``) and are used by different commands.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from . import faults, fsdir
from . import frames as zframes
from .catalog import catalog_problem
from .durable import _fsync, _generation_names, _io, _remove_own_temps, _write_all
from .errors import InternalError, IoError, SessionStale, UnsupportedFormat
from .fsdir import DirChain, DirFd
from .generations import SUPPORTED_VERSION, Generation
from .locking import SessionLock
from .model import MODEL_TYPES, Facts, facts_of
from .reader import open_log, parse_recovered
from .records import encode_event
from .sessionlog import SessionLog

if TYPE_CHECKING:  # the pool is started only by a relink that publishes batches
    pass


OWN_RANGE_TYPES = frozenset(("session/end-seed", "subagent/catalog"))
"""What every append re-reads: the cut and the catalog, for the own-range uniqueness check."""


NewEvent = tuple[str, int, Any]
"""An event dsh-fork creates: (type, time, data); the writer gives it its seq."""


class Appended(Struct):
    """What an append did: the seqs it wrote and whether it repaired a torn tail first."""

    first_seq: int
    count: int
    repaired_tail: bool
    log: SessionLog
    facts: Facts


Builder = Callable[[SessionLog, Facts], Iterable[NewEvent]]
"""What to append, given the log as it is under the lock; it may be a generator, which the
encoding consumes one event at a time."""


@_io
def append(
    session_dir: Path,
    build: Builder,
    *,
    lock: SessionLock | None = None,
    collect: frozenset[str] = MODEL_TYPES,
    cut: int = 0,
) -> Appended:
    """Re-read a v4 log under its lock, repair a torn tail, append what ``build`` returns.

    ``build`` sees the log as it is under the lock, so uniqueness decisions are never made on
    a stale read. An empty build appends nothing. ``collect`` names the event types ``build``
    needs in its facts; a narrow set keeps the re-read of a huge log cheap. The catalog and
    the end-seed markers are always collected: the uniqueness check of new catalog facts
    needs the own range. ``cut``: the log's cut as the caller read it under the lock it still
    holds; ``build`` then gets the facts of the own range only (the inherited events are not
    parsed again), or of the whole log when its cut is not that one.

    The log is reached through the locked dir's descriptor and must be the very file that was
    read (device and inode), a regular file with one link: a log shared with a hard-linked
    backup is refused, never changed in place (the backup would change with it).
    """
    collect = collect | OWN_RANGE_TYPES
    own_lock = lock is None
    held = lock if lock is not None else SessionLock(session_dir).acquire()
    try:
        dirs = held.dirs
        if not own_lock:
            dirs.verify()  # a lock held for a while: its dir may have been moved since
        _remove_own_temps(dirs.session)
        log = _read_for_write(dirs, collect, cut)
        repaired = False
        if log.torn is not None:
            _repair_torn_tail(dirs.session, log)
            repaired = True
            log = _read_for_write(dirs, collect, cut)
        facts = facts_of(log)
        if cut and facts.cut != cut:  # not the log the caller read: the facts of all of it
            log = _read_for_write(dirs, collect)
            facts = facts_of(log)
        lines = _encode_new(build(log, facts), log.event_count, facts)
        if not lines:
            return Appended(log.event_count, 0, repaired, log, facts)
        _append_frame(dirs.session, log, b"".join(lines), log.size)
        return Appended(log.event_count, len(lines), repaired, log, facts)
    finally:
        if own_lock:
            held.release()


def _read_for_write(dirs: DirChain, collect: frozenset[str], cut: int = 0) -> SessionLog:
    handle = dirs.session
    names = _generation_names(handle)
    if not names:
        raise InternalError(f"{handle.path} holds no session to append to")
    version, encoding, name = names[-1]
    path = handle.entry(name)
    if version != SUPPORTED_VERSION or encoding != "zstd":
        raise UnsupportedFormat(
            f"{handle.path.name}: only v4 zstd logs are written (found v{version} {encoding})",
            version=version,
        )
    _check_writable(path, handle.lstat(name))
    log = open_log(Generation(path, version, "zstd"), collect=collect, collect_from=cut)
    dirs.verify()  # the read went by path: it read the locked dir only if nothing moved
    _check_same(path, log, handle.lstat(name))
    return log


def _check_writable(path: Path, st: os.stat_result) -> None:
    """A log is changed in place only when it is a regular file with exactly one link."""
    if stat.S_ISLNK(st.st_mode):
        raise fsdir.symlink_refusal(path)
    if not stat.S_ISREG(st.st_mode):
        raise fsdir.not_regular(path, st.st_mode)
    if st.st_nlink > 1:
        raise IoError(
            f"refusing to append to {path}: it has {st.st_nlink} hard links, and another name "
            "of the same file (a backup made with cp -al, say) would change with it; copy the "
            "file (cp without -l) to break the link, then run again",
            errno=errno.EMLINK,
            path=str(path),
        )


def _check_same(path: Path, log: SessionLog, st: os.stat_result) -> None:
    if (st.st_dev, st.st_ino) != log.identity[:2]:
        raise SessionStale(f"{path} was replaced while it was being read", path=str(path))


def _open_log_for_write(handle: DirFd, log: SessionLog, flags: int) -> int:
    """The log's fd, opened through the locked dir: the file that was read, still one link."""
    fd = handle.open_file(log.path.name, flags)
    try:
        st = os.fstat(fd)
        _check_writable(log.path, st)
        _check_same(log.path, log, st)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _encode_new(new: Iterable[NewEvent], first_seq: int, facts: Facts) -> list[bytes]:
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


def _append_frame(handle: DirFd, log: SessionLog, plaintext: bytes, old_size: int) -> None:
    """One complete frame with O_APPEND and fsync; on failure truncate back and fsync."""
    frame = zframes.encode(plaintext)
    fd = _open_log_for_write(handle, log, os.O_WRONLY | os.O_APPEND)
    try:
        try:
            _write_all(fd, frame, log.path, "append")
            _fsync(fd, log.path)
        except Exception:
            os.ftruncate(fd, old_size)
            os.fsync(fd)
            raise
    finally:
        os.close(fd)


def _repair_torn_tail(handle: DirFd, log: SessionLog) -> None:
    """DSH's recovery (format §5.3): truncate at the torn frame, re-append recovered lines."""
    assert log.torn is not None
    recovered = parse_recovered(log)
    fd = _open_log_for_write(handle, log, os.O_WRONLY)
    try:
        faults.step("truncate", log.path)
        os.ftruncate(fd, log.torn.offset)
        faults.done("truncate", log.path)
        _fsync(fd, log.path)
    finally:
        os.close(fd)
    if recovered:
        frame_text = b"".join(line + b"\n" for line in recovered)
        _append_frame(handle, log, frame_text, log.torn.offset)
