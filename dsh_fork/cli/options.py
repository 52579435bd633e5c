"""Option values shared by the commands that create sessions (fork, import)."""

from __future__ import annotations

import os


def absolute_dir(value: str) -> str:
    """A ``--cwd`` as the user typed it, made absolute (``~`` expanded, no symlink resolved):
    a header's cwd must be absolute (format §2.6)."""
    if not value:
        return value
    return os.path.abspath(os.path.expanduser(value))
