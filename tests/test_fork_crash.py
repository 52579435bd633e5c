"""fork under failure: a crash or an I/O error at every durable step, and a source that changes
while it is read (semantics §2.4, §2.5, scenarios §10.3).
"""

from __future__ import annotations

import builtins
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import cli_launcher
import orjson
import pytest
from conftest import log_lines

from dsh_fork import faults
from dsh_fork import frames as zframes
from dsh_fork.discovery import Root
from dsh_fork.errors import IoError, SessionAlreadyExists, SessionStale
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.fork import ForkOptions, ForkResult, fork_session
from dsh_fork.fsdir import open_regular
from dsh_fork.generations import CURRENT_NAME, LOCK_NAME, list_generations
from dsh_fork.locking import probe
from dsh_fork.validation import validate_dir

SRC = "session-source"
CWD = "/home/u/proj"
PROJECT = "--home-u-proj--"
NOW = 1_800_000_000_000


def lib_fork(root: Path, child_id: str = "child") -> ForkResult:
    return fork_session(
        SRC,
        str(root),
        ForkOptions(child_id=child_id, agents=False),
        clock=lambda: NOW,
    )


def publish_source(root: Path, clock: Clock, turns: int = 3) -> Path:
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD)
    for _ in range(turns):
        spec.turn(clock)
        spec.flush()
    return spec.publish(root) / CURRENT_NAME


def turn_frame(first_seq: int, turn: int, time: int) -> bytes:
    """One flushed batch holding a whole closed turn, as a live DSH writer appends it."""
    lines = [
        {"type": "turn/start", "seq": first_seq, "time": time, "data": {"turn": turn}},
        {
            "type": "step/start",
            "seq": first_seq + 1,
            "time": time,
            "data": {"turn": turn, "step": 1},
        },
        {"type": "step/end", "seq": first_seq + 2, "time": time, "data": {"turn": turn, "step": 1}},
        {
            "type": "turn/end",
            "seq": first_seq + 3,
            "time": time,
            "data": {"turn": turn, "reason": {"kind": "completed"}},
        },
    ]
    return zframes.encode(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def error_findings(session_dir: Path) -> list[str]:
    return [f"{f.code}: {f.message}" for f in validate_dir(session_dir) if f.severity == "error"]


# -- a failure at every durable step -------------------------------------------------------------


def durable_steps(root: Path) -> list[tuple[str, str]]:
    """The durable steps of one fork, counted by a plan that never fires."""
    with faults.install("crash", 0) as plan:
        lib_fork(root, "measure")
    shutil.rmtree(root / PROJECT / "measure")
    return plan.log


def test_a_fork_has_the_durable_steps_of_a_publish(root: Path, clock: Clock, temps: str) -> None:
    publish_source(root, clock)

    kinds = [kind for kind, _ in durable_steps(root)]

    assert kinds[:3] == ["mkdir", "fsync-dir", "lock"]
    assert kinds[3] == "create"
    last = ["fsync", "link", "fsync-dir"] + (["unlink"] if temps == "named" else [])
    assert kinds[-len(last) :] == last
    assert set(kinds[4 : -len(last)]) == {"write"}


@pytest.mark.parametrize("action", ["crash", "enospc", "eio"])
def test_a_failure_at_any_step_leaves_no_child_or_a_whole_one(
    tmp_path: Path, clock: Clock, action: str
) -> None:
    pristine = tmp_path / "pristine" / "sessions"
    source = publish_source(pristine, clock)
    steps = durable_steps(pristine)
    link_step = [kind for kind, _ in steps].index("link") + 1
    expected = log_lines(pristine / PROJECT / SRC / CURRENT_NAME)
    source_digest = digest(source)

    for k in range(1, len(steps) + 1):
        root = tmp_path / f"{action}-{k}" / "sessions"
        shutil.copytree(pristine, root)
        child_dir = root / PROJECT / "child"
        if action != "crash" and steps[k - 1][0] == "unlink":
            with faults.install(action, k):  # a temp that cannot be removed is no failure
                lib_fork(root)
        else:
            with faults.install(action, k), pytest.raises((faults.InjectedCrash, IoError)):
                lib_fork(root)

        assert digest(root / PROJECT / SRC / CURRENT_NAME) == source_digest
        assert probe(child_dir) != "held"
        # The canonical name appears by link(), after the temp file was written and fsynced:
        # a failure before it leaves no child, one after it (dir fsync, temp unlink) a whole one.
        published = k > link_step or (action == "crash" and k == link_step)
        if not published:
            assert list_generations(child_dir) == [], f"{action} at step {k}: {steps[k - 1]}"
            assert not Root(root).exists("child")
            result = lib_fork(root)  # the rerun with the same id
            assert result.path == child_dir / CURRENT_NAME
        else:
            with pytest.raises(SessionAlreadyExists):
                lib_fork(root)
        child_lines = log_lines(child_dir / CURRENT_NAME)
        assert child_lines[1:19] == expected[1:19]
        assert len(child_lines) == 20
        assert error_findings(child_dir) == []


def test_an_io_error_is_reported_without_a_traceback(root: Path, clock: Clock) -> None:
    publish_source(root, clock)
    steps = durable_steps(root)
    write_step = [kind for kind, _ in steps].index("write") + 1

    env = {**os.environ, faults.ENV_VAR: f"enospc:{write_step}"}
    proc = subprocess.run(
        cli_launcher.argv("--root", str(root), "fork", SRC, "--id", "child"),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )

    assert proc.returncode == 11  # the temp has no name: the error names the log it was to be
    child_log = root / PROJECT / "child" / CURRENT_NAME
    assert proc.stderr == f"Error: cannot write {child_log}: No space left on device\n"
    assert len(proc.stderr.splitlines()) == 1
    assert list_generations(root / PROJECT / "child") == []


def test_a_killed_process_leaves_no_child_and_a_rerun_succeeds(root: Path, clock: Clock) -> None:
    source = publish_source(root, clock)
    before = digest(source)
    steps = durable_steps(root)
    link_step = [kind for kind, _ in steps].index("link")  # the step before link: fsync

    env = {**os.environ, faults.ENV_VAR: f"kill:{link_step}"}
    argv = cli_launcher.argv("--root", str(root), "fork", SRC, "--id", "child")
    proc = subprocess.run([*argv, "--no-agents"], env=env, capture_output=True, check=False)

    assert proc.returncode == -9
    child_dir = root / PROJECT / "child"
    assert list_generations(child_dir) == []  # and its unnamed temp went with the process
    assert sorted(p.name for p in child_dir.iterdir()) == [LOCK_NAME]
    assert probe(child_dir) == "free"
    assert digest(source) == before
    rerun = subprocess.run([*argv, "--no-agents"], capture_output=True, check=False)
    assert rerun.returncode == 0
    assert len(log_lines(child_dir / CURRENT_NAME)) == 20


# -- a source that changes while it is read -----------------------------------------------------


class Appender:
    """Appends one closed turn to the source each time ``stable_read`` opens it."""

    def __init__(self, path: Path, events: int, turns: int, times: int) -> None:
        self.path = path
        self.events = events
        self.turns = turns
        self.left = times

    def open(self, file: Path) -> int:
        if Path(file) == self.path and self.left > 0:
            self.left -= 1
            self.turns += 1
            with builtins.open(self.path, "ab") as handle:
                handle.write(turn_frame(self.events, self.turns, NOW))
            self.events += 4
        return open_regular(file)


def test_a_source_changing_during_both_reads_is_stale(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = publish_source(root, clock)
    appender = Appender(source, 18, 3, times=2)
    monkeypatch.setattr("dsh_fork.reader.open_fd", appender.open)

    with pytest.raises(SessionStale, match="changed while it was being read"):
        lib_fork(root)

    assert list((root / PROJECT).iterdir()) == [root / PROJECT / SRC]


def test_a_source_stable_on_the_retry_is_forked_as_read(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = publish_source(root, clock)
    appender = Appender(source, 18, 3, times=1)
    monkeypatch.setattr("dsh_fork.reader.open_fd", appender.open)

    result = lib_fork(root)

    assert result.child.boundary == 21
    assert log_lines(result.path or Path())[1:23] == log_lines(source)[1:23]


APPENDER = textwrap.dedent(
    """
    import os, sys, time
    import orjson
    from dsh_fork import frames
    path, seq, turn, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    print("appending", flush=True)
    while not os.path.exists(stop):
        turn += 1
        lines = [
            {"type": "turn/start", "seq": seq, "time": 1, "data": {"turn": turn}},
            {"type": "turn/end", "seq": seq + 1, "time": 2,
             "data": {"turn": turn, "reason": {"kind": "completed"}}},
        ]
        frame = frames.encode(b"".join(orjson.dumps(x) + b"\\n" for x in lines))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, frame)
        os.close(fd)
        seq += 2
        time.sleep(0.0005)
    """
)


def test_forks_racing_a_live_appender_are_stale_or_consistent(root: Path, clock: Clock) -> None:
    source = publish_source(root, clock)
    stop = root.parent / "stop"
    proc = subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(source), "18", "3", str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "appending"
    outcomes: list[tuple[str, int | None]] = []
    try:
        for i in range(25):
            try:
                result = lib_fork(root, f"child-{i}")
            except SessionStale:
                outcomes.append(("stale", None))
            else:
                outcomes.append((f"child-{i}", result.child.boundary))
    finally:
        stop.touch()
        proc.wait(timeout=60)
    final = log_lines(source)
    for child_id, boundary in outcomes:
        if boundary is None:
            continue
        child_dir = root / PROJECT / child_id
        lines = log_lines(child_dir / CURRENT_NAME)
        assert lines[1 : boundary + 2] == final[1 : boundary + 2]
        assert len(lines) == boundary + 3
        assert orjson.loads(lines[-1])["type"] == "session/end-seed"
        assert orjson.loads(lines[boundary + 1])["type"] == "turn/end"
        assert error_findings(child_dir) == []
    assert len(outcomes) == 25
