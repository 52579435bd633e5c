"""Pictures that fit (issue 35): ``tree --format dot|mermaid`` lays a large family out
top-down, the children of a session with more than six in rows of six; ``--depth N`` and a
SESSION narrow the picture."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_cli

from dsh_fork import porcelain
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.porcelain import Context
from dsh_fork.tree import ROW_WIDTH, narrow, plain_lines


@pytest.fixture
def wide(root: Path) -> Path:
    """One root with 20 subagents (21 sessions)."""
    made = run_cli("fixture", root, "--sessions", "1", "--agents", "20", "--depth", "1",
                   "--turns", "1", "--seed", "3", "--json")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    return root


def family_size(root: Path) -> int:
    return len(list(porcelain.tree(Context.of(str(root)), None).nodes()))


def test_dot_draws_a_wide_family_as_a_cluster_in_rows(wide: Path) -> None:
    result = run_cli("--root", wide, "tree", "--format", "dot")

    assert result.exit_code == 0
    text = result.stdout
    assert "  rankdir=TB;" in text and "  compound=true;" in text
    clusters = re.findall(r"subgraph cluster_(n\d+) \{", text)
    assert clusters == ["n1"]  # only the root has more than six children
    rows = re.findall(r"\{ rank=same; ([^}]*) \[style=invis\]; \}", text)
    assert [len(row.split(" -> ")) for row in rows] == [6, 6, 6, 2]
    assert "20 children of session-" in text and ": 20 subagent" in text
    # one edge from the root to the cluster, none to each child
    assert text.count("  n1 -> ") == 1 and "[lhead=cluster_n1]" in text
    assert family_size(wide) == 21 and '[label="subagent"]' not in text


def test_mermaid_groups_a_wide_family_and_stacks_its_rows(wide: Path) -> None:
    result = run_cli("--root", wide, "tree", "--format", "mermaid")

    assert result.exit_code == 0
    text = result.stdout
    assert text.startswith("flowchart TD\n")
    assert re.search(r'^  subgraph gn1\["20 children of session-[^"]*: 20 subagent"\]$', text, re.M)
    assert "  n1 --> gn1" in text
    stacked = re.findall(r"^    (n\d+) ~~~ (n\d+)$", text, re.M)
    assert len(stacked) == 20 - ROW_WIDTH  # child i above child i + 6
    assert "-->|subagent|" not in text


def test_a_small_family_has_no_groups(root: Path) -> None:
    run_cli("fixture", root, "--sessions", "1", "--agents", "3", "--turns", "1", "--seed", "1")
    text = run_cli("--root", root, "tree", "--format", "dot").stdout
    assert "cluster" not in text and "invis" not in text


def test_depth_narrows_every_format_and_says_what_is_below(root: Path) -> None:
    made = run_cli("fixture", root, "--sessions", "1", "--agents", "2", "--depth", "2",
                   "--turns", "1", "--seed", "4")  # fmt: skip
    assert made.exit_code == 0
    whole = porcelain.tree(Context.of(str(root)), None)
    tops = narrow(whole, 0)
    one = narrow(whole, 1)

    assert len(list(whole.nodes())) == 7  # the lineage given stays whole
    assert len(list(tops.nodes())) == 1
    assert tops.tops[0].flags[-1] == "6 more below"
    assert len(list(one.nodes())) == 3
    assert [node.flags[-1] for node in one.tops[0].children] == ["2 more below"] * 2
    assert narrow(whole, 2).tops[0].flags == whole.tops[0].flags
    assert narrow(whole, None) is whole

    text = run_cli("--root", root, "tree", "--depth", "0")
    data = run_cli("--root", root, "tree", "--depth", "1", "--json")
    picture = run_cli("--root", root, "tree", "--depth", "1", "--format", "mermaid")
    assert text.exit_code == data.exit_code == picture.exit_code == 0
    assert "6 more below" in text.stdout.splitlines()[0]
    assert len(data.json()["nodes"]) == 3
    assert picture.stdout.count("2 more below") == 2
    assert run_cli("--root", root, "tree", "--depth", "-1").exit_code == 2


def test_a_session_narrows_the_picture_to_its_family(wide: Path) -> None:
    clock = Clock()
    alone = SessionSpec(id="session-alone", created_at=clock(), cwd="/w")
    alone.turn(clock)
    alone.publish(wide)
    other = "session-alone"
    whole = run_cli("--root", wide, "tree", "--format", "dot").stdout
    one = run_cli("--root", wide, "tree", other, "--format", "dot").stdout

    assert other in whole and other in one
    assert "cluster" in whole and "cluster" not in one
    lineage = porcelain.tree(Context.of(str(wide)), other)
    assert list(plain_lines(lineage)) == ["session-alone  root"]
