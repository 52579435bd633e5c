"""The documents of the commands that write archives and roots: export, import and fixture
(the manifest an archive holds is one of them).

What documents.py says of its Structs holds here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from .forkdocs import Document, EpochMs, Version1, WorkspaceJoin


class Archive(Struct, forbid_unknown_fields=True):
    """The archive export wrote."""

    path: str
    compression: Literal["none", "gz", "xz", "bz2", "zst"]
    bytes: int


class BundleFile(Struct, forbid_unknown_fields=True):
    """A session's log in the archive."""

    path: str
    size: int
    sha256: Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]


class BundleSession(Struct, rename="camel", forbid_unknown_fields=True):
    """A session of the archive."""

    id: str
    role: Literal["top", "subagent", "fork"]
    parent_session: str | None
    origin: str | None
    cwd: str | None
    project_dir: str
    session_dir: str
    generation: int
    created_at: EpochMs
    is_seeded: bool
    delegation_depth: int
    events: int
    cut: int
    lock_held: bool
    file: BundleFile


class Manifest(Struct, rename="camel", forbid_unknown_fields=True):
    """manifest.json of the archive, as written into it."""

    schema_version: Annotated[int, Meta(description="The manifest's own schema version.")]
    kind: Literal["dsh-fork-bundle"]
    dsh_fork_version: str
    format_version: int
    created_at: int
    top: str
    forks: bool
    total_bytes: int
    sessions: Annotated[list[BundleSession], Meta(min_length=1)]


class LeftOut(Struct, forbid_unknown_fields=True):
    """A family member export left out with --skip-unreadable."""

    id: Annotated[
        str | None,
        Meta(description="The session id, when known (from its header or its dir name)."),
    ]
    path: Annotated[str, Meta(description="The session dir.")]
    code: Annotated[
        str,
        Meta(
            description="The error code of the read, or SKIPPED for a descendant of a member "
            "left out."
        ),
    ]
    message: str


class ExportDocument(Document, forbid_unknown_fields=True):
    """export SESSION -o FILE"""

    schema_version: Version1
    archive: Archive
    manifest: Manifest
    left_out: Annotated[
        list[LeftOut],
        Meta(
            description="Family members left out with --skip-unreadable (the run is then "
            "PARTIAL, exit 10): each that could not be read, and the descendants of each."
        ),
    ]


class ImportedSession(Struct, rename="camel", forbid_unknown_fields=True):
    """A session of the archive, and what import did with it."""

    source: Annotated[str, Meta(description="The id in the archive.")]
    id: Annotated[str, Meta(description="The id in the root (the same without --new-ids).")]
    role: Literal["top", "subagent", "fork"]
    parent_session: str | None
    cwd: str | None
    path: str
    status: Literal["planned", "created", "present", "skipped"]
    reason: str | None
    catalogued: list[str]
    workspace: Annotated[
        WorkspaceJoin | None,
        Meta(
            description="The workspace the session joined (or would join), or why none; null "
            "when it was left out."
        ),
    ]


class ImportDocument(Document, forbid_unknown_fields=True):
    """import FILE"""

    schema_version: Version1
    archive: str
    root: str
    top: str
    new_ids: bool
    cwd: str | None
    dry_run: bool
    bytes: int
    sessions: list[ImportedSession]


class FixtureDocument(Document):
    """fixture OUT_ROOT"""

    schema_version: Version1
    root: str
    sessions: int
    per_depth: dict[str, int]
    top_level: list[str]
    forks: list[str]
    legacy_forks: list[str]
    old_generation: list[str]
    open_turns: list[str]
    torn_tails: list[str]
    registry: (
        Annotated[
            str,
            Meta(description="The workspace registry written beside the root (--workspaces only)."),
        ]
        | UnsetType
    ) = UNSET
