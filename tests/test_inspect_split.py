"""inspect split between two processes reports exactly what one process reports.

On a large log a child checks the later half from a turn's start (``inspect._run_parts``);
its result is taken only when it continues the earlier half exactly. Each scenario builds a
log whose frames each hold one turn, so the split is taken, with findings on both sides of
the middle, and compares the whole ``--json`` document (events included) with and without
the split.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh_fork import inspect as inspect_module
from dsh_fork.discovery import locate
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.reader import FramedLog, open_log

Shape = Callable[[SessionSpec, Clock, int], None]


def one_turn_per_frame(spec: SessionSpec, clock: Clock, turns: int, extra: Shape) -> None:
    for k in range(turns):
        spec.turn(clock, f"turn {k}")
        extra(spec, clock, k)
        spec.flush()


def report(root: Path, session_id: str) -> dict[str, Any]:
    located = locate(session_id, str(root), {})
    return inspect_module.inspect_session(located, events=True).to_json()


def both_ways(
    root: Path, session_id: str, monkeypatch: pytest.MonkeyPatch, *, taken: bool
) -> dict[str, Any]:
    """The report with the split, after checking that the split was offered, whether the
    child's half was taken, and that one process gives the same document."""
    monkeypatch.setattr(inspect_module, "SPLIT_MIN_BYTES", 64)
    located = locate(session_id, str(root), {})
    log = open_log(located.generation, index=False)
    assert isinstance(log, FramedLog) and inspect_module._later_part(log) is not None
    outcomes: list[bool] = []
    absorb = inspect_module._Pass.absorb

    def spy(self: inspect_module._Pass, later: inspect_module._Pass) -> bool:
        outcomes.append(absorb(self, later))
        return outcomes[-1]

    monkeypatch.setattr(inspect_module._Pass, "absorb", spy)
    split = report(root, session_id)
    assert outcomes == [taken]
    monkeypatch.setattr(inspect_module, "SPLIT_MIN_BYTES", 1 << 50)
    assert report(root, session_id) == split
    return split


def nothing(spec: SessionSpec, clock: Clock, k: int) -> None:
    del spec, clock, k


def test_a_valid_log(root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SessionSpec(id="valid", created_at=clock())
    one_turn_per_frame(spec, clock, 40, nothing)
    spec.publish(root)
    out = both_ways(root, "valid", monkeypatch, taken=True)
    assert out["turns"]["completed"] == 40
    assert out["counts"] == {"error": 0, "warning": 0, "info": 0}


def test_more_findings_of_one_code_than_are_shown(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two unknown events per turn: 80 UNKNOWN_EVENT findings, 50 shown, 30 counted."""

    def unknown(spec: SessionSpec, clock: Clock, k: int) -> None:
        spec.add("future/thing", clock(), {"k": k})
        spec.add("future/thing", clock(), {"k": k})

    spec = SessionSpec(id="noisy", created_at=clock())
    one_turn_per_frame(spec, clock, 40, unknown)
    spec.publish(root)
    out = both_ways(root, "noisy", monkeypatch, taken=True)
    codes = [f["code"] for f in out["findings"]]
    assert codes.count("UNKNOWN_EVENT") == 51  # 50 shown and one "30 more" summary
    assert "30 more UNKNOWN_EVENT findings not shown" in [f["message"] for f in out["findings"]]


def test_a_command_run_early_and_done_late(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The later half cannot know the earlier commands: its result is not taken."""

    def commands(spec: SessionSpec, clock: Clock, k: int) -> None:
        if k == 2:
            spec.add("command/run", clock(), {"commandId": "c1"})
        if k == 35:
            spec.add("command/done", clock(), {"commandId": "c1"})
            spec.add("command/done", clock(), {"commandId": "c2"})

    spec = SessionSpec(id="commands", created_at=clock())
    one_turn_per_frame(spec, clock, 40, commands)
    spec.publish(root)
    out = both_ways(root, "commands", monkeypatch, taken=False)
    messages = [f["message"] for f in out["findings"]]
    assert "command/done 'c2' follows no command/run" in messages
    assert "command/done 'c1' follows no command/run" not in messages


def test_a_late_title_citing_an_early_message(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def titles(spec: SessionSpec, clock: Clock, k: int) -> None:
        if k == 36:
            data = {"title": "t", "messageSeqs": [1, 2], "source": {"kind": "llm"}}
            spec.add("session/title", clock(), data)

    spec = SessionSpec(id="titled", created_at=clock())
    one_turn_per_frame(spec, clock, 40, titles)
    spec.publish(root)
    out = both_ways(root, "titled", monkeypatch, taken=False)
    assert [f["code"] for f in out["findings"]] == ["TITLE"]  # seq 2 is no user message


def test_an_open_turn_at_the_end_and_a_wrong_turn_number_late(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SessionSpec(id="open", created_at=clock())
    one_turn_per_frame(spec, clock, 30, nothing)
    spec.turns += 1  # turn 31 is skipped: turn/start 32 is misnumbered
    one_turn_per_frame(spec, clock, 8, nothing)
    spec.open_turn(clock)
    spec.publish(root)
    out = both_ways(root, "open", monkeypatch, taken=True)
    assert out["turns"]["open"]["turn"] == 40
    assert "LIFECYCLE" in [f["code"] for f in out["findings"]]
