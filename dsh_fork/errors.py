"""Typed errors, one per contract code, each carrying its exit code.

The exit-code table of the contract lives here and nowhere else (``EXIT_CODES``, which the
help text prints); the CLI maps an error to its exit code by reading ``exit_code`` and never
decides codes itself.
"""

from __future__ import annotations

import errno
from typing import Any, ClassVar

from .display import cap

OPEN_IN_DSH_HINT = "open the session once in DSH, which migrates it to v4"


class DshForkError(Exception):
    """Base of every error a command may end with; ``details`` go into the JSON error object."""

    code: ClassVar[str] = "INTERNAL"
    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.listing: tuple[str, ...] = ()
        """Lines a human reads below the error line (an ambiguous prefix's candidates)."""
        self.details: dict[str, Any] = {k: v for k, v in details.items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        """The JSON error object; its message capped like a human error line, since a message
        may quote a hostile log (a header of 400,000 keys)."""
        return {"code": self.code, "message": cap(self.message), **self.details}


class InternalError(DshForkError):
    code = "INTERNAL"
    exit_code = 1


class UsageError(DshForkError):
    code = "USAGE"
    exit_code = 2


class SessionNotFound(DshForkError):
    code = "SESSION_NOT_FOUND"
    exit_code = 3


class InvalidBoundary(DshForkError):
    code = "INVALID_BOUNDARY"
    exit_code = 4


class OpenTurn(DshForkError):
    code = "OPEN_TURN"
    exit_code = 4


class SessionAlreadyExists(DshForkError):
    code = "SESSION_ALREADY_EXISTS"
    exit_code = 5


class SessionLocked(DshForkError):
    code = "SESSION_LOCKED"
    exit_code = 6


class SessionStale(DshForkError):
    code = "SESSION_STALE"
    exit_code = 7


class UnsupportedFormat(DshForkError):
    code = "UNSUPPORTED_FORMAT"
    exit_code = 8


class CorruptLog(DshForkError):
    code = "CORRUPT_LOG"
    exit_code = 9


class IoError(DshForkError, OSError):
    """The environment refused a read or write (disk full, permission denied, read-only
    filesystem, I/O error): not a bug, so not INTERNAL (exit 1), but exit 11, the first code
    after the contract's table, so a script can tell "retry elsewhere" from "report a bug".
    Also an ``OSError``, so code that handles those keeps working; ``errno`` is the original
    one."""

    code = "IO_ERROR"
    exit_code = 11

    def __init__(self, message: str, *, errno: int | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.errno = errno

    @classmethod
    def of(
        cls,
        exc: OSError,
        verb: str = "write",
        *,
        where: object | None = None,
        **details: Any,
    ) -> IoError:
        """``cannot <verb> <path>: <strerror>`` from the OSError that stopped an operation.

        An OSError raised on a file descriptor names no file; ``where`` (the file or dir the
        operation was working on) then names it, so every I/O error line has a path.
        """
        if isinstance(exc, IoError):
            return exc
        path = exc.filename if exc.filename is not None else where
        text = "an unnamed file" if path is None else str(path)
        reason = exc.strerror or str(exc) or type(exc).__name__
        return cls(
            f"cannot {verb} {text}: {reason}",
            errno=exc.errno,
            path=None if path is None else str(path),
            **details,
        )


class Partial(DshForkError):
    """A batch ran to its end but some items failed; ``result`` is the normal result.

    ``next_command`` is what the user runs to finish the work (``dsh-fork relink <child>``
    after a fork whose subagent copy failed), when there is such a command.
    """

    code = "PARTIAL"
    exit_code = 10

    def __init__(
        self,
        message: str,
        failed: list[dict[str, Any]],
        result: Any,
        next_command: str | None = None,
    ) -> None:
        super().__init__(message)
        self.failed = failed
        self.result = result
        self.next_command = next_command

    def to_json(self) -> dict[str, Any]:
        """The error member of a partial result's document (the result is beside it)."""
        out: dict[str, Any] = {"code": self.code, "message": self.message, "failed": self.failed}
        if self.next_command is not None:
            out["next"] = self.next_command
        return out


ALL_ERRORS: tuple[type[DshForkError], ...] = (
    InternalError,
    UsageError,
    SessionNotFound,
    InvalidBoundary,
    OpenTurn,
    SessionAlreadyExists,
    SessionLocked,
    SessionStale,
    UnsupportedFormat,
    CorruptLog,
    IoError,
    Partial,
)


EXIT_CODES: tuple[tuple[int, str, str], ...] = (
    (0, "-", "success"),
    (1, "INTERNAL", "a bug; should never happen"),
    (2, "USAGE", "bad arguments, or a root that is none"),
    (3, "SESSION_NOT_FOUND", "no such session (or an ambiguous id prefix)"),
    (4, "INVALID_BOUNDARY", "no such seq to fork at"),
    (4, "OPEN_TURN", "the boundary lies inside an open turn"),
    (5, "SESSION_ALREADY_EXISTS", "the child id is already used in the root"),
    (6, "SESSION_LOCKED", "a live DSH process holds it; rerun later"),
    (7, "SESSION_STALE", "the source changed while read; rerun"),
    (8, "UNSUPPORTED_FORMAT", "generation above v4, or a write below v4"),
    (9, "CORRUPT_LOG", "a bad frame, checksum, line, header, seq"),
    (10, "PARTIAL", "finished, but some items failed (named)"),
    (11, "IO_ERROR", "permissions, disk full, read-only, I/O"),
    (130, "-", "interrupted (Ctrl-C)"),
    (141, "-", "stdout closed early (broken pipe)"),
)
"""Every exit code the command can end with; printed by ``dsh-fork --help``."""

BROKEN_PIPE_EXIT = 141
INTERRUPTED_EXIT = 130


def unwritten_output(exc: OSError) -> tuple[int, str | None]:
    """How a run ends whose stdout refused its output: quietly with 141 when the reader went
    away (EPIPE), else (a full disk, an I/O error) with IO_ERROR and this line for stderr."""
    if exc.errno == errno.EPIPE:
        return BROKEN_PIPE_EXIT, None
    reason = exc.strerror or str(exc) or type(exc).__name__
    return IoError.exit_code, f"Error: cannot write the output: {reason}"


def unsupported_below_v4(what: str, version: int, **details: Any) -> UnsupportedFormat:
    """The refusal for a write that needs a generation below 4 (contract §1.1)."""
    return UnsupportedFormat(
        f"{what} is stored as generation v{version}; {OPEN_IN_DSH_HINT}",
        version=version,
        hint=OPEN_IN_DSH_HINT,
        **details,
    )
