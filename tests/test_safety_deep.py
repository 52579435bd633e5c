"""Deep chains (issue 33 rows 8, 9): a 10,000-deep chain of ``parentSession`` works in every
command. Every walk over a lineage or a subagent tree is iterative, a JSON document nested
deeper than the encoders go is still written whole, and text output caps its indentation and
says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from safetykit import count

from dsh_fork.display import MAX_INDENT_LEVELS
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import encode_segment, project_dir_name

DEPTH = 10_000
OTHERS_DEPTH = DEPTH if os.environ.get("DSH_FORK_FUZZ") == "deep" else 2_000
"""The chain the other commands read: 10,000 under the deep profile, else 2,000 (twice the
interpreter's recursion limit, so a recursive walk fails here too, in a fifth of the time)."""
CWD = "/home/u/deep"


def chain(root: Path, depth: int) -> list[str]:
    """``depth`` sessions, each a subagent of the one before (the first a top session)."""
    clock = Clock()
    ids: list[str] = []
    project = root / project_dir_name(CWD)
    for k in range(depth):
        parent = ids[-1] if ids else None
        spec = SessionSpec(
            id=f"deep-{k:05d}",
            created_at=clock(),
            cwd=CWD,
            parent=parent,
            origin="subagent" if parent else None,
            depth=1 if parent else 0,
        )
        spec.turn(clock)
        path = project / encode_segment(spec.id) / CURRENT_NAME
        write_log_file(path, spec.header_line(), spec.frame_plaintexts())
        ids.append(spec.id)
    return ids


@pytest.fixture(scope="module")
def deep_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deep") / "sessions"
    chain(root, DEPTH)
    return root


def depths(children: list[dict[str, Any]]) -> list[int]:
    """The depth of every row of a list-agents document, in order: nested, or stated."""
    out: list[int] = []
    stack = [(row, 1) for row in reversed(children)]
    while stack:
        row, depth = stack.pop()
        out.append(row.get("depth", depth))
        stack.extend((child, depth + 1) for child in reversed(row["children"]))
    return out


def test_a_ten_thousand_deep_chain_is_listed_by_tree_and_list_agents(deep_root: Path) -> None:
    tree = run_cli("--root", deep_root, "tree")
    tree_json = run_cli("--root", deep_root, "tree", "--json")
    mermaid = run_cli("--root", deep_root, "tree", "deep-00000", "--format", "mermaid")
    agents = run_cli("--root", deep_root, "list-agents", "deep-00000", "--recursive")
    agents_json = run_cli("--root", deep_root, "list-agents", "deep-00000", "--recursive", "--json")

    for done in (tree, tree_json, mermaid, agents, agents_json):
        assert done.exit_code == 0, done.stderr[-2000:]
    lines = tree.stdout.splitlines()
    assert lines[0].startswith("deep-00000  root")
    deepest = next(line for line in lines if "deep-09999" in line)
    indent = "  " * MAX_INDENT_LEVELS
    assert deepest == f"{indent}[depth {DEPTH - 1}] deep-09999  subagent  1 turn"
    assert max(len(line) for line in lines) < 200
    assert f"indentation capped at {MAX_INDENT_LEVELS} levels" in tree.stdout
    assert len(tree_json.json()["nodes"]) == DEPTH
    assert mermaid.stdout.count("-->|subagent|") == DEPTH - 1
    assert f"[depth {DEPTH - 2}] deep-09999" in agents.stdout
    assert f"indentation capped at {MAX_INDENT_LEVELS} levels" in agents.stdout
    document = json.loads(agents_json.stdout)  # nested 64 levels: any parser reads it
    assert depths(document["children"]) == list(range(1, DEPTH))
    count("10,000-deep chains walked (commands run)", 5)


def test_a_deep_chain_is_read_by_every_other_command(tmp_path: Path) -> None:
    deep_root = tmp_path / "sessions"
    chain(deep_root, OTHERS_DEPTH)
    runs = {
        "list": ("list", "--all", "--json"),
        "du": ("du", "--json"),
        "doctor": ("doctor", "--json"),
        "inspect": ("inspect", f"deep-{OTHERS_DEPTH - 1:05d}", "--json"),
        "export": ("export", "deep-00000", "-o", str(tmp_path / "deep.tar"), "--json"),
        "fork": ("fork", "deep-00000", "--id", "deep-fork", "--json"),
        "relink": ("relink", "--all", "--json"),
    }
    done = {name: run_cli("--root", deep_root, *args) for name, args in runs.items()}

    for name, result in done.items():
        assert result.exit_code == 0, (name, result.stderr[-2000:])
    assert len(done["list"].json()["sessions"]) == OTHERS_DEPTH
    assert len(done["export"].json()["manifest"]["sessions"]) == OTHERS_DEPTH
    assert "deep-fork" in done["fork"].stdout
    count("10,000-deep chains walked (commands run)", len(done))
