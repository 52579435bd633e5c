"""The documents of fork, salvage and relink, and what every document shares: its errors, the
PARTIAL member beside a result, ``schemaVersion``.

They live apart from the other families (documents.py names them all) because a fork is the
command run most often: printing its document imports these and not the Structs of every other
command (about 3 ms of a start-up). What documents.py says of its Structs holds here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

EpochMs = Annotated[int, Meta(description="Epoch milliseconds, as stored.")]
IsoTime = Annotated[
    str, Meta(description="The same time as ISO-8601 UTC (2026-01-02T03:04:05.678Z).")
]
ErrorCode = Literal[
    "INTERNAL",
    "USAGE",
    "SESSION_NOT_FOUND",
    "INVALID_BOUNDARY",
    "OPEN_TURN",
    "SESSION_ALREADY_EXISTS",
    "SESSION_LOCKED",
    "SESSION_STALE",
    "UNSUPPORTED_FORMAT",
    "CORRUPT_LOG",
    "IO_ERROR",
]
"""The codes of errors.ALL_ERRORS but PARTIAL (a test holds the two lists equal)."""


# -- errors -----------------------------------------------------------------------------------


class Error(Struct, rename="camel"):
    """code and message always; the other fields when they apply."""

    code: ErrorCode
    message: str
    session: str | UnsetType = UNSET
    path: str | UnsetType = UNSET
    requested: int | UnsetType = UNSET
    valid_boundaries: list[Any] | UnsetType = UNSET
    lock_path: str | UnsetType = UNSET
    version: int | UnsetType = UNSET
    hint: str | UnsetType = UNSET
    frame: int | UnsetType = UNSET
    offset: int | UnsetType = UNSET
    line: int | UnsetType = UNSET
    candidates: (
        Annotated[list[str], Meta(description="The ids an ambiguous prefix matches.")] | UnsetType
    ) = UNSET


class ErrorDocument(Struct, rename="camel", forbid_unknown_fields=True):
    """The document of a command that ended with an error."""

    schema_version: Literal[1]
    error: Error


class FailedItem(Struct, rename="camel"):
    """An item of a run that failed."""

    id: str
    code: str
    message: str
    fork_child: str | UnsetType = UNSET


class ForkFailedItem(Struct, rename="camel"):
    """An item of ``relink --all`` that failed, with the fork child it belongs to."""

    id: str
    code: str
    message: str
    fork_child: Annotated[
        str | None,
        Meta(description="null for a session of the root outside every fork child's tree."),
    ]


class PartialError(Struct, rename="camel", forbid_unknown_fields=True):
    """Beside a result whose run finished with failed items (exit 10)."""

    code: Literal["PARTIAL"]
    message: str
    failed: list[FailedItem]
    next: (
        Annotated[str, Meta(description="The command that finishes the work, when there is one.")]
        | UnsetType
    ) = UNSET


PartialMember = (
    Annotated[PartialError, Meta(description="Present only when the run was PARTIAL (exit 10).")]
    | UnsetType
)


class Document(Struct, rename="camel", kw_only=True):
    """What every result's document holds besides its own keys."""

    error: PartialMember = UNSET


Version1 = Annotated[Literal[1], Meta(description="Raised on an incompatible change.")]


# -- fork and relink --------------------------------------------------------------------------


class WorkspaceJoin(Struct, rename="camel"):
    """Which workspace of DSH's registry a session joined, or why none (docs/workspaces.md)."""

    session: str | None
    status: Literal["joined", "would-join", "already", "none", "skipped", "refused"]
    workspace: Annotated[str | None, Meta(description="The record's id in the registry.")]
    title: str | None
    path: str | None
    reason: Annotated[str | None, Meta(description="Why no workspace (none, skipped, refused).")]
    archived: Annotated[
        bool, Meta(description="The session is in archivedSessionIds (left there).")
    ]


ClosingCode = Literal["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"]


class ClosedToolResult(Struct, rename="camel"):
    """The synthetic result that closes a pending tool call (fork --close-turn)."""

    call_id: str
    step: Any
    result_seq: int
    code: ClosingCode
    call_seq: Annotated[
        int | None, Meta(description="The call's tool/call seq (it had started), else null.")
    ]


class ClosedTurn(Struct, rename="camel"):
    """What closes, after the marker, the turn a fork's boundary lies inside."""

    turn: Annotated[Any, Meta(description="data.turn of the open turn's turn/start.")]
    start_seq: int
    tool_results: list[ClosedToolResult]
    step_end_seq: int | None
    turn_end_seq: int
    events: Annotated[int, Meta(description="How many closing events follow the marker.")]


class Turn(Struct, rename="camel", forbid_unknown_fields=True):
    """One turn of a session, as inspect --turns lists it."""

    turn: Annotated[int, Meta(description="1-based, as fork --turn N counts.")]
    start_seq: int
    end_seq: Annotated[
        int | None, Meta(description="Seq of its turn/end; null while the turn is open.")
    ]
    last_seq: Annotated[int, Meta(description="The last event before the next turn/start.")]
    end_time: EpochMs | None
    reason: str | None
    user: Annotated[str | None, Meta(description="First line of the user's message, clipped.")]
    tools: list[str]
    agents: list[str]
    inherited: Annotated[bool, Meta(description="The turn ends inside the inherited prefix.")]
    valid_boundary: Annotated[bool, Meta(description="Its turn/end is a fork boundary.")]


class ForkChild(Struct, rename="camel"):
    """The child a fork wrote (or, with --dry-run, would write)."""

    id: str | None
    path: str | None
    project_dir: str
    parent_session: str
    boundary: int | None
    inherited_events: int
    agent_preset: str | None
    created_at: EpochMs | None
    created_at_iso: IsoTime | None
    title: Annotated[
        str | None,
        Meta(
            description="The title event appended to the child (DSH's increased title, or "
            "--title); null: none appended (--keep-title, or the source has no title)."
        ),
    ]
    source_title: Annotated[
        str | None,
        Meta(description="The source's latest session/title, what the default title increases."),
    ]
    cwd: Annotated[str, Meta(description="With --cwd: the child's working dir.")] | UnsetType = (
        UNSET
    )
    inbox_canceled: (
        Annotated[
            dict[str, int],
            Meta(description="With --drop-inherited-inbox: pending items canceled per target."),
        ]
        | UnsetType
    ) = UNSET
    closed_turn: (
        Annotated[
            ClosedTurn | None,
            Meta(
                description="With --close-turn: the closers appended after the marker (null: "
                "the boundary is between turns)."
            ),
        ]
        | UnsetType
    ) = UNSET


class CopiedAgent(Struct, rename="camel"):
    """A subagent copied under the fork child."""

    source: str
    copy: str | None
    parent: str | None
    depth: int


class SkippedAgent(Struct, rename="camel"):
    """A subagent not copied, and why."""

    id: str
    reason: Annotated[
        str,
        Meta(
            description="running (held by a live DSH process: rerun later) or open "
            "(no completed turn yet), ..."
        ),
    ]


class UncatalogableAgent(Struct, rename="camel"):
    """A copy for which no catalog fact can be made."""

    id: str | None
    source: str | None
    reason: str


class RelinkSummary(Struct, rename="camel", kw_only=True):
    """The outcome of relinking one fork child's subagents."""

    fork_child: str | None
    source: str | None
    copied: list[CopiedAgent]
    skipped: list[SkippedAgent]
    unrelated: list[str]
    uncatalogable: list[UncatalogableAgent]
    catalogued: Annotated[
        list[str],
        Meta(
            description="Existing copies whose missing catalog entry was added (catalog repaired)."
        ),
    ]
    descriptors_repaired: list[str]
    failed: list[FailedItem]
    unresumable: (
        Annotated[
            list[str],
            Meta(
                description="Copies written by this run that failed the check made by reading "
                "them back (own descriptor, free lock, no open turn, catalog fact in the "
                "parent); each is also a failed item UNRESUMABLE. Empty in a dry run."
            ),
        ]
        | UnsetType
    ) = UNSET
    dry_run: bool
    warnings: list[str]


class ForkDocument(Document):
    """fork SOURCE"""

    schema_version: Version1
    child: ForkChild
    agents: Annotated[RelinkSummary | None, Meta(description="null with --no-agents.")]
    workspace: Annotated[
        WorkspaceJoin | None,
        Meta(
            description="The workspace the child joined (or would join), or why none; null "
            "only when no fork was planned."
        ),
    ]
    dry_run: bool
    frames_copied: int
    frames_reencoded: int


class LeftBehind(Struct, rename="camel", forbid_unknown_fields=True):
    """What a salvaged child does not hold, from which seq and byte of the source, and why."""

    from_seq: Annotated[int, Meta(ge=0, description="The first seq not in the child.")]
    kept_events: Annotated[int, Meta(ge=0, description="Events DSH would read before the defect.")]
    from_byte: Annotated[
        Annotated[int, Meta(ge=0)] | None,
        Meta(description="Where the defect's data begins in the source file."),
    ]
    reason: Annotated[str, Meta(description="The defect, as the reader names it.")]
    dropped_open_turn_events: Annotated[
        int, Meta(ge=0, description="Readable events after the boundary, in a turn left open.")
    ]
    bytes_left: Annotated[int, Meta(ge=0)]


class SalvageDocument(ForkDocument):
    """salvage"""

    left_behind: LeftBehind


class _PartialSummary(RelinkSummary, kw_only=True):
    """A summary with the error of a partial run, after its own keys."""

    error: PartialMember = UNSET


class RelinkDocument(_PartialSummary):
    """relink FORK_CHILD"""

    schema_version: Version1  # not keyword-only: printed before the summary's keys


class SkippedFork(Struct, rename="camel"):
    """A fork child relink --all left alone."""

    fork_child: str
    reason: Literal["no-agents"]


class RelinkAllDocument(Document):
    """relink --all"""

    schema_version: Version1
    results: list[RelinkSummary]
    failed: list[ForkFailedItem]
    skipped: Annotated[
        list[SkippedFork],
        Meta(
            description="Fork children left alone on purpose: made with fork --no-agents (the "
            "operation log says so); relink FORK_CHILD still relinks one."
        ),
    ]
