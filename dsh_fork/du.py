"""``du``: bytes on disk per session, family and project dir, and what shared prefixes would save.

Every fork and relink copy stores its inherited prefix again: the events its source already
holds. For a seeded session the chosen log is split exactly into

- **inherited bytes**: the compressed size of every body frame that lies wholly inside the
  inherited prefix (all its events have seq < cut), plus, for the frame holding the cut (or the
  run of frames, when a line spans frames), its compressed size times the share of its
  decompressed bytes that belong to events below the cut (rounded down); in a plain log, the
  bytes of the lines below the cut; in a packed v0/v1 log, the body's bytes times cut / event
  count (rounded down);
- **own bytes**: everything else of the log file: the header frame, the rest of the body,
  a torn tail.

so ``inherited + own`` is the log's size, byte for byte. A session's bytes are the sizes of all
regular files in its dir (the chosen log, older generations, the lock file, …); ``other`` is what
is not the chosen log. The saving is the sum of the inherited bytes whose source is still in the
root (a fork's parent, a copy's original): that is what storing each prefix once would free.
Sizes are apparent sizes (``st_size``), so they add up exactly; the read is read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import TypeVar, cast

from msgspec import Struct, field

from . import rootdocs as docs
from .discovery import Root
from .generations import dir_bytes
from .lineage import PARENT_MISSING, Lineage, Node, lineage_of
from .progress import SILENT, Progress, counter
from .results import SCHEMA_VERSION, Documented, Whole, rows
from .sessionarg import Located
from .sessionlog import FramedLog, SessionLog


class SessionUsage(Documented, Struct):
    """The bytes of one session dir; ``inherited`` is None when it could not be measured."""

    id: str
    path: str
    kind: str
    family: str
    bytes: int
    log_bytes: int
    inherited: int | None
    source_present: bool
    flags: tuple[str, ...] = ()

    @property
    def own(self) -> int:
        return self.log_bytes - (self.inherited or 0)

    @property
    def other(self) -> int:
        return self.bytes - self.log_bytes

    @property
    def saving(self) -> int:
        return (self.inherited or 0) if self.source_present else 0

    def to_document(self) -> docs.Usage:
        return docs.Usage(
            id=self.id,
            path=self.path,
            kind=cast(docs.TreeKind, self.kind),
            family=self.family,
            bytes=self.bytes,
            log_bytes=self.log_bytes,
            inherited_bytes=self.inherited,
            own_bytes=self.own,
            other_bytes=self.other,
            source_present=self.source_present,
            shareable=self.saving,
            flags=list(self.flags),
        )


Group = docs.UsageGroup
"""A family (by its top session), a project dir, or the root: the sums of its sessions,
made as the document prints them (``_group``, ``_add``)."""


def _group(name: str, usage: SessionUsage | None = None) -> Group:
    """A group of one session, made at once (most families of a large root are one session:
    no empty group and no ``_add`` call per session); empty without ``usage``."""
    if usage is None:
        return Group(name=name, sessions=0, bytes=0, inherited_bytes=0, shareable=0)
    inherited = usage.inherited or 0
    return Group(
        name=name, sessions=1, bytes=usage.bytes, inherited_bytes=inherited, shareable=usage.saving
    )


def _add(group: Group, usage: SessionUsage | Group) -> None:
    """Count a session, or the sums of a group, into ``group``."""
    if isinstance(usage, SessionUsage):
        group.sessions += 1
        group.bytes += usage.bytes
        group.inherited_bytes += usage.inherited or 0
        group.shareable += usage.saving
    else:
        group.sessions += usage.sessions
        group.bytes += usage.bytes
        group.inherited_bytes += usage.inherited_bytes
        group.shareable += usage.shareable


class DiskUsage(Whole, Struct):
    root: Path
    session: str | None
    sessions: list[SessionUsage]
    """Largest first."""
    families: list[Group]
    projects: list[Group]
    top: int | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def total(self) -> Group:
        """The sums of the project groups: every session is in exactly one of them, and a
        root has far fewer project dirs than sessions."""
        total = _group("total")
        for project in self.projects:
            _add(total, project)
        return total

    def to_document(self) -> docs.DuDocument:
        limit = self.top
        return docs.DuDocument(
            schema_version=SCHEMA_VERSION,
            root=str(self.root),
            session=self.session,
            total=self.total,
            projects=self.projects[:limit],
            families=self.families[:limit],
            sessions=rows(self.sessions[:limit], SessionUsage.to_document),
        )


def inherited_bytes(log: SessionLog, cut: int) -> int:
    """The log bytes of its first ``cut`` events, by the rule in the module docstring."""
    if cut <= 0:
        return 0
    if not isinstance(log, FramedLog):  # packed rows: no per-event framing to follow
        end = log.torn.offset if log.torn is not None else log.size
        count = log.event_count
        return (end - log.header_end) * min(cut, count) // count if count else 0
    total = 0
    for index, chunk in enumerate(log.chunks):
        if chunk.first_seq >= cut or chunk.recovered:  # a torn tail is the session's own
            break
        size = sum(frame.size for frame in chunk.frames)
        if chunk.frames and chunk.end_seq <= cut:
            total += size
            continue
        lines = log.chunk_lines(index)
        below = sum(len(line) + 1 for line in lines[: cut - chunk.first_seq])
        if not chunk.frames:  # a plain log: the lines themselves
            total += below
        else:
            plain = sum(len(line) + 1 for line in lines)
            total += size * below // plain if plain else 0
    return total


_Sized = TypeVar("_Sized", "SessionUsage", "Group")

Measured = dict[str, tuple[int, int]]
"""Session path → (log bytes as read, inherited bytes): filled while the lineage is read."""


def _usage(node: Node, family: str, measured: Measured) -> SessionUsage:
    """A session's usage, made at once (a root of 100,000 sessions makes as many), while the
    node still has its entry (``lineage``'s ``settle``)."""
    entry = node.entry
    assert entry is not None  # settled before the lineage releases it
    sizes = entry.sizes  # measured by the listing of a whole root, on two cores
    total, log_bytes = dir_bytes(entry.dir_text) if sizes is None else sizes
    kind = node.kind
    flags: tuple[str, ...] = ()
    inherited: int | None = 0
    if kind == "unreadable":
        inherited, flags = None, ("unreadable",)
    elif node.is_seeded:
        read = measured.pop(node.path, None)  # each is asked for once
        if read is None:
            inherited, flags = None, (f"unreadable log: {node.error}",)
        else:
            log_bytes, inherited = read  # the bytes that were read
    if inherited is None:
        source_present = False
    elif kind == "fork":
        # its parent is in the lineage unless flagged missing (a family holds its parents)
        source_present = PARENT_MISSING not in node.flags
    else:
        source_present = kind == "copy" and node.copy_of is not None
    return SessionUsage(
        node.id, node.path, kind, family, total, log_bytes, inherited, source_present, flags
    )


def measure(measured: Measured) -> Callable[[Node, SessionLog], None]:
    """The hook that measures each seeded log while the lineage has it open."""

    def hook(node: Node, log: SessionLog) -> None:
        if node.is_seeded and node.cut is not None:
            measured[node.path] = (log.size, inherited_bytes(log, node.cut))

    return hook


class Tally:
    """The sums ``du`` makes, session by session as the lineage settles each node (family by
    family, its top first), so that no node outlives its usage row: sessions, families (by
    top) and project dirs."""

    def __init__(self, measured: Measured) -> None:
        self.measured = measured
        self.sessions: list[SessionUsage] = []
        self.families: list[Group] = []
        self.projects: dict[str, Group] = {}

    def settle(self, node: Node, head: Node) -> None:
        usage = _usage(node, head.id, self.measured)
        self.sessions.append(usage)
        if node is head:
            self.families.append(_group(head.id, usage))
        else:
            _add(self.families[-1], usage)
        project = node.project
        summed = self.projects.get(project)
        if summed is None:
            self.projects[project] = _group(project, usage)
        else:
            _add(summed, usage)

    def result(self, forest: Lineage, top: int | None) -> DiskUsage:
        """Every session, family and project dir, largest first; a log that could not be
        measured is warned of after the lineage's own warnings."""
        sessions = self.sessions
        result = DiskUsage(
            root=forest.root,
            session=forest.session,
            sessions=_largest_first(sessions, "path"),
            families=_largest_first(self.families, "name"),
            projects=_largest_first(list(self.projects.values()), "name"),
            top=top,
            warnings=list(forest.warnings),
        )
        for usage in sessions:
            for flag in usage.flags:
                if flag.startswith("unreadable log"):
                    result.warnings.append(f"{usage.path}: {flag}")
        return result


def _largest_first(items: list[_Sized], name: str) -> list[_Sized]:
    """Sorted by bytes, largest first, then by ``name``: two stable sorts on C key getters
    instead of a key tuple per item (a root of 100,000 sessions has as many families)."""
    items.sort(key=attrgetter(name))
    items.sort(key=attrgetter("bytes"), reverse=True)  # stable: equal sizes stay by name
    return items


def disk_usage_of(
    scope: Root | Located,
    *,
    session: str | None = None,
    top: int | None = None,
    progress: Progress = SILENT,
) -> DiskUsage:
    """Measure a whole root, or the family of a located ``session`` (the ``du`` command);
    ``progress`` is told of each seeded log read and measured ("logs read")."""
    measured: Measured = {}
    if session is None and isinstance(scope, Root):
        scope.entries(sizes=True)  # every dir is sized anyway: sized while it is listed
    sized = measure(measured)
    count = counter(progress, "logs read")

    def hook(node: Node, log: SessionLog) -> None:
        sized(node, log)
        count()

    tally = Tally(measured)
    forest = lineage_of(scope, session=session, detail=False, hook=hook, settle=tally.settle)
    return tally.result(forest, top)
