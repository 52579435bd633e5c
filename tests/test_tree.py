"""``tree``: every session once, under its parent, with its kind; cuts, copies and oddities."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_cli, tree_digest
from lineagekit import (
    FOREIGN_ROOTS,
    Family,
    build_family,
    foreign_roots,
    generate_oddities,
    relink_fork,
    turn_ends,
)

from dsh_fork import porcelain
from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file
from dsh_fork.generations import list_generations
from dsh_fork.layout import project_dir_name
from dsh_fork.lineage import PLACED_AT_TOP, Lineage, Node, lineage
from dsh_fork.porcelain import Context
from dsh_fork.reader import read_header
from dsh_fork.sessionentry import SessionEntry
from dsh_fork.tree import dot, mermaid, plain_lines

GOLDEN = Path(__file__).parent / "golden"


def session_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if p.is_dir() and list_generations(p))


def by_id(found: Lineage) -> dict[str, Node]:
    return {node.id: node for node in found.nodes()}


def parent_of(found: Lineage) -> dict[str, str | None]:
    """Each node's place in the drawn tree: the id of the node it hangs under."""
    out: dict[str, str | None] = {top.id: None for top in found.tops}
    for node in found.nodes():
        for child in node.children:
            out[child.id] = node.id
    return out


def assert_every_session_once(root: Path, found: Lineage) -> None:
    """Each session dir is exactly one node, drawn under the session its header names."""
    paths = [node.path for node in found.nodes()]
    expected = [f"{d.parent.name}/{d.name}" for d in session_dirs(root)]
    assert sorted(paths) == sorted(expected)
    assert len(paths) == len(set(paths))
    drawn = parent_of(found)
    for node in found.nodes():
        if PLACED_AT_TOP & set(node.flags):
            assert drawn[node.id] is None  # orphans, self-parents, cycles: at the top
        else:
            assert drawn[node.id] == node.parent
    # the tops, and the children of each node, oldest first, then by id, then by path
    for group in [found.tops, *(node.children for node in found.nodes())]:
        keys = [(n.created_at or 0, n.id, n.path) for n in group]
        assert keys == sorted(keys)


def entries_by_path(root: Path) -> dict[str, SessionEntry]:
    """A fresh listing's entries by node path (``<project dir>/<session dir>``)."""
    listing = Root(root)
    return {
        f"{e.session_dir.parent.name}/{e.session_dir.name}": e
        for e in [*listing.entries(), *listing.unlisted()]
    }


def assert_nodes_say_what_their_entries_say(found: Lineage) -> None:
    """A node is made from its validated header and its dir's text, without the ``Path`` or
    ``Generation`` of its entry: each field must be what the entry itself answers (the entry
    of a fresh listing: the lineage keeps none once complete)."""
    entries = entries_by_path(found.root)
    for node in found.nodes():
        assert node.entry is None
        entry = entries[node.path]
        session_dir = entry.session_dir
        assert node.path == f"{session_dir.parent.name}/{session_dir.name}"
        assert node.id == (entry.id or session_dir.name)
        assert node.parent == entry.parent
        assert node.created_at == (entry.created_at if entry.created_at or entry.header else None)
        assert node.is_seeded == bool(entry.header and entry.header.is_seeded)
        generation = entry.generation
        assert node.to_json()["version"] == (None if generation is None else generation.version)


@pytest.fixture(params=["relinked", "not relinked", "relinked later"])
def family(request: pytest.FixtureRequest, root: Path) -> Family:
    built = build_family(root, relinked=request.param == "relinked")
    if request.param == "relinked later":
        relink_fork(built, built.fork_aa)  # the fork of a fork first, then its parent
        relink_fork(built, built.fork_a, seed=98)
    return built


def test_a_family_with_forks_of_forks_shows_every_session_once_with_its_kind(
    family: Family,
) -> None:
    found = porcelain.tree(Context.of(str(family.root)), None)
    assert_every_session_once(family.root, found)
    nodes = by_id(found)
    assert [top.id for top in found.tops] == [family.top]
    assert nodes[family.top].kind == "root"
    ends = turn_ends(family.root, family.top)
    for fork, turn in ((family.fork_a, 2), (family.fork_b, 3)):
        assert nodes[fork].kind == "fork"
        assert nodes[fork].parent == family.top
        assert nodes[fork].forked_at == family.cuts[fork] == ends[turn - 1]
        assert nodes[fork].cut_turn == turn
    aa = nodes[family.fork_aa]
    assert (aa.kind, aa.parent, aa.cut_turn) == ("fork", family.fork_a, 2)
    assert aa.forked_at == family.cuts[family.fork_aa]  # A's last event
    originals = [n for n in found.nodes() if n.kind == "subagent"]
    assert len(originals) == 6
    assert all(nodes[n.parent].kind in ("root", "subagent") for n in originals if n.parent)
    copies = [n for n in found.nodes() if n.is_seeded and n.kind != "fork"]
    assert all(n.kind == "copy" for n in copies)
    for copy in copies:
        source = nodes[copy.copy_of or ""]
        assert source.kind in ("subagent", "copy")
        assert source.label == copy.label  # a copy carries its original's descriptor


def test_copies_hang_under_their_fork_and_name_their_originals(root: Path) -> None:
    family = build_family(root, relinked=True)
    found = porcelain.tree(Context.of(str(root)), family.fork_aa)
    nodes = by_id(found)
    aa_copies = nodes[family.fork_aa].children
    assert [c.label for c in aa_copies] == ["agent 1", "agent 2"]
    # AA's copies come from A's copies (the nearest ancestor with a complete copy).
    a_children = {c.id for c in nodes[family.fork_a].children if c.kind == "copy"}
    assert {c.copy_of for c in aa_copies} <= a_children
    grand = [g for c in nodes[family.fork_b].children for g in c.children]
    assert sorted(g.label or "" for g in grand) == [
        "agent 1.1",
        "agent 1.2",
        "agent 2.1",
        "agent 2.2",
    ]
    assert all(nodes[g.copy_of or ""].kind == "subagent" for g in grand)


def test_a_session_argument_shows_only_its_family(root: Path, clock: Clock) -> None:
    family = build_family(root, relinked=False)
    other = SessionSpec(id="lonely", created_at=clock(), cwd="/elsewhere")
    other.turn(clock, "unrelated")
    other.publish(root)
    whole = porcelain.tree(Context.of(str(root)), None)
    assert sorted(t.id for t in whole.tops) == sorted([family.top, "lonely"])
    assert by_id(whole)["lonely"].turns is None  # no relatives: its header alone is read
    one = porcelain.tree(Context.of(str(root)), family.fork_aa)
    assert [t.id for t in one.tops] == [family.top]
    assert "lonely" not in by_id(one)
    assert by_id(one)[family.top].title is not None
    assert all(n.label for n in one.nodes() if n.kind == "subagent")


def _oddities(root: Path, clock: Clock) -> None:
    """An orphan, a self-parent, a two-session cycle and an unreadable session."""
    top = SessionSpec(id="top", created_at=clock())
    top.turn(clock)
    orphan = SessionSpec(id="orphan", created_at=clock(), parent="gone", origin="subagent")
    myself = SessionSpec(id="myself", created_at=clock(), parent="myself", origin="subagent")
    ring_a = SessionSpec(id="ring-a", created_at=clock(), parent="ring-b", origin="subagent")
    ring_b = SessionSpec(id="ring-b", created_at=clock(), parent="ring-a", origin="subagent")
    hanger = SessionSpec(id="hanger", created_at=clock(), parent="ring-b", origin="subagent")
    for spec in (top, orphan, myself, ring_a, ring_b, hanger):
        spec.turn(clock)
        spec.flush()
        spec.publish(root)
    bad = root / project_dir_name("/fixture/project") / "broken"
    write_log_file(bad / "session.v4.jsonl.zstd", b'{"type":"session","version":4}', [])


def test_orphans_self_parents_cycles_and_unreadable_sessions_are_shown_never_fatal(
    root: Path, clock: Clock
) -> None:
    _oddities(root, clock)
    before = tree_digest(root)
    result = run_cli("tree", "--root", root, "--json")
    assert result.exit_code == 0, result.stderr
    assert tree_digest(root) == before
    data = result.json()
    nodes = {n["id"]: n for n in data["nodes"]}
    assert sorted(nodes) == sorted(
        ["top", "orphan", "myself", "ring-a", "ring-b", "hanger", "broken"]
    )
    assert nodes["orphan"]["flags"] == ["parent missing"]
    assert nodes["myself"]["flags"] == ["self-parent"]
    assert nodes["ring-a"]["flags"] == ["cycle"]  # the older member heads the cycle
    assert nodes["ring-b"]["flags"] == []
    assert nodes["ring-a"]["children"] == [nodes["ring-b"]["path"]]
    assert nodes["ring-b"]["children"] == [nodes["hanger"]["path"]]
    assert nodes["broken"]["kind"] == "unreadable"
    assert nodes["broken"]["error"]
    assert data["unreadable"] == [
        {"path": nodes["broken"]["path"], "error": nodes["broken"]["error"]}
    ]
    assert "unreadable session" in result.stderr
    tops = {nodes[t.split("/")[1]]["id"] for t in data["tops"]}
    assert tops == {"top", "orphan", "myself", "ring-a", "broken"}


def test_a_cycle_is_drawn_once_and_its_closing_edge_is_not_followed(
    root: Path, clock: Clock
) -> None:
    _oddities(root, clock)
    found = lineage(Root(root))
    assert_nodes_say_what_their_entries_say(found)
    ring_a = by_id(found)["ring-a"]
    assert [c.id for c in ring_a.children] == ["ring-b"]
    assert sorted(c.id for c in ring_a.children[0].children) == ["hanger"]
    assert len(list(found.nodes())) == 7


def test_piped_output_is_indented_plain_text(root: Path) -> None:
    family = build_family(root, relinked=True)
    result = run_cli("tree", "--root", root)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{family.top}  root")
    assert (
        f"  {family.fork_a}  fork at seq {family.cuts[family.fork_a]} (after turn 2)"
        in result.stdout
    )
    assert (
        f"    {family.fork_aa}  fork at seq {family.cuts[family.fork_aa]} (after turn 2)"
        in result.stdout
    )
    assert lines[-1] == "28 sessions: 1 root, 3 fork, 6 subagent, 18 copy"
    assert "\x1b[" not in result.stdout and "├" not in result.stdout


def test_json_has_nodes_and_edges(root: Path) -> None:
    family = build_family(root, relinked=True)
    data = run_cli("tree", "--root", root, "--json").json()
    assert data["counts"]["copy"] == 18
    edges = {(e["from"], e["to"], e["kind"]) for e in data["edges"]}
    assert (family.top, family.fork_a, "fork") in edges
    assert (family.fork_a, family.fork_aa, "fork") in edges
    copy_of = [e for e in data["edges"] if e["kind"] == "copy-of"]
    assert len(copy_of) == 18
    parent_edges = [e for e in data["edges"] if e["kind"] != "copy-of"]
    assert len(parent_edges) == len(data["nodes"]) - 1


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_mermaid_of_a_relinked_family_matches_the_golden_file(root: Path) -> None:
    build_family(root, relinked=True)
    result = run_cli("tree", "--root", root, "--format", "mermaid")
    assert result.exit_code == 0
    _golden("tree-family.mmd", result.stdout)


def test_dot_and_mermaid_draw_the_same_graph(root: Path) -> None:
    build_family(root, relinked=False)
    found = porcelain.tree(Context.of(str(root)), None)
    text = mermaid(found)
    graph = dot(found)
    count = len(list(found.nodes()))
    assert text.startswith("flowchart TD\n")
    assert graph.startswith("digraph lineage {")
    assert text.count("-->|") == graph.count("->") == count - 1
    assert len(list(plain_lines(found))) == count


def test_an_empty_root_has_no_sessions(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = run_cli("tree", "--root", tmp_path / "empty")
    assert result.exit_code == 0
    assert result.stdout == f"no sessions in {tmp_path / 'empty'}\n"


@pytest.mark.parametrize("command", ["tree", "du"])
def test_an_absent_root_or_a_dsh_home_is_usage_as_for_list(tmp_path: Path, command: str) -> None:
    (tmp_path / "home" / "sessions").mkdir(parents=True)

    absent = run_cli(command, "--root", tmp_path / "nothing")
    home = run_cli(command, "--root", tmp_path / "home")

    assert absent.exit_code == home.exit_code == 2
    assert absent.stderr.startswith(f"Error: the sessions root {tmp_path / 'nothing'} does not")
    assert home.stderr.startswith(f"Error: {tmp_path / 'home'} is a DSH home, not a sessions root")
    assert absent.stdout == home.stdout == ""


def test_an_unknown_session_is_session_not_found(root: Path) -> None:
    build_family(root, relinked=False)
    result = run_cli("tree", "nobody", "--root", root)
    assert result.exit_code == 3


@pytest.mark.parametrize("name", FOREIGN_ROOTS)
def test_foreign_roots_show_every_session_once(name: str, tmp_path: Path) -> None:
    source = foreign_roots(name)
    found = porcelain.tree(Context.of(str(source)), None)
    assert_every_session_once(source, found)
    assert_nodes_say_what_their_entries_say(found)
    entries = entries_by_path(source)
    for node in found.nodes():
        generation = entries[node.path].generation
        if node.kind == "unreadable" or generation is None:
            continue
        header = read_header(generation)
        assert node.parent == header.parent_session
        assert node.is_seeded == header.is_seeded


SEEDED = {
    "vfs3--root": ("preview-architecture-review", 169, "preview-showcase"),
    "vfs4--root": ("preview-architecture-review", 169, "preview-showcase"),
    "upstream--acp-agent__snapshots_subagent-fork-in-process--root": (
        "ada8966c-9fa3-441b-8721-37ff1e795e6a",
        42,
        "96cf59c9-b347-48b9-b234-a5200913ad05",
    ),
    "upstream--acp-agent__snapshots_subagent-mixed--root": (
        "02b3a8dd-1d5e-4866-825f-5fbf5000a632",
        36,
        "959ffdf5-03e2-465e-9482-009b704632dc",
    ),
}
"""Subagents DSH itself seeded with their parent's context, and their cuts (foreign README)."""


@pytest.mark.parametrize("name", sorted(SEEDED))
def test_subagents_dsh_seeded_are_seeded_subagents_with_their_cut(name: str) -> None:
    child, cut, parent = SEEDED[name]
    found = porcelain.tree(Context.of(str(foreign_roots(name))), None)
    node = by_id(found)[child]
    assert (node.kind, node.cut, node.parent, node.copy_of) == (
        "seeded-subagent",
        cut,
        parent,
        None,
    )
    assert parent_of(found)[child] == parent


def test_a_terminal_gets_a_rich_tree_with_every_session(root: Path) -> None:
    import io

    from rich.console import Console

    from dsh_fork.cli.base import Out
    from dsh_fork.cli.tree import _render

    build_family(root, relinked=True)
    found = porcelain.tree(Context.of(str(root)), None)
    out = Out(json_mode=False)
    out.tty = True
    buffer = io.StringIO()
    out._console = Console(file=buffer, width=300, no_color=True, highlight=False)
    _render(out, found)
    text = buffer.getvalue()
    assert "├── " in text and "└── " in text
    drawn = [line.lstrip("│├└─ ").split("  ")[0] for line in text.splitlines()[1:-1]]
    assert drawn == [node.id for node in found.nodes()]
    assert text.rstrip().endswith("28 sessions: 1 root, 3 fork, 6 subagent, 18 copy")


@pytest.mark.parametrize("relinked", [True, False], ids=["relinked", "not relinked"])
def test_a_generated_root_with_chains_of_forks_and_every_oddity(root: Path, relinked: bool) -> None:
    """The fixture generator's forks of forks, legacy copies, open turns, torn tails and v3
    trees: every session once, under its parent, forks with their cut."""
    generate_oddities(root, relinked=relinked)
    found = porcelain.tree(Context.of(str(root)), None)
    assert_every_session_once(root, found)
    assert_nodes_say_what_their_entries_say(found)
    nodes = list(found.nodes())
    forks = [n for n in nodes if n.kind == "fork"]
    assert len(forks) >= 2 * 2 * 2
    assert all(n.forked_at is not None and n.cut_turn is not None for n in forks)
    assert any(by_id(found)[n.parent or ""].kind == "fork" for n in forks)  # forks of forks
    seeded_agents = [n for n in nodes if n.is_seeded and n.kind != "fork"]
    assert seeded_agents and all(n.kind in ("copy", "seeded-subagent") for n in seeded_agents)
    if relinked:
        assert sum(n.kind == "copy" for n in nodes) > 2 * 2 * 2
    assert not found.unreadable()
    assert any(n.open_turn for n in nodes)
    assert sum("torn tail" in n.flags for n in nodes) == 2  # the last leaf of each top tree


def test_sessions_created_at_the_same_moment_are_drawn_by_id_then_by_path(root: Path) -> None:
    """Equal createdAt: by id; one id in two project dirs: by path (both drawn, flagged)."""
    for session_id, cwd in [("b", "/w/one"), ("a", "/w/two"), ("a", "/w/one"), ("c", "/w/two")]:
        spec = SessionSpec(id=session_id, created_at=1_000, cwd=cwd)
        spec.turn(Clock(), "same moment")
        spec.publish(root)
    found = lineage(Root(root))
    drawn = [(top.id, top.path.split("/")[0]) for top in found.tops]
    one, two = project_dir_name("/w/one"), project_dir_name("/w/two")
    assert drawn == sorted([("a", one), ("a", two), ("b", one), ("c", two)])
    assert_every_session_once(root, found)


def test_a_lineage_drawn_twice_from_one_listing_is_the_same(root: Path) -> None:
    """A lineage hands each entry back to its listed form once its rows are made (a root of
    100,000 sessions keeps no parsed header or path per session); a second lineage of the
    same listing, which parses them again, draws and serialises the same."""
    generate_oddities(root, relinked=True)
    listing = Root(root)
    first, second = lineage(listing), lineage(listing)
    assert list(plain_lines(first)) == list(plain_lines(second))
    assert first.to_json() == second.to_json() == lineage(Root(root)).to_json()
    assert mermaid(first) == mermaid(second) and dot(first) == dot(second)
    assert_nodes_say_what_their_entries_say(second)
