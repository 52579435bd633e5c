"""``dsh-fork diff``: the common prefix of two sessions and what each did after it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from .base import Out, app, emit, iso, root_of, run
from .options import SESSION_HELP, json_option, root_option, session_argument

DIFFERS_EXIT = 1
"""``--exit-code``: the sessions differ (git's and diff(1)'s code; INTERNAL everywhere else)."""

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..diff import DiffResult, DiffSide


def _side_line(name: str, side: DiffSide) -> str:
    parent = f" of {side.parent_session}" if side.parent_session else ""
    return f"{name}: {side.id}  ({side.kind}{parent}; {side.events} events, cut {side.cut})"


def _tail(out: Out, name: str, side: DiffSide, split: int) -> None:
    if not side.tail:
        out.line(f"{name} after seq {split - 1}: nothing" if split else f"{name}: no turns")
        return
    count = len(side.tail)
    out.line(f"{name} from seq {split}: {count} turn{'' if count == 1 else 's'}")
    for turn in side.tail:
        end = "open" if turn.end_seq is None else str(turn.end_seq)
        if turn.end_seq is not None and turn.end_seq < split:
            out.line(f"  after turn {turn.turn}: seqs {split}-{turn.last_seq} (between turns)")
        else:
            shared = " (its start is shared)" if turn.start_seq < split else ""
            span = f"seqs {turn.start_seq}-{end}{shared}"
            out.line(f"  turn {turn.turn}  {span}  ended {iso(turn.end_time)}")
        if turn.user:
            out.line(f"    user: {turn.user}")
        if turn.tools:
            out.line(f"    tools: {', '.join(turn.tools)}")
        if turn.agents:
            out.line(f"    agents: {', '.join(turn.agents)}")


def _agents(out: Out, name: str, side: DiffSide) -> None:
    if not side.subagents:
        out.line(f"subagents of {name}: none")
        return
    out.line(f"subagents of {name}: {len(side.subagents)}")
    for agent in side.subagents:
        label = f" {agent.label!r}" if agent.label else ""
        copy = f"  copy of {agent.copy_of}" if agent.copy_of else ""
        out.line(f"  {agent.id}{label}{copy}")


def _render(out: Out, result: DiffResult) -> None:
    out.line(_side_line("A", result.a))
    out.line(_side_line("B", result.b))
    out.line(f"relation: {result.relation}")
    split = result.first_difference
    if split is None:
        out.line(f"identical: both hold the same {result.common} events")
    else:
        if result.common == 0:
            out.line("no common prefix: the first events differ")
        else:
            out.line(f"common prefix: {result.common} events (seqs 0-{result.common - 1})")
        for name, side in (("A", result.a), ("B", result.b)):
            if side.split_event_type is None:
                out.line(f"  {name} ends before seq {split}")
            else:
                turn = "before any turn" if side.split_turn is None else f"turn {side.split_turn}"
                out.line(f"  {name} at seq {split}: {side.split_event_type} ({turn})")
        out.line()
        _tail(out, "A", result.a, split)
        _tail(out, "B", result.b, split)
    out.line()
    _agents(out, "A", result.a)
    _agents(out, "B", result.b)


@app.command("diff", short_help="Where two sessions part, and what each did after (read-only).")
def diff_command(
    a: str = session_argument(SESSION_HELP, metavar="A"),
    b: str = session_argument(SESSION_HELP, metavar="B"),
    exit_code: bool = typer.Option(
        False,
        "--exit-code",
        help="Exit 1 when either side has a turn after the common prefix, 0 otherwise (git's "
        "diff --exit-code); a fork's marker, title and catalog facts are no difference.",
    ),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Compare two sessions: common prefix (raw event bytes), the split, each side's tail.

    Meant for a fork and its parent, two sibling forks, or a copy and its original.

    With --exit-code, exit 1 means "they differ" (not INTERNAL, as everywhere else): either
    side has a turn after the common prefix. Errors keep their codes (3, 9, 11, ...).

    \b
    Examples:
      dsh-fork diff my-branch session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a
      dsh-fork diff -q --exit-code my-branch 68a2 || echo "the branch went on"
    """
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")
    result = run(out, lambda: porcelain.diff(ctx, a, b), where=ctx.root)
    emit(out, result, _render)
    if exit_code and result.differs:
        raise typer.Exit(DIFFERS_EXIT)
