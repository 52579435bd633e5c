"""``trash`` and ``restore``: a session with its family out of the root and back, by renames;
``trash --list`` and ``--empty``.

Each command settles what a crash interrupted first, then plans from what is on disk: the
trash and its entries are trashentry.py, the moves and the registry edit trashmoves.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from . import registrydocs as docs
from .discovery import Root
from .display import counted
from .errors import (
    DshForkError,
    IoError,
    SessionAlreadyExists,
    SessionLocked,
    SessionNotFound,
    UsageError,
)
from .fsdir import DirFd
from .generations import dir_bytes
from .ids import now_ms
from .kinds import KindRule
from .locking import running
from .results import SCHEMA_VERSION, Whole
from .sessionarg import locate
from .sessionentry import SessionEntry
from .times import iso_ms
from .trashentry import (
    RESTORING,
    TRASHING,
    Entry,
    Moved,
    entries,
    give,
    make_entry,
    open_trash,
    owner_of,
    remove_entry,
    step,
    trash_dir,
    write_manifest,
)
from .trashmoves import restore_moves, settle, trash_moves


class TrashResult(Whole, Struct):
    entry: Entry
    dry_run: bool
    forks_left: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_document(self) -> docs.TrashDocument:
        return docs.TrashDocument(
            schema_version=SCHEMA_VERSION,
            dry_run=self.dry_run,
            forks_left=self.forks_left,
            **self.entry.fields(),
        )


class TrashList(Whole, Struct):
    trash: str
    entries: list[Entry]
    warnings: list[str] = field(default_factory=list)

    def to_document(self) -> docs.TrashListDocument:
        return docs.TrashListDocument(
            schema_version=SCHEMA_VERSION,
            trash=self.trash,
            entries=[e.to_document() for e in self.entries],
        )


class EmptyResult(Whole, Struct):
    trash: str
    removed: list[Entry]
    kept: int
    dry_run: bool
    warnings: list[str] = field(default_factory=list)

    def to_document(self) -> docs.TrashEmptyDocument:
        return docs.TrashEmptyDocument(
            schema_version=SCHEMA_VERSION,
            trash=self.trash,
            dry_run=self.dry_run,
            removed=[e.to_document() for e in self.removed],
            bytes=sum(e.doc.bytes for e in self.removed),
            kept=self.kept,
        )


class RestoreResult(Whole, Struct):
    entry: Entry
    dry_run: bool
    warnings: list[str] = field(default_factory=list)

    def to_document(self) -> docs.RestoreDocument:
        return docs.RestoreDocument(
            schema_version=SCHEMA_VERSION, dry_run=self.dry_run, **self.entry.fields()
        )


# -- trash -----------------------------------------------------------------------------------


def _family(
    root: Root, named: list[SessionEntry], with_forks: bool, kinds: KindRule
) -> list[SessionEntry]:
    """The named sessions with their subagents and copies (and, with forks, their forks and
    theirs), each once, parents before children."""
    seen: set[str] = set()
    out: list[SessionEntry] = []
    queue = list(named)
    while queue:
        entry = queue.pop(0)
        if entry.dir_text in seen:
            continue
        seen.add(entry.dir_text)
        out.append(entry)
        if entry.id is None:
            continue
        queue += kinds.subagents_of(entry.id)  # a delegation child goes with its parent
        if with_forks:
            queue += root.forks_of(entry.id)
    return out


def _title(entry: SessionEntry) -> str | None:
    from .leanlog import ROW_TYPES
    from .model import derive
    from .reader import open_log

    generation = entry.generation
    if generation is None:
        return None
    try:
        log = open_log(generation, collect=ROW_TYPES)
    except (DshForkError, OSError):
        return None
    return derive(log.header, log.event_count, log.collected).title


def _moved(entry: SessionEntry, kinds: KindRule) -> Moved:
    header = entry.header
    session_dir = entry.session_dir
    try:
        size = dir_bytes(session_dir)[0]
    except OSError:
        size = 0
    return Moved(
        id=entry.id_or_dir,
        kind=None if header is None else kinds.kind(entry),
        project=session_dir.parent.name,
        dir=session_dir.name,
        title=_title(entry),
        bytes=size,
        where="root",
        workspace=None,
        archived=False,
        pinned=False,
    )


def _entry_name(first_id: str, created: int) -> str:
    short = re.sub(r"[^A-Za-z0-9._-]", "_", first_id.removeprefix("session-"))[:8] or "session"
    stamp = (iso_ms(created) or "").replace("-", "").replace(":", "").replace(".", "")
    return f"{stamp}-{short}"


def trash(
    root_path: Path,
    sessions: list[str],
    *,
    root_option: str | None,
    env: dict[str, str] | None,
    with_forks: bool = False,
    force: bool = False,
    dry_run: bool = False,
    clock: Any = now_ms,
) -> TrashResult:
    """Move each SESSION with its subagent and copy subtree (and forks) into a new entry."""
    if not sessions:
        raise UsageError("name at least one SESSION to trash")
    warnings = [] if dry_run else settle(root_path)
    root = Root(root_path)
    named: list[SessionEntry] = []
    for arg in sessions:
        located = locate(arg, root_option, env)
        found = next((e for e in root.entries() if e.dir_text == str(located.session_dir)), None)
        if found is None:
            raise SessionNotFound(f"{arg}: not a session of {root_path}", session=arg)
        named.append(found)
    kinds = KindRule(root)  # the one rule: which children are subagents, which forks
    family = _family(root, named, with_forks, kinds)
    members = {e.dir_text for e in family}
    for one in named:
        parent = one.parent
        if not one.is_subagent or parent is None or not root.exists(parent):
            continue
        if any(e.id == parent and e.dir_text in members for e in family):
            continue
        if not force:
            raise UsageError(
                f"{one.id} is a subagent of {parent}, which stays in the root: its parent "
                "would list a missing child; trash the parent, or pass --force",
                session=one.id,
                parent=parent,
            )
        warnings.append(f"{one.id} is trashed without its parent {parent} (--force)")
    for one in family:
        if running(one.session_dir):
            raise SessionLocked(
                f"{one.id or one.dir_text} is in use: its session.lock is held by a live "
                "process; nothing was moved",
                session=one.id,
                path=one.dir_text,
            )
    forks_left = sorted(
        {
            f.id or f.dir_text
            for e in family
            if e.id is not None
            for f in root.forks_of(e.id)
            if f.dir_text not in members
        }
    )
    if forks_left:
        warnings.append(
            f"{counted(len(forks_left), 'fork')} {'stays' if len(forks_left) == 1 else 'stay'} "
            "in the root (whole: a fork holds what it inherited); "
            "--with-forks trashes them too"
        )
    created = clock()
    moved = [_moved(e, kinds) for e in family]
    _memberships(root_path, moved)
    trash_path = trash_dir(root_path)
    name = _entry_name(moved[0].id, created)
    modes = {}
    for m in moved:
        with contextlib.suppress(OSError):
            modes[m.project] = stat.S_IMODE(os.stat(root_path / m.project).st_mode)
    entry = make_entry(
        name,
        str(trash_path / name),
        str(root_path),
        created,
        TRASHING,
        list(sessions),
        with_forks,
        moved,
        modes,
    )
    if dry_run:
        return TrashResult(entry, True, forks_left, warnings)
    _check_same_fs(root_path)
    trash_fd = open_trash(root_path, create=True)
    assert trash_fd is not None
    owner = owner_of(root_path.parent)
    try:
        suffix = 0
        while trash_fd.exists(entry.doc.entry):
            suffix += 1
            entry.doc.entry = f"{name}-{suffix}"
            entry.doc.path = str(trash_path / entry.doc.entry)
        step("mkdir", Path(entry.doc.path), lambda: trash_fd.mkdir(entry.doc.entry))
        give(trash_fd.fd, Path(entry.doc.path), owner, name=entry.doc.entry)
        trash_fd.fsync()
        entry_fd = DirFd.open(entry.doc.entry, Path(entry.doc.path), trash_fd)
    finally:
        trash_fd.close()
    try:
        write_manifest(entry_fd, entry, owner)
        trash_moves(root_path, entry, entry_fd=entry_fd)
    finally:
        entry_fd.close()
    return TrashResult(entry, False, forks_left, warnings)


def _memberships(root_path: Path, moved: list[Moved]) -> None:
    """Which workspace lists each session, and whether it is archived or pinned: what a
    restore puts back."""
    from . import registry

    reg = registry.load(registry.home_of(root_path))
    for m in moved:
        record = reg.listing(m.id)
        m.workspace = None if record is None else record.id
        m.archived = reg.archived(m.id)
        m.pinned = reg.pinned(m.id)


def _check_same_fs(root_path: Path) -> None:
    home = root_path.parent
    trash_path = trash_dir(root_path)
    where = trash_path if os.path.isdir(trash_path) else home
    if os.stat(root_path).st_dev != os.stat(where).st_dev:
        raise IoError(
            f"the trash {trash_path} is on another file system than the root {root_path}: "
            "a session dir moves only by a rename, so nothing was moved",
            errno=errno.EXDEV,
            path=str(trash_path),
        )


# -- list, empty ---------------------------------------------------------------------------


def list_trash(root_path: Path) -> TrashList:
    warnings = settle(root_path)
    return TrashList(str(trash_dir(root_path)), entries(root_path), warnings)


def empty(root_path: Path, *, older_than: int | None, now: int, dry_run: bool) -> EmptyResult:
    """Delete entries for good (those created before ``now - older_than`` ms)."""
    warnings = [] if dry_run else settle(root_path)
    found = entries(root_path)
    chosen = [e for e in found if older_than is None or e.doc.created <= now - older_than]
    if not dry_run:
        trash = open_trash(root_path, create=False)
        if trash is not None:
            try:
                for entry in chosen:
                    step(
                        "remove",
                        Path(entry.doc.path),
                        lambda e=entry: remove_entry(trash, e.doc.entry),
                    )
                trash.fsync()
            finally:
                trash.close()
    return EmptyResult(str(trash_dir(root_path)), chosen, len(found) - len(chosen), dry_run,
                       warnings)  # fmt: skip


def parse_age(text: str) -> int:
    """``--older-than``: an age such as 30m, 12h, 7d, 2w; in ms."""
    units = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
    value = text.strip()
    if value[:-1].isdigit() and value[-1:] in units:
        return int(value[:-1]) * units[value[-1]]
    raise UsageError(f"--older-than {text!r}: give an age such as 30m, 12h, 7d or 2w")


# -- restore -----------------------------------------------------------------------------------


def _find(root_path: Path, what: str) -> Entry:
    found = entries(root_path)
    by_name = [e for e in found if e.doc.entry == what]
    if by_name:
        return by_name[0]
    prefixes = (what, f"session-{what}")  # a short id may leave out the session- prefix
    holding = [e for e in found if any(s.id.startswith(prefixes) for s in e.doc.sessions)]
    exact = [e for e in holding if any(s.id == what for s in e.doc.sessions)]
    chosen = exact or holding
    if not chosen:
        raise SessionNotFound(
            f"no trash entry named {what!r} or holding that session in {trash_dir(root_path)}",
            session=what,
        )
    ids = {s.id for e in chosen for s in e.doc.sessions if s.id.startswith(prefixes)}
    if len(ids) > 1:
        raise SessionNotFound(f"{what!r} is a prefix of {len(ids)} trashed sessions", session=what)
    return chosen[-1]  # the newest entry holding it


def restore(root_path: Path, what: str, *, dry_run: bool = False) -> RestoreResult:
    """Move an entry's sessions back where they were, refusing ids that exist again."""
    warnings = [] if dry_run else settle(root_path)
    entry = _find(root_path, what)
    if Path(entry.doc.root) != root_path:
        raise UsageError(
            f"{entry.doc.entry} was trashed from {entry.doc.root}, not {root_path}: pass --root "
            f"{entry.doc.root}",
            entry=entry.doc.entry,
        )
    root = Root(root_path)
    for moved in entry.doc.sessions:
        if moved.where == "both":
            raise SessionAlreadyExists(
                f"{moved.project}/{moved.dir} exists in the root again; nothing was restored",
                session=moved.id,
            )
        if moved.where == "trash" and root.exists(moved.id):
            raise SessionAlreadyExists(
                f"{moved.id} exists in the root again ({root.dirs_of(moved.id)[0]}); nothing "
                "was restored",
                session=moved.id,
            )
    missing = [m.id for m in entry.doc.sessions if m.where == "missing"]
    if missing:
        warnings.append(f"{len(missing)} sessions of {entry.doc.entry} are neither in the "
                        f"trash nor in the root: {', '.join(missing)}")  # fmt: skip
    if dry_run:
        return RestoreResult(entry, True, warnings)
    if entry.doc.state != RESTORING:
        trash = open_trash(root_path, create=False)
        assert trash is not None
        try:
            entry_fd = DirFd.open(entry.doc.entry, Path(entry.doc.path), trash)
        finally:
            trash.close()
        try:
            entry.doc.state = RESTORING
            write_manifest(entry_fd, entry, owner_of(root_path.parent))
        finally:
            entry_fd.close()
    restore_moves(root_path, entry)
    return RestoreResult(entry, False, warnings)
