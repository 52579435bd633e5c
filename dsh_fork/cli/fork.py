"""``dsh-fork fork``: fork a session at a turn boundary into a new seeded session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ..errors import UsageError
from .base import Out, app, emit, fail, root_of, when
from .options import (
    absolute_dir,
    child_id_option,
    close_turn_option,
    cwd_option,
    dry_run_option,
    json_option,
    no_workspace_option,
    root_option,
    session_argument,
    title_option,
)
from .progress import metered

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..fork import ForkResult


@app.command(
    "fork",
    short_help="Fork a session at a turn boundary into a new seeded session.",
)
def fork_command(
    source: str = session_argument(
        "Session id (or a unique prefix), session dir, or a log file inside one.", "SOURCE"
    ),
    at: int | None = typer.Option(
        None,
        "--at",
        metavar="SEQ",
        help="Inclusive boundary seq (default: the last event); never inside an open turn.",
    ),
    turn: int | None = typer.Option(
        None,
        "--turn",
        metavar="N",
        help="Fork at the end of turn N (1-based, as inspect --turns counts; -1 = the last "
        "completed turn). Not with --at.",
    ),
    child_id: str | None = child_id_option(
        "Id of the child (default: session-<uuid4>); no control characters.", "CHILD_ID"
    ),
    no_agents: bool = typer.Option(
        False, "--no-agents", help="Do not copy the source's subagent tree under the child."
    ),
    dry_run: bool = dry_run_option("Print what would be written; write nothing."),
    cwd: str | None = cwd_option(
        "Move the child into DIR's workspace (cwd DIR); its subagent copies follow."
    ),
    drop_inbox: bool = typer.Option(
        False,
        "--drop-inherited-inbox",
        help="Cancel the queued input the child inherits, so it is never delivered.",
    ),
    no_workspace: bool = no_workspace_option("the child shows"),
    title: str | None = title_option(
        "Title the child TEXT (normalised as DSH saves titles) instead of the source's "
        'title increased as DSH\'s fork buttons do ("X" -> "X (1)").'
    ),
    keep_title: bool = typer.Option(
        False, "--keep-title", help="Add no title: the child shows the title it inherits."
    ),
    close_turn: bool = close_turn_option(
        "Fork at a boundary inside an open turn (--at, --turn, or a source that ends "
        "inside one) and close the turn in the child as DSH does: an error result per pending "
        "tool call, step/end, turn/end (forked)."
    ),
    json_out: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Fork SOURCE into a new session holding its events 0..SEQ (the source is only read).

    The child (a "fork child") names SOURCE as its parentSession and ends with an end-seed
    marker: a session/end-seed event tagged inherited, whose seq is the child's cut (the
    number of events it inherited). Frames wholly before SEQ are copied verbatim; the one
    frame holding SEQ is re-encoded (its lines are kept byte for byte). Unless --no-agents,
    the source's subagents are copied under the child as with relink.

    The child is titled as DSH's fork buttons title it: the source's latest title
    increased ("X" -> "X (1)", "X (1)" -> "X (2)"), saved as a user's session/title
    after the marker. Two forks of "X" are both "X (1)", as in DSH: --title names them apart.

    \b
    Examples:
      dsh-fork fork session-68a2dc34 --at 41 --id my-branch
      dsh-fork fork session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a --dry-run --json
    """
    from .. import porcelain
    from ..fork import ForkOptions
    from ..ids import new_id_problem

    out = Out(json_out)
    problem = None if child_id is None else new_id_problem(child_id)
    if problem is not None:  # a typed id must print as one line: no controls, valid UTF-8
        fail(out, UsageError(problem))
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}; operation log: {ctx.oplog}")

    options = ForkOptions(
        at=at,
        child_id=child_id,
        agents=not no_agents,
        dry_run=dry_run,
        cwd=None if cwd is None else absolute_dir(cwd),
        drop_inbox=drop_inbox,
        workspace=not no_workspace,
        title=title,
        keep_title=keep_title,
        close_turn=close_turn,
    )
    result = metered(
        out,
        lambda bar: porcelain.fork(ctx, source, options, turn=turn, progress=bar),
        where=ctx.root,
    )
    emit(out, result, _render)


def _render(out: Out, result: ForkResult) -> None:
    from msgspec import UNSET

    child = result.child
    at = "an empty source" if child.boundary is None else f"seq {child.boundary}"
    if result.dry_run:
        into = child.id or "a new session-<uuid4> id"
        title = f"Dry run: would fork {child.parent_session} at {at} into {into}"
        path: Any = result.path or f"{child.project_dir}/<new id>/"
    else:
        title = f"Forked {child.parent_session} at {at} into {child.id}"
        path = result.path
    rows: list[tuple[str, Any]] = [
        ("path", path),
        ("events copied", f"{child.inherited_events} (+ end-seed marker)"),
        ("frames", f"{result.frames_copied} copied verbatim, {result.frames_reencoded} re-encoded"),
        ("agent preset", child.agent_preset),
        ("title", _title_line(result)),
    ]
    if child.cwd is not UNSET:
        rows.append(("cwd", f"{result.cwd} (moved)"))
    if child.inbox_canceled is not UNSET:
        canceled = ", ".join(f"{n} {t}" for t, n in child.inbox_canceled.items()) or "none"
        rows.append(("inherited inbox", f"canceled: {canceled}"))
    if child.created_at is not None:
        rows.append(("created", when(child.created_at)))
    _closed_rows(rows, result)
    rows.append(("agents", _agents_line(result)))
    if result.agents is not None:
        verb = "would copy" if result.dry_run else "copied"
        for item in result.agents.copied:
            copy = f" as {item['copy']}" if item.get("copy") else ""
            rows.append(("", f"{verb} {item.get('source')}{copy} (depth {item.get('depth')})"))
    if result.workspace is not None:
        from .. import joining

        rows.append(("workspace", joining.text(result.workspace)))
    if out.rich:
        _rich(out, title, rows)
    else:
        out.line(title)
        for key, value in rows:
            text = "-" if value is None else value
            out.line(f"  {key}: {text}" if key else f"  {text}")
    if result.dry_run:
        out.line("Nothing was written.")


def _rich(out: Out, title: str, rows: list[tuple[str, Any]]) -> None:
    """A borderless two-column summary; long paths and ids wrap instead of being cut."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False, box=None)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, "-" if value is None else str(value))
    out.console.print(table)


def _title_line(result: ForkResult) -> str:
    """The title the child is given, and the source's it came from (output escapes controls)."""
    source = result.child.source_title
    if result.child.title is not None:
        was = "the source has none" if not source else f'the source\'s is "{source}"'
        return f'"{result.child.title}" ({was})'
    if source:
        return f'none added (--keep-title); the source\'s is "{source}"'
    return "none (the source has no title)"


def _closed_rows(rows: list[tuple[str, Any]], result: ForkResult) -> None:
    """What --close-turn appends after the marker: the turn, then one line per tool result."""
    from msgspec import UNSET

    closed = result.closed_turn
    if closed is None:
        if result.child.closed_turn is not UNSET:  # --close-turn, between turns
            rows.append(("closed turn", "none (the boundary is not inside a turn)"))
        return
    first, last = closed.events[0].seq, closed.events[-1].seq
    kinds = [f"{len(closed.calls)} tool result{'' if len(closed.calls) == 1 else 's'}"]
    kinds += [] if closed.step_end_seq is None else ["step/end"]
    seqs = f"seq {first}" if first == last else f"seqs {first}..{last}"
    line = f"turn {closed.turn} (started at seq {closed.start_seq}) by {seqs}: "
    rows.append(("closed turn", line + ", ".join([*kinds, "turn/end (forked)"])))
    for call in closed.calls:
        started = "" if call.call_seq is None else f" (it started at seq {call.call_seq})"
        rows.append(("", f"result for {call.call_id}: {call.code}{started}"))


def _agents_line(result: ForkResult) -> str:
    if result.agents is None:
        return "not copied (--no-agents)"
    agents = result.agents
    counts = {
        "copied": len(agents.copied),
        "skipped": len(agents.skipped),
        "unrelated": len(agents.unrelated),
        "uncatalogable": len(agents.uncatalogable),
        "failed": len(agents.failed),
    }
    verb = "would copy" if result.dry_run else "copied"
    return (
        f"{verb} {counts['copied']}, skipped {counts['skipped']}, unrelated "
        f"{counts['unrelated']}, uncatalogable {counts['uncatalogable']}, failed "
        f"{counts['failed']}"
    )
