"""One session dir of the root as a listing knows it (``SessionEntry``): its generations, and its
header and lineage read lazily from the first frame of its log (format §5.2).

A listing of ten thousand sessions makes ten thousand entries, so an entry holds text, not
``Path`` objects, builds its paths on demand and reads its header line only when a caller asks
for its id, parent or kind. Entries that could not be read at all (a linked dir, one that
cannot be listed, a generation that is no regular file) are entries too, carrying the error,
so a command names them instead of skipping them. Apart from the listing of the root
(``discovery``) because this is what every command holds of a session, and the listing only
makes them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct

from .errors import DshForkError, IoError
from .fsdir import not_regular
from .generations import Generation, Names, parse_name, select
from .layout import decode_segment
from .reader import read_header_line
from .records import Header, LineError, parse_header, parse_line

if TYPE_CHECKING:
    from .leanlog import Glance


class _Lineage(Struct, frozen=True):
    """What lineage asks of a header line, read off its raw fields: ``id`` and ``parent``
    when they are strings, whether ``origin`` is ``subagent``, ``createdAt`` when it is a
    plain integer (else the validated header decides). Taken from a validated header, it
    also holds its ``delegationDepth`` and whether it is a fork child's: an entry returned
    to its listed form (``forget``) answers them without validating its line again."""

    id: str | None
    parent: str | None
    subagent: bool
    created_at: int | None
    depth: int | None = None
    """The validated header's ``delegationDepth``; None when not taken from one."""
    fork_child: bool = False

    @classmethod
    def of(cls, fields: dict[str, object] | None) -> _Lineage:
        if not fields:
            return _NO_LINEAGE
        ident = fields.get("id")
        parent = fields.get("parentSession")
        created = fields.get("createdAt")
        return cls(
            ident if isinstance(ident, str) else None,
            parent if isinstance(parent, str) else None,
            fields.get("origin") == "subagent",
            created if type(created) is int else None,
        )


_NO_LINEAGE = _Lineage(None, None, False, None)


class SessionEntry:
    """One session dir of the root, as listing sees it: its highest generation and header.

    Entries made by ``Root.entries`` are lazy: the dir path, the ``Generation`` objects and
    the validated header are built on first use. Lineage (id, parent, origin, createdAt) is
    answered from four values read off the raw header line when first asked (``_Lineage``), which
    give the same answers as the validated header (and as ``raw_fields`` when it is invalid),
    so finding the children of one session in a root of ten thousand validates only those
    children, and an entry nobody validates holds its line's bytes, not its parsed fields.
    """

    __slots__ = (
        "_dir",
        "_dir_text",
        "_error",
        "_generations",
        "_header",
        "_lin",
        "_line",
        "_listed",
        "_names",
        "_raw_fields",
        "_shed",
        "glance",
        "glanced",
        "others",
        "sizes",
    )

    def __init__(
        self,
        session_dir: Path,
        generations: list[Generation],
        header: Header | None = None,
        error: DshForkError | None = None,
        raw_fields: dict[str, object] | None = None,
    ) -> None:
        self._dir: Path | None = session_dir
        self._dir_text = ""
        self._names: Names = ()
        self._generations: list[Generation] | None = generations
        self._header = header
        self._error = error
        self._raw_fields = raw_fields
        self._line: bytes | None = None
        self._lin: _Lineage | None = None
        self._listed = False
        self._shed = False
        self.glance: Glance | None = None
        """A list row's facts of the log, folded from the listing's own read (``leanlog``)."""
        self.glanced = False
        """Whether that fold was tried: a log it could not fold goes to the full read."""
        self.sizes: tuple[int, int] | None = None
        """``generations.dir_bytes`` of the dir, when the listing measured it (``du``)."""
        self.others: tuple[str, ...] | None = None
        """The dir's regular files that are neither generations nor the lock, when the
        listing kept them (``doctor`` looks for leftover temps among them)."""

    @classmethod
    def _from_listing(cls, dir_text: str, names: Names) -> SessionEntry:
        entry = cls.__new__(cls)
        entry._dir = None
        entry._dir_text = dir_text
        entry._names = names
        entry._generations = None
        entry._header = None
        entry._error = None
        entry._raw_fields = None
        entry._line = None
        entry._lin = None
        entry._listed = True
        entry._shed = False
        entry.glance = None
        entry.glanced = False
        entry.sizes = None
        entry.others = None
        return entry

    @classmethod
    def _of_line(cls, dir_text: str, names: Names, line: bytes) -> SessionEntry:
        """The listed form of a dir whose highest generation's header line is ``line``
        (without its newline): validated on first use. A run that registers thousands of
        copies so keeps no ``Path``, ``Generation`` or parsed header for any of them."""
        entry = cls._from_listing(dir_text, names)
        entry._line = line
        return entry

    def __repr__(self) -> str:
        return f"SessionEntry({self.session_dir!s}, id={self.id!r})"

    # -- paths and generations --------------------------------------------------------------

    @property
    def session_dir(self) -> Path:
        if self._dir is None:
            self._dir = Path(self._dir_text)
        return self._dir

    @property
    def dir_text(self) -> str:
        """The session dir as a string (a listed entry builds no ``Path`` for it)."""
        return self._dir_text if self._dir is None else str(self._dir)

    @property
    def log_path(self) -> str | None:
        """The path of the highest canonical generation as a string, None without one."""
        if self._generations is None:
            if not self._names:
                return None
            return self._dir_text + os.sep + self._names[-1][2]
        generation = select(self._generations)
        return None if generation is None else str(generation.path)

    @property
    def version(self) -> int | None:
        """The chosen generation's version, without building any ``Generation``."""
        if self._generations is None:
            return self._names[-1][0] if self._names else None
        generation = select(self._generations)
        return None if generation is None else generation.version

    @property
    def generations(self) -> list[Generation]:
        if self._generations is None:
            base = self.session_dir
            self._generations = [Generation(base / name, v, e) for v, e, name in self._names]
        return self._generations

    @property
    def generation(self) -> Generation | None:
        return select(self.generations)

    def forget(self) -> None:
        """Return a listed entry to its listed form: drop the ``Path``, ``Generation`` and
        parsed header objects built on use, each built again from the entry's text and
        header line when next asked for (a plan over thousands of sources keeps none of
        them). An entry whose header was refused keeps its error; any other entry keeps what
        it has: that is all it has."""
        if self._listed:
            self._dir = None
            self._generations = None
            header = self._header
            if header is not None and self._line is None and self._error is None:
                self._line, self._header = header.raw, None

    def shed(self) -> None:
        """Keep of a listed entry only what names and finds its session (dir, names, sizes,
        id and parent): its header line and row facts go, and the header is read again from
        the log when next asked for. ``list`` sheds each entry once its row is made, so a
        root of 100,000 sessions never holds a header line beside each row."""
        self.glance, self.glanced = None, False
        if not self._listed or self._error is not None:
            return  # an entry refused keeps its error; any other keeps all it has
        if self._line is None and self._header is None:
            return
        self._lineage()  # id and parent stay answered
        self._dir = None
        self._generations = None
        self._line = self._header = None
        self._raw_fields = None
        self._shed = True

    def _read_again(self) -> None:
        """The header line of a shed entry, read from its log as the listing read it."""
        self._shed = False
        if not self._names:
            return
        _, encoding, name = self._names[-1]
        path = self._dir_text + os.sep + name
        try:
            self._line = read_header_line(path, encoding)
        except DshForkError as exc:
            self._error = exc
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            self._error = IoError(
                f"cannot read the session log in {self._dir_text}: {reason}",
                errno=exc.errno,
                path=path,
            )

    @property
    def encodings(self) -> set[str]:
        if self._generations is None:
            return {encoding for _, encoding, _ in self._names}
        return {g.encoding for g in self._generations}

    @property
    def project(self) -> str:
        if self._dir is None:  # a listed entry: ``<project dir>/<session dir>``, no Path
            return self._dir_text.rpartition(os.sep)[0].rpartition(os.sep)[2]
        return self._dir.parent.name

    @property
    def dir_id(self) -> str | None:
        """The id the dir name encodes (path binding, format §2.6): what names a session whose
        header cannot be read, e.g. to match it with a parent's catalog fact."""
        return decode_segment(self.session_dir.name)

    # -- header -----------------------------------------------------------------------------

    def _validate(self) -> None:
        line, self._line = self._line, None
        if line is None:
            return
        if self._generations is None:  # a listed entry: its names, no Path built
            if not self._names:
                return
            version, _, name = self._names[-1]
            where = self._dir_text + os.sep + name
        else:
            generation = select(self._generations)
            if generation is None:
                return
            version, where = generation.version, str(generation.path)
        try:
            self._header = parse_header(line, version, where=where)
            if self._lin is not None and self._lin.depth is None:
                self._lin = None  # taken again from the validated header, with its depth
        except DshForkError as exc:
            self._error = exc
            self._raw_fields = _raw_value(line)  # what peek_fields would read from the line

    def _settle(self) -> None:
        """Make the header, its error and its raw fields current: read the shed line back,
        then validate a line not validated yet (what each of the three properties reads)."""
        if self._shed:
            self._read_again()
        if self._line is not None:
            self._validate()

    def _given(self) -> None:
        """A caller sets the header or its error itself: no line stays to validate or read
        back, and the lineage facts are taken again from what it set."""
        self._line = None
        self._lin = None
        self._shed = False

    @property
    def header(self) -> Header | None:
        self._settle()
        return self._header

    @header.setter
    def header(self, value: Header | None) -> None:
        self._given()
        self._header = value

    @property
    def error(self) -> DshForkError | None:
        self._settle()
        return self._error

    @property
    def raw_fields(self) -> dict[str, object] | None:
        self._settle()
        return self._raw_fields

    def refuse(self, error: DshForkError, raw_fields: dict[str, object] | None = None) -> None:
        """A caller found the header unreadable itself: ``error`` says why, ``raw_fields``
        what its line holds when it is a JSON object (``peek_fields``), from which the
        lineage facts are then taken."""
        self._given()
        self._error = error
        self._raw_fields = raw_fields

    # -- lineage ----------------------------------------------------------------------------

    def _lineage(self) -> _Lineage:
        """Read off the raw header line on first use, not where the dir is listed: a command
        that validates every header (``tree``, ``du``, ``list``) then parses each line once,
        and a listing child, which sends lines, parses none."""
        lineage = self._lin
        if lineage is not None:
            return lineage
        line = self._line
        if line is not None:  # listed, not validated: the raw fields, not the validator
            lineage = _Lineage.of(_raw_value(line))
        else:
            header = self.header  # validated, or not listed from a line: header or raw fields
            if header is not None:
                lineage = _Lineage(
                    header.id,
                    header.parent_session,
                    header.origin == "subagent",
                    header.created_at,
                    header.delegation_depth,
                    header.is_fork_child,
                )
            else:
                lineage = _Lineage.of(self.raw_fields)
        self._lin = lineage
        return lineage

    @property
    def id(self) -> str | None:
        return self._lineage().id

    @property
    def id_or_dir(self) -> str:
        """What a result and an ordering name the session by: its header's id, else its dir's
        name, so that a session whose header cannot be read is named too, never skipped."""
        ident = self._lineage().id
        if ident:
            return ident
        if self._dir is None:  # a listed entry: no Path built for a name
            return self._dir_text.rpartition(os.sep)[2]
        return self._dir.name

    @property
    def parent(self) -> str | None:
        return self._lineage().parent

    @property
    def is_subagent(self) -> bool:
        lineage = self._lineage()
        return lineage.subagent and lineage.parent is not None

    @property
    def delegation_depth(self) -> int | None:
        """The validated header's ``delegationDepth``, None when the header is refused; from
        the lineage facts once the header has been validated (no second validation)."""
        depth = self._lineage().depth
        if depth is not None:
            return depth
        header = self.header
        return None if header is None else header.delegation_depth

    @property
    def is_fork_child(self) -> bool:
        """Whether the header validates and is a fork child's (seeded, with a parent, no
        origin); from the lineage facts once the header has been validated."""
        lineage = self._lineage()
        if lineage.depth is not None:
            return lineage.fork_child
        header = self.header
        return header is not None and header.is_fork_child

    @property
    def created_at(self) -> int:
        value = self._lineage().created_at
        if value is not None:
            return value
        header = self.header  # 5.0 and the like: the validated header decides
        if header is not None:
            return header.created_at
        return 0


def birth_order(entry: SessionEntry) -> tuple[int, str]:
    """The order of a parent's children, as DSH lists them: by createdAt, then by id."""
    return (entry.created_at, entry.id_or_dir)


def linked_entry(dir_text: str, what: str = "session directory") -> SessionEntry:
    """An entry for a dir that is a symbolic link: named with its refusal, never followed."""
    entry = SessionEntry._from_listing(dir_text, ())
    entry.refuse(
        IoError(
            f"refusing to read the {what} {dir_text}: it is a symbolic link (never followed)",
            errno=errno.ELOOP,
            path=dir_text,
        )
    )
    entry.sizes = (0, 0)  # not measured either: the link's target lies anywhere
    return entry


def unlisted_entry(dir_text: str, exc: OSError, what: str = "session directory") -> SessionEntry:
    """An entry for a dir that cannot be listed: named, with its error, never dropped."""
    entry = SessionEntry._from_listing(dir_text, ())
    reason = exc.strerror or str(exc) or type(exc).__name__
    entry.refuse(
        IoError(f"cannot read the {what} {dir_text}: {reason}", errno=exc.errno, path=dir_text)
    )
    return entry


def odd_generation(dir_text: str) -> SessionEntry | None:
    """A dir whose canonical name is no regular file (a FIFO, a dir, a dangling link) holds a
    session nobody can read: named, with its error, never taken for an empty dir. A regular
    file found here was linked after the first listing of the dir (a session being published
    at that moment): the dir is taken as that listing saw it, empty."""
    try:
        names = sorted(n for n in os.listdir(dir_text) if parse_name(n) is not None)
    except OSError as exc:
        return unlisted_entry(dir_text, exc)
    if not names:
        return None
    path = os.path.join(dir_text, names[-1])
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return unlisted_entry(dir_text, exc)
    if stat.S_ISREG(mode):
        return None
    entry = SessionEntry._from_listing(dir_text, ())
    entry.refuse(not_regular(path, mode))
    return entry


def _raw_value(line: bytes) -> dict[str, object] | None:
    """The header line as listing parses it (its raw fields), None when it is no object."""
    try:
        value, _ = parse_line(line)
    except LineError:
        return None
    return value if isinstance(value, dict) else None
