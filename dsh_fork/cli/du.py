"""``dsh-fork du``: bytes on disk per session, family and project dir (read-only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from .base import Out, app, emit, root_of
from .options import family_argument, json_option, root_option
from .progress import metered

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..du import DiskUsage, Group

Sizer = Callable[[int | None], str]

DEFAULT_TOP = 10
"""Rows per table without --top (with --json every row, unless --top is given)."""


def _sizes(exact: bool) -> Callable[[int | None], str]:
    """How a size is shown: exact bytes with --bytes, else as people read them."""
    from .tables import human_size

    return (lambda value: "?" if value is None else str(value)) if exact else human_size


def _groups(out: Out, title: str, groups: list[Group], top: int, size: Sizer) -> None:
    rows = [
        [g.name, g.sessions, size(g.bytes), size(g.inherited_bytes), size(g.shareable)]
        for g in groups[:top]
    ]
    more = f" (largest {top} of {len(groups)})" if len(groups) > top else ""
    out.table(f"{title}{more}", ["name", "sessions", "bytes", "inherited", "shareable"], rows)
    out.line()


def _render(out: Out, usage: DiskUsage, exact: bool) -> None:
    size = _sizes(exact)
    top = usage.top or DEFAULT_TOP
    total = usage.total
    if not usage.sessions:
        out.line(f"no sessions in {usage.root}")
        return
    share = f" ({100 * total.shareable / total.bytes:.0f}%)" if total.bytes else ""
    scope = f"family of {usage.session}" if usage.session else str(usage.root)
    unit = " bytes" if exact else ""
    out.line(
        f"{scope}: {total.sessions} sessions, {size(total.bytes)}{unit}; inherited prefixes "
        f"{size(total.inherited_bytes)}{unit}; sharing them would save "
        f"{size(total.shareable)}{unit}{share}"
    )
    out.line()
    _groups(out, "Project dirs", usage.projects, top, size)
    _groups(out, "Families", usage.families, top, size)
    rows = [
        [
            u.id,
            u.kind,
            size(u.bytes),
            size(u.log_bytes),
            size(u.inherited),
            size(u.own),
            size(u.other),
            "; ".join(u.flags),
        ]
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
    exact: bool = typer.Option(
        False, "--bytes", "-b", help="Sizes in exact bytes (--json always has exact bytes)."
    ),
    human: bool = typer.Option(
        False,
        "--human-readable",
        "-h",
        help="Sizes as people read them (KiB, MiB, GiB): the default; du's -h, accepted.",
    ),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Bytes on disk per session, family and project dir; forks' and copies' inherited
    prefixes against their own bytes, and what sharing the prefixes would save.

    Sizes are shown in binary units (KiB = 1024 bytes) unless --bytes is given; -h means
    that here, as in du(1) (--help prints this help).

    \b
    Examples:
      dsh-fork du --top 5
      dsh-fork du -h 68a2
      dsh-fork du --bytes | sort -k3 -n
    """
    _du(session, top, exact and not human, json_mode, root)


def _du(
    session: str | None, top: int | None, exact: bool, json_mode: bool, root: str | None
) -> None:
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")

    usage = metered(
        out, lambda bar: porcelain.du(ctx, session, top=top, progress=bar), where=ctx.root
    )
    emit(out, usage, lambda o, u: _render(o, u, exact))
