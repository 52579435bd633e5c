"""Command-line conventions shared by every command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
