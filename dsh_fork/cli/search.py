"""``dsh-fork search``: the sessions where something was said (read-only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from .base import Out, app, emit, root_of, run
from .options import json_option, project_option, root_option, since_option

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..search import SearchResult

COLUMNS = ("session", "turn", "seq", "role", "snippet")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def render(out: Out, result: SearchResult) -> None:
    doc = result.document
    case = "ignoring case" if doc.ignore_case else "case-sensitive"
    scope = ", ".join(doc.in_)
    head = (
        f"{_count(doc.total, 'hit')} in {doc.sessions_with_hits} of {doc.searched} "
        "sessions "
        f"({case}; in {scope})"
    )
    if not doc.hits:
        out.line(f"{doc.root}: no hits ({case}; in {scope}; {doc.searched} sessions)")
        return
    rows = [
        (
            hit.session,
            hit.turn,
            f"{hit.seq}{' (inherited)' if hit.inherited else ''}",
            hit.role,
            hit.snippet,
        )
        for hit in doc.hits
    ]
    out.table(head, COLUMNS, rows)


@app.command("search", short_help="Find the sessions where something was said.")
def search_command(
    text: str = typer.Argument(..., metavar="TEXT", help="What to look for (smart case)."),
    regex: bool = typer.Option(False, "--regex", help="TEXT is a regular expression (Python)."),
    scopes: list[str] | None = typer.Option(
        None,
        "--in",
        metavar="WHERE",
        help="Search only here: title, user, assistant or tool (repeatable; default all).",
    ),
    inherited: bool = typer.Option(
        False,
        "--inherited",
        help="Also report hits in forks' and copies' inherited prefixes (once per session).",
    ),
    since: str | None = since_option(),
    project: str | None = project_option(),
    limit: int = typer.Option(
        200, "--limit", min=1, metavar="N", help="List at most N hits (all are counted)."
    ),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Search titles, user and assistant messages and tool calls and results of every
    session; each hit with its session, turn (as inspect --turns counts), seq, role and a
    one-line snippet.

    Smart case: a TEXT without capitals ignores case. Text is matched as decoded, so quotes
    and escapes match as they were typed. A fork's or copy's inherited prefix is searched
    only in the session that wrote it (so each hit appears once), unless --inherited, or
    that session is gone. Sessions that cannot be read are named.

    \b
    Examples:
      dsh-fork search "flaky test" --in user
      dsh-fork search 'timeout \\d+ ?ms' --regex --since 7d --json
    """
    from .. import porcelain
    from ..ids import now_ms

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")
    result = run(
        out,
        lambda: porcelain.search(
            ctx,
            text,
            regex=regex,
            scopes=scopes or None,
            inherited=inherited,
            since=since,
            project=project,
            limit=limit,
            now_ms=now_ms(),
        ),
        where=ctx.root,
    )
    emit(out, result, render)
