"""``dsh-fork fork``: fork a session at a turn boundary into a new seeded session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from .base import JSON_HELP, ROOT_HELP, Out, app, emit, fail, iso, root_of, run

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..fork import ForkResult


@app.command("fork")
def fork_command(
    source: str = typer.Argument(
        ..., metavar="SOURCE", help="Session id, session dir, or a log file inside one."
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
    child_id: str | None = typer.Option(
        None, "--id", metavar="CHILD_ID", help="Id of the child (default: session-<uuid4>)."
    ),
    no_agents: bool = typer.Option(
        False, "--no-agents", help="Do not copy the source's subagent tree under the child."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print what would be written; write nothing."
    ),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    root: str | None = typer.Option(None, "--root", help=ROOT_HELP, metavar="PATH"),
) -> None:
    """Fork SOURCE into a new session holding its events 0..SEQ (the source is only read).

    Example: dsh-fork fork session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a --at 41 --id my-branch
    """
    from ..errors import UsageError
    from ..fork import fork_session
    from ..turns import fork_at_turn

    out = Out(json_out)
    if at is not None and turn is not None:
        fail(out, UsageError("give either --at SEQ or --turn N, not both"))
    if turn is not None:
        chosen = turn
        result = run(
            out,
            lambda: fork_at_turn(
                source,
                root_of(root),
                turn=chosen,
                child_id=child_id,
                agents=not no_agents,
                dry_run=dry_run,
            ),
        )
    else:
        result = run(
            out,
            lambda: fork_session(
                source,
                root_of(root),
                at=at,
                child_id=child_id,
                agents=not no_agents,
                dry_run=dry_run,
            ),
        )
    emit(out, result, _render, warnings=result.warnings)


def _render(out: Out, result: ForkResult) -> None:
    at = "an empty source" if result.boundary is None else f"seq {result.boundary}"
    if result.dry_run:
        into = result.child_id or "a new session-<uuid4> id"
        title = f"Dry run: would fork {result.parent_session} at {at} into {into}"
        path: Any = result.path or f"{result.project_dir}/<new id>/"
    else:
        title = f"Forked {result.parent_session} at {at} into {result.child_id}"
        path = result.path
    rows: list[tuple[str, Any]] = [
        ("path", path),
        ("events copied", f"{result.inherited_events} (+ end-seed marker)"),
        ("frames", f"{result.frames_copied} copied verbatim, {result.frames_reencoded} re-encoded"),
        ("agent preset", result.agent_preset),
    ]
    if result.created_at is not None:
        rows.append(("created", f"{result.created_at} ({iso(result.created_at)})"))
    rows.append(("agents", _agents_line(result)))
    if result.agents is not None:
        verb = "would copy" if result.dry_run else "copied"
        for item in result.agents.to_json().get("copied", []):
            copy = f" as {item['copy']}" if item.get("copy") else ""
            rows.append(("", f"{verb} {item.get('source')}{copy} (depth {item.get('depth')})"))
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


def _agents_line(result: ForkResult) -> str:
    if result.agents is None:
        return "not copied (--no-agents)"
    summary = result.agents.to_json()
    counts = {
        key: len(summary.get(key) or [])
        for key in ("copied", "skipped", "unrelated", "uncatalogable", "failed")
    }
    verb = "would copy" if result.dry_run else "copied"
    return (
        f"{verb} {counts['copied']}, skipped {counts['skipped']}, unrelated "
        f"{counts['unrelated']}, uncatalogable {counts['uncatalogable']}, failed "
        f"{counts['failed']}"
    )
