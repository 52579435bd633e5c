"""The documents of the commands that read one session: inspect, list-agents and diff.

What documents.py says of its Structs holds here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from .forkdocs import Document, EpochMs, IsoTime, Turn, Version1


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
