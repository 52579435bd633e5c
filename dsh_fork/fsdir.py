"""Filesystem access through directory descriptors, so that no write ever leaves the root.

A check of a path ("is it a symbolic link?") followed by a second lookup of the same path for
the write leaves a window in which the path can be swapped for a link to anywhere. Here every
directory on the way from the root to a session dir is opened once, with
``O_DIRECTORY | O_NOFOLLOW``, each one relative to the descriptor of its parent; every later
step (lock, create, link, rename, unlink, append) names a single entry relative to the session
dir's descriptor, so the kernel never follows a link on the way. ``DirChain.verify`` then
checks, under the session's lock, that the names still lead to the directories held (device and
inode): a dir swapped meanwhile is refused with a clear error instead of being written.

Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``: a symbolic link
is refused, and a FIFO or device is refused instead of blocking the command forever.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from pathlib import Path
from types import TracebackType

from .errors import IoError, SessionStale, UsageError

DIR_MODE = 0o700
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR)
_NO_UNNAMED_ERRNOS = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOSYS)
"""``O_TMPFILE`` refused for want of support: by the file system (EOPNOTSUPP), by a kernel
that predates it (EISDIR: it opens the dir itself for writing), or otherwise."""


@functools.cache
def _unnamed_links() -> bool:
    """Whether an unnamed file can be named here: through ``/proc/self/fd`` (a process
    without ``/proc``, as in some containers, names temps instead)."""
    return os.path.isdir("/proc/self/fd")


def symlink_refusal(path: Path | str) -> IoError:
    """A dir or log on the way of a write that is a symbolic link: never followed (it may lead
    out of the root). IO_ERROR (exit 11), as a read refuses one: the root's state refuses the
    write, the command line is not at fault (USAGE, exit 2, is for bad arguments)."""
    return IoError(
        f"refusing to write through the symbolic link {path}", errno=errno.ELOOP, path=str(path)
    )


def not_regular(path: Path | str, mode: int) -> IoError:
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "a symbolic link"
        if stat.S_ISLNK(mode)
        else "a device or socket"
    )
    return IoError(
        f"refusing to open {path}: it is {kind}, not a regular file",
        errno=errno.ELOOP if stat.S_ISLNK(mode) else errno.EINVAL,
        path=str(path),
    )


@functools.cache
def effective_uid() -> int:
    """The run's effective uid, asked once: whether what it makes must be handed over
    (``hand_over``) is the same answer for every file of a run, which makes thousands (a
    relink of 1,000 agents asked 4,000 times). dsh-fork never changes its uid; a forked child
    asks again (``register_at_fork`` below): it may go on as another user."""
    return os.geteuid()


os.register_at_fork(after_in_child=effective_uid.cache_clear)


def hand_over(fd: int, parent: int | str | Path | DirFd) -> None:
    """Give a file or dir this run just made to the owner of the dir it was made in, when the
    run is root's and that dir is a user's: DSH, running as that user, must lock, append to
    and remove what dsh-fork left in its home (``parent``: the dir's descriptor or path, or
    the dir held open, whose owner its ``fstat`` at open already gave: no stat per file)."""
    if effective_uid() != 0:
        return
    if isinstance(parent, DirFd):
        uid, gid = parent.uid, parent.gid
    else:
        st = os.fstat(parent) if isinstance(parent, int) else os.stat(parent, follow_symlinks=False)
        uid, gid = st.st_uid, st.st_gid
    if uid != 0 or gid != 0:
        os.fchown(fd, uid, gid)


def _handed_over(fd: int, parent: DirFd) -> int:
    """``fd``, a file just made in the dir ``parent``, after ``hand_over``; closed when that
    fails, so no caller leaks it."""
    try:
        hand_over(fd, parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(name: str, dir_fd: int | None) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISLNK(st.st_mode)


class DirFd:
    """One open directory and the identity it had when opened."""

    __slots__ = ("dev", "fd", "gid", "ino", "path", "uid")

    def __init__(self, fd: int, path: Path) -> None:
        st = os.fstat(fd)
        self.fd = fd
        self.path = path
        self.dev = st.st_dev
        self.ino = st.st_ino
        self.uid = st.st_uid
        self.gid = st.st_gid
        """The dir's owner when it was opened: whom what a run as root makes in it goes to."""

    @classmethod
    def open(cls, name: str | Path, path: Path, parent: DirFd | None = None) -> DirFd:
        """Open ``name`` (relative to ``parent``, or a path) as a directory, never a link."""
        dir_fd = None if parent is None else parent.fd
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in _LINK_ERRNOS and _is_link(os.fspath(name), dir_fd):
                raise symlink_refusal(path) from None
            if exc.errno == errno.ENOTDIR:
                raise UsageError(f"{path} exists and is not a directory", path=str(path)) from None
            exc.filename = str(path)
            raise
        try:
            return cls(fd, path)
        except BaseException:
            os.close(fd)
            raise

    def same(self, st: os.stat_result) -> bool:
        return (st.st_dev, st.st_ino) == (self.dev, self.ino) and stat.S_ISDIR(st.st_mode)

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    # -- entries relative to this dir ---------------------------------------------------------

    def entry(self, name: str) -> Path:
        return self.path / name

    def lstat(self, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def exists(self, name: str) -> bool:
        """Whether this dir has an entry ``name`` (a link counts: it is not followed)."""
        try:
            self.lstat(name)
        except FileNotFoundError:
            return False
        return True

    def listdir(self) -> list[str]:
        return os.listdir(self.fd)

    def mkdir(self, name: str, *, hand: bool = True) -> bool:
        """Create ``name`` 0700; False when it already exists (a link there is refused).
        ``hand=False``: the caller opens the new dir anyway and hands it over through that
        descriptor (``hand_over_child``), so a run as root opens it once, not twice."""
        try:
            os.mkdir(name, DIR_MODE, dir_fd=self.fd)
            if hand and effective_uid() == 0:
                made = os.open(name, DIR_FLAGS, dir_fd=self.fd)
                try:
                    hand_over(made, self)
                finally:
                    os.close(made)
        except FileExistsError:
            return False
        except OSError as exc:
            exc.filename = str(self.entry(name))
            raise
        return True

    def hand_over_child(self, child: DirFd) -> None:
        """``hand_over`` of a dir made in this one (``mkdir(hand=False)``), held open; the
        owner it keeps for what is made in it is then the one it was given."""
        hand_over(child.fd, self)
        if effective_uid() == 0:
            child.uid, child.gid = self.uid, self.gid

    def open_file(self, name: str, flags: int, mode: int = 0o600) -> int:
        """Open a regular file of this dir: never through a link, never blocking on a FIFO."""
        return self.open_file_stat(name, flags, mode)[0]

    def open_file_stat(
        self, name: str, flags: int, mode: int = 0o600
    ) -> tuple[int, os.stat_result]:
        """``open_file``, with the ``fstat`` that proved the file regular."""
        path = self.entry(name)
        try:
            fd = os.open(name, flags | FILE_FLAGS, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise not_regular(path, stat.S_IFLNK) from None
            if exc.errno == errno.ENXIO:  # a FIFO without a reader, opened for writing
                raise not_regular(path, stat.S_IFIFO) from None
            exc.filename = str(path)
            raise
        st = regular_stat(fd, path)
        if flags & os.O_CREAT and st.st_uid == 0:  # made here by root (or root's already)
            _handed_over(fd, self)
        return fd, st

    def create_file(self, name: str, mode: int = 0o600) -> int:
        """Create a new file of this dir (``O_EXCL``: never an existing name, never through a
        link). What ``O_EXCL`` creates is a new regular file: no ``fstat`` to prove it."""
        try:
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | FILE_FLAGS, mode, dir_fd=self.fd
            )
        except OSError as exc:
            exc.filename = str(self.entry(name))
            raise
        return _handed_over(fd, self)

    def create_unnamed(self, mode: int = 0o600) -> int | None:
        """A new file of this dir that has no name yet (``O_TMPFILE``): nothing of it is seen
        in the dir, and it is gone with its descriptor unless ``link_unnamed`` names it. None
        when this system or file system cannot make one (the caller then names a temp).
        Open for reading too: a file system that cannot link it gets a copy of it."""
        if not _unnamed_links():
            return None
        try:
            fd = os.open(".", os.O_RDWR | os.O_TMPFILE | FILE_FLAGS, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in _NO_UNNAMED_ERRNOS:
                return None
            exc.filename = str(self.path)
            raise
        return _handed_over(fd, self)

    def link_unnamed(self, fd: int, target: str) -> None:
        """Name the unnamed file ``fd`` as ``target`` of this dir: ``linkat`` through the
        descriptor's own ``/proc`` entry, which names the open file itself; an existing
        ``target`` fails (``FileExistsError``), as ``link`` does."""
        os.link(f"/proc/self/fd/{fd}", target, dst_dir_fd=self.fd, follow_symlinks=True)

    def unlink(self, name: str) -> None:
        os.unlink(name, dir_fd=self.fd)

    def link(self, source: str, target: str) -> None:
        os.link(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)

    def rename(self, source: str, target: str) -> None:
        os.rename(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def remove_dir(self, child: DirFd) -> bool:
        """Remove the empty dir ``child`` held open, by its name in this dir, only while that
        name still leads to it (device and inode): a dir swapped in meanwhile, a link put
        there, or a dir another process filled is left alone. Whether it was removed."""
        if self.fd < 0 or child.fd < 0:
            return False
        try:
            if not child.same(self.lstat(child.path.name)):
                return False
            os.rmdir(child.path.name, dir_fd=self.fd)
        except OSError:  # not empty, gone, or not ours to remove: it stays
            return False
        return True


def require_regular(fd: int, path: Path | str) -> int:
    """``fd`` when it is a regular file; else it is closed and the open refused."""
    regular_stat(fd, path)
    return fd


def regular_stat(fd: int, path: Path | str) -> os.stat_result:
    """The ``fstat`` of ``fd`` when it is a regular file; else it is closed and the open
    refused."""
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise not_regular(path, st.st_mode)
    # O_NONBLOCK stays: it has no effect on a regular file (reads and writes of one never
    # return EAGAIN), and clearing it would cost two more system calls per open.
    return st


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """Open a file by path: the last component never a link, never blocking, regular only."""
    return open_regular_stat(path, flags, mode)[0]


def open_regular_stat(
    path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o600
) -> tuple[int, os.stat_result]:
    """``open_regular``, with the ``fstat`` that proved the file regular."""
    try:
        fd = os.open(path, flags | FILE_FLAGS, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise not_regular(path, stat.S_IFLNK) from None
        if exc.errno == errno.ENXIO:
            raise not_regular(path, stat.S_IFIFO) from None
        raise
    st = regular_stat(fd, path)
    if flags & os.O_CREAT and st.st_uid == 0:  # the operation log, made by a run as root
        try:
            hand_over(fd, Path(path).parent)
        except BaseException:
            os.close(fd)
            raise
    return fd, st


class DirChain:
    """root → project dir → session dir, each held open; the one way the writer reaches a
    session dir."""

    __slots__ = ("made", "project", "root", "session")

    def __init__(
        self, root: DirFd, project: DirFd, session: DirFd, made: tuple[DirFd, ...] = ()
    ) -> None:
        self.root = root
        self.project = project
        self.session = session
        self.made = made
        """The dirs of the chain this run created (the session dir, maybe the project dir):
        the only ones ``remove_made`` may take away again."""

    @property
    def path(self) -> Path:
        return self.session.path

    @classmethod
    def open(cls, session_dir: Path) -> DirChain:
        """Open the project and session dirs below the root ``session_dir.parent.parent``,
        each relative to its parent's descriptor and never through a link."""
        root_path = session_dir.parent.parent
        root = DirFd.open(root_path, root_path)
        opened = [root]
        try:
            for path in (session_dir.parent, session_dir):
                opened.append(DirFd.open(path.name, path, opened[-1]))
            return cls(opened[0], opened[1], opened[2])
        except BaseException:
            for handle in opened:
                handle.close()
            raise

    def verify(self) -> None:
        """The names still lead to the dirs held: nothing was swapped since they were opened."""
        checks: tuple[tuple[DirFd, DirFd | None], ...] = (
            (self.root, None),
            (self.project, self.root),
            (self.session, self.project),
        )
        for handle, parent in checks:
            try:
                if parent is None:
                    st: os.stat_result | None = os.stat(handle.path, follow_symlinks=False)
                else:
                    st = parent.lstat(handle.path.name)
            except OSError:
                st = None
            if st is None or not handle.same(st):
                raise SessionStale(
                    f"{handle.path} was moved or replaced while it was being written; "
                    "nothing was written through it",
                    path=str(handle.path),
                )

    def remove_made(self) -> bool:
        """Take away the dirs this run made (``made``), deepest first, each by its name in
        its held parent (``DirFd.remove_dir``): a write into them that failed before anything
        was published leaves nothing behind. The session dir must be empty by then; a
        project dir that holds anything else stays. Whether everything made is gone."""
        for handle, parent in ((self.session, self.project), (self.project, self.root)):
            if handle in self.made and not parent.remove_dir(handle):
                return False
        self.made = ()
        return True

    def close(self) -> None:
        for handle in (self.session, self.project, self.root):
            handle.close()

    def __enter__(self) -> DirChain:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
