"""Entry point: importing the command modules registers them on the app."""

from __future__ import annotations

from . import fixture  # noqa: F401  (registers the command)
from .base import app

__all__ = ["app", "main"]


def main() -> None:
    app(prog_name="dsh-fork")
