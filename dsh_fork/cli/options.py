"""The options and arguments several commands share, each declared once: ``--json``,
``--root``, ``--dry-run``, ``[SESSION]...``, ``--since``, ``--project``, ``--cwd``,
``--no-workspace``, the child's ``--id``, ``--title`` and ``--close-turn`` (fork, salvage), the
archive's ``--format`` (export, import), and the values of ``--cwd`` and ``--format``.

A declaration is a function returning typer's default object, so that a command's signature
stays the one place its parser is read from while the flag, metavar and help of a shared option
are written here only (the help each command says in its own words is its argument).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer

from ..errors import UsageError
from .base import JSON_HELP, ROOT_HELP, Out, complete_session, fail

if TYPE_CHECKING:
    from ..tarstream import Compression


def json_option(help_text: str = JSON_HELP) -> Any:
    """``--json``: the result as one JSON document on stdout."""
    return typer.Option(False, "--json", help=help_text)


def root_option() -> Any:
    """``--root`` after the command (it wins over the one before it: ``base.root_of``)."""
    return typer.Option(None, "--root", help=ROOT_HELP, metavar="PATH")


def dry_run_option(help_text: str) -> Any:
    """``--dry-run``: say what the command would write, write nothing."""
    return typer.Option(False, "--dry-run", help=help_text)


SESSION_HELP = (
    "Session id (or a unique prefix of one, `session-` left out or not), session dir, or log file."
)


def session_argument(help_text: str, metavar: str = "SESSION") -> Any:
    """The SESSION argument every command takes, with id completion."""
    return typer.Argument(..., metavar=metavar, help=help_text, autocompletion=complete_session)


def family_argument(help_text: str, metavar: str = "[SESSION]") -> Any:
    """An optional SESSION (``tree``, ``du``; relink's FORK_CHILD, which --all replaces):
    without it the whole root is read."""
    return typer.Argument(None, metavar=metavar, help=help_text, autocompletion=complete_session)


def sessions_argument(help_text: str, metavar: str = "[SESSION]...") -> Any:
    """Any number of SESSIONs (none is allowed: the command then reads the whole root, or
    asks for another mode)."""
    return typer.Argument(None, metavar=metavar, help=help_text, autocompletion=complete_session)


def since_option() -> Any:
    """``--since WHEN`` of the commands that read many sessions (``listing.parse_since``)."""
    return typer.Option(
        None,
        "--since",
        metavar="WHEN",
        help="Only sessions active since WHEN: an age (30m, 2h, 7d), an ISO date, epoch ms.",
    )


def project_option() -> Any:
    """``--project PROJECT``: one project dir, named by its dir name or a cwd."""
    return typer.Option(
        None, "--project", metavar="PROJECT", help="Only this project: a dir name or a cwd."
    )


def cwd_option(help_text: str) -> Any:
    """``--cwd DIR``: move what is written into DIR's workspace (``absolute_dir``)."""
    return typer.Option(None, "--cwd", metavar="DIR", help=help_text)


def no_workspace_option(shown_as: str) -> Any:
    """``--no-workspace``: DSH's workspace registry is not touched."""
    return typer.Option(
        False,
        "--no-workspace",
        help=f"Leave DSH's workspace registry alone ({shown_as} as Ungrouped).",
    )


def child_id_option(help_text: str, metavar: str) -> Any:
    """``--id``: the id of the child a fork writes (``ids.new_id_problem`` checks it)."""
    return typer.Option(None, "--id", metavar=metavar, help=help_text)


def title_option(help_text: str) -> Any:
    """``--title TEXT``: the title of the child a fork writes."""
    return typer.Option(None, "--title", metavar="TEXT", help=help_text)


def close_turn_option(help_text: str) -> Any:
    """``--close-turn``: a fork may end inside a turn, which the child then closes."""
    return typer.Option(False, "--close-turn", help=help_text)


def absolute_dir(value: str) -> str:
    """A ``--cwd`` as the user typed it, made absolute (``~`` expanded, no symlink resolved):
    a header's cwd must be absolute (format §2.6)."""
    if not value:
        return value
    return os.path.abspath(os.path.expanduser(value))


def format_option(default_said: str) -> Any:
    """``--format FORMAT`` of export and import, read by ``archive_format``; each says what
    it does without one."""
    return typer.Option(
        None,
        "--format",
        metavar="FORMAT",
        help=f"Compression of the archive: zst, gz, xz, bz2 or tar (none) ({default_said}).",
    )


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
