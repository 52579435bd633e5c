"""``trash`` and ``restore``: a session with its family out of the root and back, by renames.

The trash lies in the root's home (the root's parent, as DSH's own ``$DSH_HOME/sessions``):
``<home>/dsh-fork-trash/<UTC time>-<short id>/``, an entry holding the sessions' dirs in the
root's ``<project dir>/<session dir>`` layout and ``manifest.json``, which says what came from
where. Every session dir moves by one ``rename`` on the same file system (refused across file
systems), so it is whole in exactly one place at every moment, with its owner, modes and times.

The manifest is written first, as the intent (``state: trashing``), then the dirs move, then it
says ``trashed``; a restore rewrites it as ``restoring``, moves the dirs back and removes the
entry. What is on disk is the truth: where a session dir is tells where it is, and a run that
finds an entry still ``trashing`` or ``restoring`` (a crash) finishes its moves first
(``settle``). A crash before the manifest exists leaves an entry with no manifest and no
session, which ``settle`` removes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal, cast

import msgspec
import orjson
from msgspec import Struct, field

from . import faults
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
from .fsdir import DIR_MODE, DirFd
from .generations import dir_bytes
from .ids import now_ms
from .kinds import KindRule
from .locking import running
from .results import SCHEMA_VERSION, Documented, Whole, plain
from .sessionarg import locate
from .sessionentry import SessionEntry
from .times import iso_ms

TRASH_DIR = "dsh-fork-trash"
MANIFEST = "manifest.json"
MANIFEST_TEMP = ".manifest.json.tmp"
MANIFEST_VERSION = 1
TRASHING: Final = "trashing"
TRASHED: Final = "trashed"
RESTORING: Final = "restoring"
_ENTRY_NAME = re.compile(r"^\d{8}T\d{6}(?:\d{3})?Z-[A-Za-z0-9._-]+$")


Moved = docs.TrashedSession
"""One session of an entry: where it came from, what it was (``_moved``, or an entry's
manifest read back), where it is now (``where``, from what is on disk: ``_where``), and the
workspace record that listed it when it was trashed (its id), to re-attach it."""


def _stored(moved: Moved) -> dict[str, Any]:
    """A session as the entry's manifest keeps it: all but where it is now."""
    out = plain(moved)
    del out["where"]
    return out


class Entry(Documented, Struct):
    """A trash entry: its document (its manifest, and where each of its sessions is now),
    made once where the entry is made or read back (``_entry``), and the mode of each project
    dir the sessions came from (to make it again on restore)."""

    doc: docs.TrashEntry
    modes: dict[str, int] = field(default_factory=dict)

    def to_document(self) -> docs.TrashEntry:
        return self.doc

    def fields(self) -> dict[str, Any]:
        """The fields of its ``TrashEntry``, which the trash and restore documents extend."""
        return msgspec.structs.asdict(self.doc)

    def manifest(self) -> bytes:
        doc = self.doc
        document = {
            "version": MANIFEST_VERSION,
            "root": doc.root,
            "created": doc.created,
            "state": doc.state,
            "named": doc.named,
            "withForks": doc.with_forks,
            "projectModes": self.modes,
            "sessions": [_stored(s) for s in doc.sessions],
        }
        return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


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


# -- the trash dir ------------------------------------------------------------------------------


def trash_dir(root: Path) -> Path:
    """``<home>/dsh-fork-trash``, the home being the root's parent."""
    return root.parent / TRASH_DIR


def _step(kind: str, path: Path, action: Any) -> Any:
    faults.step(kind, path)
    value = action()
    faults.done(kind, path)
    return value


def _owner_of(path: Path) -> tuple[int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_uid, st.st_gid


def _give(fd: int | None, path: Path, owner: tuple[int, int], *, name: str | None = None) -> None:
    """What a run as root makes in a user's home belongs to that user."""
    if os.geteuid() != 0:
        return
    with contextlib.suppress(OSError):
        if name is None:
            os.chown(path, *owner, follow_symlinks=False)
        else:
            os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)


def _open_trash(root: Path, *, create: bool) -> DirFd | None:
    """The trash dir, opened from the home down without following a link (made 0700 when
    ``create``); None when it does not exist and is not to be made."""
    home = root.parent
    home_fd = DirFd.open(home, home)
    try:
        if not home_fd.exists(TRASH_DIR):
            if not create:
                return None
            if _step("mkdir", home / TRASH_DIR, lambda: home_fd.mkdir(TRASH_DIR)):
                _give(home_fd.fd, home / TRASH_DIR, _owner_of(home), name=TRASH_DIR)
                home_fd.fsync()
        return DirFd.open(TRASH_DIR, home / TRASH_DIR, home_fd)
    finally:
        home_fd.close()


def _entry(
    name: str,
    path: str,
    root: str,
    created: int,
    state: docs.EntryState,
    named: list[str],
    with_forks: bool,
    sessions: list[Moved],
    modes: dict[str, int],
) -> Entry:
    """An entry as made, or read back from its manifest: its sessions, their bytes summed."""
    doc = docs.TrashEntry(
        entry=name,
        path=path,
        root=root,
        created=created,
        created_iso=iso_ms(created),
        state=state,
        named=named,
        with_forks=with_forks,
        bytes=sum(s.bytes for s in sessions),
        registry=None,
        sessions=sessions,
    )
    return Entry(doc, modes)


def _write_manifest(entry_fd: DirFd, entry: Entry, owner: tuple[int, int]) -> None:
    """Temp, fsync, rename over, fsync the dir: the manifest is old or new, never half."""
    data = entry.manifest()
    path = entry_fd.entry(MANIFEST)
    with contextlib.suppress(FileNotFoundError):
        entry_fd.unlink(MANIFEST_TEMP)
    fd = _step("create", path, lambda: entry_fd.create_file(MANIFEST_TEMP, 0o600))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        _step("fsync", path, lambda: os.fsync(fd))
    finally:
        os.close(fd)
    _give(entry_fd.fd, path, owner, name=MANIFEST_TEMP)
    _step("rename", path, lambda: entry_fd.rename(MANIFEST_TEMP, MANIFEST))
    _step("fsync", entry_fd.path, entry_fd.fsync)


def _read_entry(trash: DirFd, name: str) -> Entry | None:
    """The entry's manifest with each session's real place; None without a manifest."""
    path = trash.entry(name)
    try:
        entry_fd = DirFd.open(name, path, trash)
    except (OSError, DshForkError):
        return None
    try:
        fd = entry_fd.open_file(MANIFEST, os.O_RDONLY)
    except FileNotFoundError:
        entry_fd.close()
        return None
    try:
        raw = b""
        while chunk := os.read(fd, 1 << 16):
            raw += chunk
            if len(raw) > 64 << 20:
                raise IoError(f"{path / MANIFEST}: larger than a manifest can be")
    finally:
        os.close(fd)
        entry_fd.close()
    try:
        doc = orjson.loads(raw)
        sessions = [
            Moved(
                id=s["id"],
                kind=s.get("kind"),
                project=s["project"],
                dir=s["dir"],
                title=s.get("title"),
                bytes=int(s.get("bytes", 0)),
                where="trash",
                workspace=s.get("workspace"),
                archived=s.get("archived") is True,
                pinned=s.get("pinned") is True,
            )
            for s in doc["sessions"]
        ]
        entry = _entry(
            name,
            str(path),
            str(doc["root"]),
            int(doc["created"]),
            cast(docs.EntryState, str(doc["state"])),
            [str(n) for n in doc.get("named", [])],
            bool(doc.get("withForks", False)),
            sessions,
            {str(k): int(v) for k, v in doc.get("projectModes", {}).items()},
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise IoError(f"{path / MANIFEST} is not a manifest dsh-fork wrote") from None
    for moved in entry.doc.sessions:
        moved.where = _where(Path(entry.doc.root), path, moved)
    return entry


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _where(root: Path, entry_path: Path, moved: Moved) -> docs.Where:
    in_trash = _exists(entry_path / moved.project / moved.dir)
    in_root = _exists(root / moved.project / moved.dir)
    return "both" if in_trash and in_root else "trash" if in_trash else "root" if in_root else (
        "missing"
    )  # fmt: skip


def _entry_names(trash: DirFd) -> list[str]:
    return sorted(n for n in trash.listdir() if _ENTRY_NAME.match(n))


def entries(root: Path) -> list[Entry]:
    trash = _open_trash(root, create=False)
    if trash is None:
        return []
    try:
        found = [_read_entry(trash, name) for name in _entry_names(trash)]
    finally:
        trash.close()
    return [e for e in found if e is not None]


# -- moving ------------------------------------------------------------------------------------


def _move(
    src_parent: Path, dst_parent: Path, name: str, *, mode: int, owner: tuple[int, int]
) -> None:
    """Rename ``src_parent/name`` to ``dst_parent/name``, making ``dst_parent`` (one level,
    ``mode``) if needed; both parents opened without following links; fsync both."""
    grand = DirFd.open(dst_parent.parent, dst_parent.parent)
    try:
        if not grand.exists(dst_parent.name):
            made = _step("mkdir", dst_parent, lambda: grand.mkdir(dst_parent.name))
            if made:
                os.chmod(dst_parent.name, mode, dir_fd=grand.fd, follow_symlinks=True)
                _give(grand.fd, dst_parent, owner, name=dst_parent.name)
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
            _step(
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
        _step("fsync", target, dst.fsync)
        _step("fsync", src_parent, src.fsync)
    finally:
        dst.close()
        if src is not None:
            src.close()


def _remove_empty(parent: Path, name: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(parent / name)


# -- settling interrupted runs -----------------------------------------------------------------


def settle(root: Path) -> list[str]:
    """Finish what a crash interrupted: an entry still ``trashing`` moves its remaining
    sessions into the trash, one still ``restoring`` moves its remaining ones back; an entry
    dir without a manifest and without sessions (a crash before the intent) is removed.
    Returns a warning per entry settled."""
    trash = _open_trash(root, create=False)
    if trash is None:
        return []
    notes: list[str] = []
    try:
        for name in _entry_names(trash):
            path = trash.entry(name)
            entry = _read_entry(trash, name)
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
                _trash_moves(root, entry)
                notes.append(f"finished an interrupted trash: {name}")
            elif entry.doc.state == RESTORING:
                _restore_moves(root, entry)
                notes.append(f"finished an interrupted restore: {name}")
    finally:
        trash.close()
    return notes


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
    entry = _entry(
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
    trash_fd = _open_trash(root_path, create=True)
    assert trash_fd is not None
    owner = _owner_of(root_path.parent)
    try:
        suffix = 0
        while trash_fd.exists(entry.doc.entry):
            suffix += 1
            entry.doc.entry = f"{name}-{suffix}"
            entry.doc.path = str(trash_path / entry.doc.entry)
        _step("mkdir", Path(entry.doc.path), lambda: trash_fd.mkdir(entry.doc.entry))
        _give(trash_fd.fd, Path(entry.doc.path), owner, name=entry.doc.entry)
        trash_fd.fsync()
        entry_fd = DirFd.open(entry.doc.entry, Path(entry.doc.path), trash_fd)
    finally:
        trash_fd.close()
    try:
        _write_manifest(entry_fd, entry, owner)
        _trash_moves(root_path, entry, entry_fd=entry_fd)
    finally:
        entry_fd.close()
    return TrashResult(entry, False, forks_left, warnings)


# -- the workspace registry ---------------------------------------------------------------

_LISTS = (("archivedSessionIds", "archived"), ("pinnedSessionIds", "pinned"))


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
        where = _where(root_path, entry_path, moved)
        if where == source:
            mode = entry.modes.get(moved.project, DIR_MODE)
            here, there = places[source] / moved.project, places[target] / moved.project
            _move(here, there, moved.dir, mode=mode, owner=_owner_of(here))
            where = target
        moved.where = where


def _trash_moves(root_path: Path, entry: Entry, *, entry_fd: DirFd | None = None) -> None:
    """Move every session still in the root into the entry (children first), then say so."""
    entry_path = Path(entry.doc.path)
    owner = _owner_of(root_path.parent)
    _move_each(root_path, entry, reversed(entry.doc.sessions), "root", "trash")
    entry.doc.registry = _registry_edit(root_path, entry, attach=False)
    entry.doc.state = TRASHED
    if entry_fd is None:
        trash = _open_trash(root_path, create=False)
        assert trash is not None
        try:
            entry_fd = DirFd.open(entry.doc.entry, entry_path, trash)
        finally:
            trash.close()
        try:
            _write_manifest(entry_fd, entry, owner)
        finally:
            entry_fd.close()
    else:
        _write_manifest(entry_fd, entry, owner)


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
        trash = _open_trash(root_path, create=False)
        if trash is not None:
            try:
                for entry in chosen:
                    _step(
                        "remove", Path(entry.doc.path), lambda e=entry: _rmtree(trash, e.doc.entry)
                    )
                trash.fsync()
            finally:
                trash.close()
    return EmptyResult(str(trash_dir(root_path)), chosen, len(found) - len(chosen), dry_run,
                       warnings)  # fmt: skip


def _rmtree(trash: DirFd, name: str) -> None:
    """Remove an entry: the manifest first (the entry stops being one), then the rest, walked
    through descriptors (``shutil.rmtree`` on this platform never follows a link)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"{name}/{MANIFEST}", dir_fd=trash.fd)
    shutil.rmtree(name, dir_fd=trash.fd)


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
        trash = _open_trash(root_path, create=False)
        assert trash is not None
        try:
            entry_fd = DirFd.open(entry.doc.entry, Path(entry.doc.path), trash)
        finally:
            trash.close()
        try:
            entry.doc.state = RESTORING
            _write_manifest(entry_fd, entry, _owner_of(root_path.parent))
        finally:
            entry_fd.close()
    _restore_moves(root_path, entry)
    return RestoreResult(entry, False, warnings)


def _restore_moves(root_path: Path, entry: Entry) -> None:
    """Move every session still in the entry back (parents first), then remove the entry."""
    entry_path = Path(entry.doc.path)
    _move_each(root_path, entry, entry.doc.sessions, "trash", "root")
    entry.doc.registry = _registry_edit(root_path, entry, attach=True)
    trash = _open_trash(root_path, create=False)
    if trash is None:
        return
    try:
        for project in sorted({m.project for m in entry.doc.sessions}):
            _remove_empty(entry_path, project)
        leftovers = [n for n in os.listdir(entry_path) if n not in (MANIFEST, MANIFEST_TEMP)]
        if not leftovers:
            _step("remove", entry_path, lambda: _rmtree(trash, entry.doc.entry))
            trash.fsync()
    finally:
        trash.close()


def session_ids(entries_: Iterable[Entry]) -> list[str]:
    return [s.id for e in entries_ for s in e.doc.sessions]
