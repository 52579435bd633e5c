"""The sessions root: its listing, lookup by id, root encoding, the parent index.

Listing reads header frames only (format §5.2: a scan limited to one frame), so a root of ten
thousand sessions is indexed without decoding any event. Each session dir becomes a
``SessionEntry`` (``sessionentry``); a SESSION argument is resolved by ``sessionarg``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Set
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from msgspec import Struct, field

from .errors import DshForkError, IoError, SessionNotFound, UnsupportedFormat
from .frames import first_line
from .fsdir import open_regular_stat
from .generations import (
    SETTLED_NS,
    SUPPORTED_VERSION,
    Generation,
    dir_bytes,
    list_generations,
    scan_names,
    scan_sized,
    shared,
)
from .layout import encode_segment
from .progress import SILENT, Progress
from .reader import HEADER_FIRST_READ, peek_fields, read_header, read_header_line
from .records import Header
from .sessionentry import SessionEntry, birth_order, linked_entry, odd_generation, unlisted_entry

if TYPE_CHECKING:
    from .leanlog import Glance

RootEncoding = Literal["zstd", "plain", "mixed", "empty"]


class _ProjectListing(Struct, frozen=True):
    """A project dir as ``Root.unknown_texts`` last listed it."""

    mark: tuple[int, int, int] | None
    """(inode, mtime, ctime) when they were settled at that listing, else None."""
    unknown: list[str]
    """Its candidate dirs the listing did not know then."""


class Root(Struct):
    path: Path
    _entries: list[SessionEntry] | None = None
    _children: dict[str, list[SessionEntry]] | None = None
    _by_id: dict[str, SessionEntry] | None = None
    _suffixes: set[str] | None = None
    """The encodings of the listed entries, kept with them (relink asks once per fork child)."""
    _unlisted: list[SessionEntry] = field(default_factory=list)
    _texts: set[str] | None = None
    """The dir texts of the listed entries (``listed_texts``), kept with them."""
    _seen: dict[str, _ProjectListing] = field(default_factory=dict)
    """What ``unknown_texts`` found in each project dir when it last listed it."""
    progress: Progress | None = None
    """Told of each session dir read by ``entries`` (the stage "sessions read")."""
    _walked: list[str] | None = None
    """The candidate dirs of the listing's walk, in order (``listed_candidates``)."""

    # -- walking ----------------------------------------------------------------------------

    def project_dirs(self) -> list[Path]:
        """Every directory directly under the root is a project dir, whatever its name."""
        try:
            entries = sorted(os.scandir(self.path), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except PermissionError as exc:
            raise IoError.of(exc, "list the root") from None
        return [Path(e.path) for e in entries if _is_dir(e)]

    def candidate_dirs(self) -> Iterator[Path]:
        for text in self.candidate_texts():
            yield Path(text)

    def listed_texts(self) -> Set[str]:
        """The dirs of the listed sessions as text (``SessionEntry.dir_text``): what a run
        compares ``candidate_texts`` with to find the dirs the listing does not know. Kept
        with the listing (``register`` adds to it): relink asks once per fork child."""
        if self._texts is None:
            self._texts = {entry.dir_text for entry in self.entries()}
        return self._texts

    def unknown_texts(self) -> list[str]:
        """The candidate session dirs (as text) the listing does not know, in order: what
        another run made since the root was listed, and the dirs that hold no session.

        relink asks this once per fork child, so a ``relink --all`` does not list every
        project dir of a large root again for each: a project dir whose inode, mtime and
        ctime are those it had when this method last listed it, stamped at least
        ``SETTLED_NS`` before that listing, holds the same names (creating or removing a
        dir in it changes its mtime and ctime). Of such a dir only the unknown dirs found
        then are given again: any of them may hold a session by now. A dir changed within
        ``SETTLED_NS`` of its listing is listed again each time, since a file system stamps
        times coarsely and a change in the same stamp would keep its mtime."""
        known = self.listed_texts()
        found: list[str] = []
        for project in self.project_dirs():
            base = str(project)
            listed_at = time.time_ns()
            try:
                st = os.stat(base)
            except OSError:
                st = None
            mark = None if st is None else (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            seen = self._seen.get(base)
            if mark is not None and seen is not None and seen.mark == mark:
                found.extend(text for text in seen.unknown if text not in known)
                continue
            try:
                names = _subdir_names(project)
            except OSError:  # named by the listing (``unlisted``), as before
                self._seen.pop(base, None)
                continue
            unknown = [text for text in _dir_texts(base, names) if text not in known]
            settled = st is not None and max(st.st_mtime_ns, st.st_ctime_ns) < (
                listed_at - SETTLED_NS
            )
            self._seen[base] = _ProjectListing(mark if settled else None, unknown)
            found.extend(unknown)
        return found

    def candidate_texts(self) -> Iterator[str]:
        """``candidate_dirs`` as text, the form of ``SessionEntry.dir_text``: a run that looks
        for dirs it has not listed yet (relink, once per fork child) builds no Path per dir."""
        for job in self._walk():
            if isinstance(job, str):
                yield job

    def listed_candidates(self) -> list[str]:
        """``candidate_texts`` as the root's listing found them (listing it first if need
        be): a pass over the listed dirs and those that held no session (doctor's root
        rules) goes through them in order without walking the root again."""
        self.entries()
        assert self._walked is not None
        return self._walked

    def walk(self) -> Iterator[str | SessionEntry]:
        """``_walk``: for a pass that reads each session dir itself (``search``)."""
        return self._walk()

    def _walk(self) -> Iterator[str | SessionEntry]:
        """Every candidate session dir (``<project dir>/<dir>``, as text), in order, and in
        place of a project dir that cannot be listed an entry naming it with its error."""
        for project in self.project_dirs():
            base = str(project)
            if os.path.islink(base):
                yield linked_entry(base, "project directory")
                continue
            try:
                names, links = _subdirs(project)
            except OSError as exc:
                yield unlisted_entry(base, exc, "project directory")
                continue
            yield from _dir_texts(base, names)  # str paths: no Path per session
            prefix = base if base.endswith(os.sep) else base + os.sep
            yield from (linked_entry(prefix + name) for name in links)

    def entries(
        self,
        *,
        glance: bool = False,
        sizes: bool = False,
        agents: bool = True,
        others: bool = False,
    ) -> list[SessionEntry]:
        """Every session of the root with its header (or the error reading it); cached.

        Reads the header frame of each session and nothing else; see ``SessionEntry`` for
        what is deferred until used. With ``glance`` (``list``) a small log is read whole in
        that same read and its row facts are folded at once (``SessionEntry.glance``), so no
        log is opened twice and no bytes are kept; without ``agents`` only the logs whose
        header is not a subagent's are folded (the conversations ``list`` shows: a subagent
        is counted under its conversation, and the rare one shown is read when its row is
        made). With ``sizes`` (``du`` of a whole root) each dir is also sized
        (``SessionEntry.sizes``) where it is listed. With ``others`` (``doctor``) the names
        of each dir's other regular files are kept from that same listing
        (``SessionEntry.others``), so that no dir is listed again for its temps.
        """
        if self._entries is None:
            jobs = list(self._walk())  # dirs to list, in order, or a project dir's error
            self._walked = [job for job in jobs if isinstance(job, str)]
            found: list[SessionEntry] = []
            unlisted: list[SessionEntry] = []
            progress = self.progress or SILENT
            progress.stage("sessions read", len(jobs))
            glancing = _glancing(agents) if glance else None
            listed = _list_jobs(jobs, glancing, sizes, progress, others)
            for entry in listed:
                if entry is None:
                    continue
                if not entry._names:  # no generation: named as unreadable
                    unlisted.append(entry)
                else:
                    found.append(entry)
            self._entries = found
            self._unlisted = unlisted
        return self._entries

    def encoding(self) -> RootEncoding:
        """The set of suffixes of every canonical generation in the root (format §4)."""
        seen: set[str] = set()
        if self._entries is not None:  # the listing already walked every session dir
            if self._suffixes is None:
                self._suffixes = set()
                for entry in self._entries:
                    self._suffixes.update(entry.encodings)
            seen.update(self._suffixes)
            if len(seen) == 2:
                return "mixed"
        for session_dir in () if self._entries is not None else self.candidate_dirs():
            try:
                seen.update(g.encoding for g in list_generations(session_dir))
            except OSError:  # unreadable: its generations are unknown, to DSH as well
                continue
            if len(seen) == 2:
                return "mixed"
        if not seen:
            return "empty"
        return "zstd" if seen == {"zstd"} else "plain"

    def require_writable(self) -> None:
        """Writes go only into a zstd (or empty) root (semantics §2.5)."""
        encoding = self.encoding()
        if encoding in ("plain", "mixed"):
            raise UnsupportedFormat(
                f"the root {self.path} is {encoding}; dsh-fork writes only into a zstd root",
                path=str(self.path),
            )

    # -- lookup -----------------------------------------------------------------------------

    def dirs_of(self, session_id: str, projects: list[Path] | None = None) -> list[Path]:
        """Session dirs named for ``session_id`` that hold a canonical generation. The empty
        id names no dir (it has no encoding), yet a header may name it: ``parentSession`` is
        any string, never resolved on read (format §7.2). ``projects``: the root's project
        dirs as this run already listed them (``project_dirs``), so the root is listed once."""
        if not session_id:
            return []
        return [path for path, _ in self.holding(session_id, projects)]

    def holding(
        self, session_id: str, projects: list[Path] | None = None
    ) -> list[tuple[Path, list[Generation]]]:
        """``dirs_of`` with the generations found in each, for a caller that reads one."""
        if not session_id:
            return []
        segment = encode_segment(session_id)
        listed = self.project_dirs() if projects is None else projects
        found = [p / segment for p in listed if not os.path.islink(p)]
        held = [(path, _generations(path)) for path in found if not os.path.islink(path)]
        return [(path, generations) for path, generations in held if generations]

    def refusal(self, session_id: str, projects: list[Path] | None = None) -> DshForkError | None:
        """Why a dir named for ``session_id`` holds no session that can be read (it cannot be
        listed, its log is a FIFO, it is a symbolic link), or None when no such dir exists:
        a session that is there but unreadable is named so, never "no session"."""
        if not session_id:
            return None
        segment = encode_segment(session_id)
        projects = self.project_dirs() if projects is None else projects
        linked = [p for p in projects if os.path.islink(p)]
        for project in [p for p in projects if p not in linked]:  # the root's own dirs first
            path = str(project / segment)
            if os.path.islink(path):
                return linked_entry(path).error
            if os.path.lexists(path):
                odd = odd_generation(path)
                if odd is not None and odd.error is not None:
                    return odd.error
        for project in linked:  # the session lies behind a linked project dir
            if os.path.lexists(project / segment):
                return linked_entry(str(project), "project directory").error
        return None

    def exists(self, session_id: str) -> bool:
        return bool(self.dirs_of(session_id))

    def find(self, session_id: str, projects: list[Path] | None = None) -> Path:
        """The one dir of ``session_id``; ``projects`` as ``dirs_of`` takes them."""
        dirs = self.dirs_of(session_id, projects)
        return self.only_dir(session_id, dirs, projects)

    def only_dir(self, session_id: str, dirs: list[Path], projects: list[Path] | None) -> Path:
        """``dirs`` (``dirs_of(session_id)``) when it is one dir; else why not, as ``find``."""
        if not dirs:
            refusal = self.refusal(session_id, projects)
            if refusal is not None:
                raise refusal
            raise SessionNotFound(f"no session {session_id!r} in {self.path}", session=session_id)
        if len(dirs) > 1:
            raise SessionNotFound(
                f"ambiguous id {session_id!r} in {len(dirs)} project directories; pass a path",
                session=session_id,
            )
        return dirs[0]

    # -- lineage ----------------------------------------------------------------------------

    def _index(self) -> dict[str, list[SessionEntry]]:
        if self._children is None:
            index: dict[str, list[SessionEntry]] = {}
            for entry in self.entries():
                parent = entry.parent
                if parent is not None:
                    index.setdefault(parent, []).append(entry)
            self._children = index
        return self._children

    def children_of(self, parent_id: str) -> list[SessionEntry]:
        """Subagent children: ``parentSession`` = parent and ``origin: subagent``, whole root.

        Sorted by (createdAt, id). A child whose header cannot be validated (a future
        generation, a corrupt header) is listed with its ``error`` when its raw header still
        names the parent, so callers can report it instead of dropping it.
        """
        kids = [e for e in self._index().get(parent_id, []) if e.is_subagent]
        return sorted(kids, key=birth_order)

    def forks_of(self, parent_id: str) -> list[SessionEntry]:
        kids = [e for e in self._index().get(parent_id, []) if _is_fork_child(e)]
        return sorted(kids, key=birth_order)

    def counts_of(self, parent_id: str) -> tuple[int, int]:
        """(``len(forks_of)``, ``len(children_of)``) without building or sorting either list:
        a listing asks it of every session, and most have neither."""
        kids = self._index().get(parent_id)
        if not kids:
            return 0, 0
        return sum(map(_is_fork_child, kids)), sum(e.is_subagent for e in kids)

    def unlisted(self) -> list[SessionEntry]:
        """Dirs of the root that cannot be listed (a project dir or a session dir: EACCES,
        EIO), each with its ``error`` and no generation. Not among ``entries`` (nothing is
        known of what they hold), but never dropped: a command names them as unreadable."""
        self.entries()
        return list(self._unlisted)

    def unreadable(self) -> list[SessionEntry]:
        """Every session a command cannot read, with its ``error``: logs without a valid
        header (damaged, or that cannot be opened) and the dirs that cannot be listed."""
        return [e for e in self.entries() if e.header is None] + self.unlisted()

    def fork_children(self) -> list[SessionEntry]:
        kids = [e for e in self.entries() if e.header and e.header.is_fork_child]
        return sorted(kids, key=birth_order)

    def entry(self, session_id: str) -> SessionEntry | None:
        """The listed session with this id (the first one when an id is duplicated)."""
        if self._by_id is None:
            by_id: dict[str, SessionEntry] = {}
            for entry in self.entries():
                if entry.id is not None:
                    by_id.setdefault(entry.id, entry)
            self._by_id = by_id
        return self._by_id.get(session_id)

    def register(
        self,
        session_dir: Path,
        generation: Generation | None = None,
        *,
        line: bytes | None = None,
    ) -> SessionEntry | None:
        """Add a session published during this run to the cached listing and indexes.

        A run that writes sessions (relink copies) keeps one index for its whole duration;
        registering what it wrote keeps that index true without re-reading the root. The
        writer may pass the (only) generation it wrote and its header line, which saves
        reading them back: the entry is then as listing makes it, validated on first use.
        """
        if self._entries is None:
            return None
        if line is not None and generation is not None:  # as a listed entry: no Path kept
            names = shared(((generation.version, generation.encoding, generation.path.name),))
            entry = SessionEntry._of_line(str(session_dir), names, line)
        else:
            generations = [generation] if generation is not None else list_generations(session_dir)
            if not generations:
                return None
            entry = SessionEntry(session_dir, generations)
            entry.header = read_header(generations[-1])
        self._entries.append(entry)
        if self._texts is not None:
            self._texts.add(entry.dir_text)
        if self._suffixes is not None:
            self._suffixes.update(entry.encodings)
        if self._children is not None and entry.parent is not None:
            self._children.setdefault(entry.parent, []).append(entry)
        if self._by_id is not None and entry.id is not None:
            self._by_id.setdefault(entry.id, entry)
        return entry

    def invalidate(self) -> None:
        self._entries = None
        self._walked = None
        self._texts = None
        self._seen.clear()
        self._unlisted = []
        self._children = None
        self._by_id = None
        self._suffixes = None


def _is_fork_child(entry: SessionEntry) -> bool:
    return entry.is_fork_child


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _generations(session_dir: Path) -> list[Generation]:
    """The canonical generations a dir holds; one that cannot be listed holds none that
    could be read (``entries`` names it as unreadable)."""
    try:
        return list_generations(session_dir)
    except OSError:
        return []


def _dir_texts(project: str, names: list[str]) -> list[str]:
    """The candidate session dirs of a project dir as text, the form of
    ``SessionEntry.dir_text``."""
    prefix = project if project.endswith(os.sep) else project + os.sep
    return [prefix + name for name in names]


def _subdir_names(project: Path) -> list[str]:
    """Names of the directories in a project dir, sorted: the candidate session dirs. A dir
    that does not exist has none; one that cannot be listed raises its OSError."""
    try:
        scan = os.scandir(project)
    except (FileNotFoundError, NotADirectoryError):
        return []
    with scan:
        return sorted(entry.name for entry in scan if _is_dir(entry))


def _subdirs(project: Path) -> tuple[list[str], list[str]]:
    """``_subdir_names``, and apart the names of the symbolic links to directories: a session
    or project dir reached through a link is never read (a link may lead out of the root), but
    named, as every other command refuses it."""
    try:
        scan = os.scandir(project)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    names: list[str] = []
    links: list[str] = []
    with scan:
        for entry in scan:
            if _is_dir(entry):
                (links if entry.is_symlink() else names).append(entry.name)
    return sorted(names), sorted(links)


def _list_jobs(
    jobs: list[str | SessionEntry],
    glancing: _Glancing | None,
    sizes: bool,
    progress: Progress = SILENT,
    others: bool = False,
) -> list[SessionEntry | None]:
    """The entry of each job, in order: a dir's listing (``_list_entry``), or the entry of a
    project dir that could not be listed."""
    entries: list[SessionEntry | None] = []
    for job in jobs:
        entries.append(
            job if isinstance(job, SessionEntry) else _list_entry(job, glancing, sizes, others)
        )
        progress.advance()
    if sizes:
        for entry in entries:
            if entry is not None and entry.sizes is None:  # not listed: sized alone
                entry.sizes = dir_bytes(entry.dir_text)
    return entries


class _Glancing(Struct, frozen=True):
    """How ``list`` reads and folds a small log (``leanlog``): looked up once per listing,
    since an import statement run per dir cost more than a microsecond each time."""

    max_bytes: int
    fold: Callable[[bytes, Header, str, int], Glance | None]
    agents: bool
    """Whether a log whose header says ``origin: "subagent"`` is folded too."""


def _glancing(agents: bool = True) -> _Glancing:
    from . import leanlog  # only ``list`` folds: other commands never import it

    return _Glancing(leanlog.LEAN_MAX_BYTES, leanlog.fold_listed, agents)


def _list_entry(
    dir_text: str, glancing: _Glancing | None = None, sizes: bool = False, others: bool = False
) -> SessionEntry | None:
    """One candidate session dir, as cheaply as listing allows: its generation names and the
    raw header line of the highest one (validated later, on first use), and with ``sizes``
    its sizes from the same listing; with ``glancing`` a small log's row facts too. A dir
    that cannot be listed, or whose log cannot be opened, is an entry with its error."""
    sized: tuple[int, int] | None = None
    found: list[str] | None = [] if others else None
    try:
        if sizes:
            names, sized = scan_sized(dir_text)
        else:
            names = scan_names(dir_text) if found is None else scan_names(dir_text, found)
    except OSError as exc:
        return unlisted_entry(dir_text, exc)
    if not names:
        return odd_generation(dir_text)
    entry = SessionEntry._from_listing(dir_text, names)
    entry.sizes = sized
    if found is not None:
        entry.others = tuple(found) if found else ()
    version, encoding, name = names[-1]
    whole: bytes | None = None
    mtime_ms = 0
    try:
        if version > SUPPORTED_VERSION:
            generation = entry.generation
            assert generation is not None
            read_header(generation)  # raises the future-generation refusal
        if glancing is not None and encoding == "zstd" and version >= 2:
            path = dir_text + os.sep + name
            line, whole, mtime_ms = _read_small(path, glancing.max_bytes, glancing.agents)
        else:
            line = read_header_line(dir_text + os.sep + name, encoding)
    except DshForkError as exc:
        generation = entry.generation
        assert generation is not None
        entry.refuse(exc, peek_fields(generation))
        return entry
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        entry.refuse(
            IoError(
                f"cannot read the session log in {dir_text}: {reason}",
                errno=exc.errno,
                path=os.path.join(dir_text, name),
            )
        )
        return entry
    entry._line = line
    if whole is not None and glancing is not None:
        header = entry.header
        if header is not None and (glancing.agents or header.origin != "subagent"):
            entry.glance = glancing.fold(whole, header, dir_text + os.sep + name, mtime_ms)
            entry.glanced = True
        entry.forget()  # back to its header line: a root's parsed headers are never all held
    return entry


def _read_small(path: str, max_bytes: int, agents: bool = True) -> tuple[bytes, bytes | None, int]:
    """(header line, the whole log or None, its mtime in ms) from one open: a log within
    ``max_bytes`` is read whole, a larger one as ``read_header_line`` reads it. The header
    line comes from ``frames.first_line`` or, in any doubt, from ``read_header_line`` itself,
    which gives the verdict; then no whole log is offered. Without ``agents`` a log beyond
    the header's first read is read on only when its header line may be a conversation's
    (``_may_be_conversation``): a subagent's log is not folded, so not read either."""
    fd, stat = open_regular_stat(path)  # never through a link, never blocking on a FIFO
    try:
        small = stat.st_size <= max_bytes
        first = stat.st_size + 1 if small else HEADER_FIRST_READ
        data = os.read(fd, first if agents else min(first, HEADER_FIRST_READ))
        line = first_line(data)
        rest = small and not agents and len(data) <= stat.st_size
        if rest and line is not None and _may_be_conversation(line):  # a small log: read on
            data += os.read(fd, stat.st_size + 1 - len(data))
    finally:
        os.close(fd)
    if line is None:
        return read_header_line(path, "zstd"), None, 0
    whole = data if small and len(data) == stat.st_size else None
    return line, whole, stat.st_mtime_ns // 1_000_000


def _may_be_conversation(line: bytes) -> bool:
    """Whether a header line may not be a subagent's: it does not hold the text
    ``"subagent"``. It decides only how much of a log is read: a header that holds it in
    another field is a conversation whose row reads its log when it is made; one that spells
    its origin with escapes is read whole and not folded, as the validated header decides."""
    return b'"subagent"' not in line
