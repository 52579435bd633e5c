"""The trash and its entries: where they lie, the manifest each holds, and reading them back.

The trash lies in the root's home (the root's parent, as DSH's own ``$DSH_HOME/sessions``):
``<home>/dsh-fork-trash/<UTC time>-<short id>/``, an entry holding the sessions' dirs in the
root's ``<project dir>/<session dir>`` layout and ``manifest.json``, which says what came from
where. The manifest is replaced whole (temp, fsync, rename), so it is old or new, never half;
what is on disk is the truth: where a session dir is tells where it is (``where_is``). What a
run as root makes in a user's home belongs to that user (``give``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any, Final, cast

import msgspec
import orjson
from msgspec import Struct, field

from . import faults
from . import registrydocs as docs
from .errors import DshForkError, IoError
from .fsdir import DirFd
from .results import Documented, plain
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
"""One session of an entry: where it came from, what it was (``trash._moved``, or an entry's
manifest read back), where it is now (``where``, from what is on disk: ``where_is``), and the
workspace record that listed it when it was trashed (its id), to re-attach it."""


def _stored(moved: Moved) -> dict[str, Any]:
    """A session as the entry's manifest keeps it: all but where it is now."""
    out = plain(moved)
    del out["where"]
    return out


class Entry(Documented, Struct):
    """A trash entry: its document (its manifest, and where each of its sessions is now),
    made once where the entry is made or read back (``make_entry``), and the mode of each project
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


def trash_dir(root: Path) -> Path:
    """``<home>/dsh-fork-trash``, the home being the root's parent."""
    return root.parent / TRASH_DIR


def step(kind: str, path: Path, action: Any) -> Any:
    faults.step(kind, path)
    value = action()
    faults.done(kind, path)
    return value


def owner_of(path: Path) -> tuple[int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_uid, st.st_gid


def give(fd: int | None, path: Path, owner: tuple[int, int], *, name: str | None = None) -> None:
    """What a run as root makes in a user's home belongs to that user."""
    if os.geteuid() != 0:
        return
    with contextlib.suppress(OSError):
        if name is None:
            os.chown(path, *owner, follow_symlinks=False)
        else:
            os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)


def open_trash(root: Path, *, create: bool) -> DirFd | None:
    """The trash dir, opened from the home down without following a link (made 0700 when
    ``create``); None when it does not exist and is not to be made."""
    home = root.parent
    home_fd = DirFd.open(home, home)
    try:
        if not home_fd.exists(TRASH_DIR):
            if not create:
                return None
            if step("mkdir", home / TRASH_DIR, lambda: home_fd.mkdir(TRASH_DIR)):
                give(home_fd.fd, home / TRASH_DIR, owner_of(home), name=TRASH_DIR)
                home_fd.fsync()
        return DirFd.open(TRASH_DIR, home / TRASH_DIR, home_fd)
    finally:
        home_fd.close()


def make_entry(
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


def write_manifest(entry_fd: DirFd, entry: Entry, owner: tuple[int, int]) -> None:
    """Temp, fsync, rename over, fsync the dir: the manifest is old or new, never half."""
    data = entry.manifest()
    path = entry_fd.entry(MANIFEST)
    with contextlib.suppress(FileNotFoundError):
        entry_fd.unlink(MANIFEST_TEMP)
    fd = step("create", path, lambda: entry_fd.create_file(MANIFEST_TEMP, 0o600))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        step("fsync", path, lambda: os.fsync(fd))
    finally:
        os.close(fd)
    give(entry_fd.fd, path, owner, name=MANIFEST_TEMP)
    step("rename", path, lambda: entry_fd.rename(MANIFEST_TEMP, MANIFEST))
    step("fsync", entry_fd.path, entry_fd.fsync)


def read_entry(trash: DirFd, name: str) -> Entry | None:
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
        entry = make_entry(
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
        moved.where = where_is(Path(entry.doc.root), path, moved)
    return entry


def where_is(root: Path, entry_path: Path, moved: Moved) -> docs.Where:
    in_trash = os.path.lexists(entry_path / moved.project / moved.dir)
    in_root = os.path.lexists(root / moved.project / moved.dir)
    return "both" if in_trash and in_root else "trash" if in_trash else "root" if in_root else (
        "missing"
    )  # fmt: skip


def entry_names(trash: DirFd) -> list[str]:
    return sorted(n for n in trash.listdir() if _ENTRY_NAME.match(n))


def entries(root: Path) -> list[Entry]:
    trash = open_trash(root, create=False)
    if trash is None:
        return []
    try:
        found = [read_entry(trash, name) for name in entry_names(trash)]
    finally:
        trash.close()
    return [e for e in found if e is not None]


def remove_entry(trash: DirFd, name: str) -> None:
    """Remove an entry: the manifest first (the entry stops being one), then the rest, walked
    through descriptors (``shutil.rmtree`` on this platform never follows a link)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"{name}/{MANIFEST}", dir_fd=trash.fd)
    shutil.rmtree(name, dir_fd=trash.fd)
