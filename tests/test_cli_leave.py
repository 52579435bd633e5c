"""The console script leaves without the interpreter's teardown.

Freeing the nodes and entries of a large root takes longer than writing their document, so
the read-only commands hold their results (``collector.keep``), and every run of the console
script ends with ``os._exit`` once the streams are flushed (``base.leave``): teardown would
only free memory, and it is a tenth of a short fork's run. These tests hold the script's
output, messages and exit codes against the in-process run, which frees as usual, on a
root with damaged sessions (so that warnings and the PARTIAL exit are part of it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import cli_launcher
import pytest
from conftest import run_cli
from lineagekit import generate_oddities, hostile

from dsh_fork.discovery import Root
from dsh_fork.fixtures import generate


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


@pytest.mark.parametrize("args", [["tree", "--json"], ["du"], ["--help"]], ids=str)
def test_the_script_leaves_without_teardown(odd_root: Path, args: list[str]) -> None:
    code = LEFT_EARLY.format(tests=str(Path(cli_launcher.__file__).parent))
    proc = subprocess.run(
        [sys.executable, "-c", code, "--root", str(odd_root), *args],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode in (0, 10)
    assert proc.stdout  # the whole output was flushed before leaving
    assert b"torn down" not in proc.stderr


LEAVE_PROBE = (
    "import gc, os, sys\n"
    "from dsh_fork.cli.app import main\n"
    "sys.argv = ['dsh-fork', *sys.argv[1:]]\n"
    "leave = os._exit\n"
    "def left(code):\n"
    "    print(f'left {code} gc={gc.isenabled()} frozen={gc.get_freeze_count() > 1000}',\n"
    "          file=sys.stderr)\n"
    "    sys.stderr.flush()\n"
    "    leave(code)\n"
    "os._exit = left\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as exit:\n"
    "    print(f'returned {exit.code}', file=sys.stderr)\n"
)


@pytest.mark.parametrize(
    ("args", "code"),
    [(["fork", "{top}", "--id", "f1"], 0), (["relink", "f1"], 0), (["fork", "nope"], 3)],
)
def test_a_console_run_of_a_writer_ends_without_teardown(
    tmp_path: Path, args: list[str], code: int
) -> None:
    """A writer's run ends as a read-only one does: its output flushed, then ``os._exit`` with
    its exit code (what it wrote is durable before it returns), the collector back on and
    start-up's objects frozen out of its scans."""
    root = tmp_path / "sessions"
    summary = generate(root, sessions=1, agents=2, depth=1, turns=2)
    if args[0] == "relink":
        fork = ["fork", summary.top_level[0], "--id", "f1", "--no-agents"]
        subprocess.run(
            [sys.executable, "-c", LEAVE_PROBE, "--root", str(root), *fork],
            check=True,
            capture_output=True,
        )
    argv = [a.format(top=summary.top_level[0]) for a in args]
    proc = subprocess.run(
        [sys.executable, "-c", LEAVE_PROBE, "--root", str(root), *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.stderr.strip().splitlines()[-1] == f"left {code} gc=True frozen=True"
    assert proc.returncode == code
    if code == 0:  # the output a run prints before it leaves is all there
        assert re.search(r"^\s*(agents: )?copied:? 2\b", proc.stdout, re.M), proc.stdout


@pytest.mark.parametrize(
    ("code", "status", "printed"),
    [(None, 0, ""), (3, 3, ""), ("stopped: why", 1, "stopped: why\n")],
)
def test_leaving_ends_as_sys_exit_would(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    code: object,
    status: int,
    printed: str,
) -> None:
    """The status and message ``sys.exit(code)`` would give, without the teardown."""
    from dsh_fork import collector
    from dsh_fork.cli import base

    ended: list[int] = []
    monkeypatch.setattr(collector, "_HELD", [])  # as the console script runs
    monkeypatch.setattr(os, "_exit", ended.append)
    base.leave(code)
    assert ended == [status]
    assert capsys.readouterr().err == printed


def test_what_a_pass_drops_is_held_only_in_a_process_that_leaves_without_freeing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """du's lineage and list's entries are dropped once the result is built: the console
    script holds them until it leaves (freeing 100,000 nodes costs ~50 ms and gains nothing);
    any other caller of the library frees them as usual."""
    import weakref

    from dsh_fork import collector, porcelain
    from dsh_fork.discovery import Root
    from dsh_fork.fixtures import generate
    from dsh_fork.lineage import Lineage

    root = tmp_path / "sessions"
    generate(root, sessions=3, agents=2, depth=1, turns=2, seed=5)
    ctx = porcelain.Context.of(str(root))

    monkeypatch.setattr(collector, "_HELD", None)  # a library caller: nothing held
    usage = porcelain.du(ctx, None, top=None)
    assert len(usage.sessions) == 9
    assert collector._HELD is None

    held: list[object] = []
    monkeypatch.setattr(collector, "_HELD", held)  # as the console script runs
    porcelain.du(ctx, None, top=None)
    forests = [value for value in held if isinstance(value, Lineage)]
    assert len(forests) == 1 and len(list(forests[0].nodes())) == 9
    listing = porcelain.list_sessions(
        ctx, project=None, kinds=None, since=None, now_ms=0, everything=True
    )
    roots = [value for value in held if isinstance(value, Root)]
    assert len(roots) == 1 and len(roots[0].entries()) == len(listing.rows) == 9
    alive = weakref.ref(forests[0])
    del forests
    assert alive() is not None  # held, not freed
