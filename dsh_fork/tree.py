"""Text renderings of a lineage: one line per node, Mermaid and Graphviz DOT.

Pure functions of a ``Lineage``, so the command, the docs and the golden-file tests all print
the same text; the rich tree on a terminal is drawn by the command from ``describe``.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Iterable, Iterator

from msgspec.structs import replace

from .display import capped_note, indent
from .lineage import Edge, Lineage, Node

ROW_WIDTH = 6
"""A picture puts at most this many children of one session side by side; more wrap into
further rows, so a family of 80 subagents is drawn top-down, not 80 boxes wide."""


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
    if node.workspace is not None:
        moved = "" if node.workspace.member else " (moved away)"
        parts.append(f"workspace {node.workspace.title!r}{moved}")
    parts += [name for name, on in (("archived", node.archived), ("pinned", node.pinned)) if on]
    if node.flags:
        parts.append("[" + "; ".join(node.flags) + "]")
    return "  ".join(parts)


def narrow(lineage: Lineage, depth: int | None) -> Lineage:
    """The lineage down to ``depth`` levels below its tops (``tree --depth``): a node whose
    children are left out says how many sessions are below it (a flag, so every format and
    the JSON show it). The nodes are copies; the lineage given is unchanged. Iterative."""
    if depth is None:
        return lineage
    tops = [replace(top, children=()) for top in lineage.tops]
    stack = [(old, new, 0) for old, new in zip(lineage.tops, tops, strict=True)]
    while stack:
        old, new, level = stack.pop()
        if not old.children:
            continue
        if level >= depth:
            new.flags += (f"{_below(old)} more below",)
            continue
        new.children = tuple(replace(child, children=()) for child in old.children)
        pairs = zip(old.children, new.children, strict=True)
        stack.extend((child, copy, level + 1) for child, copy in pairs)
    return replace(lineage, tops=tops)


def _below(node: Node) -> int:
    """How many sessions are below ``node`` (each once: a cycle is drawn once already)."""
    count = 0
    stack = list(node.children)
    while stack:
        child = stack.pop()
        count += 1
        stack.extend(child.children)
    return count


def walk(tops: Iterable[Node]) -> Iterator[tuple[Node, int]]:
    """(node, depth) of the forest in display order, parents before their children, without
    recursion: a 10,000-deep chain of ``parentSession`` is walked like a flat root."""
    stack = [(top, 0) for top in reversed(list(tops))]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        stack.extend((child, depth + 1) for child in reversed(node.children))


def plain_lines(lineage: Lineage) -> Iterator[str]:
    """The forest as indented lines: two spaces per level (capped: ``display.indent``), each
    line ``id  description``; a last line says so when the indentation was capped."""
    deepest = 0
    for node, depth in walk(lineage.tops):
        deepest = max(deepest, depth)
        yield f"{indent(depth)}{node.id}  {describe(node)}"
    note = capped_note(deepest)
    if note is not None:
        yield note


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
    lines = [node.id, what, *([extra] if extra else []), *node.flags]
    return "\n".join(lines)


def _mermaid_text(text: str) -> str:
    escaped = text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;")
    return escaped.replace(">", "#gt;").replace("\n", "<br/>")


def _groups(lineage: Lineage) -> list[Node]:
    """The sessions whose children a picture draws as one group: more than ``ROW_WIDTH``."""
    return [node for node in lineage.nodes() if len(node.children) > ROW_WIDTH]


def _group_label(node: Node) -> str:
    """``78 children of session-…: 70 subagent, 8 fork``."""
    kinds: dict[str, int] = {}
    for child in node.children:
        kinds[child.kind] = kinds.get(child.kind, 0) + 1
    counted = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    return f"{len(node.children)} children of {node.id}: {counted}"


def _edges_drawn(lineage: Lineage, grouped: Container[str]) -> Iterator[Edge]:
    """The edges a picture draws one by one: not those from a session whose children are
    drawn as a group (``grouped``: their paths), which get one edge, to the group; a copy's
    edge to its original always."""
    for edge in lineage.edges():
        if edge.kind == "copy-of" or edge.source.path not in grouped:
            yield edge


def _rows(kids: tuple[Node, ...], ids: dict[str, str]) -> Iterator[list[str]]:
    """The names of a group's children, ``ROW_WIDTH`` a row, in display order."""
    for start in range(0, len(kids), ROW_WIDTH):
        yield [ids[kid.path] for kid in kids[start : start + ROW_WIDTH]]


def mermaid(lineage: Lineage) -> str:
    """A Mermaid flowchart, top-down: parent → child edges, dotted copy → original edges; the
    children of a session with more than ``ROW_WIDTH`` are one subgraph, in rows of
    ``ROW_WIDTH`` (invisible links), with one edge from their parent."""
    return "".join(line + "\n" for line in mermaid_lines(lineage))


def mermaid_lines(lineage: Lineage) -> Iterator[str]:
    """``mermaid`` line by line: the command writes each as it is made, so a picture of
    100,000 sessions is never held as text."""
    ids = _ids(lineage)
    groups = {node.path: f"g{ids[node.path]}" for node in _groups(lineage)}
    yield "flowchart TD"
    for node in lineage.nodes():
        shape = ('(["', '"])') if node.kind == "fork" else ('["', '"]')
        yield f"  {ids[node.path]}{shape[0]}{_mermaid_text(_short(node))}{shape[1]}"
    for node in _groups(lineage):
        yield f'  subgraph {groups[node.path]}["{_mermaid_text(_group_label(node))}"]'
        yield "    direction TB"
        yield from (f"    {ids[kid.path]}" for kid in node.children)
        # top-down, a link puts its target below: child i above child i + ROW_WIDTH
        for upper, lower in itertools.pairwise(_rows(node.children, ids)):
            for above, below in zip(upper, lower, strict=False):
                yield f"    {above} ~~~ {below}"
        yield "  end"
        yield f"  {ids[node.path]} --> {groups[node.path]}"
    for edge in _edges_drawn(lineage, groups):
        a, b = ids[edge.source.path], ids[edge.target.path]
        arrow = "-.->" if edge.kind == "copy-of" else "-->"
        yield f"  {a} {arrow}|{edge.kind}| {b}"


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def dot(lineage: Lineage) -> str:
    """A Graphviz digraph with the same nodes, edges and groups as ``mermaid``, top-down: a
    group is a cluster whose rows are held by invisible edges, so a family of 80 subagents is
    a grid about six boxes wide, not a row of 80."""
    return "".join(line + "\n" for line in dot_lines(lineage))


def dot_lines(lineage: Lineage) -> Iterator[str]:
    """``dot`` line by line (see ``mermaid_lines``)."""
    ids = _ids(lineage)
    groups = _groups(lineage)
    grouped = {node.path for node in groups}
    yield from ("digraph lineage {", "  rankdir=TB;", "  node [shape=box];")
    if groups:
        yield "  compound=true;"
    for node in lineage.nodes():
        style = ", style=rounded" if node.kind == "fork" else ""
        yield f'  {ids[node.path]} [label="{_dot_text(_short(node))}"{style}];'
    for node in groups:
        name = ids[node.path]
        rows = list(_rows(node.children, ids))
        yield f"  subgraph cluster_{name} {{"
        yield f'    label="{_dot_text(_group_label(node))}"; style=dashed;'
        for row in rows:
            yield "    { rank=same; " + " -> ".join(row) + " [style=invis]; }"
        for upper, lower in itertools.pairwise(rows):
            yield f"    {upper[0]} -> {lower[0]} [style=invis];"
        yield "  }"
        yield f"  {name} -> {rows[0][0]} [lhead=cluster_{name}];"
    for edge in _edges_drawn(lineage, grouped):
        a, b = ids[edge.source.path], ids[edge.target.path]
        # a copy → original edge does not rank: the copy stays under its fork
        style = ", style=dashed, constraint=false" if edge.kind == "copy-of" else ""
        yield f'  {a} -> {b} [label="{edge.kind}"{style}];'
    yield "}"
