"""``dsh-fork du``: bytes on disk per session, family and project dir (read-only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ..collector import keep
from .base import JSON_HELP, ROOT_HELP, Out, app, emit, family_argument, root_of, run

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..du import DiskUsage, Group

DEFAULT_TOP = 10
"""Rows per table without --top (with --json every row, unless --top is given)."""


def _size(value: int | None) -> str:
    if value is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def _groups(out: Out, title: str, groups: list[Group], top: int) -> None:
    rows = [[g.name, g.sessions, g.bytes, g.inherited, g.saving] for g in groups[:top]]
    more = f" (largest {top} of {len(groups)})" if len(groups) > top else ""
    out.table(f"{title}{more}", ["name", "sessions", "bytes", "inherited", "shareable"], rows)
    out.line()


def _render(out: Out, usage: DiskUsage) -> None:
    top = usage.top or DEFAULT_TOP
    total = usage.total
    if not usage.sessions:
        out.line(f"no sessions in {usage.root}")
        return
    share = f" ({100 * total.saving / total.bytes:.0f}%)" if total.bytes else ""
    scope = f"family of {usage.session}" if usage.session else str(usage.root)
    out.line(
        f"{scope}: {total.sessions} sessions, {total.bytes} bytes ({_size(total.bytes)}); "
        f"inherited prefixes {total.inherited} bytes; sharing them would save "
        f"{total.saving} bytes{share}"
    )
    out.line()
    _groups(out, "Project dirs", usage.projects, top)
    _groups(out, "Families", usage.families, top)
    rows = [
        [u.id, u.kind, u.bytes, u.log_bytes, u.inherited, u.own, u.other, "; ".join(u.flags)]
        for u in usage.sessions[:top]
    ]
    more = f" (largest {top} of {len(usage.sessions)})" if len(usage.sessions) > top else ""
    columns = ["id", "kind", "bytes", "log", "inherited", "own", "other", "flags"]
    out.table(f"Sessions{more}", columns, rows)


@app.command("du", short_help="Bytes on disk per session and family: inherited and own bytes.")
def du_command(
    session: str | None = family_argument(
        "Measure only the family of this session (id or unique prefix, dir or log)."
    ),
    top: int | None = typer.Option(
        None, "--top", min=1, metavar="N", help=f"Show the N largest (default {DEFAULT_TOP})."
    ),
    json_mode: bool = typer.Option(False, "--json", help=JSON_HELP),
    root: str | None = typer.Option(None, "--root", help=ROOT_HELP, metavar="PATH"),
) -> None:
    """Bytes on disk per session, family and project dir; forks' and copies' inherited
    prefixes against their own bytes, and what sharing the prefixes would save.

    Example: dsh-fork du --top 5
    """
    from ..collector import paused_gc

    with paused_gc():  # the usage is dropped (on return) before the collector runs again
        _du(session, top, json_mode, root)


def _du(session: str | None, top: int | None, json_mode: bool, root: str | None) -> None:
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")
    usage = run(out, lambda: porcelain.du(ctx, session, top=top), where=ctx.root)
    keep(ctx, usage)
    emit(out, usage, _render)
