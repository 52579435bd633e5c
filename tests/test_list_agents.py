"""list-agents (semantics §5, scenarios §10.1 and §10.5): both views side by side, flags,
statuses, recursion that survives cycles, fork children apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import NON_CANONICAL_NAMES, run_cli
from relinkkit import CWD, fork_of, legacy_copy, subagent

from dsh_fork.discovery import Root
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file, write_spec_as
from dsh_fork.times import iso_ms

ROW_KEYS = [
    "id",
    "label",
    "mode",
    "provider",
    "model",
    "createdAt",
    "createdAtIso",
    "turns",
    "status",
    "onDisk",
    "inPanel",
    "copyOf",
    "flags",
    "children",
]


def listed(root: Path, session: str, *extra: str) -> dict[str, Any]:
    result = run_cli("list-agents", session, "--root", root, "--json", *extra)
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = result.json()
    assert data.pop("schemaVersion") == 1
    return data


def rows(tree: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in tree["children"]}


def panel_scenario(root: Path, clock: Clock) -> SessionSpec:
    """X with every kind of child the two views can disagree about."""
    x = SessionSpec(id="session-X", created_at=clock(), cwd=CWD)
    x.turn(clock)
    idle = subagent(
        clock,
        "idle",
        x,
        label="idle one",
        agent_provider="deepseek",
        agent_model="deepseek-chat",
        turns=2,
    )
    uncatalogued = subagent(clock, "uncatalogued", x, label="stray")
    open_child = subagent(clock, "open", x, label="busy")
    open_child.open_turn(clock)
    running = subagent(clock, "running", x, label="live")
    drifted = subagent(clock, "drifted", x, label="drifted")
    other_parent = subagent(clock, "elsewhere", "session-Y", label="not yours")
    for child in (idle, open_child, running):
        x.catalog(clock, child, label=child.id)
    x.add(
        "subagent/catalog",
        clock(),
        {
            "version": 0,
            "childId": "drifted",
            "childCreatedAt": 5,
            "mode": "continuable",
            "label": "drifted",
        },
    )
    x.add(
        "subagent/catalog",
        clock(),
        {"version": 0, "childId": "gone", "childCreatedAt": 6, "mode": "one-shot"},
    )
    x.catalog(clock, other_parent, label="not yours")
    x.turn(clock)
    fork = fork_of(x, "fork-of-X", clock())
    for spec in (x, idle, uncatalogued, open_child, running, drifted, other_parent, fork):
        spec.publish(root)
    return x


def test_both_views_side_by_side_with_their_differences(
    root: Path, clock: Clock, hold_lock: Any
) -> None:
    panel_scenario(root, clock)
    hold_lock(Root(root).find("running"))

    tree = listed(root, "session-X")

    assert tree["session"] == "session-X" and tree["flags"] == []
    assert tree["forks"] == [{"id": "fork-of-X", "createdAt": tree["forks"][0]["createdAt"]}]
    by_id = rows(tree)
    assert sorted(by_id) == [
        "drifted",
        "elsewhere",
        "gone",
        "idle",
        "open",
        "running",
        "uncatalogued",
    ]
    assert "fork-of-X" not in by_id
    idle = by_id["idle"]
    assert list(idle) == ROW_KEYS
    assert idle == {
        "id": "idle",
        "label": "idle one",
        "mode": "continuable",
        "provider": "fixture",
        "model": "fixture-1",
        "createdAt": idle["createdAt"],
        "createdAtIso": iso_ms(idle["createdAt"]),
        "turns": 2,
        "status": "idle",
        "onDisk": True,
        "inPanel": True,
        "copyOf": None,
        "flags": [],
        "children": [],
    }
    assert by_id["uncatalogued"]["flags"] == ["on disk, not catalogued"]
    assert (by_id["uncatalogued"]["onDisk"], by_id["uncatalogued"]["inPanel"]) == (True, False)
    assert by_id["gone"]["flags"] == ["catalogued, missing on disk"]
    assert (by_id["gone"]["onDisk"], by_id["gone"]["inPanel"]) == (False, True)
    assert (by_id["gone"]["mode"], by_id["gone"]["createdAt"]) == ("one-shot", 6)
    assert by_id["elsewhere"]["flags"] == ["catalogued, other parent"]
    assert by_id["drifted"]["flags"] == ["createdAt differs"]
    assert by_id["open"]["status"] == "open turn"
    assert by_id["running"]["status"] == "running"
    assert [row["id"] for row in tree["children"]] == sorted(
        by_id, key=lambda i: (by_id[i]["createdAt"], i)
    )


def test_descriptor_fallbacks_and_unreadable_children(root: Path, clock: Clock) -> None:
    x = SessionSpec(id="session-X", created_at=clock(), cwd=CWD)
    x.turn(clock)
    source = subagent(clock, "source", x, label="original")
    copy = legacy_copy(source, "inherited-only", x, clock(), own_descriptor=False)
    no_request = subagent(clock, "described", x, label="d", turns=0)
    future = subagent(clock, "future", x, label="f")
    broken = subagent(clock, "broken", x, label="b")
    x.catalog(clock, copy, label="from catalog")
    for spec in (x, source, copy, no_request):
        spec.publish(root)
    write_spec_as(future, root, 9)
    write_log_file(
        root / "--home-u-proj--" / "broken" / "session.v4.jsonl.zstd",
        broken.header_line(),
        [b"{broken\n"],
    )

    by_id = rows(listed(root, "session-X"))

    assert by_id["inherited-only"]["flags"] == ["no own descriptor"]
    assert by_id["inherited-only"]["label"] == "from catalog"
    assert by_id["described"]["provider"] == "fixture"  # from agentProvider: no request yet
    assert by_id["described"]["turns"] == 0
    assert by_id["future"]["flags"] == ["on disk, not catalogued", "unsupported v9"]
    assert by_id["future"]["turns"] is None and by_id["future"]["status"] is None
    assert by_id["broken"]["flags"] == ["on disk, not catalogued", "corrupt"]


def test_recursive_descends_three_levels_and_names_copies(root: Path, clock: Clock) -> None:
    p = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    p.turn(clock)
    a = subagent(clock, "a", p, label="a", turns=0)
    b = subagent(clock, "b", a, label="b", turns=0)
    c = subagent(clock, "c", b, label="c")
    for parent, child in ((b, c), (a, b), (p, a)):  # each spawned inside its parent's turn
        parent.catalog(clock, child, label=child.id)
        parent.turn(clock)
    fork = fork_of(p, "session-C", clock())
    for spec in (p, a, b, c, fork):
        spec.publish(root)

    flat = listed(root, "session-P")
    deep = listed(root, "session-P", "--recursive")

    assert [r["children"] for r in flat["children"]] == [[]]
    level1 = deep["children"][0]
    level2 = level1["children"][0]
    level3 = level2["children"][0]
    assert (level1["id"], level2["id"], level3["id"]) == ("a", "b", "c")
    assert level3["children"] == []
    assert deep["forks"][0]["id"] == "session-C"

    assert run_cli("relink", "session-C", "--root", root).exit_code == 0
    copied = listed(root, "session-C", "--recursive")
    chain = []
    row = copied["children"][0]
    while True:
        chain.append(row["copyOf"])
        if not row["children"]:
            break
        row = row["children"][0]
    assert chain == ["a", "b", "c"]

    piped = run_cli("list-agents", "session-P", "--root", root, "--recursive")
    lines = piped.stdout.splitlines()
    assert lines[0] == "subagents of session-P"
    assert lines[1].split()[:4] == ["id", "label", "mode", "provider/model"]
    assert [line[:3] for line in lines[2:5]] == ["a  ", "  b", "   "]
    assert lines[4].startswith("    c ")
    assert lines[-1] == "forks: session-C"


def test_cycles_and_missing_parents_are_flags_not_errors(root: Path, clock: Clock) -> None:
    selfish = SessionSpec(
        id="selfish", created_at=clock(), cwd=CWD, parent="selfish", origin="subagent", depth=1
    )
    selfish.descriptor(clock, "me")
    selfish.turn(clock)
    first = SessionSpec(
        id="first", created_at=clock(), cwd=CWD, parent="second", origin="subagent", depth=1
    )
    second = SessionSpec(
        id="second", created_at=clock(), cwd=CWD, parent="first", origin="subagent", depth=1
    )
    orphan = subagent(clock, "orphan", "nobody-here", label="o")
    for spec in (first, second):
        spec.descriptor(clock, spec.id)
        spec.turn(clock)
    for spec in (selfish, first, second, orphan):
        spec.publish(root)

    own = listed(root, "selfish", "--recursive")
    pair = listed(root, "first", "--recursive")
    lost = listed(root, "orphan")

    assert [(r["id"], r["flags"]) for r in own["children"]] == [
        ("selfish", ["on disk, not catalogued", "cycle"])
    ]
    assert own["children"][0]["children"] == []
    assert pair["children"][0]["id"] == "second"
    assert [(r["id"], r["flags"][-1]) for r in pair["children"][0]["children"]] == [
        ("first", "cycle")
    ]
    assert lost["flags"] == ["parent missing"] and lost["children"] == []


def test_the_generation_scan_fixture_set(root: Path, clock: Clock) -> None:
    """Semantics §10.1: which generation files make a child, and which do not."""
    parent = SessionSpec(id="parent", created_at=clock(), cwd="/fx")
    parent.turn(clock)
    parent.publish(root)

    def child(child_id: str, *, cwd: str = "/fx", parent_id: str = "parent") -> SessionSpec:
        return subagent(clock, child_id, parent_id, label=child_id, cwd=cwd)

    child("child-a").publish(root)
    write_spec_as(child("child-b"), root, 3)
    d = child("child-d")
    write_spec_as(d, root, 3)
    d.turn(clock)
    write_spec_as(d, root, 4)
    write_spec_as(child("child-g"), root, 0)
    write_spec_as(child("child-f"), root, 9)
    child("child-c", parent_id="other").publish(root)
    e = child("child-e")
    write_log_file(root / "--fx--" / "child-e" / "session.v4.jsonl.txt", e.header_line(), [])
    h = child("child-h")
    for name in NON_CANONICAL_NAMES:
        write_log_file(root / "--fx--" / "child-h" / name, h.header_line(), [])
    child("child-x", cwd="/other").publish(root)
    (root / "--fx--" / "loose-file").write_text("x")
    (root / "stray").write_text("x")

    by_id = rows(listed(root, "parent"))

    assert sorted(by_id) == ["child-a", "child-b", "child-d", "child-f", "child-g", "child-x"]
    assert by_id["child-d"]["turns"] == 2  # read from v4, which has one more turn than v3
    assert by_id["child-f"]["flags"] == ["on disk, not catalogued", "unsupported v9"]
    assert all(by_id[i]["flags"] == ["on disk, not catalogued"] for i in by_id if i != "child-f")


def test_errors_about_the_session_itself_use_their_codes(root: Path, clock: Clock) -> None:
    x = SessionSpec(id="session-X", created_at=clock(), cwd=CWD)
    x.turn(clock)
    write_spec_as(x, root, 9)
    broken = SessionSpec(id="broken", created_at=clock(), cwd=CWD)
    write_log_file(
        root / "--home-u-proj--" / "broken" / "session.v4.jsonl.zstd",
        broken.header_line(),
        [b"not json\n"],
    )

    missing = run_cli("list-agents", "nobody", "--root", root)
    future = run_cli("list-agents", "session-X", "--root", root, "--json")
    corrupt = run_cli("list-agents", "broken", "--root", root)

    assert missing.exit_code == 3 and missing.stderr.startswith("Error: no session 'nobody'")
    assert future.exit_code == 8 and future.json()["error"]["code"] == "UNSUPPORTED_FORMAT"
    assert corrupt.exit_code == 9 and corrupt.stderr.startswith("Error: ")
    assert len(corrupt.stderr.splitlines()) == 1


def test_a_session_without_agents(root: Path, clock: Clock) -> None:
    x = SessionSpec(id="session-X", created_at=clock(), cwd=CWD)
    x.turn(clock)
    x.publish(root)

    human = run_cli("list-agents", "session-X", "--root", root)

    assert human.exit_code == 0
    assert human.stdout == "session-X: no subagents\n"
    assert listed(root, "session-X") == {
        "session": "session-X",
        "flags": [],
        "children": [],
        "forks": [],
    }


def test_help_shows_an_example() -> None:
    result = run_cli("list-agents", "--help")
    assert result.exit_code == 0 and "  dsh-fork list-agents " in result.stdout
