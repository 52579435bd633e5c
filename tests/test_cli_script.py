"""The console script prints and exits as the in-process run does.

The script's output, messages and exit codes are held against the in-process run on a root
with damaged sessions (so that warnings and the PARTIAL exit are part of it).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import cli_launcher
import pytest
from conftest import run_cli
from lineagekit import generate_oddities, hostile

from dsh_fork.discovery import Root


@pytest.fixture(scope="module")
def odd_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("leave") / "sessions"
    generate_oddities(root)
    hostile(root)
    return root


def commands(root: Path) -> list[list[str]]:
    listed = Root(root)
    top = next(e.id for e in listed.entries() if e.id and listed.children_of(e.id))
    return [
        ["tree", "--json"],
        ["tree"],
        ["du", "--json"],
        ["list", "--json"],
        ["list"],
        ["list-agents", top, "--json"],
        ["doctor", "--json"],
        ["doctor"],
        ["inspect", top, "--json"],
        ["inspect", "session-damaged"],
    ]


def test_every_read_only_command_prints_and_exits_as_the_in_process_run(odd_root: Path) -> None:
    codes = set()
    for args in commands(odd_root):
        argv = ["--root", str(odd_root), *args]
        expected = run_cli(*argv)
        proc = subprocess.run(
            cli_launcher.argv(*argv), capture_output=True, timeout=120, check=False
        )
        assert proc.returncode == expected.exit_code, args
        assert proc.stdout.decode() == expected.stdout, args
        assert proc.stderr.decode() == expected.stderr, args
        codes.add(proc.returncode)
    assert codes == {0, 9, 10}  # clean runs, a damaged log (CORRUPT_LOG), partial ones
