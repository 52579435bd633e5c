"""The one rule that tells a user fork from a delegation child (dsh-world §4, semantics §11).

A seeded session with ``parentSession`` and none of {``origin: "subagent"``, a catalog fact in
its parent's log, an own-range ``subagent/descriptor``} is a user fork; one without ``origin``
that has one of them is a delegation child, a subagent. Each branch of the rule is a case
here, then every command that says "fork" is held to it: list, tree, du, relink and relink
--all (which once copied two sessions under such a child).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from conftest import run_cli
from relinkkit import CWD, fork_of, session_path, subagent

from dsh_fork import frames as zframes
from dsh_fork.discovery import Root
from dsh_fork.fixturedamage import DAMAGES, damage
from dsh_fork.fixtures import Clock, SessionSpec, write_spec_as
from dsh_fork.kinds import (
    Evidence,
    KindRule,
    delegation,
    header_kind,
    read_evidence,
    read_own_descriptor,
    settled_kind,
)
from dsh_fork.lineage import lineage
from dsh_fork.listing import list_sessions
from dsh_fork.records import parse_header
from dsh_fork.relink import relink_all


def parent_with_two_subagents(clock: Clock) -> tuple[SessionSpec, list[SessionSpec]]:
    """P with two completed subagents it catalogues, then a turn: what a fork copies."""
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock, "spawn two helpers")
    kids = [subagent(clock, f"helper-{k}", parent, label=f"helper {k}") for k in (1, 2)]
    for kid in kids:
        parent.catalog(clock, kid, label=kid.id.replace("-", " "))
    parent.turn(clock, "thanks")
    parent.flush()
    return parent, kids


def seeded_child(
    parent: SessionSpec,
    child_id: str,
    clock: Clock,
    *,
    own_descriptor: bool = False,
    catalogued: bool = False,
    seeded: bool = True,
) -> SessionSpec:
    """A child of ``parent`` without ``origin``: seeded with the parent's history (a fork's
    shape, and a DSH forked subagent's), with the evidence asked for."""
    if seeded:
        child = fork_of(parent, child_id, clock())
        child.turns = parent.turns  # its turns go on numbering from the inherited ones
    else:
        child = SessionSpec(id=child_id, created_at=clock(), cwd=parent.cwd, parent=parent.id)
    if own_descriptor:
        child.descriptor(clock, "delegated reviewer")
    child.turn(clock, "work of the child")
    child.flush()
    if catalogued:
        parent.catalog(clock, child, label="delegated reviewer")
        parent.flush()
    return child


def publish(root: Path, *specs: SessionSpec) -> None:
    for spec in specs:
        spec.publish(root)


def entry_of(root: Path, session_id: str) -> object:
    entry = Root(root).entry(session_id)
    assert entry is not None
    return entry


# -- the rule, branch by branch -------------------------------------------------------------


@pytest.mark.parametrize(
    ("own_descriptor", "catalogued", "why", "kind"),
    [
        (False, False, None, "fork"),
        (True, False, "descriptor", "subagent"),
        (False, True, "catalogued", "subagent"),
        (True, True, "catalogued", "subagent"),
    ],
)
def test_a_seeded_child_without_origin_is_a_fork_unless_the_logs_say_delegation(
    root: Path, own_descriptor: bool, catalogued: bool, why: str | None, kind: str
) -> None:
    clock = Clock()
    parent, kids = parent_with_two_subagents(clock)
    child = seeded_child(
        parent, "session-D", clock, own_descriptor=own_descriptor, catalogued=catalogued
    )
    publish(root, parent, *kids, child)
    located = Root(root)
    rule = KindRule(located)
    entry = located.entry("session-D")
    assert entry is not None and entry.header is not None

    assert header_kind(entry.header) == "fork"
    assert rule.why(entry) == why
    assert rule.kind(entry) == kind
    assert rule.is_user_fork(entry) is (why is None)
    assert [e.id for e in rule.fork_children()] == ([] if why else ["session-D"])


def test_a_descriptor_only_in_the_inherited_prefix_is_no_evidence(root: Path) -> None:
    """A fork of a subagent inherits its descriptor: that one is the source's, not its own."""
    clock = Clock()
    top = SessionSpec(id="session-T", created_at=clock(), cwd=CWD)
    top.turn(clock)
    helper = subagent(clock, "helper", top)
    fork = fork_of(helper, "session-F", clock())
    fork.turn(clock)
    fork.flush()
    publish(root, top, helper, fork)
    located = Root(root)
    entry = located.entry("session-F")
    assert entry is not None

    assert KindRule(located).why(entry) is None
    assert KindRule(located).kind(entry) == "fork"


def test_a_catalog_fact_naming_another_id_is_no_evidence(root: Path) -> None:
    clock = Clock()
    parent, kids = parent_with_two_subagents(clock)
    child = seeded_child(parent, "session-D", clock)
    publish(root, parent, *kids, child)  # P catalogues helper-1 and helper-2, not D

    entry = Root(root).entry("session-D")
    assert entry is not None
    assert KindRule(Root(root)).kind(entry) == "fork"


def test_origin_subagent_decides_by_header_alone(root: Path) -> None:
    """A copy and a spawned subagent are delegation children by their ``origin``: no log is
    read for them."""
    clock = Clock()
    parent, kids = parent_with_two_subagents(clock)
    copy = fork_of(parent, "copy-1", clock(), origin="subagent")
    publish(root, parent, *kids, copy)
    reads: list[str] = []

    def reader(entry: object) -> Evidence | None:
        reads.append(str(entry))
        return None

    rule = KindRule(Root(root), read=reader)
    for session_id, kind in (("copy-1", "copy"), ("helper-1", "subagent"), ("session-P", "root")):
        entry = Root(root).entry(session_id)
        assert entry is not None
        assert rule.kind(entry) == kind
    assert reads == []


def test_an_unseeded_child_without_origin_is_linked_unless_the_logs_say_delegation(
    root: Path,
) -> None:
    clock = Clock()
    parent, kids = parent_with_two_subagents(clock)
    plain = seeded_child(parent, "linked-1", clock, seeded=False)
    described = seeded_child(parent, "linked-2", clock, seeded=False, own_descriptor=True)
    listed = seeded_child(parent, "linked-3", clock, seeded=False, catalogued=True)
    publish(root, parent, *kids, plain, described, listed)
    rule = KindRule(Root(root))

    kinds = {}
    for session_id in ("linked-1", "linked-2", "linked-3"):
        entry = Root(root).entry(session_id)
        assert entry is not None
        kinds[session_id] = rule.kind(entry)
    assert kinds == {"linked-1": "linked", "linked-2": "subagent", "linked-3": "subagent"}


def test_a_missing_or_unreadable_parent_leaves_only_the_own_descriptor(root: Path) -> None:
    clock = Clock()
    parent, kids = parent_with_two_subagents(clock)
    catalogued = seeded_child(parent, "session-D1", clock, catalogued=True)
    described = seeded_child(parent, "session-D2", clock, own_descriptor=True, catalogued=True)
    publish(root, *kids, catalogued, described)  # P itself is not in the root

    rule = KindRule(Root(root))
    kinds = []
    for session_id in ("session-D1", "session-D2"):
        entry = Root(root).entry(session_id)
        assert entry is not None
        kinds.append(rule.kind(entry))
    assert kinds == ["fork", "subagent"]

    # P present but its log unreadable past the header: no catalog to read, same answer
    parent.publish(root)
    log = Root(root).find("session-P") / "session.v4.jsonl.zstd"
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2 + 40] + b"\x00" * 8 + data[len(data) // 2 + 48 :])
    rule = KindRule(Root(root))
    entry = Root(root).entry("session-D1")
    assert entry is not None
    assert rule.kind(entry) == "fork"


def test_the_pure_rule_matches_the_spec_table() -> None:
    line = (
        b'{"type":"session","version":4,"id":"session-D","createdAt":1,"cwd":"/w",'
        b'"parentSession":"session-P","isSeeded":true,"delegationDepth":0}'
    )
    header = parse_header(line, 4)
    cases = {
        (False, False): None,
        (True, False): "descriptor",
        (False, True): "catalogued",
        (True, True): "catalogued",
    }
    for (own, listed), want in cases.items():
        why = delegation(header, own_descriptor=own, catalogued_by_parent=listed)
        assert why == want
        assert settled_kind(header, why) == ("fork" if want is None else "subagent")


# -- the own descriptor, read from the end ---------------------------------------------------


def framed_fork(source: SessionSpec, fork_id: str, clock: Clock) -> SessionSpec:
    """A fork of ``source`` whose inherited events keep the source's frames."""
    fork = fork_of(source, fork_id, clock())
    fork.batches = list(source.batches)
    fork.turns = source.turns
    return fork


def end_read_shapes(clock: Clock) -> dict[str, tuple[SessionSpec, bool]]:
    """Logs whose own-range question the end read answers after several frames or none,
    each with the answer of the rule (dsh-world §4)."""
    top = SessionSpec(id="session-T", created_at=clock(), cwd=CWD)
    for k in range(4):
        top.turn(clock, f"turn {k}")
        top.flush()
    helper = subagent(clock, "helper", top)
    helper.framed_turns(clock, 3)
    shapes: dict[str, tuple[SessionSpec, bool]] = {}

    late = framed_fork(top, "session-late", clock)  # its descriptor frames before its end
    late.descriptor(clock, "reviewer")
    late.flush()
    late.framed_turns(clock, 3)
    shapes["own descriptor, three frames before the end"] = (late, True)

    user = framed_fork(top, "session-user", clock)
    user.framed_turns(clock, 3)
    shapes["user fork"] = (user, False)

    of_helper = framed_fork(helper, "session-of-helper", clock)
    of_helper.framed_turns(clock, 1)
    shapes["fork of a subagent: its descriptor inherited"] = (of_helper, False)

    middle = framed_fork(top, "session-middle", clock)
    middle.descriptor(clock, "reviewer")
    middle.framed_turns(clock, 1)
    second = framed_fork(middle, "session-second", clock)
    second.framed_turns(clock, 1)
    shapes["fork of a fork: the first fork's descriptor inherited"] = (second, False)

    linked = SessionSpec(id="linked-d", created_at=clock(), cwd=CWD, parent=top.id)
    linked.descriptor(clock, "reviewer")
    linked.flush()
    linked.framed_turns(clock, 3)
    shapes["unseeded, its descriptor at its start"] = (linked, True)

    plain = SessionSpec(id="linked-p", created_at=clock(), cwd=CWD, parent=top.id)
    plain.framed_turns(clock, 1)
    shapes["unseeded, no descriptor"] = (plain, False)
    return shapes


SHAPES = list(end_read_shapes(Clock()))


STORED = ["v4", "v3", "v4, one frame", "plain v4", *(f"v4, then {kind}" for kind in DAMAGES)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("stored", STORED)
def test_the_end_read_answers_as_the_whole_read(root: Path, shape: str, stored: str) -> None:
    """What the log says of an own descriptor is the same read from its end (the kind rule's
    read) and whole: over several frames, across inherited descriptors and markers, in a
    log of one frame, of an older generation, a plain one (read whole), and with each defect
    DSH refuses appended after the answer (the end read meets it first: unreadable)."""
    spec, answer = end_read_shapes(Clock())[shape]
    if stored == "v3":
        write_spec_as(spec, root, 3)
    elif stored == "plain v4":
        write_spec_as(spec, root, 4, encoding="plain")
    else:
        spec.publish(root, frame_target=1 << 20 if stored == "v4, one frame" else 1)
    if stored.startswith("v4, then "):
        damage(session_path(root, spec), stored.removeprefix("v4, then "), Clock())
        answer = False  # the log is refused: no evidence
    entry = Root(root).entry(spec.id)
    assert entry is not None and entry.header is not None

    whole = read_evidence(entry)
    assert (whole is not None and whole.own_descriptor) is answer
    assert bool(read_own_descriptor(entry)) is answer


def test_a_defect_before_the_answer_is_left_to_the_command_that_reads_the_log(
    root: Path,
) -> None:
    """The end read stops at the answer: a frame before it that does not decode (a whole read
    refuses the log) is not read, and the answer stands; the kind rule names such a fork a
    subagent by its own descriptor, and the relink that copies it reports it unreadable."""
    clock = Clock()
    shapes = end_read_shapes(clock)
    spec, answer = shapes["own descriptor, three frames before the end"]
    assert answer
    spec.publish(root)
    path = session_path(root, spec)
    data = bytearray(path.read_bytes())
    second = zframes.scan(bytes(data)).frames[2]  # an inherited frame
    data[second.end - 1] ^= 0xFF  # its content checksum no longer matches
    path.write_bytes(bytes(data))
    entry = Root(root).entry(spec.id)
    assert entry is not None

    assert read_evidence(entry) is None
    assert read_own_descriptor(entry) is True


# -- every command that says "fork" ---------------------------------------------------------


def delegation_root(root: Path) -> None:
    """P with two subagents, a delegation child D (seeded, no origin, its own descriptor, P
    catalogues it) and a user fork C of P."""
    clock = Clock()
    parent, kids = parent_with_two_subagents(clock)
    child = seeded_child(parent, "session-D", clock, own_descriptor=True, catalogued=True)
    fork = fork_of(parent, "session-C", clock())
    publish(root, parent, *kids, child, fork)


def test_relink_all_copies_no_tree_under_a_delegation_child(root: Path) -> None:
    """The issue's case: relink --all once copied P's two subagents under D."""
    delegation_root(root)

    result = relink_all(Root(root))

    assert [s.fork_child for s in result.results] == ["session-C"]
    # D is one of P's subagents by the rule: C's branch holds it, so it is copied too
    copied = result.results[0].copied
    assert [c["source"] for c in copied] == ["helper-1", "helper-2", "session-D"]
    assert {c["parent"] for c in copied} == {"session-C"}
    assert result.forks == 1 and result.failed == []
    assert [e.id for e in Root(root).children_of("session-D")] == []


def test_doctor_takes_a_delegation_child_for_its_parents_subagent(root: Path) -> None:
    """P catalogues D, D names P: no CATALOG_MISMATCH (D is a subagent child of P by the
    rule), and D's tree is never asked for."""
    delegation_root(root)

    report = run_cli("doctor", "--root", root, "--json")

    assert report.exit_code == 0, report.stdout
    found = [(f["session"], f["code"]) for f in report.json()["findings"]]
    assert found == [("session-C", "FORK_TREE_MISSING")]
    relink_all(Root(root))
    again = run_cli("doctor", "--root", root, "--json")
    assert again.json()["findings"] == []


def test_relink_names_a_delegation_child_as_usage_error(root: Path) -> None:
    delegation_root(root)

    result = run_cli("relink", "session-D", "--root", root)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        "Error: session-D is a delegation child, not a fork child: its parent's log "
        "catalogues it; relink copies subagent trees under user forks only"
    )
    assert [e.id for e in Root(root).children_of("session-D")] == []


def test_list_tree_and_du_call_a_delegation_child_a_subagent(root: Path) -> None:
    delegation_root(root)

    rows = {row.id: row.kind for row in list_sessions(Root(root), everything=True).rows}
    assert rows["session-D"] == "subagent" and rows["session-C"] == "fork"
    assert [row.id for row in list_sessions(Root(root), kinds=["fork"]).rows] == ["session-C"]
    conversations = {row.id: row.subagents for row in list_sessions(Root(root)).rows}
    assert conversations == {"session-P": 3, "session-C": 0}  # D counted under P
    (parent,) = [row for row in list_sessions(Root(root)).rows if row.id == "session-P"]
    assert (parent.forks, parent.agents) == (1, 3)  # C is its fork, D one of its agents

    nodes = {node.id: node.kind for node in lineage(Root(root)).nodes()}
    assert nodes["session-D"] == "subagent" and nodes["session-C"] == "fork"
    quick = {node.id: node.kind for node in lineage(Root(root), detail=False).nodes()}
    assert quick == nodes

    tree = run_cli("tree", "--root", root, "--json")
    assert tree.exit_code == 0
    assert tree.json()["counts"]["fork"] == 1
    du = run_cli("du", "--root", root, "--json")
    assert du.exit_code == 0
    kinds = {s["id"]: s["kind"] for s in du.json()["sessions"]}
    assert kinds["session-D"] == "subagent" and kinds["session-C"] == "fork"


# -- a fork made without its tree on purpose ------------------------------------------------


NO_HOME = {"DSH_HOME": ""}
"""The operation log then lies beside the root (``<home>/dsh-fork-relink.log``)."""


def test_a_no_agents_fork_is_logged_and_relink_all_leaves_it_alone(root: Path) -> None:
    clock = Clock()
    parent, kids = parent_with_two_subagents(clock)
    publish(root, parent, *kids)
    made = run_cli(
        "fork", "session-P", "--no-agents", "--id", "session-N", "--root", root, env=NO_HOME
    )
    assert made.exit_code == 0, made.stderr
    oplog = root.parent / "dsh-fork-relink.log"
    records = [orjson.loads(line) for line in oplog.read_bytes().splitlines()]
    assert [(r["message"], r["data"]) for r in records] == [
        ("forked without subagents", {"forkChild": "session-N", "source": "session-P"})
    ]

    everything = run_cli("relink", "--all", "--root", root, "--json", env=NO_HOME)

    assert everything.exit_code == 0, everything.stderr
    document = everything.json()
    assert document["results"] == [] and document["failed"] == []
    assert document["skipped"] == [{"forkChild": "session-N", "reason": "no-agents"}]
    assert Root(root).children_of("session-N") == []

    named = run_cli("relink", "session-N", "--root", root, "--json", env=NO_HOME)

    assert named.exit_code == 0, named.stderr
    assert [c["source"] for c in named.json()["copied"]] == ["helper-1", "helper-2"]


def test_a_dry_run_no_agents_fork_is_not_recorded(root: Path) -> None:
    clock = Clock()
    parent, kids = parent_with_two_subagents(clock)
    publish(root, parent, *kids)
    made = run_cli("fork", "session-P", "--no-agents", "--dry-run", "--root", root, env=NO_HOME)
    assert made.exit_code == 0, made.stderr
    assert not (root.parent / "dsh-fork-relink.log").exists()


def test_list_agents_lists_only_user_forks_under_forks(root: Path) -> None:
    delegation_root(root)

    result = run_cli("list-agents", "session-P", "--root", root, "--json")

    assert result.exit_code == 0, result.stderr
    assert [fork["id"] for fork in result.json()["forks"]] == ["session-C"]


def test_trash_takes_a_delegation_child_with_its_parent(root: Path) -> None:
    """D goes with P (its subagent by the rule), named a subagent; C, P's user fork, stays
    and is named among the forks left in the root."""
    delegation_root(root)

    result = run_cli("trash", "session-P", "--root", root, "--dry-run", "--json")

    assert result.exit_code == 0, result.stderr
    document = result.json()
    assert [(s["id"], s["kind"]) for s in document["sessions"]] == [
        ("session-P", "root"),
        ("helper-1", "subagent"),
        ("helper-2", "subagent"),
        ("session-D", "subagent"),
    ]
    assert document["forksLeft"] == ["session-C"]
