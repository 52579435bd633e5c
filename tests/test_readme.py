"""The README's quick start runs as written: each command of its shell blocks, in order, in a
fresh DSH home, exits 0, and the lines of its output blocks that no run changes (no time, no
temp path, no id relink makes afresh) are printed as shown."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import cli_launcher

README = Path(__file__).resolve().parent.parent / "README.md"
_CHANGING = re.compile(r"/tmp/|\d{4}-\d\d-\d\dT|copy of|^\.\.\.$|session-(81eb|a770)")


def _quick_start() -> tuple[list[list[str]], list[str]]:
    """The commands of the quick start's shell blocks and the stable lines of its output."""
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands: list[list[str]] = []
    shown: list[str] = []
    for block in re.findall(r"```\n(.*?)```", section, re.S):
        lines = block.strip().splitlines()
        if all(line.startswith(("dsh-fork ", "export ")) for line in lines):
            commands += [shlex.split(line) for line in lines if line.startswith("dsh-fork ")]
        else:
            shown += [line for line in lines if not _CHANGING.search(line)]
    return commands, shown


def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    commands, shown = _quick_start()
    assert len(commands) >= 8 and len(shown) >= 5
    home = tmp_path / "home"
    env = {**os.environ, "DSH_HOME": str(home)}
    printed = []
    for words in commands:
        args = [a.replace("$DSH_HOME", str(home)) for a in words[1:]]
        proc = subprocess.run(
            cli_launcher.argv(*args), env=env, capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, (words, proc.stderr)
        printed += proc.stdout.splitlines()
    missing = [line for line in shown if line not in printed]
    assert missing == []


def test_the_dsh_world_example_runs_as_written(tmp_path: Path) -> None:
    """The section on forks as DSH makes them: the refused in-turn fork exits 4 (OPEN_TURN),
    the --close-turn fork exits 0, and their stable lines are printed as shown."""
    text = README.read_text()
    section = text.split("## Forks as DSH makes them", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    commands = [shlex.split(line) for line in blocks[0].splitlines() if line.startswith("dsh-")]
    shown = [line for line in blocks[1].strip().splitlines() if not _CHANGING.search(line)]
    assert len(commands) == 3 and len(shown) >= 4
    home = tmp_path / "home"
    env = {**os.environ, "DSH_HOME": str(home)}
    printed, codes = [], []
    for words in commands:
        args = [a.replace("$DSH_HOME", str(home)) for a in words[1:]]
        proc = subprocess.run(
            cli_launcher.argv(*args), env=env, capture_output=True, text=True, check=False
        )
        codes.append(proc.returncode)
        printed += proc.stdout.splitlines() + proc.stderr.splitlines()
    assert codes == [0, 4, 0]
    assert [line for line in shown if line not in printed] == []
    workspace = next(line for line in printed if line.startswith("  workspace:"))
    assert workspace == f"  workspace: joined 'project-0' ({home}/projects/project-0)"
