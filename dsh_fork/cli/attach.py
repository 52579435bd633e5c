"""``dsh-fork attach``: sessions into the workspace their cwd belongs to."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from .base import Out, app, emit, root_of, run
from .options import dry_run_option, json_option, root_option, sessions_argument

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..attach import AttachResult


@app.command(
    "attach",
    short_help="Put sessions into the workspace their cwd belongs to (DSH's registry).",
)
def attach_command(
    sessions: list[str] | None = sessions_argument(
        "Session ids (or unique prefixes), session dirs or log files."
    ),
    every: bool = typer.Option(
        False, "--all", help="Every visible session that a workspace's path matches."
    ),
    dry_run: bool = dry_run_option("Show what would change in the registry; write nothing."),
    json_out: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Put sessions into the workspace of DSH's web UI their cwd belongs to.

    A session joins the workspace whose path is the realpath of its cwd and leaves every
    other (a moved session), in one write of the registry (ROOT/../storages/workspace.json)
    for the whole batch; no workspace is ever created. --all takes every visible session
    (not a subagent, not archived, with a turn) that shows as Ungrouped or is listed under a
    workspace that is no longer its cwd's. A second run changes nothing. A running DSH
    overwrites offline edits of its registry: close it first (docs/workspaces.md).

    \b
    Examples:
      dsh-fork attach --all --dry-run
      dsh-fork attach session-68a2dc34 --json
    """
    from .. import porcelain

    out = Out(json_out)
    ctx = porcelain.Context.of(root_of(root))
    result = run(
        out,
        lambda: porcelain.attach(ctx, sessions or [], every=every, dry_run=dry_run),
        where=ctx.root,
    )
    emit(out, result, _render)


def _render(out: Out, result: AttachResult) -> None:
    doc = result.document
    placed = result.count("joined", "would-join")
    noun = "session" if placed == 1 else "sessions"
    if placed == 0 and doc.registry_state == "ready":
        out.line(f"Nothing to attach in {doc.registry}")
    else:
        verb = "Dry run: would attach" if doc.dry_run else "Attached"
        out.line(f"{verb} {placed} {noun} to their workspaces in {doc.registry}")
    if doc.registry_state != "ready":
        out.line(f"  the registry is {doc.registry_state}: {doc.registry_reason}")
    if doc.members:
        many = doc.members != 1
        are = "sessions are" if many else "session is"
        out.line(f"  {doc.members} visible {are} already in {'their' if many else 'its'} workspace")
    if doc.sessions:
        why = any(i.reason for i in doc.sessions)
        out.table(
            None,
            ["status", "id", "workspace", "was", *(["why"] if why else [])],
            [
                (i.status, i.session, i.title, i.was, *([i.reason] if why else []))
                for i in doc.sessions
            ],
        )
    for item in doc.unreadable:
        out.line(f"  unreadable: {item.path} ({item.code}): {item.message}")
    if doc.dry_run:
        out.line("Nothing was written.")
