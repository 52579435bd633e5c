"""The man page, made from the help every command prints: one source for both.

``python -m dsh_fork.cli.manpage > docs/dsh-fork.1`` (``make man``) writes it; a test holds
the committed page to what this renders, so the page says what ``--help`` says. The help is
laid out at a fixed width and set in no-fill blocks, so the page is the same on every machine.
"""

from __future__ import annotations

import sys
from typing import Any

from .. import __version__

WIDTH = 80
"""The width the help is laid out at for the page."""


def _roff(text: str) -> str:
    """Help text as roff no-fill lines: backslashes escaped, no line read as a request."""
    lines = []
    for line in text.replace("\\", "\\e").splitlines():
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def _help(command: Any, name: str, parent: Any = None) -> str:
    ctx = command.make_context(
        name,
        [],
        parent=parent,
        resilient_parsing=True,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
    )
    text: str = command.get_help(ctx)
    return text


def render() -> str:
    """The whole page: the app's help, then each command's, in name order."""
    import typer

    from .app import app

    group = typer.main.get_command(app)
    root_ctx = group.make_context(
        "dsh-fork", [], resilient_parsing=True, terminal_width=WIDTH, max_content_width=WIDTH
    )
    out = [
        f'.TH DSH-FORK 1 "" "dsh-fork {__version__}" "User Commands"',
        ".SH NAME",
        "dsh-fork \\- offline fork, subagent relink and inspection of DSH session logs",
        ".SH SYNOPSIS",
        ".B dsh-fork",
        "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        ".nf",
        _roff(_help(group, "dsh-fork")),
        ".fi",
        ".SH COMMANDS",
    ]
    commands: dict[str, Any] = getattr(group, "commands", {})
    for name in sorted(commands):
        out += [
            f'.SS "dsh-fork {name}"',
            ".nf",
            _roff(_help(commands[name], name, root_ctx)),
            ".fi",
        ]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
