"""The shape of every ``--json`` document, as msgspec Structs: the one source of the JSON Schemas.

Each command's result is, holds or builds its document as one of these Structs (a row or item
that carries the same facts as its document is the document's Struct, made once where its
facts are known: docs/schemas.md), ``to_document`` (results.py) returns it, and ``--json``
prints that Struct as msgspec encodes it, so mypy holds every key a command prints to its
Struct; ``schemas.py`` turns the same Structs into the JSON Schemas shipped in the package
(``dsh_fork/schemas/``, printed by ``dsh-fork schema``), and the test suite checks every
document a command prints against them. A field's place is its key's place in the
document. To add or change a field: edit its Struct here, set it where the command makes the
Struct, then ``make schemas`` (docs/schemas.md).
The documents of fork, salvage and relink and what every document shares are defined in
forkdocs.py, and named here too: a fork, the command run most often, imports only them.

Field names are snake_case and rename to the documents' camelCase keys. A key a document holds
only in some runs is ``UNSET`` by default (absent, never null); a key that is always there but
may be null is ``X | None`` without a default. ``forbid_unknown_fields`` marks the objects whose
keys are closed (``additionalProperties: false``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType, field

from .forkdocs import (
    ClosedToolResult,
    ClosedTurn,
    ClosingCode,
    CopiedAgent,
    Document,
    EpochMs,
    Error,
    ErrorCode,
    ErrorDocument,
    FailedItem,
    ForkChild,
    ForkDocument,
    ForkFailedItem,
    IsoTime,
    LeftBehind,
    PartialError,
    PartialMember,
    RelinkAllDocument,
    RelinkDocument,
    RelinkSummary,
    SalvageDocument,
    SkippedAgent,
    SkippedFork,
    Turn,
    UncatalogableAgent,
    Version1,
    WorkspaceJoin,
)

__all__ = [  # those of forkdocs: documents of this module all the same
    "ClosedToolResult",
    "ClosedTurn",
    "ClosingCode",
    "CopiedAgent",
    "Document",
    "EpochMs",
    "Error",
    "ErrorCode",
    "ErrorDocument",
    "FailedItem",
    "ForkChild",
    "ForkDocument",
    "ForkFailedItem",
    "IsoTime",
    "LeftBehind",
    "PartialError",
    "PartialMember",
    "RelinkAllDocument",
    "RelinkDocument",
    "RelinkSummary",
    "SalvageDocument",
    "SkippedAgent",
    "SkippedFork",
    "Turn",
    "UncatalogableAgent",
    "Version1",
    "WorkspaceJoin",
]

TreeKind = Literal["root", "fork", "subagent", "copy", "seeded-subagent", "linked", "unreadable"]


# -- inspect, list-agents, diff ---------------------------------------------------------------


class Generation(Struct, rename="camel"):
    """The chosen log generation."""

    version: int
    file: str
    encoding: Literal["zstd", "plain"]


class PathBinding(Struct, rename="camel"):
    """Whether the session's dir is where its header says it belongs."""

    ok: bool
    problem: str | None


class Counts(Struct, rename="camel"):
    """Findings by severity."""

    error: int
    warning: int
    info: int


class GenerationFile(Struct, rename="camel"):
    """A canonical generation file of the session dir."""

    version: int
    file: str
    encoding: Literal["zstd", "plain"]
    size: int
    mtime: EpochMs
    events: Annotated[int | None, Meta(description="null when it could not be read.")]
    turn_ends: int | None
    chosen: bool
    error: Annotated[str, Meta(description="Why it could not be read.")] | UnsetType = UNSET


class LargestFrame(Struct):
    """The largest frame: its 1-based number and compressed size."""

    frame: int
    bytes: int


class FrameCounts(Struct, rename="camel"):
    """The zstd frames of the log."""

    count: int
    header_frame_ok: bool
    with_checksum: int
    without_checksum: int
    largest: LargestFrame


class TornTail(Struct, rename="camel"):
    """Bytes after the last complete frame or line, which DSH truncates on its next write."""

    offset: int
    bytes: int
    complete_lines: int
    recoverable_lines: int


class EventCounts(Struct, rename="camel"):
    """Events, in all and by type."""

    total: int
    by_type: dict[str, int]


class OpenTurn(Struct, rename="camel"):
    """The turn left open at the end of the log."""

    turn: Annotated[Any, Meta(description="data.turn of its turn/start.")]
    start_seq: int
    open_step: int | None
    unresolved_calls: list[str]


class TurnCounts(Struct, rename="camel"):
    """Completed turns, and the open one."""

    completed: int
    open: OpenTurn | None


class Boundaries(Struct, rename="camel"):
    """Where a fork may cut."""

    ranges: Annotated[list[list[int]], Meta(description="[first, last] seqs of each range.")]
    turn_ends: list[int]


class Inheritance(Struct, rename="camel"):
    """What the session inherited from its parent."""

    cut: int
    is_seeded: bool
    parent_session: str | None
    parent_exists: bool | None
    markers: Annotated[list[int], Meta(description="Seqs of the inherited-prefix markers.")]
    last_inherited_time: EpochMs | None
    last_inherited_time_iso: IsoTime | None


class Descriptor(Struct, rename="camel"):
    """The session's subagent/descriptor (values as the log holds them)."""

    seq: int
    version: Any
    mode: Any
    label: Any
    provider: Any
    inherited_only: bool


class CatalogRow(Struct, rename="camel"):
    """A catalog fact of the own range (values as the log holds them)."""

    seq: int
    child_id: Any
    child_created_at: Any
    mode: Any
    label: Any
    version: Any


class ModelChoice(Struct):
    """The provider and model last chosen."""

    provider: str | None
    model: str | None


class EventLine(Struct):
    """One event, as inspect --events lists it."""

    seq: int
    type: str
    time: EpochMs | None
    summary: str


class LogFinding(Struct):
    """A finding of the checks of one log."""

    severity: Literal["error", "warning", "info"]
    code: str
    message: str
    seq: Annotated[int, Meta(description="The event it is about.")] | UnsetType = UNSET


class InspectDocument(Document, kw_only=True):
    """inspect SESSION"""

    schema_version: Version1
    session: str
    path: str
    header: dict[str, Any]
    generation: Generation
    generations: list[GenerationFile]
    ignored_files: list[str]
    root_encoding: str
    path_binding: PathBinding
    frames: Annotated[FrameCounts | None, Meta(description="null for a plain-text log.")]
    torn_tail: TornTail | None
    lock: Literal["absent", "free", "held", "unknown"]
    events: EventCounts
    turns: TurnCounts
    boundaries: Boundaries
    inheritance: Inheritance
    descriptor: Descriptor | None
    catalog: Annotated[
        list[CatalogRow], Meta(description="The own-range catalog (entries at or after the cut).")
    ]
    title: str | None
    preset: str | None
    model: ModelChoice
    pending_inbox: list[Any]
    findings: list[LogFinding]
    counts: Counts
    event_list: (
        Annotated[list[EventLine], Meta(description="With --events: one entry per event.")]
        | UnsetType
    ) = UNSET
    turn_list: Annotated[list[Turn], Meta(description="Present only with --turns.")] | UnsetType = (
        UNSET
    )


class AgentRow(Struct, rename="camel", kw_only=True):
    """A subagent, as list-agents shows it."""

    id: str
    label: str | None
    mode: str | None
    provider: str | None
    model: str | None
    created_at: EpochMs | None
    created_at_iso: IsoTime | None
    turns: int | None
    status: str | None
    on_disk: bool
    in_panel: bool
    copy_of: str | None
    flags: list[str]
    children: list[AgentRow]
    depth: (
        Annotated[
            int,
            Meta(
                description="Only on a row deeper than 64 levels (1: the session's own subagents), "
                "which is then a child of the row at level 64, in order"
            ),
        ]
        | UnsetType
    ) = UNSET


class ForkRef(Struct, rename="camel"):
    """A fork child of the session."""

    id: Annotated[str | None, Meta(description="null when its header names no valid id.")]
    created_at: EpochMs | None


class ListAgentsDocument(Document):
    """list-agents SESSION"""

    schema_version: Version1
    session: str
    flags: list[str]
    children: list[AgentRow]
    forks: list[ForkRef]


DiffKind = Literal["root", "fork", "subagent", "seeded-subagent", "linked"]


class DiffSide(Struct, rename="camel", forbid_unknown_fields=True):
    """One of the two sessions diff compares."""

    id: str
    path: str
    kind: Annotated[
        DiffKind,
        Meta(description="By header, as tree names kinds (a copy is a seeded-subagent here)."),
    ]
    parent_session: str | None
    events: int
    cut: Annotated[int, Meta(description="Events inherited (0 for an unseeded session).")]
    split_event_type: Annotated[
        str | None,
        Meta(
            description="Type of the event at the first differing seq; null when this side "
            "ends before it."
        ),
    ]
    split_turn: int | None
    tail: Annotated[list[Turn], Meta(description="The turns from the split on.")]
    subagents: Annotated[
        list[AgentRow],
        Meta(description="Its subagents on disk, as list-agents rows (children not listed)."),
    ]


class DiffDocument(Document, forbid_unknown_fields=True):
    """diff A B"""

    schema_version: Version1
    a: DiffSide
    b: DiffSide
    relation: str
    common_prefix: Annotated[int, Meta(description="Leading events byte-identical on both sides.")]
    no_common_prefix: bool
    identical: bool
    first_differing_seq: Annotated[int | None, Meta(description="null when identical.")]
    differs: Annotated[
        bool,
        Meta(
            description="Either side has a turn after the common prefix (diff --exit-code exits 1)."
        ),
    ]


# -- the root: doctor, list, tree, du ---------------------------------------------------------


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


# -- export, import, fixture ------------------------------------------------------------------


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


# -- workspaces -------------------------------------------------------------------------------


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


# -- search, trash and restore ----------------------------------------------------------------


class SearchFilters(Struct, rename="camel", forbid_unknown_fields=True):
    """The filters search applied."""

    project: str | None
    since: int | None
    since_iso: str | None


Role = Literal["title", "user", "assistant", "tool"]


class SearchHit(Struct, rename="camel", forbid_unknown_fields=True):
    """A place the text was found."""

    session: str
    path: Annotated[str, Meta(description="The session dir.")]
    title: Annotated[str | None, Meta(description="The session's latest title.")]
    turn: Annotated[
        int | None,
        Meta(
            description="As inspect --turns counts: the n-th turn/start at or before seq; null "
            "before the first."
        ),
    ]
    seq: int
    role: Role
    snippet: Annotated[str, Meta(description="One line around the first match.")]
    inherited: Annotated[bool, Meta(description="In the session's inherited prefix.")]


class SearchUnreadable(Struct, forbid_unknown_fields=True):
    """A session search could not read."""

    session: str | None
    path: str
    code: str
    message: str


class SearchDocument(Struct, rename="camel", forbid_unknown_fields=True):
    """search"""

    schema_version: Version1
    root: str
    text: Annotated[str, Meta(description="TEXT as given (a regular expression with --regex).")]
    regex: bool
    ignore_case: Annotated[
        bool, Meta(description="Smart case: true when TEXT has no capital letter.")
    ]
    in_: list[Role] = field(name="in")
    inherited: Annotated[
        bool, Meta(description="--inherited: hits in inherited prefixes are listed too.")
    ]
    filters: SearchFilters
    searched: Annotated[int, Meta(description="Sessions read and searched.")]
    sessions_with_hits: int
    total: Annotated[int, Meta(description="Hits found, those beyond --limit included.")]
    limit: int
    truncated: Annotated[bool, Meta(description="More hits were found than are listed.")]
    hits: list[SearchHit]
    unreadable: Annotated[
        list[SearchUnreadable],
        Meta(description="Sessions that could not be read, so were not searched."),
    ]


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


DOCUMENTS: dict[str, type[Struct]] = {
    "attach": AttachDocument,
    "diff": DiffDocument,
    "doctor": DoctorDocument,
    "du": DuDocument,
    "error": ErrorDocument,
    "export": ExportDocument,
    "fixture": FixtureDocument,
    "fork": ForkDocument,
    "import": ImportDocument,
    "inspect": InspectDocument,
    "list": ListDocument,
    "list-agents": ListAgentsDocument,
    "relink": RelinkDocument,
    "relink-all": RelinkAllDocument,
    "restore": RestoreDocument,
    "salvage": SalvageDocument,
    "search": SearchDocument,
    "trash": TrashDocument,
    "trash-empty": TrashEmptyDocument,
    "trash-list": TrashListDocument,
    "tree": TreeDocument,
}
"""Each schema's name (the command, ``relink-all`` for ``relink --all``, ``error`` for a run
that ended with an error) and its document's Struct, whose docstring is the schema's title."""
