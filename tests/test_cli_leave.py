"""The console script leaves without freeing what a read-only command built.

Freeing the nodes and entries of a large root takes longer than writing their document, so
the read-only commands hold their results (``base.keep``) and the console script ends with
``os._exit`` once the streams are flushed (``base.leave``). These tests hold the script's
output, messages and exit codes against the in-process run, which frees as usual, on a
root with damaged sessions (so that warnings and the PARTIAL exit are part of it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cli_launcher
import pytest
from conftest import run_cli
from lineagekit import generate_oddities
from test_listing_split import hostile

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


LEFT_EARLY = """
import atexit, sys
sys.path.insert(0, {tests!r})
import cli_launcher
atexit.register(lambda: sys.stderr.write("torn down\\n"))
sys.argv = ["dsh-fork", *sys.argv[1:]]
cli_launcher.main()
"""


@pytest.mark.parametrize(
    ("args", "torn_down"),
    [(["tree", "--json"], False), (["du"], False), (["--help"], True)],
    ids=["tree", "du", "help"],
)
def test_the_script_leaves_without_teardown_only_after_a_held_result(
    odd_root: Path, args: list[str], torn_down: bool
) -> None:
    code = LEFT_EARLY.format(tests=str(Path(cli_launcher.__file__).parent))
    proc = subprocess.run(
        [sys.executable, "-c", code, "--root", str(odd_root), *args],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode in (0, 10)
    assert proc.stdout  # the whole output was flushed before leaving
    assert (b"torn down" in proc.stderr) == torn_down
