"""``dsh-fork schema``: the JSON Schema of each command's ``--json`` document."""

from __future__ import annotations

import sys

import typer

from .base import Out, app, fail


@app.command(name="schema", short_help="Print the JSON Schema of a command's --json document.")
def schema_command(
    name: str | None = typer.Argument(
        None,
        metavar="[COMMAND]",
        help="A command (relink-all for relink --all, error for a run that ended with an error).",
    ),
) -> None:
    """Print the JSON Schema (draft 2020-12, self-contained) of COMMAND's --json document;
    without COMMAND, the names there are schemas for, one a line.

    \b
    Examples:
      dsh-fork schema
      dsh-fork schema fork > fork.schema.json
    """
    from .. import schemas
    from ..errors import UsageError

    out = Out(False)
    if name is None:
        for known in schemas.names():
            out.line(known)
        return
    try:
        text = schemas.shipped(name)
    except KeyError:
        known = ", ".join(schemas.names())
        fail(out, UsageError(f"no schema named {name!r}; there are: {known}"))
    sys.stdout.write(text)
