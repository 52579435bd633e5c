"""``session.lock``: the liveness probe and the exclusive write lock (format §11).

Only ``flock`` is used. POSIX record locks (``lockf``/``F_SETLK``) are invisible to a DSH writer
holding ``flock`` and are dropped when any descriptor of the file closes.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType
from typing import Literal

from . import faults
from .errors import SessionLocked, UsageError
from .generations import LOCK_NAME

LockState = Literal["absent", "free", "held", "unknown"]
"""``unknown``: the lock file exists but cannot be opened for the probe (permissions, a symbolic
link, an I/O error); nothing can be said, so ``running`` counts it as held."""
_ATTEMPTS = 3


def lock_path(session_dir: Path) -> Path:
    return session_dir / LOCK_NAME


def probe(session_dir: Path) -> LockState:
    """Is a live process holding the session's lock? Never creates the file."""
    path = lock_path(session_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return "absent"
    except OSError:
        return "unknown" if os.path.lexists(path) else "absent"
    try:
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
    """An exclusive, non-blocking ``flock`` on a session's lock file, held until ``release``."""

    def __init__(self, session_dir: Path) -> None:
        self.session_dir = session_dir
        self.path = lock_path(session_dir)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> SessionLock:
        for path in (self.session_dir, self.session_dir.parent):
            if path.is_symlink():  # a lock is taken to write, never through a link
                raise UsageError(
                    f"refusing to write through the symbolic link {path}", path=str(path)
                )
        for _ in range(_ATTEMPTS):
            existed = self.path.exists()
            if not existed:
                faults.step("lock", self.path)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            if not existed:
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
            try:
                held, now = os.fstat(fd), os.stat(self.path)
            except FileNotFoundError:
                os.close(fd)
                continue
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                self._fd = fd
                return self
            os.close(fd)
        raise SessionLocked(
            f"{self.session_dir.name}: session.lock kept being replaced", lockPath=str(self.path)
        )

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SessionLock:
        return self if self.held else self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
