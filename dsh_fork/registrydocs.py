"""The documents of the commands that edit the workspace registry: attach, trash (with
--list and --empty) and restore.

What documents.py says of its Structs holds here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from .forkdocs import PartialError, Version1, WorkspaceJoin


class PlacedSession(WorkspaceJoin):
    """A session attach placed (or, dry, would place)."""

    cwd: str | None
    was: Annotated[
        str | None,
        Meta(description="The title of the workspace that listed it before (a moved session)."),
    ]


class UnreadableSession(Struct):
    """A session attach could not read."""

    path: str
    code: str
    message: str


class AttachDocument(Struct, rename="camel", kw_only=True):
    """attach [SESSION...] [--all]"""

    schema_version: Version1
    root: str
    registry: Annotated[str, Meta(description="The workspace registry of the root's home.")]
    registry_state: Literal["missing", "uninitialised", "refused", "ready"]
    registry_reason: Annotated[
        str | None, Meta(description="Why it may not be edited, unless ready.")
    ]
    dry_run: bool
    sessions: Annotated[
        list[PlacedSession],
        Meta(
            description="Each session placed (or, dry, to place); with --all also the visible "
            "Ungrouped sessions no workspace's path matches (status none)."
        ),
    ]
    members: Annotated[
        int, Meta(description="--all: visible sessions already members of their workspace.")
    ]
    unreadable: list[UnreadableSession]
    error: (
        Annotated[
            PartialError,
            Meta(
                description="Present only when the run was PARTIAL (exit 10): the registry "
                "could not be edited."
            ),
        ]
        | UnsetType
    ) = UNSET


class RegistryEdit(Struct, forbid_unknown_fields=True):
    """What this run did to the workspace registry; null when it listed none of the sessions
    (or when read from the trash)."""

    path: str
    written: bool
    changed: Annotated[
        list[str],
        Meta(
            description='Records changed, and "global" when the archived or pinned lists changed.'
        ),
    ]
    reason: Annotated[str | None, Meta(description="Why nothing was written.")]


Where = Literal["root", "trash", "both", "missing"]


class TrashedSession(Struct, forbid_unknown_fields=True):
    """A session of a trash entry."""

    id: str
    kind: Annotated[
        str | None,
        Meta(
            description="From the header: root, fork, subagent, copy, linked; null when unreadable."
        ),
    ]
    project: Annotated[str, Meta(description="The project dir it came from (and goes back to).")]
    dir: Annotated[str, Meta(description="Its session dir's name.")]
    title: str | None
    bytes: int
    where: Annotated[
        Where,
        Meta(description="Where it is now, from what is on disk."),
    ]
    workspace: Annotated[
        str | None,
        Meta(description="The workspace record that listed it when trashed (its id)."),
    ]
    archived: bool
    pinned: bool


EntryState = Literal["trashing", "trashed", "restoring"]


class TrashEntry(Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """An entry of the trash: sessions trashed together."""

    entry: Annotated[str, Meta(description="The entry's name: <UTC time>-<short id>.")]
    path: str
    root: Annotated[str, Meta(description="The sessions root it was trashed from.")]
    created: int
    created_iso: str | None
    state: EntryState
    named: Annotated[list[str], Meta(description="The SESSION arguments as given.")]
    with_forks: bool
    bytes: int
    registry: RegistryEdit | None
    sessions: list[TrashedSession]


class TrashDocument(TrashEntry):
    """trash"""

    # not keyword-only, as the entry's fields are: printed before them
    schema_version: Version1
    dry_run: bool
    forks_left: Annotated[
        list[str],
        Meta(
            description="Forks of the trashed sessions that stay in the root (without "
            "--with-forks)."
        ),
    ]


class RestoreDocument(TrashEntry):
    """restore"""

    # not keyword-only, as the entry's fields are: printed before them
    schema_version: Version1
    dry_run: bool


class TrashListDocument(Struct, rename="camel", forbid_unknown_fields=True):
    """trash --list"""

    schema_version: Version1
    trash: str
    entries: list[TrashEntry]


class TrashEmptyDocument(Struct, rename="camel", forbid_unknown_fields=True):
    """trash --empty"""

    schema_version: Version1
    trash: str
    dry_run: bool
    removed: list[TrashEntry]
    bytes: int
    kept: int
