"""Root checks (issue 12): a root that cannot be one is refused with the fix, by every command,
instead of a healthy empty report."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from schemakit import check

from dsh_fork.fixtureroot import generate

WHOLE_ROOT = [["doctor"], ["relink", "--all"], ["list"]]
LOOKUPS = [["inspect", "x"], ["list-agents", "x"], ["fork", "x"], ["relink", "x"]]
ALL = [*WHOLE_ROOT, *LOOKUPS]


@pytest.mark.parametrize("argv", WHOLE_ROOT, ids=" ".join)
def test_a_missing_root_is_usage_for_a_whole_root_command(tmp_path: Path, argv: list[str]) -> None:
    missing = tmp_path / "nowhere" / "sessions"

    result = run_cli("--root", missing, *argv)
    from_home = run_cli(*argv, "--json", env={"DSH_HOME": str(tmp_path / "nowhere")})

    assert result.exit_code == from_home.exit_code == 2
    assert result.stderr == (
        f"Error: the sessions root {missing} does not exist; pass --root PATH or set DSH_HOME "
        "(the root is $DSH_HOME/sessions)\n"
    )
    check("error", from_home.json())
    assert from_home.json()["error"]["path"] == str(missing)
    assert not missing.exists()


@pytest.mark.parametrize("argv", LOOKUPS, ids=" ".join)
def test_a_missing_root_makes_a_lookup_not_found_and_says_why(
    tmp_path: Path, argv: list[str]
) -> None:
    missing = tmp_path / "nowhere"
    result = run_cli("--root", missing, *argv)
    assert result.exit_code == 3
    assert result.stderr.startswith(f"Error: no session 'x': the sessions root {missing} does not")


@pytest.mark.parametrize("argv", ALL, ids=" ".join)
def test_a_file_is_not_a_root(tmp_path: Path, argv: list[str]) -> None:
    blocker = tmp_path / "passwd"
    blocker.write_text("root:x:0:0\n")

    result = run_cli("--root", blocker, *argv)

    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: the sessions root {blocker} is not a directory")
    assert blocker.read_text() == "root:x:0:0\n"


@pytest.mark.parametrize("argv", ALL, ids=" ".join)
def test_a_dsh_home_given_as_the_root_asks_did_you_mean_its_sessions(
    tmp_path: Path, argv: list[str]
) -> None:
    home = tmp_path / "home"
    generate(home / "sessions", sessions=2, agents=1, depth=1, turns=1, seed=2)

    result = run_cli("--root", home, *argv)
    as_json = run_cli("--root", home, *argv, "--json")

    assert result.exit_code == as_json.exit_code == 2
    assert result.stderr == (
        f"Error: {home} is a DSH home, not a sessions root: did you mean {home / 'sessions'}?\n"
    )
    assert as_json.json()["error"]["hint"] == f"--root {home / 'sessions'}"


def test_an_empty_root_is_still_a_root(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    root.mkdir()
    doctor = run_cli("--root", root, "doctor", "--json")
    relink = run_cli("--root", root, "relink", "--all")
    assert doctor.exit_code == relink.exit_code == 0
    assert doctor.json()["sessions"] == 0
