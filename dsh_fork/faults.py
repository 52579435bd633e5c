"""Fault injection at durable steps: the seam the crash, ENOSPC and EACCES tests drive.

Every durable step of the writer (mkdir, lock file creation, file write, fsync, link, rename,
append, truncate, unlink) calls ``step`` before and ``done`` after itself. A plan installed with
``install`` (or, once the test suite has called ``enable_env``, through the
``DSH_FORK_FAULT`` environment variable, for subprocess tests, as ``kill:K``, ``crash:K``,
``tear:K``, ``enospc:K``, ``eacces:K``, ``erofs:K`` or ``eio:K``) then acts at the K-th
step: errors replace the step, crashes happen right after it, and ``tear`` makes a write
step write only half of its bytes before the crash (a torn frame). With
no plan every call is a no-op.

The installed command never reads ``DSH_FORK_FAULT``: only a process that called
``enable_env`` (the test suite, and the test launcher its subprocess tests run) does.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from msgspec import Struct, field

ENV_VAR = "DSH_FORK_FAULT"
_ERRNOS = {
    "enospc": errno.ENOSPC,
    "eacces": errno.EACCES,
    "erofs": errno.EROFS,
    "eio": errno.EIO,
}


class InjectedCrash(BaseException):
    """Raised by a ``crash`` plan: a BaseException, so no ``except Exception`` cleanup runs."""


class Plan(Struct):
    action: str
    at: int
    count: int = 0
    log: list[tuple[str, str]] = field(default_factory=list)


_plan: Plan | None = None
_env_enabled = False


def _from_env() -> Plan | None:
    value = os.environ.get(ENV_VAR, "")
    if not value:
        return None
    action, _, at = value.partition(":")
    if action not in ("kill", "crash", "tear", *_ERRNOS) or not at.isdigit():
        return None
    return Plan(action, int(at))


WRITE_KINDS = ("write", "append")
"""Steps that write bytes: an errno there fails midway, as a real ENOSPC or EIO does."""


def _error(plan: Plan, path: Path | str) -> OSError:
    code = _ERRNOS[plan.action]
    return OSError(code, os.strerror(code), str(path))


def step(kind: str, path: Path | str) -> None:
    """Called before a durable step; an errno plan fails the K-th step here (a write step
    first writes half of its bytes, see ``tear_at``, and fails in ``done``)."""
    plan = _plan
    if plan is None:
        return
    plan.count += 1
    plan.log.append((kind, str(path)))
    if plan.count == plan.at and plan.action in _ERRNOS and kind not in WRITE_KINDS:
        raise _error(plan, path)


def active() -> bool:
    """Whether a plan is installed: its steps must then run one at a time, in order."""
    return _plan is not None


def done(kind: str, path: Path | str) -> None:
    """Called after a durable step; a crash plan ends the process (or the call) here."""
    plan = _plan
    if plan is None or plan.count != plan.at:
        return
    if plan.action in _ERRNOS:  # only a write step gets here: half written, then the error
        raise _error(plan, path)
    if plan.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if plan.action in ("crash", "tear"):
        raise InjectedCrash(f"injected crash after step {plan.at} ({kind} {path})")


def tear_at(size: int) -> int | None:
    """How many of ``size`` bytes the current write step may write: half under a ``tear``
    plan (then the crash) or an errno plan (then the error), else all (None)."""
    plan = _plan
    if plan is None or plan.count != plan.at or plan.action not in ("tear", *_ERRNOS):
        return None
    return size // 2


@contextmanager
def install(action: str, at: int) -> Iterator[Plan]:
    """Run a block under a fault plan; ``at=0`` only counts the steps (a dry measurement)."""
    global _plan
    previous = _plan
    _plan = Plan(action, at)
    try:
        yield _plan
    finally:
        _plan = previous


def enable_env() -> None:
    """Let ``load_from_env`` read ``DSH_FORK_FAULT``: called by the test suite only."""
    global _env_enabled
    _env_enabled = True


def load_from_env() -> None:
    """Install the plan named by ``DSH_FORK_FAULT`` (called once by the CLI), only in a
    process that called ``enable_env``; elsewhere the variable means nothing."""
    global _plan
    _plan = _from_env() if _env_enabled else None
