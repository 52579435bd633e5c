"""The documents of the commands that read the whole root: doctor, list, tree and du.

What documents.py says of its Structs holds here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Struct, UnsetType, field

from .forkdocs import Document, EpochMs, IsoTime, Version1
from .sessiondocs import Counts

TreeKind = Literal["root", "fork", "subagent", "copy", "seeded-subagent", "linked", "unreadable"]


class Finding(Struct, rename="camel", kw_only=True):
    """A problem doctor found."""

    severity: Literal["error", "warning", "info"]
    scope: Literal["root", "session"]
    session: str | UnsetType = UNSET
    path: str | UnsetType = UNSET
    code: str
    message: str
    seq: int | UnsetType = UNSET


class DoctorDocument(Document):
    """doctor"""

    schema_version: Version1
    root: str
    encoding: str
    sessions: int
    findings: Annotated[
        list[Finding], Meta(description="At .findings whether or not the run found errors.")
    ]
    counts: Counts


class ListFilters(Struct, rename="camel"):
    """The filters list applied."""

    project: str | None
    kinds: list[str] | None
    since: EpochMs | None
    workspace: (
        Annotated[str, Meta(description="--workspace NAME, present only when given.")] | UnsetType
    ) = UNSET


class RowError(Struct, rename="camel"):
    """Why a session's log could not be read."""

    code: str
    message: str


class Placement(Struct, rename="camel"):
    """The workspace of DSH's registry that lists the session; member false when its
    realpath(cwd) is no longer the workspace's path (moved)."""

    id: str
    title: str
    path: str
    member: bool


class ListRow(Struct, rename="camel", forbid_unknown_fields=True, gc=False):
    """A session, as list shows it."""

    id: str
    kind: Annotated[
        Literal["root", "fork", "subagent", "copy", "linked"] | None,
        Meta(
            description="From the header (root: no parent; fork: seeded, no origin; subagent: "
            "origin subagent; copy: a seeded subagent; linked: names a parent but is neither); "
            "null when the header cannot be read."
        ),
    ]
    title: str | None
    project: str
    path: str
    cwd: str | None
    parent_session: str | None
    created_at: EpochMs | None
    created_at_iso: IsoTime | None
    turns: int | None
    last_activity: Annotated[int, Meta(description="The log's modification time, epoch ms.")]
    last_activity_iso: IsoTime | None
    forks: int
    agents: int
    label: Annotated[
        str | None,
        Meta(description="A subagent's label, from its descriptor (shown as its title)."),
    ]
    subagents: Annotated[
        int,
        Meta(description="Subagents under it at any depth, through subagents and copies only."),
    ]
    copies: Annotated[int, Meta(description="Copies (seeded subagents) under it, likewise.")]
    bytes: Annotated[int | None, Meta(description="Bytes on disk of its session dir.")]
    agent_bytes: Annotated[
        int,
        Meta(description="Bytes on disk of the dirs of the subagents and copies counted under it."),
    ]
    error: Annotated[
        RowError | None,
        Meta(description="Why the log could not be read (the row is still listed)."),
    ]
    workspace: Annotated[
        Placement | None,
        Meta(
            description="null when no workspace lists it (Ungrouped in DSH's UI, if visible) or "
            "the home has no registry."
        ),
    ]
    archived: Annotated[bool, Meta(description="In the registry's archivedSessionIds.")]
    pinned: Annotated[bool, Meta(description="In the registry's pinnedSessionIds.")]


class ListDocument(Document, forbid_unknown_fields=True):
    """list"""

    schema_version: Annotated[
        Literal[3],
        Meta(
            description="Raised on an incompatible change. 2: the kind linked, and a null kind "
            "for a header that cannot be read. 3: by default the conversations only (all "
            "false), rows with label, subagents, copies, bytes, agentBytes."
        ),
    ]
    root: str
    total: Annotated[int, Meta(description="Sessions in the root before filtering.")]
    all: Annotated[
        bool,
        Meta(
            description="Every session is a row (--all or --kind); false: the conversations "
            "and the sessions no conversation holds."
        ),
    ]
    filters: ListFilters
    sessions: list[ListRow]


class TreeCounts(Struct, forbid_unknown_fields=True):
    """Nodes by kind."""

    root: int
    fork: int
    subagent: int
    copy: int
    seeded_subagent: int = field(name="seeded-subagent")
    linked: int
    unreadable: int


class TreeNode(Struct, rename="camel", forbid_unknown_fields=True):
    """A session of the lineage."""

    id: str
    path: Annotated[
        str,
        Meta(
            description="Project dir / session dir, relative to the root (unique even when an "
            "id is not)."
        ),
    ]
    kind: TreeKind
    parent_session: str | None
    created_at: EpochMs | None
    is_seeded: bool
    version: Annotated[int | None, Meta(description="Log format version of the chosen generation.")]
    cut: Annotated[
        int | None, Meta(description="Events inherited (seeded sessions); null otherwise.")
    ]
    forked_at: Annotated[
        int | None,
        Meta(description="The source seq the cut follows (cut - 1), as fork --at names it."),
    ]
    cut_turn: Annotated[
        int | None, Meta(description="The turn the cut ends, as inspect --turns numbers it.")
    ]
    turns: int | None
    open_turn: bool | None
    title: str | None
    label: str | None
    copy_of: Annotated[
        str | None, Meta(description="The id of the subagent a copy was copied from.")
    ]
    error: Annotated[
        str | None, Meta(description="Why the session could not be read (it is still a node).")
    ]
    flags: Annotated[
        list[str], Meta(description="Orphan, self-parent, cycle and the like: shown, never fatal.")
    ]
    children: Annotated[list[str], Meta(description="Paths of the child nodes, in display order.")]
    workspace: Annotated[
        Placement | None,
        Meta(description="The workspace of DSH's registry that lists the session, else null."),
    ]
    archived: bool
    pinned: bool


EdgeKind = Literal[
    "root", "fork", "subagent", "copy", "seeded-subagent", "linked", "unreadable", "copy-of"
]


class TreeEdge(Struct, rename="camel", forbid_unknown_fields=True):
    """A parent-to-child (or copy-to-original) link."""

    from_: str = field(name="from")
    to: str
    from_path: str
    to_path: str
    kind: Annotated[
        EdgeKind,
        Meta(description="The child's kind (parent to child), or copy-of (copy to original)."),
    ]


class Unreadable(Struct, forbid_unknown_fields=True):
    """A session dir whose log cannot be read."""

    path: str
    error: str | None


class TreeDocument(Document, forbid_unknown_fields=True):
    """tree (the lineage; --format mermaid|dot prints text, never this document)"""

    schema_version: Version1
    root: str
    session: Annotated[
        str | None, Meta(description="The SESSION argument as given; null for the whole root.")
    ]
    counts: TreeCounts
    tops: Annotated[list[str], Meta(description="Paths of the top nodes.")]
    nodes: Annotated[
        list[TreeNode], Meta(description="Every node once, depth first in display order.")
    ]
    edges: list[TreeEdge]
    unreadable: list[Unreadable]


class UsageGroup(Struct, rename="camel", forbid_unknown_fields=True):
    """The usage of a group of sessions (the root, a project, a family)."""

    name: str
    sessions: int
    bytes: int
    inherited_bytes: int
    shareable: Annotated[int, Meta(description="Bytes sharing the inherited prefixes would save.")]


class Usage(Struct, rename="camel", forbid_unknown_fields=True):
    """The usage of one session."""

    id: str
    path: str
    kind: TreeKind
    family: Annotated[str, Meta(description="Id of the family's top session.")]
    bytes: Annotated[int, Meta(description="Every file of the session dir.")]
    log_bytes: Annotated[int, Meta(description="The chosen log file.")]
    inherited_bytes: Annotated[
        int | None,
        Meta(
            description="Bytes of the log holding the inherited prefix; null for an unseeded or "
            "unreadable session."
        ),
    ]
    own_bytes: Annotated[int, Meta(description="logBytes - inheritedBytes.")]
    other_bytes: Annotated[int, Meta(description="bytes - logBytes.")]
    source_present: bool
    shareable: int
    flags: list[str]


class DuDocument(Document, forbid_unknown_fields=True):
    """du"""

    schema_version: Version1
    root: str
    session: str | None
    total: UsageGroup
    projects: Annotated[list[UsageGroup], Meta(description="Largest first; --top N keeps N.")]
    families: list[UsageGroup]
    sessions: list[Usage]
