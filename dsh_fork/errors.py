"""Typed errors, one per contract code, each carrying its exit code.

The exit-code table of the contract lives here and nowhere else; the CLI maps an error to its
exit code by reading ``exit_code`` and never decides codes itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

OPEN_IN_DSH_HINT = "open the session once in DSH, which migrates it to v4"


class DshForkError(Exception):
    """Base of every error a command may end with; ``details`` go into the JSON error object."""

    code: ClassVar[str] = "INTERNAL"
    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = {k: v for k, v in details.items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


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
    filesystem, I/O error): not a bug, so not INTERNAL, but it shares exit 1 (the contract
    table has no other code for it). Also an ``OSError``, so code that handles those keeps
    working; ``errno`` is the original one."""

    code = "IO_ERROR"
    exit_code = 1

    def __init__(self, message: str, *, errno: int | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.errno = errno

    @classmethod
    def of(cls, exc: OSError, verb: str = "write", **details: Any) -> IoError:
        """``cannot <verb> <path>: <strerror>`` from the OSError that stopped an operation."""
        if isinstance(exc, IoError):
            return exc
        where = exc.filename if exc.filename is not None else "a file"
        reason = exc.strerror or str(exc) or type(exc).__name__
        return cls(
            f"cannot {verb} {where}: {reason}",
            errno=exc.errno,
            path=None if exc.filename is None else str(exc.filename),
            **details,
        )


class Partial(DshForkError):
    """A batch ran to its end but some items failed; ``result`` is the normal result."""

    code = "PARTIAL"
    exit_code = 10

    def __init__(self, message: str, failed: list[dict[str, Any]], result: Any) -> None:
        super().__init__(message)
        self.failed = failed
        self.result = result

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "failed": self.failed,
            "result": self.result,
        }


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


def unsupported_below_v4(what: str, version: int, **details: Any) -> UnsupportedFormat:
    """The refusal for a write that needs a generation below 4 (contract §1.1)."""
    return UnsupportedFormat(
        f"{what} is stored as generation v{version}; {OPEN_IN_DSH_HINT}",
        version=version,
        hint=OPEN_IN_DSH_HINT,
        **details,
    )
