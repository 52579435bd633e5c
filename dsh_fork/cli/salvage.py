"""``dsh-fork salvage``: fork the part of a refused log that DSH would read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Out, app, emit, root_of, run
from .fork import _render as render_fork
from .options import (
    child_id_option,
    close_turn_option,
    dry_run_option,
    json_option,
    root_option,
    session_argument,
    title_option,
)

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..salvage import SalvageResult


def _render(out: Out, result: SalvageResult) -> None:
    render_fork(out, result.fork)
    left = result.left
    where = "" if left.from_byte is None else f", byte {left.from_byte} of the source"
    out.line(f"  left behind: from seq {left.from_seq}{where}: {left.reason}")
    if left.dropped_open_turn_events:
        out.line(f"  ({left.dropped_open_turn_events} readable events lie in a turn left open)")


@app.command("salvage", short_help="Fork the part of a log DSH refuses that DSH would read.")
def salvage_command(
    session: str = session_argument("The session whose log DSH refuses."),
    child_id: str | None = child_id_option(
        "The child's id (default: a new session-<uuid4>).", "CHILD"
    ),
    title: str | None = title_option("Title the child TEXT (default: as fork names it)."),
    close_turn: bool = close_turn_option(
        "Keep every readable event and close a turn left open, as fork --close-turn does."
    ),
    dry_run: bool = dry_run_option("Say what would be forked; write nothing."),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """For a log DSH refuses (a seq gap or repeat, a bad line or frame in the middle, a record
    torn mid-log, a second writer's restarted seqs): fork the longest prefix DSH would read,
    ending outside an open turn (with --close-turn: all of it, a turn left open closed as
    fork --close-turn closes it), into a new child with the branch's subagents. The source is
    never changed; the result says what was left behind, from which seq and byte, and why.
    A log DSH reads whole is not salvaged: use fork.

    \b
    Example:
      dsh-fork salvage 3f2a9c1d --dry-run
    """
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    result = run(
        out,
        lambda: porcelain.salvage(
            ctx, session, child_id=child_id, title=title, dry_run=dry_run, close_turn=close_turn
        ),
        where=ctx.root,
    )
    emit(out, result, _render)
