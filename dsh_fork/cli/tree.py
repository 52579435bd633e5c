"""``dsh-fork tree``: the fork family graph of the root, or of one session's family."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import TYPE_CHECKING

import typer

from .base import Out, app, emit, printable, root_of
from .options import family_argument, json_option, root_option
from .progress import metered

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..lineage import Lineage, Node


class Format(StrEnum):
    text = "text"
    mermaid = "mermaid"
    dot = "dot"


def _rich(out: Out, lineage: Lineage) -> None:
    from rich.text import Text
    from rich.tree import Tree

    from ..display import MAX_INDENT_LEVELS, capped_note
    from ..tree import describe, walk

    def label(node: Node, depth: int) -> Text:
        text = Text()
        if depth > MAX_INDENT_LEVELS:
            text.append(f"[depth {depth}] ", style="dim")
        text.append(node.id, style="bold")
        text.append("  " + describe(node), style="yellow" if node.flags else "")
        return text

    top = Tree(Text(f"{lineage.root}", style="dim"), guide_style="dim")
    # Built without recursion; a row deeper than the cap joins the branch at the cap's level.
    branches = [top]
    deepest = 0
    for node, depth in walk(lineage.tops):
        deepest = max(deepest, depth)
        level = min(depth, MAX_INDENT_LEVELS)
        del branches[level + 1 :]
        branches.append(branches[level].add(label(node, depth)))
    out.console.print(top)
    note = capped_note(deepest)
    if note is not None:
        out.line(note)


def _summary(lineage: Lineage) -> str:
    counts = lineage.counts()
    parts = [f"{n} {kind}" for kind, n in counts.items() if n]
    return f"{sum(counts.values())} sessions: " + (", ".join(parts) or "none")


def _render(out: Out, lineage: Lineage) -> None:
    from ..tree import plain_lines

    if not lineage.tops:
        out.line(f"no sessions in {lineage.root}")
        return
    if out.rich:
        _rich(out, lineage)
    else:
        for line in plain_lines(lineage):
            out.line(line)
    out.line(_summary(lineage))


@app.command("tree", short_help="The fork family as a tree: forks, subagents and copies.")
def tree_command(
    session: str | None = family_argument(
        "Show only the family of this session (id or unique prefix, dir or log)."
    ),
    fmt: Format = typer.Option(
        Format.text, "--format", help="text (default), mermaid or dot (a picture's source)."
    ),
    depth: int | None = typer.Option(
        None,
        "--depth",
        min=0,
        metavar="N",
        help="Only N levels below each top (0: the tops); a cut node says how many are below.",
    ),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Show forks, subagents and copies as a tree (read-only).

    --format mermaid|dot prints a picture's source (text), laid out top-down: the children
    of one session wrap into rows of six, so a large family stays narrow. It cannot be
    combined with --json. A SESSION narrows the picture to its family, --depth N to N levels.

    Forks show where they were cut (seq and turn), copies the subagent they were copied from;
    orphans, self-parents, cycles and unreadable sessions are flagged, never fatal.

    Example: dsh-fork tree session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a --format mermaid
    """
    _tree(session, fmt, depth, json_mode, root)


def _tree(
    session: str | None, fmt: Format, depth: int | None, json_mode: bool, root: str | None
) -> None:
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")

    lineage = metered(
        out,
        lambda bar: porcelain.tree(
            ctx, session, fmt=fmt.value, as_json=json_mode, depth=depth, progress=bar
        ),
        where=ctx.root,
    )
    if fmt is Format.text:
        emit(out, lineage, _render)
        return
    from ..tree import dot_lines, mermaid_lines

    for warning in lineage.warnings:
        out.warn(warning)
    # Plain lines even on a terminal (a picture's source is meant to be copied, not wrapped);
    # each escaped like every other output line, and written as it is made; a character
    # ``str.splitlines`` takes for a line break (a CR in a title) ends the line there.
    lines = mermaid_lines if fmt is Format.mermaid else dot_lines
    for made in lines(lineage):
        for line in made.splitlines():
            sys.stdout.write(printable(line) + "\n")
