"""A session's kind from its header: the one rule by which every command names kinds.

Format §1 and semantics §2: a fork child is seeded, names a parent and has no ``origin``; a
subagent child has ``origin: "subagent"`` and names the parent that spawned it; a copy is a
seeded subagent child. What names a parent but is neither (an unseeded session without
``origin``, as in DSH's own catalog test of a child of another origin) is ``linked``: DSH does
not take it for a fork (it has no inherited prefix) nor for a subagent (header-based child
listing and the catalog backfill skip it). A session that names no parent is a ``root``
whatever its ``origin`` says: no parent can list it as a child.
"""

from __future__ import annotations

from typing import Literal

from .records import Header

HeaderKind = Literal["root", "fork", "subagent", "copy", "linked"]
HEADER_KINDS: tuple[HeaderKind, ...] = ("root", "fork", "subagent", "copy", "linked")


def header_kind(header: Header) -> HeaderKind:
    """The kind a validated header says; a seeded subagent is a ``copy`` (``tree`` then calls
    one that matches no original a ``seeded-subagent``)."""
    if header.parent_session is None:
        return "root"
    if header.origin == "subagent":
        return "copy" if header.is_seeded else "subagent"
    return "fork" if header.is_seeded else "linked"
