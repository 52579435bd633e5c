"""``dsh-fork export``: a session and its family into one archive."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from ..errors import UsageError
from .base import Out, app, emit, fail, root_of
from .options import (
    SESSION_HELP,
    archive_format,
    format_option,
    json_option,
    root_option,
    session_argument,
)
from .progress import metered

if TYPE_CHECKING:
    from ..export import ExportResult


@app.command("export", short_help="Write a session and its family into one archive (read-only).")
def export_command(
    session: str = session_argument(SESSION_HELP),
    output: str = typer.Option(
        ...,
        "-o",
        "--output",
        metavar="FILE",
        help="Archive to write: .tar, .tar.gz/.tgz, .tar.xz, .tar.bz2 or .tar.zst; "
        "- writes it to standard output (a pipe or a file, never a terminal).",
    ),
    forks: bool = typer.Option(
        False, "--forks", help="Also export the session's fork children and their trees."
    ),
    skip_unreadable: bool = typer.Option(
        False,
        "--skip-unreadable",
        help="Write what can be read; name the members left out and exit 10 (PARTIAL).",
    ),
    format_name: str | None = format_option("- defaults to zst"),
    json_out: bool = json_option("Print the manifest as one JSON document."),
    root: str | None = root_option(),
) -> None:
    """Export a session and its family into one archive.

    Writes SESSION, its whole subagent tree (and with --forks its fork children and their
    trees) with a manifest: ids, parent links, cwd, size and sha256 of every log.

    \b
    Examples:
      dsh-fork export session-6f1c8d2e -o family.tar.zst
      dsh-fork export session-6f1c8d2e --forks -o family.tar.gz --json
      dsh-fork export session-6f1c8d2e -o - | ssh host dsh-fork import - --new-ids
    """
    from .. import porcelain
    from ..export import ExportOptions

    out = Out(json_out)
    compression = archive_format(out, format_name)
    to_stdout = output == "-"
    if to_stdout and json_out:
        fail(out, UsageError("-o - writes the archive to standard output: drop --json"))
    if to_stdout and sys.stdout.isatty():
        fail(
            out,
            UsageError(
                "refusing to write an archive to a terminal: pipe it (-o - | ...) "
                "or redirect it (-o - > FILE)"
            ),
        )
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")
    options = ExportOptions(forks=forks, skip_unreadable=skip_unreadable, compression=compression)
    result = metered(
        out,
        lambda bar: porcelain.export(
            ctx,
            session,
            output,
            options,
            stdout=sys.stdout.buffer if to_stdout else None,
            progress=bar,
        ),
        where=ctx.root,
    )
    emit(out, result, _render_stderr if to_stdout else _render)


def _render_stderr(out: Out, result: ExportResult) -> None:
    """Standard output holds the archive: one summary line goes to stderr instead."""
    sys.stderr.write(_summary(result) + "\n")


def _summary(result: ExportResult) -> str:
    manifest = result.manifest
    related = len(manifest.sessions) - 1
    family = "" if not related else f" and {related} related session" + ("s" * (related > 1))
    where = "standard output" if str(result.path) == "-" else str(result.path)
    return (
        f"Exported {manifest.top}{family} to {where}: {manifest.total_bytes} bytes of logs, "
        f"archive {result.archive_bytes} bytes ({result.compression})"
    )


def _render(out: Out, result: ExportResult) -> None:
    manifest = result.manifest
    related = len(manifest.sessions) - 1
    family = "" if not related else f" and {related} related session" + ("s" * (related > 1))
    out.line(f"Exported {manifest.top}{family} to {result.path}")
    out.line(
        f"  {manifest.total_bytes} bytes of logs, archive {result.archive_bytes} bytes "
        f"({result.compression})"
    )
    out.table(
        None,
        ["role", "id", "parent", "events", "bytes", "sha256"],
        [
            (s.role, s.id, s.parent_session, s.events, s.file.size, s.file.sha256[:16])
            for s in manifest.sessions
        ],
    )
