"""The environment failing (issue 5, guarantee 2), and the source guard itself (guarantee 6).

I/O errors are IO_ERROR (exit 11) with one line naming the path, never INTERNAL; a session
whose canonical name was linked is published, whatever fails after; an unreadable dir is a
doctor finding. The guard that ``run_cli`` wraps around every command of the suite is shown
to catch each kind of damage it is there for.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import log_lines, run_cli
from relinkkit import CWD, plugin_scenario
from safetykit import RootGuard, appended_problem, guarded, is_read_only, roots_of

from dsh_fork import faults, writer
from dsh_fork import frames as zframes
from dsh_fork.discovery import Root
from dsh_fork.durable import is_own_temp
from dsh_fork.errors import IoError
from dsh_fork.fixtures import Clock
from dsh_fork.fork import ForkOptions
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import project_key

PROJECT = project_key(CWD)
SOURCE = "session-P_A"


@pytest.fixture
def tree(root: Path) -> Path:
    plugin_scenario(root, Clock(), children=2)
    return root


def step_of(root: Path, kind: str, argv: list[str], tmp_path: Path) -> int:
    """The number of the first durable step of ``kind`` the command takes."""
    scratch = tmp_path / "count" / "sessions"
    shutil.copytree(root, scratch)
    from dsh_fork.fork import fork_session

    with faults.install("crash", 0) as plan:
        fork_session(
            SOURCE,
            str(scratch),
            ForkOptions(child_id="child", agents=False),
        )
    assert argv[:1] == ["fork"]
    return next(k for k, (name, _) in enumerate(plan.log, 1) if name == kind)


# -- I/O errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("enospc", "No space left on device"),
        ("eacces", "Permission denied"),
        ("erofs", "Read-only file system"),
        ("eio", "Input/output error"),
    ],
)
def test_a_failing_write_is_io_error_naming_the_path(
    tree: Path, tmp_path: Path, action: str, reason: str, temps: str
) -> None:
    argv = ["fork", SOURCE, "--id", "child", "--no-agents"]
    k = step_of(tree, "create", argv, tmp_path)
    child = tree / PROJECT / "child"

    result = run_cli("--root", tree, *argv, env={faults.ENV_VAR: f"{action}:{k}"})
    as_json = run_cli("--root", tree, *argv, "--json", env={faults.ENV_VAR: f"{action}:{k}"})
    faults.load_from_env()

    assert result.exit_code == 11
    error = as_json.json()["error"]
    assert error["code"] == "IO_ERROR" and error["message"].endswith(reason)
    if temps == "named":
        assert result.stderr.startswith(f"Error: cannot write {child}/session.v4.jsonl.zstd.")
        assert result.stderr.endswith(f".dsh-fork.tmp: {reason}\n")
        assert is_own_temp(Path(error["path"]).name)
    else:  # the unnamed temp's error names the log it was to become
        assert result.stderr == f"Error: cannot write {child / CURRENT_NAME}: {reason}\n"
        assert Path(error["path"]) == child / CURRENT_NAME
    assert not child.exists()  # the dir the fork made goes again, its lock file with it


def test_a_failing_dir_fsync_after_the_link_says_the_session_was_published(
    tree: Path, tmp_path: Path
) -> None:
    argv = ["fork", SOURCE, "--id", "child", "--no-agents"]
    link = step_of(tree, "link", argv, tmp_path)

    result = run_cli("--root", tree, *argv, env={faults.ENV_VAR: f"eio:{link + 1}"})
    faults.load_from_env()

    final = tree / PROJECT / "child" / CURRENT_NAME
    assert result.exit_code == 11
    assert result.stderr == (
        f"Error: published {final}, but syncing its directory failed (Input/output error): "
        "the session exists and may not survive a system crash\n"
    )
    assert Root(tree).exists("child") and len(log_lines(final)) > 1
    assert [p.name for p in final.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_temp_that_cannot_be_removed_after_the_link_is_no_failure(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "UNNAMED_TEMPS", False)  # only a named temp is removed
    argv = ["fork", SOURCE, "--id", "child", "--no-agents"]
    unlink = step_of(tree, "unlink", argv, tmp_path)

    result = run_cli("--root", tree, *argv, env={faults.ENV_VAR: f"eacces:{unlink}"})
    faults.load_from_env()

    assert result.exit_code == 0, result.stderr
    child = tree / PROJECT / "child"
    temps = [p.name for p in child.iterdir() if p.name.endswith(".tmp")]
    assert len(temps) == 1 and is_own_temp(temps[0])
    relinked = run_cli("--root", tree, "relink", "child")  # the next run under its lock
    assert relinked.exit_code == 0
    assert [p.name for p in child.iterdir() if p.name.endswith(".tmp")] == []


def test_io_error_is_an_oserror_with_its_errno() -> None:
    error = IoError.of(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/r/x"))
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert (error.code, error.exit_code, error.message) == (
        "IO_ERROR",
        11,
        "cannot write /r/x: No space left on device",
    )
    assert error.to_json() == {"code": "IO_ERROR", "message": error.message, "path": "/r/x"}


@pytest.fixture
def unlistable(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """Dirs whose listing fails with EACCES (the sandbox runs as root, so permissions are
    simulated at ``os.scandir``/``os.listdir``, the calls a listing makes)."""
    denied: set[str] = set()
    real_scandir, real_listdir = os.scandir, os.listdir

    def check(path: Any) -> None:
        if os.fspath(path) in denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))

    def scandir(path: Any = ".") -> Any:
        check(path)
        return real_scandir(path)

    def listdir(path: Any = ".") -> list[str]:
        check(path)
        return real_listdir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    yield denied


def test_an_unreadable_session_dir_is_a_doctor_finding(tree: Path, unlistable: set[str]) -> None:
    hidden = tree / PROJECT / "a-child-02"
    unlistable.add(str(hidden))

    doctored = run_cli("--root", tree, "doctor", "--json")
    inspected = run_cli("--root", tree, "inspect", "a-child-02")

    assert doctored.exit_code == 10
    found = [f for f in doctored.json()["findings"] if f["code"] == "UNREADABLE"]
    assert [(f["severity"], f["path"]) for f in found] == [("error", str(hidden))]
    assert "Permission denied" in found[0]["message"]
    assert inspected.exit_code in (3, 11)
    assert "internal error" not in inspected.stderr and "Traceback" not in inspected.stderr


def test_an_unreadable_project_dir_is_a_doctor_finding(tree: Path, unlistable: set[str]) -> None:
    unlistable.add(str(tree / PROJECT))

    doctored = run_cli("--root", tree, "doctor", "--json")

    assert doctored.exit_code == 10
    codes = [f["code"] for f in doctored.json()["findings"]]
    assert "UNREADABLE" in codes


# -- the source guard catches what it is there for ----------------------------------------------


def frames_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return [data[f.start : f.end] for f in zframes.scan(data).frames]


def test_the_guard_admits_whole_frames_and_a_repaired_torn_tail(tmp_path: Path) -> None:
    old = zframes.encode(b'{"a":1}\n')
    frame = zframes.encode(b'{"b":2}\n')
    assert appended_problem(old, old) is None
    assert appended_problem(old, old + frame + frame) is None
    torn = old + frame[:5]
    assert appended_problem(torn, old + frame) is None  # DSH's recovery cut the torn bytes
    assert appended_problem(old, old + frame[:-3]) == f"a torn frame was left at offset {len(old)}"
    assert appended_problem(old, old + frame[:-3], torn_ok=True) is None
    assert "not zstd frames" in str(appended_problem(old, old + b"garbage!"))
    changed = f"bytes before offset {len(old)} changed"
    assert appended_problem(old, old[:-1] + b"\x00" + frame) == changed
    assert appended_problem(old, frame) == changed


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("flip a byte", "bytes before offset"),
        ("delete", "a generation file was deleted"),
        ("append garbage", "not zstd frames"),
        ("new generation", "a new generation beside an existing session's"),
        ("v3 append", "a generation other than v4 zstd was written"),
        ("delete a DSH temp", "a temp dsh-fork does not own was deleted"),
    ],
)
def test_the_guard_catches_every_kind_of_damage(tree: Path, damage: str, expected: str) -> None:
    log = Root(tree).find(SOURCE) / CURRENT_NAME
    dsh_temp = log.parent / f"{CURRENT_NAME}.0123456789ab.tmp"
    dsh_temp.write_bytes(b"DSH")
    v3 = log.parent.parent / "a-child-01" / "session.v3.jsonl.zstd"
    v3.write_bytes(frames_of(log)[0])
    guard = RootGuard([tree], read_only=False)
    if damage == "flip a byte":
        data = bytearray(log.read_bytes())
        data[10] ^= 1
        log.write_bytes(bytes(data))
    elif damage == "delete":
        log.unlink()
    elif damage == "append garbage":
        log.write_bytes(log.read_bytes() + b"\x00\x01\x02\x03")  # under 4 bytes: a torn tail
    elif damage == "new generation":
        (log.parent / "session.v5.jsonl.zstd").write_bytes(b"")
    elif damage == "v3 append":
        v3.write_bytes(v3.read_bytes() + zframes.encode(b"{}\n"))
    else:
        dsh_temp.unlink()
    problems = guard.problems()
    assert len(problems) == 1 and expected in problems[0], problems


def test_the_guard_makes_a_read_only_command_change_nothing_at_all(tree: Path) -> None:
    log = Root(tree).find(SOURCE) / CURRENT_NAME
    with (
        pytest.raises(AssertionError, match="changed by a read-only command"),
        guarded([tree], read_only=True),
    ):
        log.write_bytes(log.read_bytes() + zframes.encode(b"{}\n"))
    with (
        pytest.raises(AssertionError, match="a read-only command changed the tree"),
        guarded([tree], read_only=True),
    ):
        (log.parent / "stray").write_bytes(b"")


def test_the_guard_finds_the_roots_a_command_line_names(tree: Path, tmp_path: Path) -> None:
    log = Root(tree).find(SOURCE) / CURRENT_NAME
    home = tmp_path / "home-env"
    assert roots_of(["--root", str(tree), "doctor"], {}) == [tree.resolve()]
    assert roots_of(["inspect", str(log)], {"DSH_HOME": str(home)}) == [
        (home / "sessions").resolve(),
        tree.resolve(),
    ]
    assert roots_of(["doctor"], {"DSH_HOME": str(home)}) == [(home / "sessions").resolve()]
    assert is_read_only(["--root", "x", "inspect", "s"])
    assert is_read_only(["relink", "c", "--dry-run"])
    assert not is_read_only(["fork", "s"])
