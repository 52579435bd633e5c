"""A second core for the large reads: half of a pass computed by a forked child process.

Decoding and parsing a 100 MB log, or listing a root of 100,000 sessions, is CPU work under
the interpreter lock, so threads do not help; a child forked from this process shares its
memory (copy-on-write) and computes its half while this process computes the other. The child
only reads (the log's bytes in memory, or the session dirs of its half of a listing) and
sends one pickled result through a pipe; it never writes a file, takes a lock or touches the
terminal, and leaves with ``os._exit``. A caller always has a fallback: when no child can be
started, or its result does not arrive, it computes that half itself, so results never depend
on the split.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

SPLIT_MIN_BYTES = 2 << 20
"""Below this much compressed data a pass is not split: a child costs about a millisecond."""


def available() -> bool:
    """Whether a child can help: two cores, ``fork``, and a single-threaded process (a child of
    a threaded process may inherit locks held by the other threads)."""
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        cores = os.cpu_count() or 1
    return cores >= 2


class Child:
    """A forked child computing ``work()``; ``result()`` is its value, or None if it failed."""

    def __init__(self, pid: int, read_fd: int) -> None:
        self._pid = pid
        self._fd = read_fd
        self._done = False

    def result(self) -> Any:
        """Wait for the child; its (unpickled) value, or None when it failed or sent none."""
        try:
            payload = _read_all(self._fd)
        finally:
            self._close()
        _, status = os.waitpid(self._pid, 0)
        self._done = True
        if status != 0 or not payload:
            return None
        import pickle

        try:
            return pickle.loads(payload)  # our own child's bytes, through a pipe
        except Exception:
            return None

    def cancel(self) -> None:
        """Stop and reap the child when its result is no longer wanted."""
        self._close()
        if not self._done:
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            self._done = True

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def start(work: Callable[[], Any]) -> Child | None:
    """Fork a child that computes ``work()`` and sends the pickled value back; None when no
    child can be started (the caller then does the work itself)."""
    if not available():
        return None
    import pickle  # only a split pass pays its import

    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # the child: compute, send, leave without running any of the parent's code
        status = 1
        try:
            os.close(read_fd)
            payload = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
            _write_all(write_fd, payload)
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    return Child(pid, read_fd)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    pieces: list[bytes] = []
    while True:
        piece = os.read(fd, 1 << 20)
        if not piece:
            return b"".join(pieces)
        pieces.append(piece)
