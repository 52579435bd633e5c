"""Text renderings of a lineage: one line per node, Mermaid and Graphviz DOT.

Pure functions of a ``Lineage``, so the command, the docs and the golden-file tests all print
the same text; the rich tree on a terminal is drawn by the command from ``describe``.
"""

from __future__ import annotations

from collections.abc import Iterator

from .lineage import Lineage, Node


def describe(node: Node) -> str:
    """What a node is, after its id: kind, cut, label or title, turns, flags."""
    parts: list[str] = []
    if node.kind == "fork":
        if node.forked_at is None:
            parts.append("fork (empty prefix)" if node.cut == 0 else "fork")
        else:
            parts.append(f"fork at seq {node.forked_at} (after turn {node.cut_turn})")
    elif node.kind == "copy":
        parts.append(f"copy of {node.copy_of}")
    elif node.kind == "seeded-subagent" and node.forked_at is not None:
        parts.append(f"seeded subagent at seq {node.forked_at} (after turn {node.cut_turn})")
    else:
        parts.append(node.kind)
    if node.label is not None:
        parts.append(repr(node.label))
    if node.title is not None:
        parts.append(f"title {node.title!r}")
    if node.turns is not None:
        turns = f"{node.turns} turn" + ("" if node.turns == 1 else "s")
        parts.append(turns + (", open turn" if node.open_turn else ""))
    if node.flags:
        parts.append("[" + "; ".join(node.flags) + "]")
    return "  ".join(parts)


def plain_lines(lineage: Lineage) -> Iterator[str]:
    """The forest as indented lines: two spaces per level, each line ``id  description``."""

    def walk(node: Node, depth: int) -> Iterator[str]:
        yield f"{'  ' * depth}{node.id}  {describe(node)}"
        for child in node.children:
            yield from walk(child, depth + 1)

    for top in lineage.tops:
        yield from walk(top, 0)


def _ids(lineage: Lineage) -> dict[str, str]:
    """Short, stable node names for the graph languages (``n1``, ``n2``… in display order)."""
    return {node.path: f"n{i}" for i, node in enumerate(lineage.nodes(), 1)}


def _short(node: Node) -> str:
    """A graph label: the id, then kind and cut or label."""
    if node.kind == "fork" and node.forked_at is not None:
        what = f"fork @{node.forked_at} (turn {node.cut_turn})"
    else:
        what = node.kind
    extra = node.label if node.label is not None else node.title
    lines = [node.id, what] + ([extra] if extra else []) + node.flags
    return "\n".join(lines)


def _mermaid_text(text: str) -> str:
    escaped = text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;")
    return escaped.replace(">", "#gt;").replace("\n", "<br/>")


def mermaid(lineage: Lineage) -> str:
    """A Mermaid flowchart: parent → child edges, dotted copy → original edges."""
    ids = _ids(lineage)
    out = ["flowchart TD"]
    for node in lineage.nodes():
        shape = ('(["', '"])') if node.kind == "fork" else ('["', '"]')
        out.append(f"  {ids[node.path]}{shape[0]}{_mermaid_text(_short(node))}{shape[1]}")
    for edge in lineage.edges():
        a, b = ids[edge.source.path], ids[edge.target.path]
        arrow = "-.->" if edge.kind == "copy-of" else "-->"
        out.append(f"  {a} {arrow}|{edge.kind}| {b}")
    return "\n".join(out) + "\n"


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def dot(lineage: Lineage) -> str:
    """A Graphviz digraph with the same nodes and edges as ``mermaid``."""
    ids = _ids(lineage)
    out = ["digraph lineage {", "  rankdir=TB;", "  node [shape=box];"]
    for node in lineage.nodes():
        style = ", style=rounded" if node.kind == "fork" else ""
        out.append(f'  {ids[node.path]} [label="{_dot_text(_short(node))}"{style}];')
    for edge in lineage.edges():
        a, b = ids[edge.source.path], ids[edge.target.path]
        style = ", style=dashed" if edge.kind == "copy-of" else ""
        out.append(f'  {a} -> {b} [label="{edge.kind}"{style}];')
    out.append("}")
    return "\n".join(out) + "\n"
