"""``dsh-fork trash`` and ``dsh-fork restore``: sessions with their family out of the root and
back, by renames into ``<home>/dsh-fork-trash``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from ..display import counted
from ..errors import UsageError
from .base import Out, app, emit, fail, iso, root_of, run
from .options import dry_run_option, json_option, root_option, sessions_argument

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..registrydocs import TrashEntry
    from ..trash import EmptyResult, RestoreResult, TrashList, TrashResult


def _entries(n: int) -> str:
    return "1 entry" if n == 1 else f"{n} entries"


def _size(value: int) -> str:
    """Sizes as every table of the tool shows them (binary units, as ``du -h``)."""
    from .tables import human_size

    return human_size(value)


def _sessions(out: Out, entry: TrashEntry, title: str) -> None:
    rows = [(s.id, s.kind, s.title, _size(s.bytes), s.where) for s in entry.sessions]
    out.table(title, ("id", "kind", "title", "size", "where"), rows)


def _moved(out: Out, entry: TrashEntry, title: str, registry: str) -> None:
    """What trash and restore moved: the entry's sessions, then what the registry got."""
    _sessions(out, entry, title)
    _registry_line(out, entry, registry)


def _registry_line(out: Out, entry: TrashEntry, verb: str) -> None:
    done = entry.registry
    if done is None:
        return
    if done.written:
        out.line(f"workspace registry {done.path}: {verb} ({len(done.changed)} changed)")
    elif done.reason:
        out.line(f"workspace registry {done.path} not changed: {done.reason}")


def _render_trash(out: Out, result: TrashResult) -> None:
    entry = result.entry.doc
    verb = "would move" if result.dry_run else "moved"
    moved = f"{counted(len(entry.sessions), 'session')} ({_size(entry.bytes)}) to {entry.path}"
    _moved(out, entry, f"{verb} {moved}", "sessions detached, archived and pinned marks removed")
    if not result.dry_run:
        out.line(f"restore with: dsh-fork restore {entry.entry}")


def _render_list(out: Out, listing: TrashList) -> None:
    if not listing.entries:
        out.line(f"{listing.trash}: empty")
        return
    rows = [
        (
            e.doc.entry,
            iso(e.doc.created),
            e.doc.state,
            len(e.doc.sessions),
            _size(e.doc.bytes),
            ", ".join(
                s.title or s.id
                for s in e.doc.sessions
                if s.id in e.doc.named or s is e.doc.sessions[0]
            ),
        )
        for e in listing.entries
    ]
    out.table(
        f"{_entries(len(listing.entries))} in {listing.trash}",
        ("entry", "trashed", "state", "sessions", "size", "named"),
        rows,
    )


def _render_empty(out: Out, result: EmptyResult) -> None:
    verb = "would delete" if result.dry_run else "deleted"
    total = sum(e.doc.bytes for e in result.removed)
    out.line(
        f"{verb} {_entries(len(result.removed))} ({_size(total)}) from {result.trash}; "
        f"{result.kept} kept"
    )


def _render_restore(out: Out, result: RestoreResult) -> None:
    entry = result.entry.doc
    verb = "would restore" if result.dry_run else "restored"
    moved = f"{counted(len(entry.sessions), 'session')} of {entry.entry} to {entry.root}"
    _moved(out, entry, f"{verb} {moved}", "sessions re-attached, archived and pinned marks back")


@app.command("trash", short_help="Move sessions with their family to the trash (undo: restore).")
def trash_command(
    sessions: list[str] | None = sessions_argument(
        "Sessions to trash (id or unique prefix, dir or log)."
    ),
    with_forks: bool = typer.Option(
        False, "--with-forks", help="Also trash their forks (and the forks' families)."
    ),
    force: bool = typer.Option(
        False, "--force", help="Trash a subagent whose parent stays in the root."
    ),
    dry_run: bool = dry_run_option("Say what would move; move nothing."),
    list_mode: bool = typer.Option(False, "--list", help="Show what is in the trash."),
    empty_mode: bool = typer.Option(False, "--empty", help="Delete the trash's entries for good."),
    older_than: str | None = typer.Option(
        None, "--older-than", metavar="AGE", help="With --empty: only entries older (7d, 12h)."
    ),
    yes: bool = typer.Option(False, "--yes", help="With --empty: do not ask (needed off a tty)."),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Move each SESSION with its subagents and copies (and, with --with-forks, its forks)
    out of the root into <home>/dsh-fork-trash/<time>-<id>/, by one rename per session dir;
    workspace entries are detached. Refused while a session.lock is held.

    \b
    Examples:
      dsh-fork trash 3f2a --dry-run
      dsh-fork trash --list
      dsh-fork trash --empty --older-than 30d --yes
    """
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    modes = sum((list_mode, empty_mode, bool(sessions)))
    if modes != 1:
        fail(out, UsageError("give SESSION..., --list or --empty (one of them)"))
    if older_than is not None and not empty_mode:
        fail(out, UsageError("--older-than goes with --empty"))
    if list_mode:
        listing = run(out, lambda: porcelain.trash_list(ctx), where=ctx.root)
        emit(out, listing, _render_list)
        return
    if empty_mode:
        if not yes and not dry_run:
            if not sys.stdin.isatty() or json_mode:
                fail(out, UsageError("--empty deletes for good: pass --yes (or run on a terminal)"))
            if not typer.confirm("Delete the trash's entries for good?", default=False):
                fail(out, UsageError("nothing deleted"))
        emptied = run(
            out,
            lambda: porcelain.trash_empty(ctx, older_than=older_than, dry_run=dry_run),
            where=ctx.root,
        )
        emit(out, emptied, _render_empty)
        return
    assert sessions
    result = run(
        out,
        lambda: porcelain.trash(ctx, sessions, with_forks=with_forks, force=force, dry_run=dry_run),
        where=ctx.root,
    )
    emit(out, result, _render_trash)


@app.command("restore", short_help="Move a trash entry's sessions back into the root.")
def restore_command(
    what: str = typer.Argument(
        ..., metavar="ENTRY|SESSION", help="A trash entry's name, or a session id it holds."
    ),
    dry_run: bool = dry_run_option("Say what would move; move nothing."),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Move every session of a trash entry back where it was (refused when one of its ids
    exists in the root again) and re-attach them to their workspaces.

    \b
    Example:
      dsh-fork restore 20260101T000000000Z-3f2a9c1d
    """
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    result = run(out, lambda: porcelain.restore(ctx, what, dry_run=dry_run), where=ctx.root)
    emit(out, result, _render_restore)
