"""``session.lock``: the liveness probe and the exclusive write lock (format §11).

Only ``flock`` is used. POSIX record locks (``lockf``/``F_SETLK``) are invisible to a DSH writer
holding ``flock`` and are dropped when any descriptor of the file closes.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import Literal

from . import faults
from .errors import SessionLocked
from .fsdir import DirChain
from .generations import LOCK_NAME

LockState = Literal["absent", "free", "held", "unknown"]
"""``unknown``: the lock file exists but cannot be opened for the probe (permissions, a symbolic
link, an I/O error); nothing can be said, so ``running`` counts it as held."""
_ATTEMPTS = 3


def lock_path(session_dir: Path) -> Path:
    return session_dir / LOCK_NAME


def probe(session_dir: str | Path) -> LockState:
    """Is a live process holding the session's lock? Never creates the file, never blocks.
    ``session_dir`` may be text (doctor probes every listed dir without building a Path)."""
    path = os.path.join(session_dir, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return "absent"
    except OSError:
        return "unknown" if os.path.lexists(path) else "absent"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device: nothing can be said
            return "unknown"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "held"
        except OSError:
            return "unknown"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "free"
    finally:
        os.close(fd)


def running(session_dir: Path) -> bool:
    """Whether to treat the session as live: its lock is held, or cannot be probed (safe side)."""
    return probe(session_dir) in ("held", "unknown")


class SessionLock:
    """An exclusive, non-blocking ``flock`` on a session's lock file, held until ``release``.

    The lock is taken through the session dir's descriptor (``fsdir.DirChain``), and the chain
    is verified once the lock is held: every write made under this lock goes through ``dirs``,
    the very directory that was locked, never through a path that could have been swapped.
    """

    def __init__(self, session_dir: Path) -> None:
        self.session_dir = session_dir
        self.path = lock_path(session_dir)
        self._fd: int | None = None
        self._dirs: DirChain | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def dirs(self) -> DirChain:
        """The open root, project and session dirs of the held lock."""
        if self._dirs is None:
            raise RuntimeError(f"the lock of {self.session_dir} is not held")
        return self._dirs

    def acquire(self, *, dirs: DirChain | None = None, verify: bool = True) -> SessionLock:
        """Take the lock through the session dir's descriptor, then verify the dir chain.

        ``dirs``: the chain already open (a dir just made through it), taken over by the lock
        and closed with it, even when the lock is not taken. ``verify=False`` leaves the check
        to a caller that verifies the chain itself before its first write.
        """
        dirs = DirChain.open(self.session_dir) if dirs is None else dirs
        try:
            self._fd = self._lock(dirs)
            if verify:
                dirs.verify()
        except BaseException:
            self.release()
            dirs.close()
            raise
        self._dirs = dirs
        return self

    def _lock(self, dirs: DirChain) -> int:
        session = dirs.session
        planned = faults.active()
        for _ in range(_ATTEMPTS):
            # Whether the lock file is created here matters only to a fault plan (creating it
            # is a step a crash test can stop at): without one, no look before the open.
            created = planned and not session.exists(LOCK_NAME)
            if created:
                faults.step("lock", self.path)
            fd, held = session.open_file_stat(LOCK_NAME, os.O_WRONLY | os.O_CREAT, 0o600)
            if created:
                faults.done("lock", self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise SessionLocked(
                    f"{self.session_dir.name} is in use: its session.lock is held by a live "
                    "process",
                    lockPath=str(self.path),
                ) from None
            except OSError:
                os.close(fd)
                raise
            try:  # the file locked is still the one of that name (its inode never changes)
                now = session.lstat(LOCK_NAME)
            except FileNotFoundError:
                os.close(fd)
                continue
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                return fd
            os.close(fd)
        raise SessionLocked(
            f"{self.session_dir.name}: session.lock kept being replaced", lockPath=str(self.path)
        )

    def file_stat(self) -> os.stat_result:
        """The held lock file's ``fstat``: its identity, to tell it from a file put in its
        place."""
        assert self._fd is not None
        return os.fstat(self._fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._dirs is not None:
            self._dirs.close()
            self._dirs = None

    def __enter__(self) -> SessionLock:
        return self if self.held else self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
