"""``dsh-fork import``: publish the sessions of an archive into the root."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .base import Out, app, emit, root_of
from .options import (
    absolute_dir,
    archive_format,
    cwd_option,
    dry_run_option,
    format_option,
    json_option,
    no_workspace_option,
    root_option,
)
from .progress import metered

if TYPE_CHECKING:
    from ..importer import ImportResult


@app.command("import", short_help="Verify an archive, then publish its sessions into the root.")
def import_command(
    archive: str = typer.Argument(
        ...,
        metavar="FILE",
        help="An archive written by export; - reads standard input (a pipe, never a terminal).",
    ),
    new_ids: bool = typer.Option(
        False, "--new-ids", help="Import as seeded copies under new ids (a second family)."
    ),
    cwd: str | None = cwd_option(
        "Move the family into DIR: the top session's workspace (and what lies in it)."
    ),
    dry_run: bool = dry_run_option("Verify the archive and show what would be created."),
    no_workspace: bool = no_workspace_option("the sessions show"),
    format_name: str | None = format_option("default: from its content"),
    json_out: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Import the sessions of an archive written by export.

    Verifies FILE completely (manifest, size and sha256 of every log, each log itself) before
    anything is written, then publishes each session, parents before children.

    \b
    Examples:
      dsh-fork import family.tar.zst --dry-run
      dsh-fork import family.tar.zst --new-ids --cwd ~/work/other-project
      ssh host dsh-fork export session-6f1c8d2e -o - | dsh-fork import - --new-ids
    """
    from .. import porcelain
    from ..importer import ImportOptions

    out = Out(json_out)
    compression = archive_format(out, format_name)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")
    options = ImportOptions(
        new_ids=new_ids,
        cwd=None if cwd is None else absolute_dir(cwd),
        dry_run=dry_run,
        workspace=not no_workspace,
        compression=compression,
    )
    result = metered(
        out,
        lambda bar: porcelain.import_bundle(ctx, archive, options, progress=bar),
        where=ctx.root,
    )
    emit(out, result, _render)


def _render(out: Out, result: ImportResult) -> None:
    doc = result.document
    ids = " under new ids" if doc.new_ids else ""
    if doc.dry_run:
        head = f"Dry run: would import {_sessions(result.count('planned'))}"
    else:
        head = f"Imported {_sessions(result.count('created'))}"
    source = "standard input" if doc.archive == "-" else doc.archive
    out.line(f"{head} of {source}{ids} into {doc.root}")
    present, skipped = result.count("present"), result.count("skipped")
    if present:
        out.line(f"  {present} already there from an earlier run of this import")
    if skipped:
        out.line(f"  {skipped} left out (see the failures below)")
    out.line("  archive verified: manifest, sizes and sha256 of every log")
    out.table(
        None,
        ["status", "role", "id", "from", "parent", "project dir"],
        [
            (i.status, i.role, i.id, _origin(i.source, i.id), i.parent_session, _project(i.path))
            for i in doc.sessions
        ],
    )
    for item in doc.sessions:
        if item.workspace is not None and item.workspace.status != "skipped":
            from .. import joining

            out.line(f"  workspace of {item.id}: {joining.text(item.workspace)}")
    catalogued = sum(len(i.catalogued) for i in doc.sessions)
    if catalogued:
        out.line(f"  catalogued {catalogued} new children in their parents' own range")
    if doc.dry_run:
        out.line("Nothing was written.")


def _origin(source: str, new_id: str) -> str:
    return "=" if source == new_id else source


def _sessions(count: int) -> str:
    return f"{count} session" if count == 1 else f"{count} sessions"


def _project(path: str) -> str:
    return Path(path).parent.parent.name
