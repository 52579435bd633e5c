"""A log's bytes read on demand from one descriptor, never held whole (format §13).

A fork of a 1 GB log needs only the frame offsets and per-frame summaries: the frames are read
in bounded windows (``pread``), decoded once and dropped, and the verbatim run of whole frames
is copied from this descriptor into the new file by the kernel (``FileRun``). The file is not
mapped: a file truncated by another process while mapped kills the reader (SIGBUS); a short
read here is a SESSION_STALE instead.
"""

from __future__ import annotations

import errno
import os
import weakref
from collections.abc import Callable
from pathlib import Path

from .errors import SessionStale

Identity = tuple[int, int, int, int, int]
"""(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns): a file unchanged since it was read."""

WINDOW_BYTES = 4 << 20
"""Compressed bytes read at a time by a pass over the frames."""
COPY_STEP = 1 << 20
"""Bytes per step of the read/write fallback of ``copy_range``."""


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stale(path: Path | str) -> SessionStale:
    return SessionStale(f"{path} changed while it was being read", path=str(path))


class FileBytes:
    """The first ``size`` bytes of an open log, read by offset (the descriptor's own offset is
    never used, so a forked child may read through the same descriptor)."""

    def __init__(self, fd: int, path: Path, identity: Identity) -> None:
        self.fd = fd
        self.path = path
        self.identity = identity
        self._closer = weakref.finalize(self, os.close, fd)

    def __len__(self) -> int:
        return self.identity[2]

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``start..end-1``; fewer than asked means the file shrank: SESSION_STALE."""
        end = min(end, len(self))
        parts: list[bytes] = []
        pos = start
        while pos < end:
            piece = os.pread(self.fd, end - pos, pos)
            if not piece:
                raise stale(self.path)
            parts.append(piece)
            pos += len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def check(self) -> None:
        """SESSION_STALE unless the open file and the file at its path are still the one read."""
        try:
            same = (
                identity_of(os.fstat(self.fd)) == self.identity == identity_of(os.stat(self.path))
            )
        except FileNotFoundError:
            same = False
        if not same:
            raise stale(self.path)

    def close(self) -> None:
        self._closer()


class FileRun:
    """Bytes ``start..end-1`` of a log, to be copied into another file as they are."""

    def __init__(self, source: FileBytes, start: int, end: int) -> None:
        self.source = source
        self.start = start
        self.end = end

    def __len__(self) -> int:
        return self.end - self.start

    def __bool__(self) -> bool:
        return self.end > self.start

    def copy_to(self, fd: int, count: int | None = None) -> None:
        """Append the first ``count`` bytes (all by default) to ``fd`` at its offset. A
        source that ends early is SESSION_STALE."""
        end = self.end if count is None else self.start + count
        path = self.source.path
        copy_range(self.source.fd, fd, self.start, end, lambda: stale(path))


def copy_range(src: int, dst: int, start: int, end: int, ended: Callable[[], Exception]) -> None:
    """Append bytes ``start..end-1`` of ``src`` (read by offset) to ``dst`` at its offset: by
    ``copy_file_range`` (no copy through this process), else a bounded ``pread``/write loop.
    A source that ends early raises ``ended()``."""
    pos = start
    kernel = hasattr(os, "copy_file_range")
    while pos < end:
        if kernel:
            try:
                done = os.copy_file_range(src, dst, end - pos, pos)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                kernel = False
                continue
        else:
            piece = os.pread(src, min(end - pos, COPY_STEP), pos)
            view = memoryview(piece)
            while view:
                view = view[os.write(dst, view) :]
            done = len(piece)
        if not done:
            raise ended()
        pos += done
