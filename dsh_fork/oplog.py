"""The operation log: JSON lines appended beside the sessions root (semantics §4.7).

Each line is ``{"t": ISO-8601 UTC with ms, "message": ..., "data": {...} | null}``, with the
message names of the peer plugin so existing log readers keep working. The log is a record, not
part of the operation: failing to write it is a warning, never a failure. It is opened without
following a symbolic link and without blocking: a link or a FIFO in its place is refused (one
warning), never appended through or waited on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import IoError
from .fsdir import open_regular
from .ids import ClockMs, now_ms
from .records import dumps_record
from .writer import make_private_dirs

COPYING = "copying subagent tree"
PROGRESS = "copy progress"
CHILD_FAILED = "child copy failed"
CATALOGUED = "catalogued existing copies"
COPIED = "copied subagent tree"
PROGRESS_EVERY = 10


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
