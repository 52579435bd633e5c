"""The moves of ``trash`` and ``restore``, the registry edit after them, and ``settle``.

Every session dir moves by one ``rename`` on the same file system (refused across file
systems), so it is whole in exactly one place at every moment, with its owner, modes and times.
The manifest is written first, as the intent (``state: trashing``), then the dirs move, then it
says ``trashed``; a restore rewrites it as ``restoring``, moves the dirs back and removes the
entry. A run that finds an entry still ``trashing`` or ``restoring`` (a crash) finishes its
moves first (``settle``). A crash before the manifest exists leaves an entry with no manifest
and no session, which ``settle`` removes.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from . import registrydocs as docs
from .errors import IoError, SessionAlreadyExists
from .fsdir import DIR_MODE, DirFd
from .ids import now_ms
from .trashentry import (
    MANIFEST,
    MANIFEST_TEMP,
    RESTORING,
    TRASHED,
    TRASHING,
    Entry,
    Moved,
    entry_names,
    give,
    open_trash,
    owner_of,
    read_entry,
    remove_entry,
    step,
    where_is,
    write_manifest,
)


def _move(
    src_parent: Path, dst_parent: Path, name: str, *, mode: int, owner: tuple[int, int]
) -> None:
    """Rename ``src_parent/name`` to ``dst_parent/name``, making ``dst_parent`` (one level,
    ``mode``) if needed; both parents opened without following links; fsync both."""
    grand = DirFd.open(dst_parent.parent, dst_parent.parent)
    try:
        if not grand.exists(dst_parent.name):
            made = step("mkdir", dst_parent, lambda: grand.mkdir(dst_parent.name))
            if made:
                os.chmod(dst_parent.name, mode, dir_fd=grand.fd, follow_symlinks=True)
                give(grand.fd, dst_parent, owner, name=dst_parent.name)
                grand.fsync()
        dst = DirFd.open(dst_parent.name, dst_parent, grand)
    finally:
        grand.close()
    src = None
    try:
        src = DirFd.open(src_parent, src_parent)
        src_fd = src.fd
        if dst.exists(name):
            raise SessionAlreadyExists(
                f"{dst_parent / name} already exists; nothing was moved over it",
                path=str(dst_parent / name),
            )
        target = dst_parent / name
        try:
            step(
                "rename",
                target,
                lambda: os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst.fd),
            )
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise IoError(
                    f"cannot move {src_parent / name} to {target}: another file system "
                    "(the trash must be on the root's file system)",
                    errno=exc.errno,
                    path=str(target),
                ) from None
            raise IoError.of(exc, "move", where=src_parent / name) from None
        step("fsync", target, dst.fsync)
        step("fsync", src_parent, src.fsync)
    finally:
        dst.close()
        if src is not None:
            src.close()


def _remove_empty(parent: Path, name: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(parent / name)


def settle(root: Path) -> list[str]:
    """Finish what a crash interrupted: an entry still ``trashing`` moves its remaining
    sessions into the trash, one still ``restoring`` moves its remaining ones back; an entry
    dir without a manifest and without sessions (a crash before the intent) is removed.
    Returns a warning per entry settled."""
    trash = open_trash(root, create=False)
    if trash is None:
        return []
    notes: list[str] = []
    try:
        for name in entry_names(trash):
            path = trash.entry(name)
            entry = read_entry(trash, name)
            if entry is None:
                leftovers = [n for n in os.listdir(path) if n != MANIFEST_TEMP]
                if not leftovers:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path / MANIFEST_TEMP)
                    os.rmdir(path)
                    notes.append(f"removed {name}: a trash interrupted before it moved anything")
                continue
            if Path(entry.doc.root) != root or entry.doc.state == TRASHED:
                continue
            if entry.doc.state == TRASHING:
                trash_moves(root, entry)
                notes.append(f"finished an interrupted trash: {name}")
            elif entry.doc.state == RESTORING:
                restore_moves(root, entry)
                notes.append(f"finished an interrupted restore: {name}")
    finally:
        trash.close()
    return notes


_LISTS = (("archivedSessionIds", "archived"), ("pinnedSessionIds", "pinned"))


def _registry_edit(root_path: Path, entry: Entry, *, attach: bool) -> docs.RegistryEdit | None:
    """Trash: take the sessions out of every record and out of the archived and pinned
    lists; restore: put them back where they were (a record gone since stays gone: the
    session is Ungrouped). One edit by the registry's own rules; None when nothing was
    listed. A registry that cannot be edited is left alone and the reason kept."""
    from . import registry

    wanted = [m for m in entry.doc.sessions if m.workspace or m.archived or m.pinned]
    if not wanted:
        return None

    def decide(reg: registry.Registry) -> list[registry.Change]:
        known = {r.id for r in reg.records}
        changes = []
        for m in wanted:
            lists = tuple((key, attach and getattr(m, flag)) for key, flag in _LISTS)
            target = m.workspace if attach and m.workspace in known else None
            changes.append(registry.Change(m.id, target, lists))
        return changes

    edit = registry.edit(registry.home_of(root_path), decide, now_ms())
    return docs.RegistryEdit(str(edit.registry.path), edit.written, edit.changed, edit.reason)


Place = Literal["root", "trash"]
"""Where a trashed session's dir is: in the root, or in its trash entry."""


def _move_each(
    root_path: Path, entry: Entry, sessions: Iterable[Moved], source: Place, target: Place
) -> None:
    """Move each of ``sessions`` that is still in ``source`` ("root" or "trash") to
    ``target``, and note where each is. A project dir made on the way takes the mode noted
    in the entry and the owner of the project dir it comes from (the entry's takes the
    root's, which restore gives back)."""
    entry_path = Path(entry.doc.path)
    places = {"root": root_path, "trash": entry_path}
    for moved in sessions:
        where = where_is(root_path, entry_path, moved)
        if where == source:
            mode = entry.modes.get(moved.project, DIR_MODE)
            here, there = places[source] / moved.project, places[target] / moved.project
            _move(here, there, moved.dir, mode=mode, owner=owner_of(here))
            where = target
        moved.where = where


def trash_moves(root_path: Path, entry: Entry, *, entry_fd: DirFd | None = None) -> None:
    """Move every session still in the root into the entry (children first), then say so."""
    entry_path = Path(entry.doc.path)
    owner = owner_of(root_path.parent)
    _move_each(root_path, entry, reversed(entry.doc.sessions), "root", "trash")
    entry.doc.registry = _registry_edit(root_path, entry, attach=False)
    entry.doc.state = TRASHED
    if entry_fd is None:
        trash = open_trash(root_path, create=False)
        assert trash is not None
        try:
            entry_fd = DirFd.open(entry.doc.entry, entry_path, trash)
        finally:
            trash.close()
        try:
            write_manifest(entry_fd, entry, owner)
        finally:
            entry_fd.close()
    else:
        write_manifest(entry_fd, entry, owner)


def restore_moves(root_path: Path, entry: Entry) -> None:
    """Move every session still in the entry back (parents first), then remove the entry."""
    entry_path = Path(entry.doc.path)
    _move_each(root_path, entry, entry.doc.sessions, "trash", "root")
    entry.doc.registry = _registry_edit(root_path, entry, attach=True)
    trash = open_trash(root_path, create=False)
    if trash is None:
        return
    try:
        for project in sorted({m.project for m in entry.doc.sessions}):
            _remove_empty(entry_path, project)
        leftovers = [n for n in os.listdir(entry_path) if n not in (MANIFEST, MANIFEST_TEMP)]
        if not leftovers:
            step("remove", entry_path, lambda: remove_entry(trash, entry.doc.entry))
            trash.fsync()
    finally:
        trash.close()
