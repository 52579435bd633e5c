"""DSH's JSON storage files, ``<home>/storages/<unit>.json``: read, locked, replaced.

DSH keeps each storage unit in one file it rewrites whole (temp file, fsync, rename, fsync of
the dir) and reads once at start. This module reads such a file and replaces it the same way,
for an offline writer: the home and ``storages`` dirs are opened without following links and
every step names one entry relative to the dir's descriptor; the file is read only when it is
a regular file (never through a link, never blocking on a FIFO) and not too large; an edit
holds ``flock`` on the storages dir from its read to its rename and checks, just before the
rename, that the file is still the one it read (DSH takes no lock). The temp gets the old
file's mode and, for a run as root, its owner. What the file means is ``registry``'s business.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from .fsdir import DirFd

STORAGES = "storages"
LOCK_WAIT_S = 10.0
"""How long an edit waits for another dsh-fork run's lock on the storages dir before giving
up (nothing written): a run never hangs on a forgotten lock."""


class Refusal(Exception):
    """A file this project will not edit; the message says why, ``dsh`` whether DSH itself
    would refuse it too."""

    def __init__(self, message: str, *, dsh: bool = False) -> None:
        super().__init__(message)
        self.dsh = dsh


class Held:
    """The home and storages dirs held open (never through a link); closing the storages
    dir's descriptor releases its lock."""

    def __init__(self, home: DirFd, storages: DirFd) -> None:
        self.home = home
        self.storages = storages

    def close(self) -> None:
        self.storages.close()
        self.home.close()


def open_dirs(home: Path) -> Held | None:
    """Home and storages, each relative to its parent's descriptor; None when either is
    missing."""
    try:
        home_fd = DirFd.open(home, home)
    except FileNotFoundError:
        return None
    try:
        storages = DirFd.open(STORAGES, home / STORAGES, home_fd)
    except FileNotFoundError:
        home_fd.close()
        return None
    except BaseException:
        home_fd.close()
        raise
    return Held(home_fd, storages)


def read(held: Held, name: str, max_bytes: int) -> tuple[bytes, os.stat_result] | None:
    """The file's bytes and identity (None when absent): a regular file only, never through
    a link or blocking on a FIFO, never more than ``max_bytes``."""
    try:
        fd, st = held.storages.open_file_stat(name, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if st.st_size > max_bytes:
            raise Refusal(f"it is larger than {max_bytes} bytes")
        pieces: list[bytes] = []
        left = st.st_size + 1
        while left > 0:
            piece = os.read(fd, min(left, 1 << 20))
            if not piece:
                break
            pieces.append(piece)
            left -= len(piece)
    finally:
        os.close(fd)
    data = b"".join(pieces)
    if len(data) != st.st_size:
        raise Refusal("it changed while it was read")
    return data, st


def lock(storages: DirFd) -> None:
    """``flock`` on the storages dir, waited for at most ``LOCK_WAIT_S``."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(storages.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Refusal(
                    f"another run held the lock on {storages.path} for {LOCK_WAIT_S:.0f} s"
                ) from None
            time.sleep(0.05)


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def replace(held: Held, name: str, data: Iterable[bytes], was: os.stat_result) -> None:
    """Temp file (``O_EXCL``, 0600) in the storages dir, the old file's owner and mode, fsync,
    a last check that the file is still the one read, rename over it, fsync the dir."""
    storages = held.storages
    temp = f".{name}.{os.getpid()}-{os.urandom(4).hex()}.tmp"  # not secrets: it loads OpenSSL
    fd = storages.create_file(temp, 0o600)
    named = True
    try:
        try:
            for chunk in data:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            if os.geteuid() == 0 and (was.st_uid, was.st_gid) != (os.getuid(), os.getgid()):
                os.fchown(fd, was.st_uid, was.st_gid)  # the user's DSH must read its own file
            os.fchmod(fd, stat.S_IMODE(was.st_mode))
            os.fsync(fd)
        finally:
            os.close(fd)
        _still_same(held, name, was)
        storages.rename(temp, name)
        named = False
        storages.fsync()
    finally:
        if named:
            with contextlib.suppress(OSError):
                storages.unlink(temp)


def _still_same(held: Held, name: str, was: os.stat_result) -> None:
    """The file and the storages dir are still those read: else another writer (DSH takes no
    lock) changed them, and its edit must not be lost."""
    try:
        now = held.storages.lstat(name)
        dir_now = held.home.lstat(STORAGES)
    except FileNotFoundError:
        raise Refusal("it was removed while it was being edited") from None
    if _identity(now) != _identity(was) or not held.storages.same(dir_now):
        raise Refusal("it changed while it was being edited (rerun to apply the edit)")
