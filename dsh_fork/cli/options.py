"""Option values shared by several commands: ``--cwd`` (fork, import), ``--format`` (export,
import)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import UsageError
from .base import Out, fail

if TYPE_CHECKING:
    from ..tarstream import Compression


def absolute_dir(value: str) -> str:
    """A ``--cwd`` as the user typed it, made absolute (``~`` expanded, no symlink resolved):
    a header's cwd must be absolute (format §2.6)."""
    if not value:
        return value
    return os.path.abspath(os.path.expanduser(value))


FORMAT_HELP = "Compression of the archive: zst, gz, xz, bz2 or tar (none)"
_FORMATS: dict[str, Compression] = {
    "zst": "zst",
    "zstd": "zst",
    "gz": "gz",
    "gzip": "gz",
    "xz": "xz",
    "bz2": "bz2",
}


def archive_format(out: Out, name: str | None) -> Compression | None:
    """``--format`` of export and import: a compression, or None when not given."""
    if name is None:
        return None
    if name in ("tar", "none"):
        return "none"
    found = _FORMATS.get(name.lower())
    if found is None:
        fail(out, UsageError(f"--format {name!r}: use zst, gz, xz, bz2 or tar"))
    return found
