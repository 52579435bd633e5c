"""Queued input (``agent/inbox/spliced``, format §10.9) and ``fork --drop-inherited-inbox``.

A splice edits one target's list; claims and cancellations are both removals (DSH writes
``outcome: "canceled"`` on a removal that drops the items). A fork inherits what is queued at
its boundary; with ``--drop-inherited-inbox`` its own range starts with one canceling splice per
target, and inspect then shows no inherited pending item.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import log_events, log_header, log_lines, run_cli

from dsh_fork import inbox
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.validation import validate_dir

SPLICE = "agent/inbox/spliced"


def message(text: str) -> dict[str, Any]:
    return {
        "id": f"m-{text}",
        "role": "user",
        "source": {"kind": "user"},
        "content": [{"type": "text", "text": text}],
    }


def insert(target: str, start: int, *texts: str) -> dict[str, Any]:
    return {"target": target, "start": start, "inserted": [message(t) for t in texts]}


def remove(target: str, count: int, *, canceled: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {"target": target, "start": 0, "removedCount": count, "inserted": []}
    if canceled:
        data["outcome"] = "canceled"
    return data


# -- the fold ---------------------------------------------------------------------------------


def test_targets_are_separate_lists() -> None:
    splices = [(0, insert("next-turn", 0, "a")), (1, insert("next-step", 0, "b"))]

    queues = inbox.fold(splices)

    assert [q.item["id"] for q in queues["next-turn"]] == ["m-a"]
    assert [q.item["id"] for q in queues["next-step"]] == ["m-b"]


def test_a_claim_and_a_cancellation_both_remove() -> None:
    splices = [
        (0, insert("next-turn", 0, "a", "b", "c")),
        (1, remove("next-turn", 1)),
        (2, {**remove("next-turn", 1, canceled=True), "start": 1}),
    ]

    assert [m["id"] for m in inbox.pending(splices)] == ["m-b"]
    assert [m["id"] for m in inbox.pending(splices, through=0)] == ["m-a", "m-b", "m-c"]


def test_inherited_pending_is_what_the_prefix_queued_and_the_end_still_holds() -> None:
    splices = [
        (0, insert("next-turn", 0, "old")),
        (5, insert("next-turn", 1, "own")),
    ]

    assert [m["id"] for m in inbox.inherited_pending(splices, cut=3)] == ["m-old"]
    dropped = [*splices, (6, remove("next-turn", 1, canceled=True))]
    assert inbox.inherited_pending(dropped, cut=3) == []


def test_cancellations_name_each_non_empty_target() -> None:
    splices = [
        (0, insert("next-turn", 0, "a", "b")),
        (1, insert("next-step", 0, "c")),
        (2, remove("next-step", 1)),
    ]

    assert inbox.cancellations(splices, through=2) == [remove("next-turn", 2, canceled=True)]
    assert inbox.cancellations(splices, through=1) == [
        remove("next-turn", 2, canceled=True),
        remove("next-step", 1, canceled=True),
    ]


def test_a_malformed_splice_is_not_applied() -> None:
    splices = [
        (0, insert("next-turn", 0, "a")),
        (1, {"target": "next-turn", "start": "0", "removedCount": 1, "inserted": []}),
        (2, {"start": 0, "removedCount": 1, "inserted": []}),
        (3, "not an object"),
    ]

    assert [m["id"] for m in inbox.pending(splices)] == ["m-a"]


# -- fork --drop-inherited-inbox --------------------------------------------------------------


def queued_source(root: Path, clock: Clock) -> Path:
    """One closed turn, then next-turn [a, b] with a claimed, and next-step [c]."""
    spec = SessionSpec(id="src", created_at=clock(), cwd="/w")
    spec.turn(clock)
    spec.add(SPLICE, clock(), insert("next-turn", 0, "a", "b"))
    spec.add(SPLICE, clock(), remove("next-turn", 1))
    spec.add(SPLICE, clock(), insert("next-step", 0, "c"))
    return spec.publish(root) / CURRENT_NAME


def pending_of(root: Path, session: str) -> list[str]:
    result = run_cli("--root", root, "inspect", session, "--json")
    assert result.exit_code == 0, result.stderr
    return [item["id"] for item in result.json()["pendingInbox"]]


def test_a_plain_fork_inherits_the_queued_items(root: Path, clock: Clock) -> None:
    queued_source(root, clock)

    assert run_cli("--root", root, "fork", "src", "--id", "child").exit_code == 0

    assert pending_of(root, "child") == ["m-b", "m-c"]


def test_drop_inherited_inbox_cancels_each_target_after_the_marker(
    root: Path, clock: Clock
) -> None:
    source = queued_source(root, clock)

    result = run_cli(
        "--root", root, "fork", "src", "--id", "child", "--drop-inherited-inbox", "--json"
    )

    assert result.exit_code == 0, result.stderr
    assert result.json()["child"]["inboxCanceled"] == {"next-turn": 1, "next-step": 1}
    path = root / "--w--" / "child" / CURRENT_NAME
    inherited = len(log_lines(source)) - 1
    assert log_lines(path)[1 : inherited + 1] == log_lines(source)[1:]
    own = log_events(path)[inherited:]
    marker_time = log_events(path)[inherited - 1]["time"]
    created_at = log_header(path)["createdAt"]
    assert own == [
        {
            "type": "session/end-seed",
            "seq": inherited,
            "time": marker_time,
            "data": {"inherited": True},
        },
        {
            "type": SPLICE,
            "seq": inherited + 1,
            "time": created_at,
            "data": remove("next-turn", 1, canceled=True),
        },
        {
            "type": SPLICE,
            "seq": inherited + 2,
            "time": created_at,
            "data": remove("next-step", 1, canceled=True),
        },
    ]
    assert pending_of(root, "child") == []
    assert pending_of(root, "src") == []  # the source is no fork: nothing inherited
    assert [f for f in validate_dir(path.parent) if f.severity == "error"] == []


def test_a_fork_at_an_earlier_boundary_cancels_what_was_queued_there(
    root: Path, clock: Clock
) -> None:
    queued_source(root, clock)
    boundary = 6  # the insert of [a, b], before the claim (a turn is seqs 0..5)

    result = run_cli(
        "--root", root, "fork", "src", "--at", str(boundary), "--id", "early",
        "--drop-inherited-inbox", "--json",
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    assert result.json()["child"]["inboxCanceled"] == {"next-turn": 2}
    assert pending_of(root, "early") == []


def test_nothing_queued_nothing_appended(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="quiet", created_at=clock(), cwd="/w")
    spec.turn(clock)
    spec.publish(root)

    result = run_cli(
        "--root", root, "fork", "quiet", "--id", "c", "--drop-inherited-inbox", "--json"
    )

    assert result.json()["child"]["inboxCanceled"] == {}
    assert log_events(root / "--w--" / "c" / CURRENT_NAME)[-1]["type"] == "session/end-seed"


def test_a_dry_run_names_what_it_would_cancel(root: Path, clock: Clock) -> None:
    queued_source(root, clock)

    result = run_cli("--root", root, "fork", "src", "--drop-inherited-inbox", "--dry-run")

    assert result.exit_code == 0
    assert "inherited inbox: canceled: 1 next-turn, 1 next-step" in result.stdout
    assert not (root / "--w--").joinpath("child").exists()
