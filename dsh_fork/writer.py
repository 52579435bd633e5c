"""Publishing a new session (format §14.1): the one way a session dsh-fork writes comes to exist.

A new session appears the way DSH materialises one: the canonical file name is created last, by
``link`` from a fully written and fsynced temp file, so a crash at any point leaves either no
session or a complete one. A batch of sessions is published step by step for the whole batch,
so their fsyncs overlap. Every step goes through ``faults`` so tests can fail or crash after
any of them.

Every write is made relative to the descriptors of the dirs it resolved, from the root down
(``fsdir``), and is checked under the lock to still be the dir those names lead to: a session
or project dir swapped for a symbolic link, or moved, fails the write instead of sending it out
of the root. Appending to an existing log is ``appending``; the primitive steps both use are
``durable``.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct, field

from . import faults
from . import frames as zframes
from .durable import (
    FILE_MODE,
    _copy_run,
    _fsync,
    _fsync_dir_fd,
    _generation_names,
    _generations_among,
    _remove_own_temps,
    _remove_temps_among,
    _write_frames,
    is_own_temp,
    own_temp_name,
)
from .errors import DshForkError, IoError, SessionAlreadyExists
from .fsdir import DirChain, DirFd
from .generations import CURRENT_NAME, LOCK_NAME
from .locking import SessionLock
from .source import FileRun, copy_range

if TYPE_CHECKING:  # the pool is started only by a relink that publishes batches
    from concurrent.futures import Future, ThreadPoolExecutor


# -- publishing -----------------------------------------------------------------------------


class Body(Struct):
    """The events of a new session: whole compressed frames, then plaintext lines to frame."""

    frames: list[bytes | memoryview | FileRun] = field(default_factory=list)
    """Whole frames, written as they are: a view of a source log's bytes is never copied, and
    a run of a log read on demand goes from file to file (``FileRun.copy_to``)."""
    tail: bytes = b""

    def add_lines(self, lines: list[bytes]) -> None:
        self.tail += b"".join(lines)

    def encoded(self) -> list[bytes | memoryview | FileRun]:
        lines = [line + b"\n" for line in self.tail.split(b"\n")[:-1]]
        return self.frames + [zframes.encode(chunk) for chunk in zframes.batch_lines(lines)]


class Published(Struct):
    path: Path
    session_dir: Path
    size: int
    lock: SessionLock | None
    temp_left: bool = False
    """The temp could not be removed after the link (an ignored name a sweep removes)."""


class Draft(Struct):
    """A new session to publish: its dir (existing, empty), header and events."""

    session_dir: Path
    header_line: bytes
    body: Body
    header_frame: bytes | None = None
    """The header's frame exactly as another log stored it (an import reproduces a log byte
    for byte); ``header_line`` is then only what it holds."""
    dirs: DirChain | None = None
    """The open dirs the session dir was made through (``open_session_dir``): the publish
    takes them over (its lock holds them), or closes them if it never gets that far."""
    fresh: bool = False
    """The session dir was created by ``open_session_dir`` for this draft, under a fresh
    random id: it held nothing then, so the publish need not list it for a session or a
    dead run's temps (only a writer drawing the same id could have put one there)."""


class _Pending(Struct, eq=False):
    """A publish between its steps: locked, its temp created and written, maybe linked."""

    session_dir: Path
    lock: SessionLock
    size: int
    temp: str | None = None
    """The temp's name; None for an unnamed temp (``unnamed``) or once linked."""
    fd: int | None = None
    unnamed: bool = False
    """The temp has no name (``O_TMPFILE``): its descriptor stays open until it is linked."""
    linked: str | None = None
    temp_left: bool = False
    runs: list[FileRun] = field(default_factory=list)
    """Runs copied from a source log: checked to be what was read before the link."""

    @property
    def handle(self) -> DirFd:
        return self.lock.dirs.session

    @property
    def final(self) -> Path:
        return self.session_dir / CURRENT_NAME


UNNAMED_TEMPS = True
"""Whether a publish writes an unnamed temp (``O_TMPFILE``) where the system can: named once,
by the link, it costs one change of the session dir instead of three (create, link, remove:
relink of 1,000 agents 5.8 % faster), and a crash before the link leaves nothing at all.
Where it cannot (no ``O_TMPFILE``, no ``/proc``) a named temp is written, as the tests also
make it by setting this to False."""

SYNC_THREADS = 16
"""fsyncs in flight at once in a batch: ``os.fsync`` releases the GIL, so the waits overlap.
On a disk another process keeps busy, more fsyncs in flight share the journal's commits:
1,000 copies took 1.6–1.9 s with 32 against 2.3–2.4 s with 8; 16 threads take a batch of
32 in groups of two, for half the futures of one per fsync."""


def publish(
    session_dir: Path,
    header_line: bytes,
    body: Body,
    *,
    keep_lock: bool,
    header_frame: bytes | None = None,
) -> Published:
    """Write a new session into an existing, empty session dir (format §14.1 steps 2–6).

    Every step names an entry of the locked dir's descriptor (``fsdir``), and the dir chain
    is verified under the lock, again just before ``link`` and once after it: a session dir or
    project dir swapped for a link (or moved) meanwhile fails the publish, and a session
    linked into a dir that was moved out of place is unlinked again. Once ``link`` has put the
    canonical name in place the session exists: a failing temp removal after it is no failure
    (the temp is an ignored name the next run sweeps), and a failing dir fsync raises an
    ``IoError`` that says the session was published.
    """
    return publish_draft(Draft(session_dir, header_line, body, header_frame), keep_lock=keep_lock)


def publish_draft(draft: Draft, *, keep_lock: bool) -> Published:
    """``publish`` of one draft; a draft that made its dirs (``open_session_dir``) takes them
    away again when the publish fails before its log is linked."""
    (outcome,) = publish_batch([draft], keep_lock=keep_lock)
    if isinstance(outcome, DshForkError):
        raise outcome
    return outcome


def publish_batch(drafts: list[Draft], *, keep_lock: bool) -> list[Published | DshForkError]:
    """Publish several sessions with the steps of ``publish``, each step run for the whole
    batch before the next: every temp written, the temps fsynced, each linked, the session
    dirs fsynced. Each session keeps its own order (data durable before its name is linked,
    the name durable before this returns), and the fsyncs of a batch overlap on a few threads
    instead of waiting one after the other: inside ``sync_threads`` a group of temps starts
    its fsyncs as soon as it is written, while the next temps are being written, and a group
    of dirs as soon as its sessions are linked. A draft that fails gets its error in its
    place; the others go on. Under a fault plan every step runs in turn on this thread, so
    each step of each session stays a step the crash tests can stop at."""
    results: list[Published | DshForkError | None] = [None] * len(drafts)
    live: dict[int, _Pending] = {}
    pool = None if faults.active() else _threads.get(len(drafts))
    group = -(-len(drafts) // SYNC_THREADS)  # one group per thread
    syncing: list[tuple[list[int], Future[list[Exception | None]]]] = []
    waiting: list[int] = []
    try:
        for index, draft in enumerate(drafts):
            dirs, draft.dirs = draft.dirs, None  # from here on, _begin (or the lock) owns them
            try:
                first = (
                    zframes.encode(draft.header_line)
                    if draft.header_frame is None
                    else draft.header_frame
                )
                payload = [first, *draft.body.encoded()]  # before the lock: pure work
                live[index] = _begin(draft.session_dir, payload, dirs, fresh=draft.fresh)
            except BaseException as exc:
                if dirs is not None:  # closing twice is harmless (DirFd.close)
                    if isinstance(exc, Exception):  # not locked yet: only empty dirs go
                        dirs.remove_made()
                    dirs.close()
                if not isinstance(exc, Exception):
                    raise
                results[index] = _as_error(exc, draft.session_dir)
                continue
            waiting.append(index)
            if pool is not None and len(waiting) >= group:
                syncing.append(_start(pool, _sync_temp, waiting, live))
                waiting = []
        if pool is None:
            for stage in (_sync_temp, _link, _sync_dir):
                _run_stage(stage, live, results)
        else:
            if waiting:
                syncing.append(_start(pool, _sync_temp, waiting, live))
            _gather(syncing, live, results)
            waiting = []
            for index in list(live):
                error = _attempt(_link, live[index])
                if error is not None:
                    _abandon(index, error, live, results)
                    continue
                waiting.append(index)
                if len(waiting) >= group:
                    syncing.append(_start(pool, _sync_dir, waiting, live))
                    waiting = []
            if waiting:
                syncing.append(_start(pool, _sync_dir, waiting, live))
            _gather(syncing, live, results)
    except BaseException:
        for _, future in syncing:  # no fsync may still run on a descriptor closed below
            with contextlib.suppress(BaseException):
                future.result()
        # A simulated crash leaves its temps behind, as a real one would; the kernel would
        # also drop the locks with the process, so a rerun in this process can take them.
        for pending in live.values():
            _close_fd(pending)
            pending.lock.release()
        for draft in drafts:
            if draft.dirs is not None:
                draft.dirs.close()
                draft.dirs = None
        raise
    for index, pending in live.items():
        if not keep_lock:
            pending.lock.release()
        results[index] = Published(
            pending.final,
            pending.session_dir,
            pending.size,
            pending.lock if keep_lock else None,
            pending.temp_left,
        )
    return [r for r in results if r is not None]


class _SyncThreads:
    """The fsync threads of a ``sync_threads`` block: started the first time a batch has more
    than one session to sync, so a block that publishes one session at a time (a fork whose
    source has no subagents) never starts them, nor imports ``concurrent.futures``."""

    def __init__(self) -> None:
        self.wanted = False
        self.pool: ThreadPoolExecutor | None = None

    def get(self, items: int) -> ThreadPoolExecutor | None:
        if not self.wanted or items < 2:
            return None
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(max_workers=SYNC_THREADS, thread_name_prefix="fsync")
        return self.pool


_threads = _SyncThreads()


@contextlib.contextmanager
def sync_threads() -> Iterator[None]:
    """Run the batches published inside the block with their fsyncs on a few threads, started
    once for the block and stopped after it (no thread outlives the block)."""
    if _threads.wanted:
        yield
        return
    _threads.wanted = True
    try:
        yield
    finally:
        pool, _threads.pool, _threads.wanted = _threads.pool, None, False
        if pool is not None:
            pool.shutdown()


def _as_error(exc: Exception, session_dir: Path) -> DshForkError:
    if isinstance(exc, DshForkError):
        return exc
    if isinstance(exc, OSError):
        return IoError.of(exc, where=session_dir)
    raise exc


_Stage = Callable[[_Pending], None]


def _attempt(stage: _Stage, pending: _Pending) -> Exception | None:
    try:
        stage(pending)
    except Exception as exc:
        return exc
    return None


def _run_stage(
    stage: _Stage, live: dict[int, _Pending], results: list[Published | DshForkError | None]
) -> None:
    """Run one step for every live publish, in turn; a failing one is abandoned."""
    for index, pending in list(live.items()):
        error = _attempt(stage, pending)
        if error is not None:
            _abandon(index, error, live, results)


def _start(
    pool: ThreadPoolExecutor, stage: _Stage, indices: list[int], live: dict[int, _Pending]
) -> tuple[list[int], Future[list[Exception | None]]]:
    """One step of a group of publishes, run in turn on a thread of the pool."""
    group = [live[index] for index in indices]
    return indices, pool.submit(lambda: [_attempt(stage, pending) for pending in group])


def _gather(
    syncing: list[tuple[list[int], Future[list[Exception | None]]]],
    live: dict[int, _Pending],
    results: list[Published | DshForkError | None],
) -> None:
    """Wait for the groups started; each publish that failed is abandoned."""
    while syncing:
        indices, future = syncing[0]
        errors = future.result()
        del syncing[0]
        for index, error in zip(indices, errors, strict=True):
            if error is not None:
                _abandon(index, error, live, results)


def _abandon(
    index: int,
    error: Exception,
    live: dict[int, _Pending],
    results: list[Published | DshForkError | None],
) -> None:
    """A publish that failed at a step: its temp removed, its lock released, its error kept."""
    pending = live.pop(index)
    _close_fd(pending)
    if pending.temp is not None:
        _remove_quietly(pending.handle, pending.temp)
    _undo_made(pending.lock)
    pending.lock.release()
    results[index] = _as_error(exc=error, session_dir=pending.session_dir)


def _undo_made(lock: SessionLock) -> None:
    """A publish that failed before its log was linked, into a session dir this run made
    (``DirChain.made``): the lock file it made and the dirs it made go again, so a fork that
    lost a race leaves no empty child dir behind. Only while the session dir still holds the
    very lock file held and nothing else, and is still where it was made (device and inode;
    its project dir may have been moved: the names are those in the dirs held). The lock file
    goes while it is held, in a dir no session ever lived in: no DSH writer can hold or wait
    for it (format §11.1 keeps the lock file of a session, and there is none). Best effort: a
    failure leaves what stays, as before."""
    dirs = lock.dirs
    session = dirs.session
    if session not in dirs.made:
        return
    try:
        if session.listdir() != [LOCK_NAME] or not session.same(
            dirs.project.lstat(session.path.name)
        ):
            return
        held, now = lock.file_stat(), session.lstat(LOCK_NAME)
        if (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino):
            return
        session.unlink(LOCK_NAME)
    except OSError:
        return
    dirs.remove_made()


def _close_fd(pending: _Pending) -> None:
    if pending.fd is not None:
        with contextlib.suppress(OSError):
            os.close(pending.fd)
        pending.fd = None


def _begin(
    session_dir: Path,
    payload: list[bytes | memoryview | FileRun],
    dirs: DirChain | None = None,
    *,
    fresh: bool = False,
) -> _Pending:
    """Lock the dir, check it holds no session, create the temp and write it (not synced).
    ``dirs``: the chain the dir was just made through, which the lock takes over; ``fresh``:
    that dir was made empty for this publish (``Draft.fresh``), so it is not listed."""
    lock = SessionLock(session_dir).acquire(dirs=dirs, verify=False)  # verified below
    pending = _Pending(session_dir, lock, sum(len(f) for f in payload))
    handle = lock.dirs.session
    try:
        names = [] if fresh else handle.listdir()  # one listing for both checks
        if _generations_among(names):
            raise SessionAlreadyExists(
                f"{session_dir.name} already holds a session", path=str(session_dir)
            )
        lock.dirs.verify()  # the last moment before the first byte is created or removed
        _remove_temps_among(handle, names)
        temp_path = _create_temp(pending)
        fd = pending.fd
        assert fd is not None
        frames: list[bytes | memoryview] = []
        for frame in payload:
            if isinstance(frame, FileRun):
                if frames:
                    _write_frames(fd, frames, temp_path)
                    frames = []
                _copy_run(fd, frame, temp_path)
                pending.runs.append(frame)
            else:
                frames.append(frame)
        if frames:
            _write_frames(fd, frames, temp_path)
    except Exception:
        _close_fd(pending)
        if pending.temp is not None:
            _remove_quietly(handle, pending.temp)
        _undo_made(lock)
        lock.release()
        raise
    except BaseException:
        _close_fd(pending)
        lock.release()
        raise
    return pending


def _create_temp(pending: _Pending) -> Path:
    """The temp of ``pending``, created and open (``pending.fd``): unnamed where the system
    allows it (``UNNAMED_TEMPS``), else named. Returns the path its steps and errors name:
    the named temp, or for an unnamed one the log it is to become."""
    global UNNAMED_TEMPS
    handle = pending.handle
    temp = None if UNNAMED_TEMPS else own_temp_name()
    faults.step("create", pending.final if temp is None else handle.entry(temp))
    if temp is None:
        fd = handle.create_unnamed(FILE_MODE)
        if fd is not None:
            pending.fd, pending.unnamed = fd, True
            faults.done("create", pending.final)
            return pending.final
        UNNAMED_TEMPS = False  # this system cannot: the process names its temps from now on
        temp = own_temp_name()
    temp_path = handle.entry(temp)
    pending.fd = handle.create_file(temp)
    pending.temp = temp
    faults.done("create", temp_path)
    return temp_path


def _temp_label(pending: _Pending) -> Path:
    return pending.final if pending.temp is None else pending.handle.entry(pending.temp)


def _sync_temp(pending: _Pending) -> None:
    assert pending.fd is not None and (pending.temp is not None or pending.unnamed)
    try:
        _fsync(pending.fd, _temp_label(pending))
    finally:
        if not pending.unnamed:  # an unnamed temp's descriptor is what ``_link`` names
            _close_fd(pending)


def _link(pending: _Pending) -> None:
    assert pending.temp is not None or pending.unnamed
    for run in pending.runs:  # the frames copied are those read: else SESSION_STALE
        run.source.check()
    dirs = pending.lock.dirs
    dirs.verify()
    if pending.unnamed:
        _link_unnamed(pending)
    else:
        assert pending.temp is not None
        _link_into_place(pending.handle, pending.temp, pending.final)
        pending.linked, pending.temp = pending.temp, None
    try:
        dirs.verify()
    except DshForkError:
        _remove_quietly(pending.handle, CURRENT_NAME)
        if pending.linked is not None:
            _remove_quietly(pending.handle, pending.linked)
        raise


def _link_unnamed(pending: _Pending) -> None:
    """Name the unnamed temp with the log's name, and close it. A file system that makes
    unnamed files but cannot link them gets a named copy, linked (or renamed) as usual."""
    assert pending.fd is not None
    final = pending.final
    faults.step("link", final)
    try:
        pending.handle.link_unnamed(pending.fd, final.name)
    except FileExistsError:
        raise SessionAlreadyExists(f"{final} already exists", path=str(final)) from None
    except OSError as exc:
        if exc.errno not in _NO_LINK_ERRNOS:
            raise
        _named_copy(pending)
        assert pending.temp is not None
        _link_into_place(pending.handle, pending.temp, final, counted=True)
        pending.linked, pending.temp = pending.temp, None
        return
    finally:
        if pending.unnamed:
            _close_fd(pending)  # named now, or freed with its descriptor
            pending.unnamed = False
    faults.done("link", final)


_NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)
"""``link`` refused by a file system without hard links: the temp is renamed instead."""
_NO_LINK_ERRNOS = (*_NO_HARD_LINKS, errno.EACCES, errno.ENOENT)
"""``linkat`` of an unnamed temp refused for want of support (hard links, the ``/proc``
entry, or a security module that denies linking through it): a named copy is tried, whose
own steps fail as any publish does if the dir itself is the trouble."""


def _named_copy(pending: _Pending) -> None:
    """The unnamed temp's bytes as a named temp, synced (a file system that cannot link an
    unnamed file): ``pending`` then goes on as a named publish."""
    global UNNAMED_TEMPS
    UNNAMED_TEMPS = False  # this process names its temps from now on
    assert pending.fd is not None
    handle = pending.handle
    temp = own_temp_name()
    temp_path = handle.entry(temp)
    fd = handle.create_file(temp)
    pending.temp = temp
    try:
        copy_range(
            pending.fd,
            fd,
            0,
            pending.size,
            lambda: IoError(f"{temp_path}: the temp ended early", path=str(temp_path)),
        )
        os.fsync(fd)
    except BaseException:
        _remove_quietly(handle, temp)
        pending.temp = None
        raise
    finally:
        os.close(fd)


def _sync_dir(pending: _Pending) -> None:
    handle = pending.handle
    try:
        _fsync_dir_fd(handle)
    except OSError as exc:
        if pending.linked is not None:
            _unlink_temp(handle, pending.linked)
        raise IoError(
            f"published {pending.final}, but syncing its directory failed ({exc.strerror}): "
            "the session exists and may not survive a system crash",
            errno=exc.errno,
            path=str(pending.final),
            published=True,
        ) from exc
    if pending.linked is not None:  # an unnamed temp left no name to remove
        pending.temp_left = not _unlink_temp(handle, pending.linked)


def _link_into_place(handle: DirFd, temp: str, final: Path, *, counted: bool = False) -> None:
    """Name the temp as the log (``counted``: the fault seam's step was taken already)."""
    if not counted:
        faults.step("link", final)
    try:
        handle.link(temp, final.name)
    except FileExistsError:
        raise SessionAlreadyExists(f"{final} already exists", path=str(final)) from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        if _generation_names(handle):
            raise SessionAlreadyExists(f"{final} already exists", path=str(final)) from None
        handle.rename(temp, final.name)
    faults.done("link", final)


def _remove_quietly(handle: DirFd, name: str) -> None:
    with contextlib.suppress(OSError):
        handle.unlink(name)


def _unlink_temp(handle: DirFd, temp: str) -> bool:
    """Remove a linked temp; failing to is no failure (an ignored name, swept later)."""
    try:
        faults.step("unlink", handle.entry(temp))
        handle.unlink(temp)
        faults.done("unlink", handle.entry(temp))
    except OSError:
        return False
    return True


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
        return _remove_own_temps(lock.dirs.session)
    finally:
        lock.release()
