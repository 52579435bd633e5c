"""``dsh-fork fixture``: write a deterministic demo/test root."""

from __future__ import annotations

from pathlib import Path

import typer

from .base import Out, app, run


@app.command()
def fixture(
    out_root: Path = typer.Argument(..., metavar="OUT_ROOT", help="New sessions root to write."),
    sessions: int = typer.Option(1, "--sessions", min=0, help="Top-level sessions."),
    agents: int = typer.Option(2, "--agents", min=0, help="Subagents per session above depth D."),
    depth: int = typer.Option(1, "--depth", min=0, help="Depth of the subagent trees."),
    turns: int = typer.Option(2, "--turns", min=0, help="Completed turns per session."),
    seed: int = typer.Option(0, "--seed", help="Seed for ids and text."),
) -> None:
    """Write a deterministic, valid v4 sessions root for tests and demos.

    Example: dsh-fork fixture /tmp/demo/sessions --sessions 3 --agents 2 --depth 2
    """
    from ..fixtures import generate

    out = Out(json_mode=False)
    summary = run(
        out,
        lambda: generate(
            out_root, sessions=sessions, agents=agents, depth=depth, turns=turns, seed=seed
        ),
    )
    per_depth = ", ".join(f"depth {d}: {n}" for d, n in sorted(summary.per_depth.items()))
    out.line(f"wrote {summary.sessions} sessions to {summary.root} ({per_depth})")
    for session_id in summary.top_level:
        out.line(f"top-level session {session_id}")
