"""doctor's fork rules: what relink repairs, seen before it is run (issue 32).

- ``FORK_TREE_MISSING`` (warning): a user fork whose branch has subagents it lacks, counted as
  exactly the copies ``relink --dry-run`` would make (the planner is relink's own, run as a
  dry run: nothing is written, no lock is taken), with the command that copies them.
- ``FORK_WITHOUT_AGENTS`` (info): a fork the operation log says was made with ``fork
  --no-agents``: without its tree on purpose, so no plan is made for it unless it is named.
- ``MISPLACED_COPIES`` (warning): copies an earlier relink made under a delegation child that
  it took for a fork (its subagents are its own): each is a copy of a subagent of the
  child's parent, by provenance (semantics §4.3), and named.

Which sessions are forks is the one rule of ``kinds``; what a fork lacks is relink's plan.
"""

from __future__ import annotations

import shlex
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .discovery import Root
from .display import counted
from .errors import DshForkError
from .findings import Severity
from .generations import SUPPORTED_VERSION
from .kinds import DELEGATION_WHY, Delegation, KindRule
from .model import facts_of
from .oplog import forks_without_agents
from .provenance import Logged, match_copies
from .reader import open_log
from .sessionentry import SessionEntry

if TYPE_CHECKING:
    from .relinkplan import _Opened

RECENT_BYTES = 8 << 20
RECENT_LOGS = 256
PROVENANCE_TYPES = ("session/end-seed", "turn/start", "turn/end")
"""What a copy and a candidate are read for to compare prefixes: the cut and the turns."""


class ForkNote(NamedTuple):
    """One finding about a session (``doctor`` makes it a ``DoctorFinding``)."""

    severity: Severity
    code: str
    message: str
    entry: SessionEntry


class ForkRules:
    """The fork findings of a root's sessions, one session at a time (``doctor``'s pass)."""

    def __init__(
        self, root: Root, kinds: KindRule, *, oplog_path: Path | None, named: bool = False
    ) -> None:
        """``named``: the user named the sessions, so a ``--no-agents`` fork is checked like
        any other; otherwise the operation log says which forks to leave alone."""
        self.root = root
        self.kinds = kinds
        self.on_purpose = frozenset() if named else forks_without_agents(oplog_path)
        self.recent = RecentLogs()

    def notes(self, entry: SessionEntry) -> list[ForkNote]:
        header = entry.header
        if header is None or header.parent_session is None or not header.is_fork_child:
            return []
        why = self.kinds.why(entry)
        if why is not None:
            note = _misplaced(self.root, entry, why)
        elif header.id in self.on_purpose:
            note = ForkNote(
                "info",
                "FORK_WITHOUT_AGENTS",
                "forked with --no-agents (the operation log says so): left without its "
                f"subagent tree on purpose; `{_relink(header.id)}` copies it",
                entry,
            )
        else:
            note = _missing(self.root, entry, self.kinds, self.recent)
        return [] if note is None else [note]


class RecentLogs:
    """The candidate logs the last dry-run plans read, for the next plan: the forks of one
    parent (listed together, in its project dir) share their candidates, so each is read
    once, not once per fork. Bounded by ``RECENT_BYTES`` of held log bytes and
    ``RECENT_LOGS`` logs; a log read in pieces (too large to hold) is not kept. Each caller
    gets its own ``_Opened`` (a plan lets go of the log it has drafted a copy from)."""

    def __init__(self) -> None:
        self._logs: OrderedDict[str, _Opened] = OrderedDict()
        self._bytes = 0

    def __call__(self, entry: SessionEntry) -> _Opened:
        from .relinkplan import _open, _Opened

        key = entry.dir_text
        kept = self._logs.get(key)
        if kept is not None:
            self._logs.move_to_end(key)
            return _Opened(entry, kept.log, kept.facts, kept.error)
        opened = _open(entry)
        size = 0 if opened.log is None else len(opened.log.data)
        if size and size <= RECENT_BYTES:
            self._logs[key] = _Opened(entry, opened.log, opened.facts, opened.error)
            self._bytes += size
            while self._bytes > RECENT_BYTES or len(self._logs) > RECENT_LOGS:
                _, dropped = self._logs.popitem(last=False)
                assert dropped.log is not None
                self._bytes -= len(dropped.log.data)
        return opened


def _relink(session_id: str) -> str:
    return f"dsh-fork relink {shlex.quote(session_id)}"


def _missing(
    root: Root, entry: SessionEntry, kinds: KindRule, opener: RecentLogs
) -> ForkNote | None:
    """FORK_TREE_MISSING from relink's own dry-run plan; a fork relink cannot plan (running,
    below v4, unreadable) has other findings and none of this one."""
    from .relink import relink  # the planner: relink imports the library's writers

    generation = entry.generation
    if generation is None or generation.version < SUPPORTED_VERSION:
        return None
    try:
        summary = relink(
            root,
            entry.session_dir,
            dry_run=True,
            unreadable=[],
            kinds=kinds,
            refresh=False,
            opener=opener,
        )
    except (DshForkError, OSError):
        return None
    missing = len(summary.copied)
    if not missing:
        return None
    session_id = summary.fork_child or entry.session_dir.name
    direct = sum(1 for row in summary.copied if row["depth"] == 1 + _depth(entry))
    what = counted(missing, "subagent")
    if direct != missing:
        what += f" ({direct} direct, {missing - direct} below them)"
    return ForkNote(
        "warning",
        "FORK_TREE_MISSING",
        f"lacks {what} of its branch: `{_relink(session_id)}` copies them (`--dry-run` lists them)",
        entry,
    )


def _depth(entry: SessionEntry) -> int:
    return 0 if entry.header is None else entry.header.delegation_depth


def _misplaced(root: Root, entry: SessionEntry, why: Delegation) -> ForkNote | None:
    """MISPLACED_COPIES: the seeded subagent children of a delegation child that are copies
    of its parent's subagents (what relink made when it took the child for a fork)."""
    header = entry.header
    assert header is not None and header.parent_session is not None
    copies = [e for e in root.children_of(header.id) if e.header and e.header.is_seeded]
    if not copies:
        return None
    sources = root.children_of(header.parent_session)
    existing = [x for x in map(_logged, copies) if x is not None]
    offered = [x for x in map(_logged, sources) if x is not None]
    matched = match_copies(existing, offered)
    if not matched:
        return None
    names = ", ".join(f"{copy} (copy of {source})" for copy, source in matched.items())
    count = len(matched)
    return ForkNote(
        "warning",
        "MISPLACED_COPIES",
        f"{counted(count, 'copy', 'copies')} of its parent's subagents under this "
        f"delegation child ({DELEGATION_WHY[why]}), made by a relink that took it for a fork: "
        f"{names}. They duplicate the parent's subagents; delete them once no one uses them",
        entry,
    )


def _logged(entry: SessionEntry) -> Logged | None:
    generation = entry.generation
    if generation is None or entry.id is None or entry.header is None:
        return None
    try:
        log = open_log(generation, collect=PROVENANCE_TYPES)
    except (DshForkError, OSError):
        return None
    return Logged(entry.id, log, facts_of(log))
