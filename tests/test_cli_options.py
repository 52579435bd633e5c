"""Options where the hand puts them (issue 35): the app's options (-q, -v, --color, --root) on
either side of the command, --json on either side of a command that has it, one rule for all
(``cli/argv.py``); a parser error is one line on stderr and exit 2 (issue 33)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from dsh_fork.cli.argv import arrange, command_index
from dsh_fork.fixtures import Clock, SessionSpec

LIST_OPTIONS = {"--project", "--kind", "--since", "--json", "--root"}
LIST_VALUED = {"--project", "--kind", "--since", "--root"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["list", "-q"], ["-q", "list"]),
        (["list", "-v", "--quiet"], ["-v", "--quiet", "list"]),
        (["list", "-qv"], ["-qv", "list"]),
        (["--json", "list"], ["list", "--json"]),
        (["list", "--color", "never"], ["--color", "never", "list"]),
        (
            ["list", "--color=always", "--kind", "fork"],
            ["--color=always", "list", "--kind", "fork"],
        ),
        # a value of the command's own option stays its value
        (["list", "--project", "-q"], ["list", "--project", "-q"]),
        (["list", "--kind=-v", "-q"], ["-q", "list", "--kind=-v"]),
        # nothing moves after --
        (["list", "--", "-q"], ["list", "--", "-q"]),
        # --root is the command's own option too: it stays where it is
        (["list", "--root", "/r", "-q"], ["-q", "list", "--root", "/r"]),
        (["--root", "list", "list", "-q"], ["--root", "list", "-q", "list"]),
    ],
)
def test_the_app_options_move_before_the_command_and_json_after_it(
    args: list[str], expected: list[str]
) -> None:
    assert arrange(args, LIST_OPTIONS, LIST_VALUED) == expected


def test_json_before_a_command_without_it_stays_where_the_parser_refuses_it() -> None:
    assert arrange(["--json", "fixture", "out"], {"--seed"}, {"--seed"}) == [
        "--json",
        "fixture",
        "out",
    ]


@pytest.mark.parametrize(
    ("args", "index"),
    [(["list"], 0), (["--root", "x", "-q", "du"], 3), (["-q"], None), (["--", "list"], None)],
)
def test_the_command_is_the_first_word_no_option_takes(args: list[str], index: int | None) -> None:
    assert command_index(args) == index


@pytest.fixture
def one(root: Path) -> Path:
    clock = Clock()
    spec = SessionSpec(id="session-one", created_at=clock(), cwd="/w")
    spec.turn(clock)
    spec.publish(root)
    return root


def test_quiet_after_the_command_prints_nothing(one: Path) -> None:
    before = run_cli("--root", one, "-q", "list")
    after = run_cli("--root", one, "list", "-q")
    assert before.exit_code == after.exit_code == 0
    assert before.stdout == after.stdout == ""


def test_verbose_after_the_command_names_the_root(one: Path) -> None:
    result = run_cli("list", "--root", one, "-v")
    assert result.exit_code == 0
    assert result.stderr == f"root: {one}\n"


def test_json_before_the_command_is_the_commands(one: Path) -> None:
    before = run_cli("--root", one, "--json", "list")
    after = run_cli("--root", one, "list", "--json")
    assert before.exit_code == 0
    assert before.json()["sessions"] == after.json()["sessions"]


def test_json_before_an_unknown_command_is_a_usage_document() -> None:
    result = run_cli("--json", "no-such")
    assert result.exit_code == 2
    assert result.json()["error"]["code"] == "USAGE"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["list", "--nope"],
            "Error: No such option: --nope (Possible options: --since) "
            "(see 'dsh-fork list --help')",
        ),
        (["fork"], "Error: Missing argument 'SOURCE'. (see 'dsh-fork fork --help')"),
        (["no-such"], "Error: No such command 'no-such'. (see 'dsh-fork --help')"),
        (
            ["list", "--color", "pink"],
            "Error: Invalid value for '--color': 'pink' is not one of 'auto', 'always', 'never'. "
            "(see 'dsh-fork --help')",
        ),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args: list[str], line: str) -> None:
    result = run_cli(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == line + "\n"


def test_color_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh_fork.cli import base

    monkeypatch.setattr(base.state, "color", base.Color.auto)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert base.colour_wanted(True) and not base.colour_wanted(False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not base.colour_wanted(True)
    monkeypatch.setattr(base.state, "color", base.Color.always)
    assert base.colour_wanted(True) and base.colour_wanted(False)
    monkeypatch.setattr(base.state, "color", base.Color.never)
    monkeypatch.delenv("NO_COLOR")
    assert not base.colour_wanted(True)
