"""Durable writes: publishing a new session and appending whole frames (format §14).

A new session appears the way DSH materialises one: the canonical file name is created last, by
``link`` from a fully written and fsynced temp file, so a crash at any point leaves either no
session or a complete one. Appends are one checksummed frame each, under ``session.lock``, rolled
back on failure. Every step goes through ``faults`` so tests can fail or crash after any of them.

Every write is made relative to the descriptors of the dirs it resolved, from the root down
(``fsdir``), and is checked under the lock to still be the dir those names lead to: a session
or project dir swapped for a symbolic link, or moved, fails the write instead of sending it out
of the root. A log with more than one hard link is never changed in place (``append``).

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
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from msgspec import Struct, field

from . import faults, fsdir
from . import frames as zframes
from .catalog import catalog_problem
from .errors import (
    DshForkError,
    InternalError,
    IoError,
    SessionAlreadyExists,
    SessionStale,
    UnsupportedFormat,
)
from .fsdir import DIR_FLAGS, DIR_MODE, DirChain, DirFd, hand_over
from .generations import CURRENT_NAME, LOCK_NAME, SUPPORTED_VERSION, Generation, parse_name
from .locking import SessionLock
from .model import MODEL_TYPES, Facts, facts_of
from .reader import SessionLog, open_log, parse_recovered
from .records import encode_event
from .source import FileRun, copy_range

if TYPE_CHECKING:  # the pool is started only by a relink that publishes batches
    from concurrent.futures import Future, ThreadPoolExecutor

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
        except OSError as exc:  # one on a descriptor names no file: name the first path
            where = next((a for a in args if isinstance(a, (Path, str))), None)
            raise IoError.of(exc, where=where) from exc

    return wrapper


def own_temp_name() -> str:
    """``session.v4.jsonl.zstd.<12 hex>.dsh-fork.tmp``: non-canonical, so DSH ignores it, and
    distinct from DSH's own ``<final>.<12 hex>.tmp``, so a sweep never takes a temp of DSH."""
    return f"{CURRENT_NAME}.{os.urandom(6).hex()}{OWN_TEMP_SUFFIX}"


def is_own_temp(name: str) -> bool:
    return _OWN_TEMP.fullmatch(name) is not None


# -- primitive steps ------------------------------------------------------------------------


def fsync_dir(path: Path) -> None:
    faults.step("fsync-dir", path)
    fd = os.open(path, fsdir.DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    faults.done("fsync-dir", path)


def _fsync_dir_fd(handle: DirFd) -> None:
    faults.step("fsync-dir", handle.path)
    handle.fsync()
    faults.done("fsync-dir", handle.path)


def _write_all(fd: int, data: bytes | memoryview, path: Path, kind: str = "write") -> None:
    """Write everything, looping over short writes; a ``tear`` plan writes half, then dies."""
    faults.step(kind, path)
    view = memoryview(data)
    torn = faults.tear_at(len(view))
    if torn is not None:
        view = view[:torn]
    _write_rest(fd, view)
    faults.done(kind, path)


def _write_rest(fd: int, view: memoryview) -> None:
    """Write all of ``view``, looping over short writes."""
    while view:
        view = view[os.write(fd, view) :]


def _write_frames(fd: int, frames: list[bytes | memoryview], path: Path) -> None:
    """``_write_all`` of several frames in one ``writev`` (a small copy is three frames: one
    system call, not three). Under a fault plan each frame stays a step of its own."""
    if faults.active() or len(frames) == 1:
        for frame in frames:
            _write_all(fd, frame, path)
        return
    for start in range(0, len(frames), _IOV_MAX):
        group = frames[start : start + _IOV_MAX]
        total = sum(len(frame) for frame in group)
        written = os.writev(fd, group)
        if written != total:  # a short write: the rest, looping
            _write_rest(fd, memoryview(b"".join(group))[written:])


_IOV_MAX = 1024
"""The most buffers one ``writev`` takes (POSIX's IOV_MAX on Linux); more is EINVAL."""


def _copy_run(fd: int, run: FileRun, path: Path) -> None:
    """``_write_all`` of a run of another file's bytes, copied file to file."""
    faults.step("write", path)
    run.copy_to(fd, faults.tear_at(len(run)))
    faults.done("write", path)


def _fsync(fd: int, path: Path) -> None:
    faults.step("fsync", path)
    os.fsync(fd)
    faults.done("fsync", path)


def make_private_dirs(path: Path) -> None:
    """``mkdir -p`` with every created directory 0700 whatever the umask (DSH's mode);
    ``Path.mkdir(parents=True)`` would give the intermediate ones the umask's default."""
    missing: list[Path] = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, DIR_MODE)
            _hand_over_dir(directory)


def _hand_over_dir(directory: Path) -> None:
    """A dir made by path (the root and its missing parents) goes to its parent's owner
    when a run as root makes it in a user's home (``fsdir.hand_over``)."""
    if os.geteuid() != 0:
        return
    fd = os.open(directory, DIR_FLAGS)
    try:
        hand_over(fd, directory.parent)
    finally:
        os.close(fd)


def _ensure_root(root: Path, deferred: set[Path] | None) -> None:
    """The root itself, made 0700 with its missing parents (the only dirs made by path)."""
    if os.path.lexists(root):
        return
    make_private_dirs(root.parent)
    faults.step("mkdir", root)
    try:
        os.mkdir(root, DIR_MODE)
    except FileExistsError:
        return
    _hand_over_dir(root)
    faults.done("mkdir", root)
    if deferred is not None:
        deferred.add(root.parent)
    else:
        fsync_dir(root.parent)


@_io
def ensure_session_dir(
    root: Path, project: str, segment: str, *, deferred: set[Path] | None = None
) -> Path:
    """root/project/segment, each created 0700 if missing, none of them a symlink.

    The project and session dirs are made relative to their parent's descriptor, never
    through a path a symbolic link could redirect (``fsdir``). With ``deferred``, the parents
    of created dirs are added to that set instead of being fsynced one by one; the caller
    fsyncs them (``sync_dirs``) before any durable record refers to the new sessions. A batch
    of copies then costs one project-dir fsync, not one per copy; a crash before it can only
    lose sessions nothing refers to yet.
    """
    dirs, _ = _make_session_dir(root, project, segment, deferred)
    dirs.close()
    return dirs.path


@_io
def open_session_dir(
    root: Path, project: str, segment: str, *, deferred: set[Path] | None = None
) -> tuple[DirChain, bool]:
    """``ensure_session_dir``, the dirs it went through left open: a publish into the new
    dir locks through them (``Draft.dirs``) instead of opening the three dirs again. Also
    says whether the session dir was created here (``Draft.fresh``)."""
    return _make_session_dir(root, project, segment, deferred)


def _make_session_dir(
    root: Path, project: str, segment: str, deferred: set[Path] | None
) -> tuple[DirChain, bool]:
    _ensure_root(root, deferred)
    session_dir = root / project / segment
    opened = [DirFd.open(root, root)]
    made: list[DirFd] = []
    try:
        for path in (root / project, session_dir):
            parent = opened[-1]
            created = False
            if not parent.exists(path.name):
                faults.step("mkdir", path)
                created = parent.mkdir(path.name)
                faults.done("mkdir", path)
            opened.append(DirFd.open(path.name, path, parent))
            if created:
                made.append(opened[-1])
                if deferred is not None:
                    deferred.add(parent.path)
                else:
                    _fsync_dir_fd(parent)
    except BaseException as exc:
        if isinstance(exc, Exception):  # a failure, not a crash: the dirs made go again
            for child, parent in zip(opened[:0:-1], opened[-2::-1], strict=True):
                if child in made and not parent.remove_dir(child):
                    break
        for handle in opened:
            handle.close()
        raise
    dirs = DirChain(opened[0], opened[1], opened[2], tuple(made))
    return dirs, opened[2] in made


@_io
def sync_dirs(deferred: set[Path]) -> None:
    """fsync the directories collected by ``ensure_session_dir(deferred=...)``, deepest first."""
    for path in sorted(deferred, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(path)
    deferred.clear()


def _generation_names(handle: DirFd) -> list[tuple[int, str, str]]:
    """(version, encoding, name) of the canonical names in a held dir, lowest first."""
    return _generations_among(handle.listdir())


def _generations_among(names: list[str]) -> list[tuple[int, str, str]]:
    found: list[tuple[int, str, str]] = []
    for name in names:
        parsed = parse_name(name)
        if parsed is not None:
            found.append((parsed[0], parsed[1], name))
    found.sort(key=lambda g: (g[0], g[1] == "zstd"))
    return found


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


def _remove_own_temps(handle: DirFd) -> list[str]:
    """Remove the temps dead dsh-fork runs left; the caller holds the dir's lock, so no live
    dsh-fork publish owns them. Best effort: a temp that stays is still an ignored name."""
    try:
        names = handle.listdir()
    except OSError:
        return []
    return _remove_temps_among(handle, names)


def _remove_temps_among(handle: DirFd, names: list[str]) -> list[str]:
    removed: list[str] = []
    for name in names:
        if is_own_temp(name):
            with contextlib.suppress(OSError):
                handle.unlink(name)
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
        return _remove_own_temps(lock.dirs.session)
    finally:
        lock.release()


# -- appending ------------------------------------------------------------------------------


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
