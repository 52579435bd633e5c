"""Resolving a SESSION argument: an id (or a unique prefix of one) looked up in the root, a path
to a session dir, or a path to a log file in one.

A path outside an explicit ``--root`` is refused; without ``--root`` a path's grandparent is
the root. Apart from the listing (``discovery``) because it is the one place where what a user
typed meets the file system, with its own rules and warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct

from .discovery import Root
from .errors import SessionNotFound, UsageError
from .generations import Generation, list_generations, parse_name, select
from .layout import expand_home, resolve_root
from .lookup import check_root, expand_prefix
from .reader import check_version
from .sessionentry import odd_generation

if TYPE_CHECKING:
    pass


class Located(Struct, frozen=True):
    root: Root
    session_dir: Path
    generation: Generation
    warnings: tuple[str, ...] = ()


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _existing_path(arg: str) -> Path | None:
    """The existing file or directory ``arg`` names, or None when it can only be an id.

    ``~x``, over-long names and the like are ids, not errors.
    """
    if not arg:
        return None
    try:
        candidate = expand_home(arg)
        return candidate if candidate.exists() else None
    except (RuntimeError, OSError, ValueError):
        return None


def locate(arg: str, root_option: str | None, env: Mapping[str, str] | None = None) -> Located:
    """Resolve an id (or a unique id prefix), a session dir or a log file path (semantics
    §2.1, §2.2); a root that cannot be one is refused with the fix (``lookup.check_root``).

    [P] A path wins when it leads to a session dir; an existing path that does not (the ids
    ``.`` and ``..`` name the working directory and its parent) is tried as an id before it
    is reported as a path without a session.
    """
    if not arg:
        raise SessionNotFound("empty session id")
    candidate = _existing_path(arg)
    if candidate is not None:
        absolute = candidate.resolve()
        session_dir = absolute.parent if absolute.is_file() else absolute
        if not list_generations(session_dir):
            by_id = Root(resolve_root(root_option, env))
            projects = by_id.project_dirs()
            held = by_id.holding(arg, projects)
            if held:
                by_id.only_dir(arg, [path for path, _ in held], projects)
                return _located(by_id, *held[0])
        return _located_path(arg, absolute, session_dir, root_option, env)
    root = Root(resolve_root(root_option, env))
    check_root(root.path, lookup=arg)
    projects = root.project_dirs()  # listed once, handed to each question below
    held = root.holding(arg, projects)
    if held:  # an id of the root is never expanded
        root.only_dir(arg, [path for path, _ in held], projects)
        return _located(root, *held[0])
    refusal = root.refusal(arg, projects)
    if refusal is not None:  # named as unreadable, not as "no session"
        raise refusal
    session_id, found = expand_prefix(root.path, arg, projects)
    if not found:  # no id has this prefix: the refusal above already said none is unreadable
        raise SessionNotFound(f"no session {arg!r} in {root.path}", session=arg)
    root.only_dir(session_id, [path for path, _ in found], projects)
    session_dir, names = found[0]  # the generations the expansion listed, not listed again
    return _located(root, session_dir, [Generation(session_dir / n, v, e) for v, e, n in names])


def _located_path(
    arg: str,
    absolute: Path,
    session_dir: Path,
    root_option: str | None,
    env: Mapping[str, str] | None,
) -> Located:
    """A path argument: inside an explicit root, or its grandparent is the root."""
    warnings: list[str] = []
    is_file = absolute.is_file()
    if is_file and parse_name(absolute.name) is None:
        warnings.append(f"{absolute.name} is not a canonical generation name")
    if root_option is not None:
        root_path = resolve_root(root_option, env)
        if not _inside(session_dir, root_path):
            raise UsageError(f"{arg} lies outside the root {root_path}", path=str(absolute))
    else:
        root_path = session_dir.parent.parent
    located = _located(Root(root_path), session_dir)
    if is_file and absolute != located.generation.path.resolve():
        warnings.append(
            f"reading {located.generation.name}, the highest generation of {session_dir}"
        )
    return Located(located.root, session_dir, located.generation, tuple(warnings))


def _located(root: Root, session_dir: Path, generations: list[Generation] | None = None) -> Located:
    """``generations``: those of ``session_dir`` as the lookup just listed them."""
    listed = list_generations(session_dir) if generations is None else generations
    generation = select(listed)
    if generation is None:
        odd = odd_generation(str(session_dir))
        if odd is not None and odd.error is not None:  # a FIFO where the log belongs, say
            raise odd.error
        raise SessionNotFound(f"{session_dir} holds no session log", path=str(session_dir))
    check_version(generation)
    return Located(root, session_dir, generation)
