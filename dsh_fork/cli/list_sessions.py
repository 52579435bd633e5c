"""``dsh-fork list``: the sessions of a root, newest activity first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import typer

from .base import Out, app, emit, iso, root_of
from .options import json_option, project_option, root_option, since_option
from .progress import metered

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..listing import SessionList, SessionRow

COLUMNS = (
    "id",
    "kind",
    "title",
    "turns",
    "last activity",
    "forks",
    "subagents",
    "copies",
    "size",
    "cwd",
)


def render(out: Out, listing: SessionList, exact: bool = False) -> None:
    shown = len(listing.rows)
    noun = "sessions" if listing.everything else "conversations"
    if not listing.rows:
        out.line(f"{listing.root}: no {noun}" + ("" if shown == listing.total else " match"))
        return
    columns = list(COLUMNS)
    if listing.workspaces:  # the root's home has DSH's workspace registry
        columns.insert(3, "workspace")
    what = f"{shown} {noun}" if listing.everything else _conversations(listing)
    out.table(f"{what} in {listing.root}", columns, lambda: _cells(listing, exact))


def _cells(listing: SessionList, exact: bool) -> Iterator[list[int | str | None]]:
    """The cells of each row, made as the table takes them: piped, a table of 100,000 rows
    is measured from them and printed from them again, and never holds them."""
    from .tables import human_size

    for row in listing.rows:
        title = row.title if row.title is not None else row.label
        if row.error is not None:
            title = f"unreadable: {row.error.code}"
        size = None if row.bytes is None else row.bytes + row.agent_bytes
        cells = [
            row.id,
            row.kind or "?",
            title,
            row.turns,
            iso(row.last_activity),
            row.forks,
            row.subagents,
            row.copies,
            size if exact or size is None else human_size(size),
            row.cwd,
        ]
        if listing.workspaces:
            cells.insert(3, workspace_cell(row))
        yield cells


def workspace_cell(row: SessionRow) -> str | None:
    """The workspace as DSH's UI groups the session: its title (``(moved)`` when the cwd
    is no longer the workspace's), and whether it is archived or pinned."""
    place = row.workspace
    text = None if place is None else place.title if place.member else f"{place.title} (moved)"
    flags = [name for name, on in (("archived", row.archived), ("pinned", row.pinned)) if on]
    if flags:
        text = " ".join([text or "-", *(f"[{flag}]" for flag in flags)])
    return text


def _conversations(listing: SessionList) -> str:
    """``9 conversations (117 sessions; --all lists every one)``: what the default hides."""
    from ..display import counted

    shown = counted(len(listing.rows), "conversation")
    if len(listing.rows) == listing.total:
        return shown
    total = counted(listing.total, "session")
    return f"{shown} ({total}; --all lists every one)"


@app.command(
    "list",
    short_help="List the sessions of a root: id, kind, title, turns, last activity.",
)
def list_command(
    project: str | None = project_option(),
    kind: list[str] | None = typer.Option(
        None,
        "--kind",
        metavar="KIND",
        help="Only sessions of this kind: root, fork, subagent, copy or linked (repeatable).",
    ),
    since: str | None = since_option(),
    everything: bool = typer.Option(
        False, "--all", "-a", help="Every session: subagents and copies too, each a row."
    ),
    exact: bool = typer.Option(False, "--bytes", "-b", help="Sizes in exact bytes."),
    workspace: str | None = typer.Option(
        None,
        "--workspace",
        metavar="NAME",
        help="Only the sessions DSH's workspace NAME lists (its title, or its path).",
    ),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """List the conversations of a root: title, kind, turns, last activity, and the
    subagents and copies under each.

    By default a row is a conversation (a root, a fork, or a linked session) or a session
    no conversation holds (one that cannot be read, a subagent whose parent is gone): the
    subagents and copies under a conversation, at any depth, are counted in its row, and
    its size is its dir's bytes plus theirs. --all, or --kind, lists every session, a
    subagent titled by its label.

    Kinds, from the header: root (names no parent), fork (a fork child: seeded from another
    session by fork), subagent (a session DSH spawned for a parent), copy (a subagent
    written by relink or fork: a copy of another subagent), linked (names a parent but is
    neither); ? when the header cannot be read. Last activity is the log's modification
    time; forks counts the fork children whose parent it is. --json has exact bytes. When
    the root's home has DSH's workspace registry, a workspace column shows the workspace
    that lists each session ("(moved)": its cwd is no longer that workspace's path;
    [archived], [pinned]); --workspace NAME keeps the sessions it lists.

    \b
    Examples:
      dsh-fork list
      dsh-fork list --all --since 7d
      dsh-fork list --kind fork --project /home/me/shop --json
    """
    _list(project, kind, since, everything, exact, json_mode, root, workspace)


def _list(
    project: str | None,
    kind: list[str] | None,
    since: str | None,
    everything: bool,
    exact: bool,
    json_mode: bool,
    root: str | None,
    workspace: str | None = None,
) -> None:
    from .. import porcelain
    from ..ids import now_ms

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")

    listing = metered(
        out,
        lambda bar: porcelain.list_sessions(
            ctx,
            project=project,
            kinds=kind or None,
            since=since,
            now_ms=now_ms(),
            everything=everything,
            workspace=workspace,
            progress=bar,
        ),
        where=ctx.root,
    )
    emit(out, listing, lambda o, result: render(o, result, exact))
