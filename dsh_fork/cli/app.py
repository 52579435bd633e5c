"""Entry point: importing the command modules registers them on the app."""

from __future__ import annotations

from . import (  # noqa: F401  (registration)
    doctor,
    export,
    fixture,
    fork,
    import_,
    inspect,
    list_agents,
    list_sessions,
    relink,
)
from .base import app
from .diff import diff_command  # noqa: F401  (registration)
from .du import du_command  # noqa: F401  (registration)
from .tree import tree_command  # noqa: F401  (registration)

__all__ = ["app", "main"]


def main() -> None:
    app(prog_name="dsh-fork")
