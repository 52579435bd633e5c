"""The console script registers only the command it runs (start-up), and every command when
it must list them: ``--help``, no command, an unknown name, or ``app`` imported for tests. A
run imports only what it uses: rich only where a terminal shows the result."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from dsh_fork.cli import app as app_module
from dsh_fork.fixtureroot import generate

COMMAND_MODULES = {"doctor", "fixture", "fork", "inspect", "list_agents", "relink"}
SHARED_MODULES = {"app", "argv", "base", "options", "progress"}
"""The CLI's own modules that are no command: the app, and the options and meter the
commands declare and run with."""


def loaded_commands(*args: str) -> tuple[set[str], str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=False
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("loaded: ")
    names = {m.removeprefix("dsh_fork.cli.") for m in last.removeprefix("loaded: ").split()}
    return names - SHARED_MODULES, proc.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["list-agents", "--help"], {"list_agents"}),
        (["--root", "fork", "inspect", "--help"], {"inspect"}),  # "fork" is --root's value
        (["--version"], set()),
        (["list", "--help"], {"list_sessions"}),  # a command whose module is not named for it
    ],
)
def test_a_run_registers_only_its_command(args: list[str], expected: set[str]) -> None:
    loaded, _ = loaded_commands(*args)
    assert loaded == expected


@pytest.mark.parametrize("args", [[], ["--help"], ["--version", "--help"], ["no-such"]])
def test_listing_or_unknown_commands_register_every_command(args: list[str]) -> None:
    loaded, _ = loaded_commands(*args)
    assert loaded >= COMMAND_MODULES


def test_help_lists_every_command() -> None:
    _, out = loaded_commands("--help")
    for name in ("doctor", "fixture", "fork", "inspect", "list-agents", "relink"):
        assert f"  {name} " in out


def test_the_completion_options_are_there_for_the_runs_that_use_them() -> None:
    """typer's completion options are built only for the app's help and their own runs (a
    command run leaves them out): the help lists them, and they work."""
    _, out = loaded_commands("--help")
    assert "--install-completion" in out
    assert "--show-completion" in out
    _, script = loaded_commands("--show-completion", "bash")
    assert "_DSH_FORK_COMPLETE=complete_bash" in script
    loaded, script = loaded_commands("--show-completion", "fork")  # a command named: its own
    assert "fork" in loaded and "inspect" not in loaded  # run, with the option it names
    assert "_DSH_FORK_COMPLETE=complete_" in script


def test_a_command_run_leaves_the_completion_options_to_the_next_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that leaves them out does so for itself: the app's help that follows in the same
    process lists them again."""
    for argv in (["fork", "--help"], ["--help"]):
        monkeypatch.setattr(sys, "argv", ["dsh-fork", *argv])
        with pytest.raises(SystemExit) as exit:
            app_module.main()
        assert exit.value.code == 0
    out = capsys.readouterr().out
    fork_help, app_help = out.split("Usage: dsh-fork [OPTIONS] COMMAND")
    assert "--install-completion" not in fork_help
    assert "--install-completion" in app_help


def test_app_imported_from_the_entry_module_has_every_command() -> None:
    names = {app_module._name_of(info) for info in app_module.app.registered_commands}
    assert {"doctor", "fixture", "fork", "inspect", "list-agents", "relink"} <= names


def probe(report: str, *, must_succeed: bool = True) -> str:
    """A run of the console script's ``main`` (that must succeed, unless told otherwise),
    then ``report`` (an expression over ``sys.modules``) printed on stderr when ``main``
    returns or exits."""
    check = "    assert not code, code\n" if must_succeed else ""
    return (
        "import os, sys\n"
        "from dsh_fork.cli.app import main\n"
        "sys.argv = ['dsh-fork', *sys.argv[1:]]\n"
        "def report(code=0):\n"
        f"    print({report}, file=sys.stderr)\n"
        f"{check}"
        "    sys.stderr.flush()\n"
        "    os._exit(code)\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit:\n"
        "    report(exit.code or 0)\n"
        "report()\n"
    )


VERSION_PROBE = probe("sorted({'typer', 'typing'} & set(sys.modules))")
PROBE = probe(
    "'loaded: ' + ' '.join(sorted(m for m in sys.modules if m.startswith('dsh_fork.cli.')))",
    must_succeed=False,
)


@pytest.mark.parametrize(
    ("args", "typer_loaded"),
    [(["--version"], False), (["-V"], False), (["-q", "--version"], True)],
)
def test_the_version_is_the_same_with_or_without_typer(args: list[str], typer_loaded: bool) -> None:
    """A bare ``--version`` is answered before typer (or even typing) is imported; its answer
    is the one the full parser gives (``-q --version`` goes through typer)."""
    from dsh_fork import __version__

    proc = subprocess.run(
        [sys.executable, "-c", VERSION_PROBE, *args], capture_output=True, text=True, check=True
    )
    assert proc.stdout == f"dsh-fork {__version__}\n"
    loaded = "['typer', 'typing']" if typer_loaded else "[]"
    assert proc.stderr.strip().splitlines()[-1] == loaded


WALK = ("dsh_fork.appending", "dsh_fork.relinkwalk", "dsh_fork.resumable")
"""relink's walk of a plan, its appends to a parent and its read-back of the copies."""
FORK_PROBE = probe(
    f"' '.join(m for m in ('concurrent.futures', 'pickle', *{WALK!r}) if m in sys.modules)"
)


@pytest.mark.parametrize(
    ("agents", "imported"), [(0, ""), (2, "concurrent.futures " + " ".join(WALK))]
)
def test_a_short_fork_imports_only_what_it_uses(tmp_path: Path, agents: int, imported: str) -> None:
    """A two-turn fork decodes without a second process (no pickling); it syncs its one new
    session without a thread pool, which only a batch of copies (its subagents) starts, and
    only subagents to copy load relink's walk."""
    root = tmp_path / "sessions"
    summary = generate(root, sessions=1, agents=agents, depth=1, turns=2)
    proc = subprocess.run(
        [sys.executable, "-c", FORK_PROBE, "--root", str(root), "fork", summary.top_level[0]],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"agents: copied {agents}," in proc.stdout
    assert (proc.stderr.strip().splitlines() or [""])[-1] == imported


LAZY = (
    "rich",
    "hashlib",
    "secrets",
    "dsh_fork.documents",
    "dsh_fork.sessiondocs",
    "dsh_fork.rootdocs",
    "dsh_fork.archivedocs",
    "dsh_fork.searchdocs",
    "dsh_fork.registrydocs",
    "shlex",
    "unicodedata",
    "encodings.utf_16_le",
    *WALK,
)
"""What a fork printing JSON has no use for: rich draws only on a terminal, OpenSSL (which
``secrets`` loads) is not how temp names are drawn, the documents of the other commands
(their own ``*docs`` modules, and documents.py) are not the fork's (forkdocs.py), ``shlex``
quotes only the rerun a partial fork names, the Unicode tables check only an id that is not
printable ASCII, the UTF-16 codec encodes only a cwd or an id that is not ASCII, and a session
without subagents leaves relink nothing to walk (``WALK``)."""
LAZY_PROBE = probe(
    "' '.join(sorted(({*sys.modules} | {m.split('.')[0] for m in sys.modules}) & "
    f"{set(LAZY)!r}))"
)


@pytest.mark.parametrize(("terminal", "imported"), [(False, ""), (True, "rich")])
def test_rich_is_loaded_only_where_a_terminal_shows_the_result(
    tmp_path: Path, terminal: bool, imported: str
) -> None:
    """Start-up is paid by every run: a two-turn ``fork --json`` imports none of ``LAZY``;
    the same fork printed on a terminal draws its summary with rich."""
    root = tmp_path / "sessions"
    summary = generate(root, sessions=1, agents=0, depth=0, turns=2, workspaces=True)
    args = ["--root", str(root), "fork", summary.top_level[0]]
    main, side = pty.openpty() if terminal else (None, subprocess.PIPE)
    proc = subprocess.run(
        [sys.executable, "-c", LAZY_PROBE, *args, *([] if terminal else ["--json"])],
        stdout=side,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
        env={**os.environ, "HOME": str(tmp_path / "home"), "COLUMNS": "120"},
    )
    if main is None:
        assert orjson.loads(proc.stdout)["child"]["parentSession"] == summary.top_level[0]
    else:
        assert isinstance(side, int)
        os.close(side)
        assert b"Forked " + summary.top_level[0].encode() in os.read(main, 65536)
        os.close(main)
    assert (proc.stderr.strip().splitlines() or [""])[-1] == imported


RICH_PROBE = probe("' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))")


def test_an_export_printed_to_a_pipe_loads_no_rich(tmp_path: Path) -> None:
    """A piped table of ASCII cells (ids, counts, digests) is laid out by length: export's
    summary and table, printed to a pipe, load none of rich's width tables."""
    root = tmp_path / "sessions"
    top = generate(root, sessions=1, agents=1, depth=1, turns=2).top_level[0]
    args = ["--root", str(root), "export", top, "-o", str(tmp_path / "f.tar.zst")]
    proc = subprocess.run(
        [sys.executable, "-c", RICH_PROBE, *args], capture_output=True, text=True, check=True
    )
    header, first = proc.stdout.splitlines()[2:4]
    assert header.split() == ["role", "id", "parent", "events", "bytes", "sha256"]
    assert first.split()[:2] == ["top", top]
    assert (proc.stderr.strip().splitlines() or [""])[-1] == ""
