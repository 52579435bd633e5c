"""The steps every durable write is made of: whole writes and fsyncs through the fault seam,
private dirs and session dirs made from the root down, and the temps of dead runs.

Publishing a new session (``writer``) and appending to an existing log (``appending``) are
built from the same few steps; each step goes through ``faults`` so tests can fail or crash
after any of them, and every ``OSError`` a public function meets leaves it as one ``IoError``
naming the path (``_io``). Temp files carry a name of their own (``own_temp_name``), so a later
run, holding the session's lock, removes the temps a dead dsh-fork run left and never a temp
of DSH or of another tool. Apart so that the two writers share the steps, not each other.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from . import faults, fsdir
from .errors import IoError
from .fsdir import DIR_FLAGS, DIR_MODE, DirChain, DirFd, effective_uid, hand_over
from .generations import CURRENT_NAME, parse_name
from .source import FileRun

if TYPE_CHECKING:  # the pool is started only by a relink that publishes batches
    pass


FILE_MODE = 0o600


OWN_TEMP_SUFFIX = ".dsh-fork.tmp"


@functools.cache
def _own_temp() -> re.Pattern[str]:
    """Compiled on first use: only a sweep of a session dir asks."""
    return re.compile(re.escape(CURRENT_NAME) + r"\.[0-9a-f]{12}" + re.escape(OWN_TEMP_SUFFIX))


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
    return _own_temp().fullmatch(name) is not None


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
    if effective_uid() != 0:
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


def _open_root(root: Path, deferred: set[Path] | None) -> DirFd:
    """The root held open, made first only when the open finds it missing: a relink opens it
    once per copy, and a look before each open (``lexists``) would be one more stat each."""
    try:
        return DirFd.open(root, root)
    except FileNotFoundError:
        _ensure_root(root, deferred)
        return DirFd.open(root, root)


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
    session_dir = root / project / segment
    opened = [_open_root(root, deferred)]
    made: list[DirFd] = []
    try:
        for path in (root / project, session_dir):
            parent = opened[-1]
            created = False
            if not parent.exists(path.name):
                faults.step("mkdir", path)
                created = parent.mkdir(path.name, hand=False)  # handed over once open, below
                faults.done("mkdir", path)
            opened.append(DirFd.open(path.name, path, parent))
            if created:
                made.append(opened[-1])
                parent.hand_over_child(opened[-1])
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
