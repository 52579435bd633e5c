"""No session left out, and the low rows (issue 33 rows 10, 11, 13, 15, 16 list's side):
every session dir a command cannot read is named in its result, exit codes do not depend on
whether stderr is open, and a root that cannot be entered is a permission error.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from relinkkit import CWD, plugin_scenario
from safetykit import count
from userkit import NOBODY, cli_as, nobodys_root

import dsh_fork
from dsh_fork.fixtures import Clock
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import project_key

PROJECT = project_key(CWD)
TIMEOUT = 60


def cli(*args: str | Path, **streams: Any) -> subprocess.CompletedProcess[bytes]:
    """The installed command line in a process of its own (its standard streams as given)."""
    env = {k: v for k, v in os.environ.items() if k != "DSH_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "dsh_fork", *map(str, args)],
        check=False,
        timeout=TIMEOUT,
        env=env,
        **streams,
    )


def _close(*fds: int) -> Callable[[], None]:
    def close() -> None:
        for fd in fds:
            os.close(fd)

    return close


@pytest.fixture
def tree(root: Path) -> Path:
    plugin_scenario(root, Clock(), children=4)
    return root


# -- row 13: exit codes independent of stderr ---------------------------------------------------


def test_exit_codes_do_not_depend_on_stderr_being_open(tree: Path) -> None:
    fifo = tree / PROJECT / "a-child-03" / CURRENT_NAME
    fifo.unlink()
    os.mkfifo(fifo)  # list warns about it: a write to the closed stderr

    listed = cli("--root", tree, "list", stdout=subprocess.PIPE, preexec_fn=_close(2))
    missing = cli("--root", tree, "inspect", "nosuch", stdout=subprocess.PIPE, preexec_fn=_close(2))
    no_stdout = cli("--root", tree, "list", stderr=subprocess.PIPE, preexec_fn=_close(1))

    assert listed.returncode == 0 and b"session-P_A" in listed.stdout
    assert missing.returncode == 3
    assert no_stdout.returncode == 11, no_stdout.stderr
    assert b"cannot write the output" in no_stdout.stderr
    assert fifo.stat().st_size == 0  # nothing written where stderr was


# -- rows 10, 11, 16: every session dir named ---------------------------------------------------


def test_a_fifo_log_and_a_linked_session_dir_are_named_by_every_listing(
    tree: Path, tmp_path: Path
) -> None:
    project = tree / PROJECT
    fifo = project / "a-child-03" / CURRENT_NAME
    fifo.unlink()
    os.mkfifo(fifo)
    outside = tmp_path / "outside"
    shutil.move(project / "a-child-04", outside)
    (project / "a-child-04").symlink_to(outside)
    linked_project = tree / "--home-u-elsewhere--"
    linked_project.symlink_to(project)

    listed = run_cli("--root", tree, "list", "--all", "--json")
    lineage = run_cli("--root", tree, "tree", "--json")
    usage = run_cli("--root", tree, "du", "--json")
    agents = run_cli("--root", tree, "list-agents", "session-P_A", "--json")
    inspected = run_cli("--root", tree, "inspect", "a-child-03")
    linked = run_cli("--root", tree, "inspect", "a-child-04")
    doctored = run_cli("--root", tree, "doctor", "--json")

    assert listed.exit_code == 0, listed.stderr
    rows = {os.path.relpath(row["path"], tree): row for row in listed.json()["sessions"]}
    assert "FIFO" in rows[f"{PROJECT}/a-child-03"]["error"]["message"]
    assert "symbolic link" in rows[f"{PROJECT}/a-child-04"]["error"]["message"]
    assert "symbolic link" in rows["--home-u-elsewhere--"]["error"]["message"]
    assert not any(path.startswith("--home-u-elsewhere--/") for path in rows)  # never read
    nodes = {node["path"]: node for node in lineage.json()["nodes"]}
    assert nodes[f"{PROJECT}/a-child-03"]["kind"] == "unreadable"
    assert nodes[f"{PROJECT}/a-child-04"]["kind"] == "unreadable"
    sessions = {s["path"]: s for s in usage.json()["sessions"]}
    assert "unreadable" in sessions[f"{PROJECT}/a-child-03"]["flags"]
    flags = {row["id"]: row["flags"] for row in agents.json()["children"]}
    assert any("FIFO" in flag for flag in flags["a-child-03"])
    assert any("symbolic link" in flag for flag in flags["a-child-04"])
    assert inspected.exit_code == 11 and "it is a FIFO" in inspected.stderr
    assert linked.exit_code == 11 and "symbolic link" in linked.stderr
    assert doctored.exit_code == 10
    findings = doctored.json()["findings"]
    named = {
        os.path.relpath(f["path"], tree)
        for f in findings
        if f["code"] == "UNREADABLE" and "symbolic link" in f["message"]
    }
    assert named == {f"{PROJECT}/a-child-04", "--home-u-elsewhere--"}
    count("unreadable sessions named (FIFO, link)", 7)


def _preloaded() -> None:
    """Every module a command may import later, imported before the child drops root (the
    interpreter's own files may not be readable to the user it becomes)."""
    for module in pkgutil.walk_packages(dsh_fork.__path__, "dsh_fork."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)
    for name in ("unicodedata", "secrets", "encodings.utf_16_le", "encodings.idna"):
        importlib.import_module(name)


def as_nobody(*args: str | Path) -> tuple[int, str, str]:
    """The command run by CliRunner in a forked child that became uid 65534."""
    _preloaded()
    return cli_as(NOBODY, *args)


@pytest.fixture
def shared_tree() -> Iterator[Path]:
    """A root any user can reach (pytest's tmp dirs are private to root), owned by nobody."""
    with nobodys_root(
        "dsh-fork-rows-", lambda root: plugin_scenario(root, Clock(), children=3)
    ) as root:
        yield root


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user")


@needs_root
def test_a_session_dir_that_cannot_be_read_is_named_by_list_tree_du_and_inspect(
    shared_tree: Path,
) -> None:
    hidden = shared_tree / PROJECT / "a-child-02"
    os.chown(hidden, 0, 0)
    hidden.chmod(0o700)

    listed = as_nobody("--root", shared_tree, "list", "--all", "--json")
    lineage = as_nobody("--root", shared_tree, "tree", "--json")
    usage = as_nobody("--root", shared_tree, "du", "--json")
    agents = as_nobody("--root", shared_tree, "list-agents", "session-P_A", "--json")
    inspected = as_nobody("--root", shared_tree, "inspect", "a-child-02")

    assert listed[0] == 0, listed[2]
    rows = {row["id"]: row for row in json.loads(listed[1])["sessions"]}
    assert "Permission denied" in rows["a-child-02"]["error"]["message"]
    nodes = {node["id"]: node for node in json.loads(lineage[1])["nodes"]}
    assert nodes["a-child-02"]["kind"] == "unreadable"
    paths = {s["path"] for s in json.loads(usage[1])["sessions"]}
    assert f"{PROJECT}/a-child-02" in paths
    flags = {row["id"]: row["flags"] for row in json.loads(agents[1])["children"]}
    assert any("Permission denied" in flag for flag in flags["a-child-02"])
    assert inspected[0] == 11 and "Permission denied" in inspected[2]
    count("unreadable sessions named (as uid 65534)", 5)


@needs_root
def test_a_root_that_cannot_be_entered_is_a_permission_error(shared_tree: Path) -> None:
    os.chown(shared_tree, 0, 0)
    shared_tree.chmod(0o700)

    for args in (("list",), ("tree",), ("du",), ("doctor",), ("inspect", "session-P_A")):
        code, _, err = as_nobody("--root", shared_tree, *args)
        assert code == 11, (args, err)
        assert "Permission denied" in err and err.count("\n") == 1, (args, err)


# -- row 14: the operation log of a hard-linked backup ------------------------------------------


def test_a_hard_linked_operation_log_is_never_appended_to(tmp_path: Path) -> None:
    from dsh_fork.oplog import OpLog

    live = tmp_path / "home" / "op.log"
    live.parent.mkdir()
    live.write_bytes(b'{"t":"2026-01-01T00:00:00.000Z","message":"old","data":null}\n')
    backup = tmp_path / "backup.log"
    os.link(live, backup)  # what `cp -al` of a home makes
    before = backup.read_bytes()
    warnings: list[str] = []

    log = OpLog(live, warn=warnings.append)
    log.write("m", None)
    log.write("m", None)

    assert backup.read_bytes() == before == live.read_bytes()
    assert len(warnings) == 1 and "2 hard links" in warnings[0] and "cp -al" in warnings[0]
    os.unlink(backup)
    OpLog(live).write("m", None)  # its own again: appended
    assert live.read_bytes().count(b"\n") == 2
