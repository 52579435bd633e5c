"""``dsh-fork fixture``: write a deterministic demo/test root."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .base import Out, app, emit
from .options import json_option
from .progress import metered

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..fixtureroot import FixtureSummary


@app.command(
    "fixture",
    short_help="Write a deterministic, valid sessions root for tests and demos.",
)
def fixture(
    out_root: Path = typer.Argument(..., metavar="OUT_ROOT", help="New sessions root to write."),
    sessions: int = typer.Option(1, "--sessions", min=0, help="Top-level sessions."),
    agents: int = typer.Option(2, "--agents", min=0, help="Subagents per session above depth D."),
    depth: int = typer.Option(1, "--depth", min=0, help="Depth of the subagent trees."),
    turns: int = typer.Option(2, "--turns", min=0, help="Completed turns per session."),
    seed: int = typer.Option(0, "--seed", help="Seed for ids and text."),
    tools: bool = typer.Option(
        False, "--tools", help="An assistant step with a tool call in every turn."
    ),
    forks: int = typer.Option(0, "--forks", min=0, help="Fork children per top-level session."),
    fork_depth: int = typer.Option(
        1, "--fork-depth", min=1, help="Each fork forked again, down a chain this long."
    ),
    relinked: bool = typer.Option(
        False, "--relinked", help="Copy the subagents into the forks (fork without --no-agents)."
    ),
    legacy: bool = typer.Option(
        False, "--legacy", help="A fork per top-level session holding an older tool's copies."
    ),
    open_turns: bool = typer.Option(
        False, "--open-turns", help="The last subagent of each parent ends inside an open turn."
    ),
    torn_tails: bool = typer.Option(
        False, "--torn-tails", help="Tear the log tail of each tree's last leaf."
    ),
    old_generation: int = typer.Option(
        0, "--old-generation", min=0, help="Extra top-level trees stored as v3 files."
    ),
    workspaces: bool = typer.Option(
        False,
        "--workspaces",
        help="Real project folders in the home as cwds, and DSH's workspace registry beside "
        "the root (a workspace per project).",
    ),
    phrases: bool = typer.Option(
        False,
        "--phrases",
        help="End each user message with a phrase said nowhere else (to try search).",
    ),
    json_mode: bool = json_option(),
) -> None:
    """Write a deterministic, valid sessions root for tests and demos.

    \b
    Example:
      dsh-fork fixture /tmp/demo/sessions --sessions 3 --agents 2 --depth 2 --forks 1
    """
    from .. import porcelain

    out = Out(json_mode=json_mode)
    summary = metered(
        out,
        lambda bar: porcelain.fixture(
            out_root,
            sessions=sessions,
            agents=agents,
            depth=depth,
            turns=turns,
            seed=seed,
            tools=tools,
            forks=forks,
            fork_depth=fork_depth,
            relinked=relinked,
            legacy=legacy,
            open_turns=open_turns,
            torn_tails=torn_tails,
            old_generation=old_generation,
            workspaces=workspaces,
            phrases=phrases,
            progress=bar,
        ),
        where=out_root,
    )
    emit(out, summary, _render)


def _render(out: Out, summary: FixtureSummary) -> None:
    per_depth = ", ".join(f"depth {d}: {n}" for d, n in sorted(summary.per_depth.items()))
    originals = sum(summary.per_depth.values())
    if summary.sessions != originals:  # forks, legacy forks and their copies
        per_depth += f"; {summary.sessions - originals} forks and copies"
    out.line(f"wrote {summary.sessions} sessions to {summary.root} ({per_depth})")
    for session_id in summary.top_level:
        out.line(f"top-level session {session_id}")
    for label, ids in (
        ("fork child", summary.forks),
        ("legacy fork child", summary.legacy_forks),
        ("v3 session", summary.old_generation),
        ("open turn in", summary.open_turns),
        ("torn tail in", summary.torn_tails),
    ):
        for session_id in ids:
            out.line(f"{label} {session_id}")
    if summary.registry is not None:
        out.line(f"workspace registry {summary.registry}")
