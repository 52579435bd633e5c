"""Moving sessions into another workspace: which cwd a moved session gets.

A workspace is a directory tree; a session working in it, or anywhere inside it, belongs to it.
Moving a workspace from ``old`` to ``new`` gives a session whose cwd is ``old`` the cwd ``new``,
and one working in ``old/sub`` the cwd ``new/sub``; a session working elsewhere keeps its cwd.
A header without cwd (the ``_no-cwd`` project dir) is in the workspace of a top session without
one. Both POSIX and Windows separators count, as in ``projectKey`` (format §2.3).
"""

from __future__ import annotations

_SEPARATORS = "/\\"

Workspace = tuple[str | None, str]
"""A workspace move: (old cwd, new cwd)."""


def moved_workspace(old: str | None, new: str | None) -> Workspace | None:
    """The move a fork child made when its cwd is not its source's (``fork --cwd``): the
    subagent copies made under it follow (``rebase_cwd``). None when nothing moved."""
    if new is None or new == old:
        return None
    return (old, new)


def rebase_cwd(cwd: str | None, old: str | None, new: str) -> str | None:
    """The cwd a session gets when the workspace ``old`` moves to ``new``."""
    if cwd == old:
        return new
    if cwd is None or old is None or not inside(cwd, old):
        return cwd
    base = old.rstrip(_SEPARATORS)
    return new.rstrip(_SEPARATORS) + cwd[len(base) :]


def inside(path: str, top: str) -> bool:
    """Whether ``path`` lies strictly inside the directory ``top`` (by its text, as DSH
    compares cwds: no normalisation, no symlinks resolved)."""
    base = top.rstrip(_SEPARATORS)
    return len(path) > len(base) + 1 and path.startswith(base) and path[len(base)] in _SEPARATORS
