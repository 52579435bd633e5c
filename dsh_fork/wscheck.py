"""``doctor``'s workspace checks: the registry of the root's home and the Ungrouped sessions.

A registry DSH would refuse to start its workspace feature with (dsh-world §1.3) is an error
naming the rule; one DSH accepts but dsh-fork will not edit (a ``pendingMutation``, a file our
writer would not reproduce byte for byte) is a warning, since forks, imports and ``attach``
leave it alone. A visible session that is no member of any workspace while one workspace's
path is its ``realpath(cwd)`` shows as Ungrouped in DSH's UI: ``UNGROUPED`` (info), with the
command that puts it there.
"""

from __future__ import annotations

import shlex
from typing import NamedTuple

from . import registry
from .attach import has_turn
from .errors import DshForkError
from .findings import Severity
from .generations import Generation
from .records import Header


class Note(NamedTuple):
    severity: Severity
    code: str
    message: str


def registry_notes(reg: registry.Registry) -> list[Note]:
    """What is wrong with the registry itself (root scope); nothing when it is usable,
    missing or not initialised yet."""
    if reg.state != "refused":
        return []
    if reg.dsh_refuses:
        return [
            Note(
                "error",
                "WORKSPACE_REGISTRY_INVALID",
                f"DSH would not start its workspace feature with {reg.path}: {reg.reason}",
            )
        ]
    return [
        Note(
            "warning",
            "WORKSPACE_REGISTRY_UNEDITABLE",
            f"dsh-fork leaves {reg.path} alone: {reg.reason}; forks, imports and attach do "
            "not join workspaces until it is",
        )
    ]


def ungrouped(reg: registry.Registry, header: Header, generation: Generation) -> Note | None:
    """``UNGROUPED`` when the session is visible, no member of any workspace, and a
    workspace's path is its ``realpath(cwd)`` (``attach`` would place it); else None."""
    if not reg.ready or header.origin == "subagent" or reg.archived(header.id):
        return None
    if reg.is_member(header.id, header.cwd):
        return None
    target = registry.cwd_target(reg, header.cwd).record
    if target is None:
        return None
    try:
        if not has_turn(generation):
            return None
    except (DshForkError, OSError):  # the session's own findings name the read error
        return None
    listed = reg.listing(header.id)
    why = (
        "no workspace lists it"
        if listed is None
        else (f"workspace {listed.title!r}, which lists it, has another path ({listed.path})")
    )
    return Note(
        "info",
        "UNGROUPED",
        f"shows as Ungrouped in DSH: {why}, while workspace {target.title!r} has its cwd's "
        f"path {target.path}; run `dsh-fork attach {shlex.quote(header.id)}` (or "
        "`dsh-fork attach --all`)",
    )
