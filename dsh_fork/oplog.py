"""The operation log: JSON lines appended beside the sessions root (semantics §4.7).

Each line is ``{"t": ISO-8601 UTC with ms, "message": ..., "data": {...} | null}``, with the
message names of the peer plugin so existing log readers keep working. The log is a record, not
part of the operation: failing to write it is a warning, never a failure. It is opened without
following a symbolic link and without blocking: a link or a FIFO in its place is refused (one
warning), never appended through or waited on. A log with more than one hard link is not
appended to either (one warning): a backup made with ``cp -al`` shares its inode, and an append
would change the backup. Copying it on write was not chosen: two runs appending at once could
each replace the other's copy and lose a line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .durable import make_private_dirs
from .errors import IoError
from .fsdir import open_regular
from .ids import ClockMs, now_ms
from .records import dumps_record

COPYING = "copying subagent tree"
PROGRESS = "copy progress"
CHILD_FAILED = "child copy failed"
CATALOGUED = "catalogued existing copies"
COPIED = "copied subagent tree"
SKIPPED_RUNNING = "skipped running child"
"""A child left alone because a live process holds its lock (a later run picks it up)."""
UNRESUMABLE = "copy is not resumable"
"""A written copy that failed the check made by reading it back (``resumable.check``)."""
NO_AGENTS = "forked without subagents"
"""A fork made with ``--no-agents``: a fork without its tree on purpose, which ``doctor``
and ``relink --all`` leave alone unless it is named."""
PROGRESS_EVERY = 10

SCAN_MAX = 16 << 20
"""Bytes of the operation log read for ``forks_without_agents``: the newest part (a log grows
without end; the records sought are small and a fork's is written once)."""


def iso_ms(ms: int) -> str:
    """``2026-01-01T00:00:00.000Z``: UTC, milliseconds, as JavaScript's toISOString."""
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


class OpLog:
    """Appends lines to one log file; ``path=None`` logs nothing (library callers, plans)."""

    def __init__(
        self,
        path: Path | None,
        *,
        dry_run: bool = False,
        clock: ClockMs = now_ms,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.dry_run = dry_run
        self.clock = clock
        self.warn = warn
        self._failed = False

    def write(self, message: str, data: dict[str, Any] | None) -> None:
        if self.path is None or self._failed:
            return
        if self.dry_run and data is not None:
            data = {**data, "dryRun": True}
        record = {"t": iso_ms(self.clock()), "message": message, "data": data}
        line = dumps_record(record) + b"\n"  # ids may hold lone surrogates
        try:
            make_private_dirs(self.path.parent)  # 0700 like DSH's dirs, whatever the umask
            # Never through a link, never blocking on a FIFO, only into a regular file.
            fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                links = os.fstat(fd).st_nlink
                if links > 1:  # a `cp -al` backup shares it: appending would change the backup
                    raise IoError(
                        f"{self.path} has {links} hard links (a backup made with `cp -al` "
                        "shares it); not appended. Copy it without -l to keep logging",
                        path=str(self.path),
                    )
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except IoError as exc:
            self._failed = True  # one warning, not one per line
            if self.warn is not None:
                self.warn(f"cannot write the operation log: {exc.message}")
        except OSError as exc:
            self._failed = True
            if self.warn is not None:
                self.warn(f"cannot write the operation log {self.path}: {exc.strerror or exc}")


def forks_without_agents(path: Path | None) -> frozenset[str]:
    """The fork children the operation log says were made with ``--no-agents``.

    Read without following a link or blocking on a FIFO, as the log is written; a log that
    is missing or cannot be read names none (the forks are then treated as any other). Only
    the lines holding the record's message are parsed, so a long log costs a scan.
    """
    if path is None:
        return frozenset()
    try:
        fd = open_regular(path)
    except (IoError, OSError):
        return frozenset()
    needle = NO_AGENTS.encode()
    found: set[str] = set()
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - SCAN_MAX)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            stream.seek(start)
            if start:
                stream.readline()  # a partial first line
            for line in stream:
                if needle not in line:
                    continue
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                child = _no_agents_child(record)
                if child is not None:
                    found.add(child)
    except OSError:
        pass
    finally:
        os.close(fd)
    return frozenset(found)


def _no_agents_child(record: Any) -> str | None:
    """The fork child a ``forked without subagents`` record names (not a dry run's)."""
    if not isinstance(record, dict) or record.get("message") != NO_AGENTS:
        return None
    data = record.get("data")
    if not isinstance(data, dict) or data.get("dryRun"):
        return None
    child = data.get("forkChild")
    return child if isinstance(child, str) else None
