"""Checks of the sessions root and ids given by a unique prefix: what a user types, made exact.

A root that is missing, not a directory, or a DSH home given instead of its ``sessions`` dir
is refused with the fix, so no command reports a healthy empty root for a typo. An id may be
given by any unique prefix of itself or of its short form (the id without DSH's ``session-``
prefix: every id DSH makes starts with it, so it tells no session apart); an ambiguous prefix
lists its candidates.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from .errors import DshForkError, IoError, SessionNotFound, UsageError
from .generations import Names, scan_names
from .layout import decode_segment, encode_segment

ROOT_HINT = "pass --root PATH or set DSH_HOME (the root is $DSH_HOME/sessions)"
CANDIDATES_SHOWN = 10
"""An ambiguous prefix names at most this many candidates (and how many more there are)."""
ID_PREFIX = "session-"
"""What every id DSH makes starts with; an id's short form is the id without it."""


def _session_dirs(root: Path, projects: list[Path] | None = None) -> Iterator[tuple[str, Path]]:
    """(dir name, path) of every dir two levels under ``root``: the candidate session dirs.
    ``projects``: the root's project dirs as the caller already listed them (a link among
    them is passed over, as a listing here passes it over)."""
    if projects is None:
        try:
            found = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            return
        paths = [e.path for e in found if e.is_dir(follow_symlinks=False)]
    else:
        paths = [str(p) for p in projects if not os.path.islink(p)]
    for path in paths:
        try:
            with os.scandir(path) as scan:
                names = sorted(e.name for e in scan if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for name in names:
            yield name, Path(path) / name


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
    try:
        home = sessions.is_dir() and not _holds_a_session(root)
    except OSError as exc:  # the root cannot be entered: name it, not a path below it
        return IoError(
            f"cannot enter the sessions root {root}: {exc.strerror or exc}",
            path=str(root),
            errno=exc.errno,
        )
    if home:
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


def short_id(session_id: str) -> str:
    """The id without DSH's ``session-`` prefix (the id itself when it has none, or when
    nothing would be left)."""
    if session_id.startswith(ID_PREFIX) and len(session_id) > len(ID_PREFIX):
        return session_id[len(ID_PREFIX) :]
    return session_id


def names_prefixes(arg: str) -> tuple[str, ...]:
    """The session dir name prefixes ``arg`` stands for: its own encoding, and, when it does
    not start with ``session-`` itself, the encoding of the id it is a short form of. The one
    place the prefix rule lives; an arg no id can start with stands for none."""
    try:
        encoded = encode_segment(arg)
    except ValueError:
        return ()
    if arg.startswith(ID_PREFIX):
        return (encoded,)
    return (encoded, encode_segment(ID_PREFIX + arg))


def completions(root: Path, incomplete: str) -> list[str]:
    """Shell completion of a SESSION: the ids starting with ``incomplete`` and the short ids
    starting with it, sorted (dir names only, nothing opened)."""
    offered: set[str] = set()
    for session_id in session_ids(root):
        short = short_id(session_id)
        if session_id.startswith(incomplete):
            offered.add(session_id)
        if short != session_id and short.startswith(incomplete):
            offered.add(short)
    return sorted(offered)


def expand_prefix(
    root: Path, arg: str, projects: list[Path] | None = None
) -> tuple[str, list[tuple[Path, Names]]]:
    """The id ``arg`` is a unique prefix of in ``root`` (``names_prefixes``), with the dirs
    that hold it and the generation names found in each (the caller reads them, not the dirs
    again); an ambiguous prefix → ``SESSION_NOT_FOUND`` listing the candidates one per line.
    An arg that matches nothing is returned as is, with no dirs (the lookup then reports it
    missing). The caller first checks that ``arg`` is no id of the root itself (an id is
    never expanded). ``projects``: as ``_session_dirs`` takes them."""
    prefixes = names_prefixes(arg)
    if not prefixes:
        return arg, []
    matches: dict[str, list[tuple[Path, Names]]] = {}
    for name, session_dir in _session_dirs(root, projects):
        if not name.startswith(prefixes):
            continue
        session_id = decode_segment(name)
        try:
            names = scan_names(session_dir) if session_id is not None else ()
        except OSError:
            continue
        if session_id is not None and names:
            matches.setdefault(session_id, []).append((session_dir, names))
    if len(matches) == 1:
        return next(iter(matches.items()))
    if not matches:
        return arg, []
    raise ambiguous(arg, sorted(matches))


def ambiguous(arg: str, ordered: list[str]) -> SessionNotFound:
    """The refusal of a prefix several ids match: the count on the error line, at most
    ``CANDIDATES_SHOWN`` candidates on the lines below it, then how many more there are."""
    shown = ordered[:CANDIDATES_SHOWN]
    more = len(ordered) - len(shown)
    listing = [*shown, f"... and {more} more"] if more > 0 else shown
    error = SessionNotFound(
        f"ambiguous id prefix {arg!r}: {len(ordered)} sessions match; give more characters",
        session=arg,
        candidates=shown,
        matches=len(ordered),
    )
    error.listing = tuple(listing)
    return error
