"""Checks of the sessions root and ids given by a unique prefix: what a user types, made exact.

A root that is missing, not a directory, or a DSH home given instead of its ``sessions`` dir
is refused with the fix, so no command reports a healthy empty root for a typo. An id may be
given by any unique prefix; an ambiguous prefix lists its candidates.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DshForkError, SessionNotFound, UsageError
from .generations import scan_names
from .layout import decode_segment, encode_segment

if TYPE_CHECKING:
    from .discovery import Root

ROOT_HINT = "pass --root PATH or set DSH_HOME (the root is $DSH_HOME/sessions)"
CANDIDATES_SHOWN = 10
"""An ambiguous prefix names at most this many candidates (and how many more there are)."""


def _session_dirs(root: Path) -> Iterator[tuple[str, Path]]:
    """(dir name, path) of every dir two levels under ``root``: the candidate session dirs."""
    try:
        projects = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return
    for project in projects:
        if not project.is_dir(follow_symlinks=False):
            continue
        try:
            with os.scandir(project.path) as scan:
                names = sorted(e.name for e in scan if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for name in names:
            yield name, Path(project.path) / name


def _holds_a_session(path: Path) -> bool:
    """Any dir two levels below ``path`` holding a canonical generation (stops at the first)."""
    for _, session_dir in _session_dirs(path):
        try:
            if scan_names(session_dir):
                return True
        except OSError:
            continue
    return False


def root_problem(root: Path, *, lookup: str | None = None) -> DshForkError | None:
    """Why ``root`` cannot be a sessions root, with the fix; None when it can be one.

    A missing root is ``SESSION_NOT_FOUND`` for the lookup of the id ``lookup`` (it holds no
    sessions: semantics §2.1) and ``USAGE``
    for a command over the whole root; a file, or a DSH home (a dir whose ``sessions`` subdir
    exists while it holds no session itself), is ``USAGE`` for both.
    """
    if not os.path.lexists(root):
        message = f"the sessions root {root} does not exist; {ROOT_HINT}"
        if lookup is None:
            return UsageError(message, path=str(root), hint=ROOT_HINT)
        return SessionNotFound(
            f"no session {lookup!r}: {message}", session=lookup, path=str(root), hint=ROOT_HINT
        )
    if not root.is_dir():
        return UsageError(
            f"the sessions root {root} is not a directory; {ROOT_HINT}",
            path=str(root),
            hint=ROOT_HINT,
        )
    sessions = root / "sessions"
    if sessions.is_dir() and not _holds_a_session(root):
        return UsageError(
            f"{root} is a DSH home, not a sessions root: did you mean {sessions}?",
            path=str(root),
            hint=f"--root {sessions}",
        )
    return None


def check_root(root: Path, *, lookup: str | None = None) -> None:
    """Raise ``root_problem`` when there is one."""
    problem = root_problem(root, lookup=lookup)
    if problem is not None:
        raise problem


def session_ids(root: Path) -> Iterator[str]:
    """The ids the session dir names of ``root`` encode (undecodable names are no ids).

    Names only: no log is opened, so completing an id stays fast on a large root.
    """
    for name, _ in _session_dirs(root):
        session_id = decode_segment(name)
        if session_id is not None:
            yield session_id


def expand_prefix(root: Root, arg: str) -> str:
    """The id ``arg`` names in ``root``: itself when a session has it, else the one id it is a
    unique prefix of; an ambiguous prefix → ``SESSION_NOT_FOUND`` listing the candidates.
    An arg that matches nothing is returned as is (the lookup then reports it missing)."""
    check_root(root.path, lookup=arg)
    if root.dirs_of(arg):
        return arg
    try:
        encoded = encode_segment(arg)
    except ValueError:
        return arg
    matches: set[str] = set()
    for name, session_dir in _session_dirs(root.path):
        if not name.startswith(encoded):
            continue
        session_id = decode_segment(name)
        try:
            if session_id is not None and scan_names(session_dir):
                matches.add(session_id)
        except OSError:
            continue
    if len(matches) == 1:
        return matches.pop()
    if not matches:
        return arg
    ordered = sorted(matches)
    shown = ", ".join(ordered[:CANDIDATES_SHOWN])
    more = len(ordered) - CANDIDATES_SHOWN
    if more > 0:
        shown += f" and {more} more"
    raise SessionNotFound(
        f"ambiguous id prefix {arg!r}: {len(ordered)} sessions match ({shown}); "
        "give more characters",
        session=arg,
        candidates=ordered,
    )
