"""relink (semantics §4, scenarios §10.4): which children are copied, what a copy is, how old
forks are repaired, and that a second run changes nothing."""

from __future__ import annotations

import gc
import os
import shutil
import sys
import weakref
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import FOREIGN, log_header, log_lines, tree_digest, tree_listing
from relinkkit import (
    CWD,
    assert_clean,
    children_on_disk,
    digests,
    fork_of,
    legacy_copy,
    log_of,
    oplog_lines,
    own_catalog,
    plugin_scenario,
    run,
    session_path,
    subagent,
    time_of,
    view,
    without_ids,
)

from dsh_fork import appending, faults, forkpoint, relinkplan, relinkwalk, seeded
from dsh_fork import relink as relink_module
from dsh_fork.discovery import Root
from dsh_fork.errors import DshForkError, SessionLocked, UnsupportedFormat, UsageError
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file, write_spec_as
from dsh_fork.forkpoint import fork_point as make_fork_point
from dsh_fork.layout import project_key
from dsh_fork.locking import probe
from dsh_fork.model import MODEL_TYPES, facts_of
from dsh_fork.reader import current_generation, open_log
from dsh_fork.relink import plan_new_fork, relink_all
from dsh_fork.sessionlog import SessionLog
from dsh_fork.source import FileRun

# -- the plugin's own scenario (built by relinkkit.plugin_scenario) -------------------------


def test_the_plugin_scenario_copies_the_branch_tree(root: Path, clock: Clock) -> None:
    s = plugin_scenario(root, clock)
    before = digests(root)
    oplog = root.parent / "relink.log"

    summary = run(root, s.fork.id, oplog_path=oplog)

    assert summary.failed == [] and summary.uncatalogable == []
    assert summary.skipped == [{"id": "a-open", "reason": "open"}]
    assert summary.unrelated == []
    assert summary.catalogued == [] and summary.descriptors_repaired == []
    sources = [c["source"] for c in summary.copied]
    assert sources == ["a-child-01", "a-grand", *[f"a-child-{k:02d}" for k in range(2, 12)]]
    copy_of = {c["source"]: c for c in summary.copied}
    for child in s.children:
        assert copy_of[child.id]["parent"] == s.fork.id
        assert copy_of[child.id]["depth"] == 1
    assert copy_of["a-grand"]["parent"] == copy_of["a-child-01"]["copy"]
    assert copy_of["a-grand"]["depth"] == 2

    for spec in [*s.children, s.grand]:
        item = copy_of[spec.id]
        copy = view(root, item["copy"])
        parent_id = item["parent"]
        assert copy.header == {
            "type": "session",
            "version": 4,
            "id": item["copy"],
            "createdAt": copy.header["createdAt"],
            "cwd": CWD,
            "parentSession": parent_id,
            "isSeeded": True,
            "origin": "subagent",
            "delegationDepth": item["depth"],
        }
        assert list(copy.header) == [
            "type",
            "version",
            "id",
            "createdAt",
            "cwd",
            "parentSession",
            "isSeeded",
            "origin",
            "delegationDepth",
        ]
        last = max(i for i, line in enumerate(spec.lines) if b'"turn/end"' in line)
        assert copy.lines[: last + 1] == [line.rstrip(b"\n") for line in spec.lines[: last + 1]]
        marker, descriptor = copy.events[last + 1], copy.events[last + 2]
        assert marker == {
            "type": "session/end-seed",
            "seq": last + 1,
            "time": time_of(spec, last),
            "data": {"inherited": True},
        }
        assert descriptor["type"] == "subagent/descriptor" and descriptor["seq"] == last + 2
        source_descriptor = orjson.loads(spec.lines[0])["data"]
        assert descriptor["data"] == source_descriptor
        assert copy.header["createdAt"] > 1_700_000_000_000  # "now", after every fixture time

    facts = own_catalog(log_of(root, s.fork.id))
    assert [f["label"] for f in facts] == [f"child {k}" for k in range(1, 12)]
    copies = {c["copy"]: c for c in summary.copied}
    for fact in facts:
        copy_header = view(root, fact["childId"]).header
        assert copies[fact["childId"]]["parent"] == s.fork.id
        assert fact == {
            "version": 0,
            "childId": fact["childId"],
            "childCreatedAt": copy_header["createdAt"],
            "mode": "continuable",
            "label": fact["label"],
        }
    assert [f["childCreatedAt"] for f in facts] == sorted(f["childCreatedAt"] for f in facts)
    grand_copy = copy_of["a-grand"]["copy"]
    assert [f["childId"] for f in own_catalog(log_of(root, copy_of["a-child-01"]["copy"]))] == [
        grand_copy
    ]
    assert grand_copy not in [f["childId"] for f in facts]

    after = digests(root)
    for key, digest in before.items():
        if not key.endswith(s.fork.id):
            assert after[key] == digest, key  # originals (and z-other) byte-identical
    assert_clean(root)

    lines = oplog_lines(oplog)
    assert [line["message"] for line in lines] == [
        "copying subagent tree",
        "copy progress",
        "copied subagent tree",
    ]
    assert lines[0]["data"] == {
        "forkChild": s.fork.id,
        "source": s.parent.id,
        "children": 12,
        "total": 13,
    }
    assert lines[1]["data"] == {"forkChild": s.fork.id, "done": 10, "total": 13}
    assert lines[2]["data"] == summary.to_json()
    assert all(line["t"].endswith("Z") and len(line["t"]) == 24 for line in lines)


def test_a_second_run_copies_nothing_and_appends_nothing(root: Path, clock: Clock) -> None:
    s = plugin_scenario(root, clock)
    run(root, s.fork.id)
    before = tree_digest(root)

    again = run(root, s.fork.id)

    assert again.copied == [] and again.catalogued == [] and again.descriptors_repaired == []
    assert again.skipped == [{"id": "a-open", "reason": "open"}]
    assert again.ok
    assert tree_digest(root) == before


def test_dry_run_writes_nothing_and_plans_the_real_outcome(root: Path, clock: Clock) -> None:
    s = plugin_scenario(root, clock)
    listing = tree_listing(root)

    plan = run(root, s.fork.id, dry_run=True)

    assert tree_listing(root) == listing
    assert plan.dry_run and all(c["copy"] is None for c in plan.copied)
    real = run(root, s.fork.id)
    assert without_ids(plan.to_json(), plan) == without_ids(real.to_json(), real)


# -- old forks --------------------------------------------------------------------------------


def legacy_scenario(root: Path, clock: Clock) -> tuple[SessionSpec, SessionSpec, SessionSpec]:
    """C_B holds two copies made by an older tool, without catalog facts; copy-b-02 has no own
    descriptor (only s2's, inherited)."""
    parent = SessionSpec(id="session-P_B", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    s1 = subagent(clock, "s1", parent, label="first")
    s2 = subagent(clock, "s2", parent, label="second", mode="one-shot")
    parent.catalog(clock, s1, label="first")
    parent.catalog(clock, s2, mode="one-shot", label="second")
    parent.turn(clock)
    fork = fork_of(parent, "session-C_B", clock())
    copy1 = legacy_copy(s1, "copy-b-01", fork, 7)
    copy2 = legacy_copy(s2, "copy-b-02", fork, 8, own_descriptor=False)
    for spec in (parent, s1, s2, fork, copy1, copy2):
        spec.publish(root)
    return fork, copy1, copy2


def test_legacy_copies_are_catalogued_and_repaired(root: Path, clock: Clock) -> None:
    fork, _, copy2 = legacy_scenario(root, clock)
    oplog = root.parent / "relink.log"
    copy2_before = log_lines(session_path(root, copy2))

    summary = run(root, fork.id, oplog_path=oplog)

    assert summary.copied == []
    assert summary.catalogued == ["copy-b-01", "copy-b-02"]
    assert summary.descriptors_repaired == ["copy-b-02"]
    assert summary.ok
    facts = own_catalog(log_of(root, fork.id))
    assert facts == [
        {
            "version": 0,
            "childId": "copy-b-01",
            "childCreatedAt": 7,
            "mode": "continuable",
            "label": "first",
        },
        {
            "version": 0,
            "childId": "copy-b-02",
            "childCreatedAt": 8,
            "mode": "one-shot",
            "label": "second",
        },
    ]
    copy2_after = log_lines(session_path(root, copy2))
    assert copy2_after[: len(copy2_before)] == copy2_before
    appended = [orjson.loads(line) for line in copy2_after[len(copy2_before) :]]
    s2_descriptor = orjson.loads(copy2.lines[0])["data"]
    assert [(e["type"], e["data"]) for e in appended] == [("subagent/descriptor", s2_descriptor)]
    messages = [line["message"] for line in oplog_lines(oplog)]
    assert messages == ["catalogued existing copies", "copied subagent tree"]
    assert oplog_lines(oplog)[0]["data"] == {"forkChild": fork.id, "catalogued": 2}
    assert_clean(root)

    before = tree_digest(root)
    again = run(root, fork.id)
    assert again.catalogued == [] and again.descriptors_repaired == [] and again.copied == []
    assert tree_digest(root) == before


def test_a_fact_present_under_the_lock_is_not_appended_again(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Own-range uniqueness is decided under the parent's lock (§4.4.4): a fact that appears
    between the plan and the append (another writer) is not duplicated."""
    fork, _, _ = legacy_scenario(root, clock)
    real_append = appending.append
    calls: list[Path] = []

    def racing_append(session_dir: Path, build: Any, *, lock: Any = None, **kw: Any) -> Any:
        calls.append(session_dir)
        if calls.count(session_dir) == 2 and session_dir.name == fork.id:  # after the plan
            real_append(
                session_dir,
                lambda log, facts: [
                    (
                        "subagent/catalog",
                        1,
                        {
                            "version": 0,
                            "childId": "copy-b-01",
                            "childCreatedAt": 7,
                            "mode": "continuable",
                            "label": "first",
                        },
                    )
                ],
                lock=lock,
            )
        return real_append(session_dir, build, lock=lock, **kw)

    monkeypatch.setattr(appending, "append", racing_append)
    summary = run(root, fork.id)

    facts = own_catalog(log_of(root, fork.id))
    assert [f["childId"] for f in facts] == ["copy-b-01", "copy-b-02"]
    assert summary.catalogued == ["copy-b-02"]


def test_children_the_fork_spawned_itself_are_catalogued_too(root: Path, clock: Clock) -> None:
    """A child of C that is not a copy (C resumed and delegated) but lacks a fact gets one,
    as DSH's own backfill would; it is never treated as a copy."""
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    fork.turn(clock)
    own = subagent(clock, "own-child", fork, label="mine")
    for spec in (parent, fork, own):
        spec.publish(root)

    summary = run(root, fork.id)

    assert summary.copied == [] and summary.catalogued == ["own-child"]
    assert [f["childId"] for f in own_catalog(log_of(root, fork.id))] == ["own-child"]


# -- branch membership --------------------------------------------------------------------------


def test_children_spawned_after_the_fork_point_are_unrelated(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    in_prefix = subagent(clock, "in-prefix", parent, label="a")
    parent.catalog(clock, in_prefix, label="a")
    boundary = parent.turn(clock)
    t = time_of(parent, boundary)
    at_t = subagent(clock, "created-at-T", parent, created_at=t)
    fork = fork_of(parent, "session-C", clock(), at=boundary)
    parent.turn(clock)
    late_fact = subagent(clock, "fact-after-cut", parent, label="b", created_at=t - 1)
    parent.catalog(clock, late_fact, label="b")
    late = subagent(clock, "created-after-T", parent, label="c")
    for spec in (parent, in_prefix, at_t, fork, late_fact, late):
        spec.publish(root)

    summary = run(root, fork.id)

    assert sorted(c["source"] for c in summary.copied) == [
        "created-at-T",
        "fact-after-cut",
        "in-prefix",
    ]
    assert summary.unrelated == ["created-after-T"]


def test_a_catalog_fact_after_the_cut_does_not_make_a_late_child_belong(
    root: Path, clock: Clock
) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    boundary = parent.turn(clock)
    fork = fork_of(parent, "session-C", clock(), at=boundary)
    parent.turn(clock)
    late = subagent(clock, "late", parent, label="late")
    parent.catalog(clock, late, label="late")
    for spec in (parent, fork, late):
        spec.publish(root)

    summary = run(root, fork.id)

    assert summary.copied == [] and summary.unrelated == ["late"]


def test_a_migrated_parent_uses_created_at(root: Path, clock: Clock) -> None:
    """DSH's v3→v4 backfill put every fact at the parent's end, after C's cut."""
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    early = subagent(clock, "early", parent, label="early")
    boundary = parent.turn(clock)
    fork = fork_of(parent, "session-C", clock(), at=boundary)
    parent.turn(clock)
    late = subagent(clock, "late", parent, label="late")
    parent.catalog(clock, early, label="early")
    parent.catalog(clock, late, label="late")
    for spec in (parent, early, fork, late):
        spec.publish(root)

    summary = run(root, fork.id)

    assert [c["source"] for c in summary.copied] == ["early"]
    assert summary.unrelated == ["late"]


def test_a_fork_at_cut_zero_has_only_unrelated_children(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.flush()
    fork = SessionSpec(
        id="session-C", created_at=clock(), cwd=CWD, parent=parent.id, is_seeded=True
    )
    fork.end_seed(fork.created_at)
    child = subagent(clock, "child", parent, created_at=1)
    for spec in (parent, fork, child):
        spec.publish(root)

    summary = run(root, fork.id)

    assert summary.copied == [] and summary.unrelated == ["child"]


# -- children that are not copied -------------------------------------------------------------


def simple_parent(root: Path, clock: Clock, *children: str) -> tuple[SessionSpec, SessionSpec]:
    """P with completed children catalogued before the fork point, and C = fork of P."""
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    specs = []
    for child_id in children:
        spec = subagent(clock, child_id, parent, label=child_id)
        parent.catalog(clock, spec, label=child_id)
        specs.append(spec)
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, *specs, fork):
        spec.publish(root)
    return parent, fork


def test_a_running_child_is_skipped_and_copied_later(
    root: Path, clock: Clock, hold_lock: Any
) -> None:
    _, fork = simple_parent(root, clock, "busy", "calm")
    holder = hold_lock(Root(root).find("busy"))

    summary = run(root, fork.id)

    assert summary.skipped == [{"id": "busy", "reason": "running"}]
    assert [c["source"] for c in summary.copied] == ["calm"]
    assert summary.ok
    holder.release()
    later = run(root, fork.id)
    assert [c["source"] for c in later.copied] == ["busy"]
    assert [f["label"] for f in own_catalog(log_of(root, fork.id))] == ["calm", "busy"]


def test_a_locked_fork_child_is_refused_and_nothing_is_written(
    root: Path, clock: Clock, hold_lock: Any
) -> None:
    _, fork = simple_parent(root, clock, "a")
    hold_lock(Root(root).find(fork.id))
    before = tree_listing(root)

    with pytest.raises(SessionLocked) as raised:
        run(root, fork.id)
    with pytest.raises(SessionLocked):
        run(root, fork.id, dry_run=True)

    assert raised.value.exit_code == 6
    assert tree_listing(root) == before


def test_an_open_child_is_copied_through_its_last_completed_turn(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    crashed = subagent(clock, "crashed", parent, label="crashed", turns=2)
    last = crashed.seq - 1
    crashed.open_turn(clock)
    never = subagent(clock, "never", parent, label="never", turns=0)
    never.open_turn(clock)
    parent.catalog(clock, crashed, label="crashed")
    parent.catalog(clock, never, label="never")
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, crashed, never, fork):
        spec.publish(root)

    summary = run(root, fork.id)

    assert [c["source"] for c in summary.copied] == ["crashed"]
    assert summary.skipped == [{"id": "never", "reason": "open"}]
    copy = view(root, summary.copied[0]["copy"])
    assert copy.lines[: last + 1] == [line.rstrip(b"\n") for line in crashed.lines[: last + 1]]
    assert [e["type"] for e in copy.events[last + 1 :]] == [
        "session/end-seed",
        "subagent/descriptor",
    ]
    assert_clean(root)


def test_uncatalogable_children_are_reported_never_dropped(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    no_label = subagent(clock, "no-label", parent, label=None)
    no_descriptor = subagent(clock, "no-descriptor", parent, descriptor=False)
    v1 = subagent(clock, "v1", parent, label="old style", version=1)
    v2 = subagent(clock, "v2-one-shot", parent, label=None, version=2, mode="one-shot")
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, no_label, no_descriptor, v1, v2, fork):
        spec.publish(root)

    summary = run(root, fork.id)

    copies = {c["source"]: c["copy"] for c in summary.copied}
    assert sorted(copies) == ["v1", "v2-one-shot"]  # nothing is written for the other two
    assert summary.uncatalogable == [
        {"id": "no-label", "source": "no-label", "reason": "continuable descriptor without label"},
        {"id": "no-descriptor", "source": "no-descriptor", "reason": "no descriptor"},
    ]
    assert sorted(children_on_disk(root, fork.id)) == sorted(copies.values())
    facts = own_catalog(log_of(root, fork.id))
    assert [(f["childId"], f["mode"], f.get("label")) for f in facts] == [
        (copies["v1"], "continuable", "old style"),
        (copies["v2-one-shot"], "one-shot", None),
    ]
    partial = summary.partial()
    assert partial is not None and partial.exit_code == 10
    assert [item["code"] for item in partial.failed] == ["UNCATALOGABLE", "UNCATALOGABLE"]

    again = run(root, fork.id)  # the problem stays reported on every run; nothing is added
    assert again.copied == [] and len(again.uncatalogable) == 2


def test_a_child_in_another_project_dir_is_found_and_copied_into_its_own(
    root: Path, clock: Clock
) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    elsewhere = subagent(clock, "elsewhere", parent, label="tools", cwd="/srv/tools")
    parent.catalog(clock, elsewhere, label="tools")
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, elsewhere, fork):
        spec.publish(root)

    summary = run(root, fork.id)

    copy_id = summary.copied[0]["copy"]
    copy_dir = Root(root).find(copy_id)
    assert copy_dir.parent.name == project_key("/srv/tools") == "--srv-tools--"
    assert log_header(copy_dir / "session.v4.jsonl.zstd")["cwd"] == "/srv/tools"
    assert_clean(root)


def test_old_and_corrupt_children_fail_and_the_others_are_copied(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    good = subagent(clock, "good", parent, label="good")
    old = subagent(clock, "old-v3", parent, label="old")
    future = subagent(clock, "future-v9", parent, label="future")
    broken = subagent(clock, "broken", parent, label="broken")
    for spec in (good, old, future, broken):
        parent.catalog(clock, spec, label=spec.id)
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, good, fork):
        spec.publish(root)
    write_spec_as(old, root, 3)
    write_spec_as(future, root, 9)
    broken_dir = root / "--home-u-proj--" / "broken"
    write_log_file(broken_dir / "session.v4.jsonl.zstd", broken.header_line(), [b"{not json\n"])

    summary = run(root, fork.id)

    assert [c["source"] for c in summary.copied] == ["good"]
    failed = {f["id"]: f for f in summary.failed}
    assert sorted(failed) == ["broken", "future-v9", "old-v3"]
    assert failed["old-v3"]["code"] == "UNSUPPORTED_FORMAT"
    assert "open the session once in DSH" in failed["old-v3"]["message"]
    assert failed["future-v9"]["code"] == "UNSUPPORTED_FORMAT"
    assert failed["broken"]["code"] == "CORRUPT_LOG"
    partial = summary.partial()
    assert partial is not None and partial.exit_code == 10
    assert partial.message == "3 of 4 items failed"


def test_a_lineage_cycle_fails_without_looping(root: Path, clock: Clock) -> None:
    """Two subagents naming each other as parent; C is a fork of one of them."""
    first = SessionSpec(
        id="first", created_at=clock(), cwd=CWD, parent="second", origin="subagent", depth=1
    )
    second = SessionSpec(
        id="second", created_at=clock(), cwd=CWD, parent="first", origin="subagent", depth=1
    )
    for spec in (first, second):
        spec.descriptor(clock, spec.id)
        spec.turn(clock)
    fork = fork_of(first, "session-C", clock())
    for spec in (first, second, fork):
        spec.publish(root)

    summary = run(root, fork.id)

    assert [c["source"] for c in summary.copied] == ["second"]
    assert summary.failed == [
        {
            "id": "first",
            "code": "CORRUPT_LOG",
            "message": "lineage cycle: first is its own ancestor",
        }
    ]


def test_a_self_parented_session_is_a_lineage_cycle(root: Path, clock: Clock) -> None:
    loop = SessionSpec(
        id="loop", created_at=clock(), cwd=CWD, parent="loop", origin="subagent", depth=1
    )
    loop.descriptor(clock, "loop")
    loop.turn(clock)
    fork = fork_of(loop, "session-C", clock())
    for spec in (loop, fork):
        spec.publish(root)

    summary = run(root, fork.id)

    assert summary.copied == []
    assert [f["message"] for f in summary.failed] == ["lineage cycle: loop is its own ancestor"]


# -- preconditions ------------------------------------------------------------------------------


def test_a_session_that_is_not_a_fork_child_is_a_usage_error(root: Path, clock: Clock) -> None:
    parent, _ = simple_parent(root, clock, "a")
    with pytest.raises(UsageError, match="not a fork child") as raised:
        run(root, parent.id)
    assert raised.value.exit_code == 2
    with pytest.raises(UsageError, match="not a fork child"):
        run(root, "a")  # a subagent child is seeded-or-not but has an origin


def test_a_fork_child_below_v4_is_refused(root: Path, clock: Clock) -> None:
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    parent.publish(root)
    write_spec_as(fork, root, 3)
    with pytest.raises(UnsupportedFormat, match="open the session once in DSH") as raised:
        run(root, fork.id)
    assert raised.value.exit_code == 8


def test_a_mixed_root_is_refused(root: Path, clock: Clock) -> None:
    _, fork = simple_parent(root, clock, "a")
    plain = SessionSpec(id="plain", created_at=clock(), cwd="/plain")
    plain.turn(clock)
    write_spec_as(plain, root, 4, encoding="plain")
    with pytest.raises(UnsupportedFormat, match="mixed"):
        run(root, fork.id)


# -- relink --all ---------------------------------------------------------------------------------


class Told:
    """A ``progress.Progress`` that records what it is told."""

    def __init__(self) -> None:
        self.stages: list[tuple[str, int | None]] = []
        self.done = 0

    def stage(self, what: str, total: int | None = None) -> None:
        self.stages.append((what, total))
        self.done = 0

    def advance(self, count: int = 1) -> None:
        self.done += count


def test_relink_all_goes_on_past_a_locked_fork_child(
    root: Path, clock: Clock, hold_lock: Any
) -> None:
    parent, fork = simple_parent(root, clock, "a", "b")
    second = fork_of(parent, "session-C2", clock())
    second.publish(root)
    hold_lock(Root(root).find(fork.id))
    seen = Told()

    result = relink_all(Root(root), clock=Clock(1_800_000_000_000, 1), progress=seen)

    assert [r.fork_child for r in result.results] == ["session-C2"]
    assert [c["source"] for c in result.results[0].copied] == ["a", "b"]
    assert [(f["id"], f["code"]) for f in result.failed] == [("session-C", "SESSION_LOCKED")]
    partial = result.partial()
    assert partial is not None and partial.exit_code == 10
    assert partial.message == "1 item failed in 1 of 2 fork children"
    # one stage, counted in agents (session-C2's two copies), not in fork children
    assert seen.stages == [("agents copied", None)]
    assert seen.done == 2


# -- the plan of a fork that does not exist yet -----------------------------------------------


def test_plan_new_fork_plans_what_the_fork_will_copy(root: Path, clock: Clock) -> None:
    s = plugin_scenario(root, clock)
    log = open_log(current_generation(Root(root).find(s.parent.id)), collect=MODEL_TYPES)  # type: ignore[arg-type]
    facts = facts_of(log)
    boundary = facts.turn_ends[-1]
    point = make_fork_point(log, facts, s.parent.id, boundary, 0)
    listing = tree_listing(root)

    plan = plan_new_fork(Root(root), point)

    assert tree_listing(root) == listing
    assert plan.dry_run and plan.fork_child is None and plan.source == s.parent.id
    existing_plan = run(root, s.fork.id, dry_run=True)
    assert len(plan.copied) == 12
    assert plan.copied == [dict(c, parent=None) for c in existing_plan.copied]
    assert plan.skipped == existing_plan.skipped == [{"id": "a-open", "reason": "open"}]
    assert plan.unrelated == existing_plan.unrelated == []


def test_a_fork_of_a_relinked_fork_gets_copies_of_the_copies(root: Path, clock: Clock) -> None:
    _, first = simple_parent(root, clock, "a", "b")
    run(root, first.id)
    first_log = log_of(root, first.id)
    lines = log_lines(first_log)[1:]
    fork2 = SessionSpec(
        id="session-C2", created_at=2_000_000_000_000, cwd=CWD, parent=first.id, is_seeded=True
    )
    fork2.lines = [line + b"\n" for line in lines]
    fork2.end_seed(orjson.loads(lines[-1])["time"])
    fork2.publish(root)

    summary = run(root, fork2.id)

    first_copies = [e.id for e in Root(root).children_of(first.id)]
    assert [c["source"] for c in summary.copied] == first_copies
    assert [c["parent"] for c in summary.copied] == [fork2.id, fork2.id]
    assert [f["label"] for f in own_catalog(log_of(root, fork2.id))] == ["a", "b"]
    assert_clean(root)
    before = tree_digest(root)
    assert run(root, fork2.id).copied == []
    assert tree_digest(root) == before


def test_relink_all_goes_on_past_an_io_error(root: Path, clock: Clock) -> None:
    parent, fork = simple_parent(root, clock, "a")
    second = fork_of(parent, "session-C2", clock())
    second.publish(root)

    with faults.install("eacces", 1):  # the first durable step: the first fork's first copy
        result = relink_all(Root(root), clock=Clock(1_800_000_000_000, 1))

    # The failing copy is the failed item (IO_ERROR, named), not the whole fork child.
    assert [(f["id"], f["code"], f["forkChild"]) for f in result.failed] == [
        ("a", "IO_ERROR", fork.id)
    ]
    assert "Permission denied" in result.failed[0]["message"]
    assert [r.fork_child for r in result.results] == [fork.id, "session-C2"]
    assert [c["source"] for c in result.results[1].copied] == ["a"]
    assert probe(Root(root).find(fork.id)) != "held"


# -- a wide tree: what the plan holds ---------------------------------------------------------


def wide_parent(root: Path, clock: Clock) -> tuple[SessionSpec, SessionSpec]:
    """P with twelve completed children and one whose last turn is open (its copy cuts inside
    its log), all catalogued before the fork point; C = fork of P."""
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    specs = []
    for k in range(12):
        spec = subagent(clock, f"child-{k:02d}", parent, label=f"child {k}", turns=1 + k % 3)
        parent.catalog(clock, spec, label=f"child {k}")
        specs.append(spec)
    crashed = subagent(clock, "crashed", parent, label="crashed", turns=2)
    crashed.open_turn(clock)
    parent.catalog(clock, crashed, label="crashed")
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, *specs, crashed, fork):
        spec.publish(root)
    return parent, fork


def test_the_plan_reads_one_child_log_at_a_time_and_keeps_none(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory flat in the number of agents: each child's log is dropped once its copy's
    prefix is taken, so planning a wide level never holds two child logs, and the walk
    starts with none."""

    _, fork = wide_parent(root, clock)
    alive: list[weakref.ref[SessionLog]] = []
    most = [0]

    def counting_open(*args: Any, **kwargs: Any) -> SessionLog:
        log = open_log(*args, **kwargs)
        alive.append(weakref.ref(log))
        most[0] = max(most[0], sum(1 for ref in alive if ref() is not None))
        return log

    held_at_walk: list[int] = []
    plain_run = relink_module._run

    def counting_run(*args: Any, **kwargs: Any) -> None:
        gc.collect()
        held_at_walk.append(sum(1 for ref in alive if ref() is not None))
        plain_run(*args, **kwargs)

    for module in (relink_module, relinkplan):
        monkeypatch.setattr(module, "open_log", counting_open)
    monkeypatch.setattr(relink_module, "_run", counting_run)
    summary = run(root, fork.id)

    assert len(summary.copied) == 13 and summary.ok
    assert len(alive) == 13  # every child read once
    assert most[0] == 1
    assert held_at_walk == [0]


def test_the_walk_frees_each_copy_it_writes_and_keeps_no_log_of_the_fork_child(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory flat in the number of agents, during the walk too: once the copies of a level
    are written, none of their planned items is alive, and the fork child's own log (whose
    catalog holds a fact per agent of its source) is not held through the run."""

    _, fork = wide_parent(root, clock)
    seen: list[tuple[int, int]] = []
    plain_append = relinkwalk._Walker._append_to_parent

    def counting_append(walker: Any, level: Any, parent: Any, new_facts: Any) -> None:
        if parent.id == fork.id:  # the top level: every copy under C written
            gc.collect()
            objects = gc.get_objects()
            copies = sum(1 for o in objects if type(o) is relinkplan._Copy)
            c_logs = sum(1 for o in objects if isinstance(o, SessionLog) and o.header.id == fork.id)
            seen.append((copies, c_logs))
        plain_append(walker, level, parent, new_facts)

    monkeypatch.setattr(relinkwalk._Walker, "_append_to_parent", counting_append)
    summary = run(root, fork.id)

    assert len(summary.copied) == 13 and summary.ok
    assert seen == [(0, 0)]


def test_runs_reread_from_their_files_make_the_same_copies(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the plan's budget a copy's verbatim frames stay in the source file and are copied
    from it: the copies are byte for byte those made from the runs held in memory."""
    held, reread = tmp_path / "held" / "sessions", tmp_path / "reread" / "sessions"
    _, fork = wide_parent(held, clock)
    shutil.copytree(held.parent, reread.parent)
    first = run(held, fork.id)
    monkeypatch.setattr(relinkplan, "HELD_RUNS_MAX", 0)
    reopened: list[str] = []
    plain_open = seeded.RunRef.open

    def counting_open(ref: seeded.RunRef) -> FileRun:
        reopened.append(ref.path)
        return plain_open(ref)

    monkeypatch.setattr(seeded.RunRef, "open", counting_open)
    second = run(reread, fork.id)

    assert first.to_json() == second.to_json()
    assert len(first.copied) == 13 and len(reopened) == 13
    assert tree_digest(held) == tree_digest(reread)
    assert_clean(reread)


def test_a_source_changed_after_the_plan_fails_stale_and_a_rerun_copies_it(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run reread from its file must come from the file the plan read: one changed since
    (here its mtime) is SESSION_STALE, its copy is not written, the others are."""
    _, fork = wide_parent(root, clock)
    changed = log_of(root, "child-03")
    plain_run = relink_module._run

    def touching_run(*args: Any, **kwargs: Any) -> None:
        st = changed.stat()
        os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        plain_run(*args, **kwargs)

    monkeypatch.setattr(relinkplan, "HELD_RUNS_MAX", 0)
    monkeypatch.setattr(relink_module, "_run", touching_run)
    summary = run(root, fork.id)

    assert [(f["id"], f["code"]) for f in summary.failed] == [("child-03", "SESSION_STALE")]
    assert len(summary.copied) == 12
    assert "child-03" not in {c["source"] for c in summary.copied}
    monkeypatch.setattr(relink_module, "_run", plain_run)
    again = run(root, fork.id)
    assert [c["source"] for c in again.copied] == ["child-03"] and again.ok
    assert_clean(root)


def _session_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("**/*") if p.is_dir() and current_generation(p) is not None)


def test_the_planners_narrow_read_agrees_with_the_full_read_on_every_log(
    tmp_path: Path, clock: Clock
) -> None:
    """The planner parses only the types it needs (``_PLAN_TYPES``) and takes an event's
    time from them when it can (``_event_time``): on every log of a generated root, of the
    plugin scenario and of every foreign root, the read fails alike, the facts relink uses
    are the same and every event's time is the one the full read gives."""
    generated = tmp_path / "generated" / "sessions"
    generate(generated, sessions=2, agents=3, depth=2, turns=3, seed=11)
    plugin_scenario(tmp_path / "plugin" / "sessions", clock)
    wide_parent(tmp_path / "wide" / "sessions", clock)
    dirs = _session_dirs(tmp_path)
    if (FOREIGN / "roots").exists():
        dirs += _session_dirs(FOREIGN / "roots")
    compared = 0
    for session_dir in dirs:
        generation = current_generation(session_dir)
        assert generation is not None
        try:
            full = open_log(generation, collect=MODEL_TYPES)
        except DshForkError as exc:
            with pytest.raises(DshForkError) as narrow_error:
                open_log(generation, collect=forkpoint._PLAN_TYPES)
            assert narrow_error.value.code == exc.code, session_dir
            continue
        narrow = open_log(generation, collect=forkpoint._PLAN_TYPES)
        wide, lean = facts_of(full), facts_of(narrow)
        for name in ("event_count", "turn_marks", "tagged_markers", "catalog", "descriptors"):
            assert getattr(lean, name) == getattr(wide, name), (session_dir, name)
        assert lean.presets == wide.presets and lean.cut == wide.cut, session_dir
        times = [forkpoint._event_time(narrow, seq) for seq in range(narrow.event_count)]
        assert times == [full.event(seq).time for seq in range(full.event_count)], session_dir
        compared += 1
    assert compared >= 40


def test_an_append_given_the_cut_reparses_only_the_own_range(root: Path, clock: Clock) -> None:
    """relink appends to a fork child whose cut it read under the lock it still holds: the
    re-read parses the own range only (a parent's inherited facts are one per agent), with
    the same own facts; a cut that is not the log's gets the facts of the whole log."""
    _, fork = simple_parent(root, clock, "a", "b")
    first = run(root, fork.id)  # C's own range: its marker and the facts of the copies
    assert len(first.copied) == 2
    c_dir = Root(root).find(fork.id)
    generation = current_generation(c_dir)
    assert generation is not None
    full = facts_of(open_log(generation, collect=MODEL_TYPES))
    cut = full.cut
    assert [e.seq < cut for e in full.catalog] == [True, True, False, False]
    seen: list[Any] = []

    def build(log: SessionLog, facts: Any) -> list[appending.NewEvent]:
        seen.append((facts.cut, [e.seq for e in facts.catalog], facts.own_catalog()))
        return []

    appending.append(c_dir, build, collect=forkpoint._APPEND_TYPES, cut=cut)
    appending.append(c_dir, build, collect=forkpoint._APPEND_TYPES, cut=cut - 1)
    own = [e.seq for e in full.catalog if e.seq > cut]
    assert seen[0] == (cut, own, full.own_catalog())
    assert seen[1] == (cut, [e.seq for e in full.catalog], full.own_catalog())


def test_a_catalog_fact_held_encoded_parses_back_equal_even_with_a_lone_surrogate() -> None:
    """The walk holds each new fact as its encoded line until its parent's append, which
    parses it again: the values are those it was made of, a label with a lone surrogate
    (descriptor data DSH accepted leniently) included, and the bytes are exactly sized."""
    fact = {
        "version": 0,
        "childId": "session-c",
        "childCreatedAt": 1_767_225_603_750,
        "mode": "continuable",
        "label": "agent \ud800 1",
    }
    held = relinkwalk._NewFact.of(fact)
    assert held.data() == fact
    assert (held.created_at, held.child_id) == (1_767_225_603_750, "session-c")
    assert sys.getsizeof(held.encoded) < len(held.encoded) + 64
