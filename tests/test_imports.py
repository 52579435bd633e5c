"""The modules' imports: no cycle among the package's modules (one that imports another, even
only for types, reads as resting on it), and none from a layer above a module's own (the layer
table of docs/design.md), so each can be read after what it imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dsh_fork"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Each module and the modules of the package it imports (relative imports, any place)."""
    paths = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
                deps.add(target)
                deps.update(f"{target}.{alias.name}" for alias in node.names)
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_package_imports_one_that_imports_it_back() -> None:
    assert _cycles(_graph()) == []


def test_the_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "dsh_fork.errors" in _graph()["dsh_fork.lookup"]


DESIGN = PACKAGE.parent / "docs" / "design.md"


def _layers() -> dict[str, int]:
    """Each module the layer table of docs/design.md names, and its layer (0 is the bottom)."""
    text = DESIGN.read_text()
    section = text[text.index("## The layers") :]
    layers: dict[str, int] = {}
    rows = [line for line in section.splitlines() if line.startswith("| **")]
    for layer, row in enumerate(rows):
        for name in re.findall(r"`(\w+)`", row.split("|")[2]):
            assert name not in layers, f"{name} is in two layers of docs/design.md"
            layers[name] = layer
    return layers


def _upward(graph: dict[str, set[str]], layers: dict[str, int]) -> list[tuple[str, str]]:
    """The imports of a module from a layer above its own (between modules the table names)."""
    return sorted(
        (name, dep)
        for name, deps in graph.items()
        for dep in deps
        if name in layers and dep in layers and layers[dep] > layers[name]
    )


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    names = {name.removeprefix("dsh_fork.") for name in _graph()}
    layers = _layers()
    assert len(set(layers.values())) == 5
    assert sorted(set(layers) - names) == []  # the table names no module that is gone
    library = {n for n in names if n not in ("dsh_fork", "__main__") and not n.startswith("cli")}
    assert sorted(library - set(layers)) == []  # a new library module goes into the table
    graph = {
        name.removeprefix("dsh_fork."): {dep.removeprefix("dsh_fork.") for dep in deps}
        for name, deps in _graph().items()
    }
    assert _upward(graph, layers) == []


def test_the_layer_check_finds_an_import_from_above() -> None:
    layers = {"frames": 0, "reader": 1, "fork": 2}
    graph = {"frames": {"reader"}, "reader": {"frames"}, "fork": {"reader", "cli"}}
    assert _upward(graph, layers) == [("frames", "reader")]
    assert _layers()["errors"] == 0 and _layers()["porcelain"] == 4
