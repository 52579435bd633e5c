"""``dsh-fork list``: the sessions of a root, newest activity first."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ..collector import keep
from .base import JSON_HELP, ROOT_HELP, Out, app, emit, iso, root_of, run

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..listing import SessionList

COLUMNS = ("id", "kind", "title", "turns", "last activity", "forks", "agents", "cwd")


def render(out: Out, listing: SessionList) -> None:
    shown = len(listing.rows)
    what = f"{shown} of {listing.total} sessions" if shown != listing.total else f"{shown} sessions"
    if not listing.rows:
        out.line(f"{listing.root}: no sessions" + ("" if shown == listing.total else " match"))
        return
    rows = []
    for row in listing.rows:
        title = row.title if row.error is None else f"unreadable: {row.error['code']}"
        rows.append(
            (
                row.id,
                row.kind or "?",
                title,
                row.turns,
                iso(row.last_activity),
                row.forks,
                row.agents,
                row.cwd,
            )
        )
    out.table(f"{what} in {listing.root}", COLUMNS, rows)


@app.command(
    "list",
    short_help="List the sessions of a root: id, kind, title, turns, last activity.",
)
def list_command(
    project: str | None = typer.Option(
        None, "--project", metavar="PROJECT", help="Only this project: a dir name or a cwd."
    ),
    kind: list[str] | None = typer.Option(
        None,
        "--kind",
        metavar="KIND",
        help="Only sessions of this kind: root, fork, subagent, copy or linked (repeatable).",
    ),
    since: str | None = typer.Option(
        None,
        "--since",
        metavar="WHEN",
        help="Only sessions active since WHEN: an age (30m, 2h, 7d), an ISO date, epoch ms.",
    ),
    json_mode: bool = typer.Option(False, "--json", help=JSON_HELP),
    root: str | None = typer.Option(None, "--root", help=ROOT_HELP, metavar="PATH"),
) -> None:
    """List the sessions of a root with their title, kind, turns and last activity.

    Kinds, from the header: root (names no parent), fork (a fork child: seeded from another
    session by fork), subagent (a session DSH spawned for a parent), copy (a subagent
    written by relink or fork: a copy of another subagent), linked (names a parent but is
    neither); ? when the header cannot be read. Last activity is the log's modification
    time; forks and agents count the fork children and subagents whose parent it is.

    \b
    Examples:
      dsh-fork list --kind fork --since 7d
      dsh-fork list --project /home/me/shop --json
    """
    from ..collector import paused_gc

    with paused_gc():  # rows and headers hold no cycle: nothing for the collector to walk
        _list(project, kind, since, json_mode, root)


def _list(
    project: str | None,
    kind: list[str] | None,
    since: str | None,
    json_mode: bool,
    root: str | None,
) -> None:
    from .. import porcelain
    from ..ids import now_ms

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")
    listing = run(
        out,
        lambda: porcelain.list_sessions(
            ctx, project=project, kinds=kind or None, since=since, now_ms=now_ms()
        ),
        where=ctx.root,
    )
    keep(ctx, listing)
    emit(out, listing, render)
