"""``dsh-fork list-agents``: a session's subagents, on disk and in the panel."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import typer

from .base import Out, app, emit, iso, root_of, run
from .options import SESSION_HELP, json_option, root_option, session_argument

if TYPE_CHECKING:  # the library is imported when the command runs, not when the CLI loads
    from ..agents import AgentRow, AgentTree

COLUMNS = (
    "id",
    "label",
    "mode",
    "provider/model",
    "createdAt",
    "turns",
    "status",
    "disk",
    "panel",
    "copy of",
    "flags",
)


def _mark(value: bool) -> str:
    return "✓" if value else "✗"


def _cells(row: AgentRow) -> list[Any]:
    provider_model = "/".join(p for p in (row.provider, row.model) if p) or None
    return [
        row.label,
        row.mode,
        provider_model,
        iso(row.created_at),
        row.turns,
        row.status,
        _mark(row.on_disk),
        _mark(row.in_panel),
        row.copy_of,
        "; ".join(row.flags) or None,
    ]


def _walk(rows: list[AgentRow]) -> Iterator[tuple[AgentRow, int]]:
    """(row, depth), each row's subtree before its next sibling, without recursion."""
    stack = [(row, 0) for row in reversed(rows)]
    while stack:
        row, depth = stack.pop()
        yield row, depth
        stack.extend((child, depth + 1) for child in reversed(row.children))


def _flatten(rows: list[AgentRow]) -> Iterator[list[Any]]:
    from ..display import indent

    for row, depth in _walk(rows):
        yield [indent(depth) + row.id, *_cells(row)]


def _deepest(rows: list[AgentRow]) -> int:
    return max((depth for _, depth in _walk(rows)), default=0)


def _tree(out: Out, tree: AgentTree) -> None:
    from rich.text import Text
    from rich.tree import Tree

    def label(row: AgentRow) -> Text:
        label, mode, provider_model, created, turns, status, disk, panel, copy_of, _ = _cells(row)
        parts = [label or "(no label)", mode or "-", provider_model or "-", created]
        parts += [f"{'-' if turns is None else turns} turns", status or "-"]
        parts.append(f"disk {disk} panel {panel}")
        if copy_of:
            parts.append(f"copy of {copy_of}")
        text = Text()
        text.append(row.id, style="bold")
        text.append("  " + " · ".join(parts))
        if row.flags:
            text.append("  [" + "; ".join(row.flags) + "]", style="yellow")
        return text

    from ..display import MAX_INDENT_LEVELS

    top = Tree(Text(tree.session, style="bold"))
    # Built without recursion; a row deeper than the cap joins the branch at the cap's level.
    branches = [top]
    for row, depth in _walk(tree.children):
        level = min(depth, MAX_INDENT_LEVELS)
        del branches[level + 1 :]
        text = label(row)
        if depth > MAX_INDENT_LEVELS:
            text = Text(f"[depth {depth}] ", style="dim") + text
        branches.append(branches[level].add(text))
    out.console.print(top)


def _render(out: Out, tree: AgentTree) -> None:
    flags = f" [{'; '.join(tree.flags)}]" if tree.flags else ""
    if not tree.children:
        out.line(f"{tree.session}: no subagents{flags}")
    elif out.rich:
        _tree(out, tree)
    else:
        out.table(f"subagents of {tree.session}{flags}", COLUMNS, _flatten(tree.children))
    if tree.children:
        from ..display import capped_note

        note = capped_note(_deepest(tree.children))
        if note is not None:
            out.line(note)
    if tree.forks:
        out.line("forks: " + ", ".join(str(fork.id) for fork in tree.forks))


@app.command(
    "list-agents",
    short_help="List a session's subagents, on disk and in DSH's panel (the catalog).",
)
def list_agents(
    session: str = session_argument(SESSION_HELP),
    recursive: bool = typer.Option(False, "--recursive", help="Descend through the whole tree."),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """List a session's subagents: on disk (header parentSession) and in the panel (catalog).

    Differences between the two views are flagged; fork children are listed apart. "copy
    of" names the subagent a relink copy was made from (recognised by its inherited
    events, byte for byte).

    \b
    Examples:
      dsh-fork list-agents session-6f1c8d2e --recursive
      dsh-fork list-agents session-6f1c8d2e-3b4a-4c5d-9e8f-0a1b2c3d4e5f --json
    """
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")
    tree = run(
        out, lambda: porcelain.list_agents(ctx, session, recursive=recursive), where=ctx.root
    )
    emit(out, tree, _render)
