"""Command-line conventions shared by every command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cli_launcher
import orjson
from conftest import run_cli

from dsh_fork import __version__


def test_version() -> None:
    result = run_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"dsh-fork {__version__}"


def test_python_dash_m_runs_the_same_cli() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dsh_fork", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"dsh-fork {__version__}"


def test_fixture_refuses_a_non_empty_out_root(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    result = run_cli("fixture", tmp_path)
    assert result.exit_code == 2
    assert result.stderr == f"Error: {tmp_path} exists and is not an empty directory\n"
    assert result.stdout == ""


def test_the_installed_command_ignores_the_fault_variable(tmp_path: Path) -> None:
    """DSH_FORK_FAULT is the test suite's seam: the command itself never honours it."""
    from dsh_fork.fixtureroot import generate

    root = tmp_path / "home" / "sessions"
    summary = generate(root, sessions=1, agents=0, depth=0, turns=1, seed=3)
    env = {k: v for k, v in os.environ.items() if k != "DSH_HOME"}
    env["DSH_FORK_FAULT"] = "enospc:1"
    argv = ["--root", str(root), "fork", summary.top_level[0], "--id", "child", "--json"]
    plain = subprocess.run(
        [sys.executable, "-m", "dsh_fork", *argv], env=env, capture_output=True, check=False
    )
    assert plain.returncode == 0, plain.stderr
    seamed = subprocess.run(
        cli_launcher.argv(*argv[:-3], "--id", "child-2", "--json"),
        env=env,
        capture_output=True,
        check=False,
    )
    assert seamed.returncode == 11, seamed.stderr
    assert orjson.loads(seamed.stdout)["error"]["code"] == "IO_ERROR"
