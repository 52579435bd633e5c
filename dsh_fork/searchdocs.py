"""The document of search: its filters, hits and the sessions it could not read.

What documents.py says of its Structs holds here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct, field

from .forkdocs import Version1


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
