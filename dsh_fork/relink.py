"""relink: copy a fork's subagent tree under the fork child, offline (semantics §4).

The entry points: resolve the fork child, read it under its lock, plan (``relinkplan``),
walk the plan (``relinkwalk``), log and report (``relinkresult``). ``relink --all`` does the
same for every user fork of the root, and ``sweep_abandoned`` clears the temps an interrupted
publish left. docs/fork-chains.md explains the choices.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import layout, writer
from . import oplog as messages
from .discovery import Root
from .errors import (
    CorruptLog,
    DshForkError,
    IoError,
    SessionLocked,
    SessionNotFound,
    UsageError,
    unsupported_below_v4,
)
from .forkpoint import _APPEND_TYPES, ForkPoint, fork_point
from .generations import SUPPORTED_VERSION, Generation
from .ids import ClockMs, IdFactory, new_session_id, now_ms
from .kinds import DELEGATION_WHY, KindRule
from .locking import SessionLock, running
from .model import Facts, facts_of
from .oplog import OpLog
from .progress import SILENT, Progress
from .reader import current_generation, open_log, read_header
from .relinkplan import Opener, _Copy, _Level, _Match, _open, _Opened, _Parent, _Planner
from .relinkresult import NO_AGENTS_REASON, RelinkAllResult, RelinkSummary
from .sessionarg import locate
from .sessionentry import SessionEntry
from .sessionlog import SessionLog
from .workspace import Workspace, moved_workspace

if TYPE_CHECKING:
    from .relinkwalk import _Walker

# -- entry points -----------------------------------------------------------------------------


def _fork_chain(root: Root, parent_id: str, kinds: KindRule) -> tuple[str, ...]:
    """The sessions P inherited from, nearest first: P's parent while P is a user fork, and
    so on up (semantics §1.5 "Fork chains"); a missing ancestor, a cycle or a delegation
    child (``kinds``: its subagents are its own, not its parent's) ends the chain."""
    chain: list[str] = []
    seen = {parent_id}
    entry = root.entry(parent_id)
    while entry is not None and kinds.is_user_fork(entry):
        above = entry.parent
        if above is None or above in seen:
            break
        chain.append(above)
        seen.add(above)
        entry = root.entry(above)
    return tuple(chain)


def _refresh(root: Root) -> list[Path]:
    """Add to the root's listing the sessions published since it was built (by another run);
    return the dirs of the root still not listed (no session in them, or unlistable), which
    ``unreadable_sessions`` and ``sweep_abandoned`` look at instead of walking the root again.

    Called with the fork child's lock held: every copy a finished run made under it is on
    disk by then, so the existing copies are listed from disk, never from a listing made
    before the lock (two runs at once never both copy one child). Only dirs the listing does
    not know are read, so a ``relink --all`` over many fork children stays cheap.
    """
    left: list[Path] = []
    for text in root.unknown_texts():  # text: no Path hashed per dir
        session_dir = Path(text)
        entry = None
        with contextlib.suppress(DshForkError, OSError):
            entry = root.register(session_dir)
        if entry is None:
            left.append(session_dir)
    return left


def _unreadable_item(entry: SessionEntry) -> dict[str, Any]:
    error = entry.error or CorruptLog(f"{entry.session_dir}: unreadable header")
    return {"id": entry.id_or_dir, "code": error.code, "message": str(error)}


def unreadable_forks(root: Root) -> list[dict[str, Any]]:
    """Fork children whose header is refused (its raw fields name a parent, no origin):
    relink --all cannot relink them, each is a failed item."""
    items: list[dict[str, Any]] = []
    for entry in root.unreadable():
        raw = entry.raw_fields
        if raw is not None and raw.get("parentSession") is not None and raw.get("origin") is None:
            items.append(_unreadable_item(entry))
    return items


def unreadable_sessions(root: Root, *, unlisted: list[Path] | None = None) -> list[dict[str, Any]]:
    """Session dirs whose lineage cannot be read (an unlistable dir, a header that cannot be
    read at all): any of them may be part of a fork's tree (``_plan`` decides by the tree's
    catalog facts). ``unlisted``: the dirs ``_refresh`` left unlisted, so the root is not
    walked again."""
    items: list[dict[str, Any]] = []
    known = root.listed_texts()
    named: set[str] = set()  # a dir the listing could not read is named once, not twice
    for entry in root.unreadable():
        if entry.raw_fields is None:
            items.append(_unreadable_item(entry))
            named.add(entry.dir_text)
    if unlisted is None:  # the dirs the listing walked, not those of a second walk
        unlisted = [Path(text) for text in root.listed_candidates() if text not in known]
    for session_dir in unlisted:
        if str(session_dir) in known or str(session_dir) in named:
            continue
        try:
            os.listdir(session_dir)
        except OSError as exc:
            error = IoError.of(exc, "list")
            items.append({"id": session_dir.name, "code": error.code, "message": error.message})
    return items


def _run(
    root: Root,
    level: _Level,
    summary: RelinkSummary,
    top: _Parent,
    log: OpLog,
    *,
    clock: ClockMs,
    new_id: IdFactory,
    children: int,
    workspace: Workspace | None = None,
    progress: Progress = SILENT,
) -> None:
    """Log, walk and log the summary: the part every entry point shares. Only a plan with
    something in it is walked: a fork of a session without subagents loads neither the walk
    nor the read-back (``relinkwalk``, ``resumable``), which would write and read nothing."""
    total, copies = _counted(level)
    progress.stage("agents planned" if summary.dry_run else "agents copied", total)
    if copies:
        log.write(
            messages.COPYING,
            {
                "forkChild": summary.fork_child,
                "source": summary.source,
                "children": children,
                "total": total,
            },
        )
    if summary.failed or not level.is_empty():
        from .relinkwalk import _Walker

        walker = _Walker(root, summary, log, clock=clock, new_id=new_id, total=total)
        walker.workspace = workspace
        walker.progress = progress
        _walk(walker, level, top)
    if summary.catalogued:
        log.write(
            messages.CATALOGUED,
            {"forkChild": summary.fork_child, "catalogued": len(summary.catalogued)},
        )
    log.write(messages.COPIED, summary.to_json())


def _walk(walker: _Walker, level: _Level, top: _Parent) -> None:
    """Log the failures found before the walk, walk the plan, read every copy back."""
    from .resumable import unresumable

    summary, log = walker.summary, walker.log
    for failure in summary.failed:  # found before the walk (unreadable sessions)
        log.write(
            messages.CHILD_FAILED,
            {
                "forkChild": summary.fork_child,
                "childId": failure["id"],
                "code": failure["code"],
                "message": failure["message"],
            },
        )
    try:
        with writer.sync_threads():
            walker.level(level, top)
    finally:
        walker.sync()
    if not summary.dry_run:  # every copy read back, once every lock of the walk is released
        summary.unresumable = unresumable(
            walker.root, summary.copied, walker.catalogs, walker.written
        )
        for item in summary.unresumable:
            log.write(
                messages.UNRESUMABLE,
                {"forkChild": summary.fork_child, "copyId": item["id"], "message": item["message"]},
            )


def _counted(level: _Level) -> tuple[int, int]:
    """(outcomes, copies) of a plan: counted, not listed, for the walk frees each item once
    it is walked."""
    total = copies = 0
    for item in level.walk_items():
        total += not isinstance(item, _Match)
        copies += isinstance(item, _Copy)
    return total, copies


def _plan(
    root: Root,
    point: ForkPoint,
    existing: list[_Opened],
    own: set[str],
    summary: RelinkSummary,
    unreadable: list[dict[str, Any]],
    *,
    kinds: KindRule | None = None,
    warn_unclaimed: bool = True,
    opener: Opener = _open,
) -> tuple[ForkPoint, _Level]:
    """The whole tree's plan under a fork child whose fork point is ``point``.

    ``unreadable``: sessions of the root whose header cannot be read at all (so whose parent
    is unknown). One that a catalog fact on the branch names is part of the fork's tree: a
    failed item. A dir that cannot be listed (IO_ERROR) may hide any of the tree: a failed
    item too, which a rerun finishes once it can be read (relink --all, which passes
    ``warn_unclaimed=False``, names the unlisted dirs no fork claims once, outside the forks).
    Any other is not known to be part of the tree: a warning (``warn_unclaimed``), not a
    failure, so a damaged session elsewhere in the root does not make every relink PARTIAL
    (and no rerun could read it).
    """
    kinds = kinds or KindRule(root)
    point = point.with_chain(_fork_chain(root, point.parent_id, kinds))
    planner = _Planner(root, kinds, opener)
    planner.visited.update((point.parent_id, *point.chain))
    level = planner.level(point, existing, own)
    for item in unreadable:
        listed = item["id"] in planner.catalogued
        if listed or (warn_unclaimed and item["code"] == IoError.code):
            summary.failed.append(item)
        elif warn_unclaimed:
            summary.warnings.append(
                f"{item['id']} cannot be read ({item['message']}); no catalog fact of this "
                "fork's tree names it, so it is left out"
            )
    return point, level


def plan_new_fork(root: Root, point: ForkPoint, kinds: KindRule | None = None) -> RelinkSummary:
    """The dry-run plan for a fork child that does not exist yet (no existing copies);
    ``kinds`` holds what the fork read of its source (``KindRule.learn``)."""
    summary = RelinkSummary(None, point.parent_id, dry_run=True)
    point, level = _plan(root, point, [], set(), summary, unreadable_sessions(root), kinds=kinds)
    _run(
        root,
        level,
        summary,
        _Parent(None, None, None, point.depth),
        OpLog(None),
        clock=now_ms,
        new_id=new_session_id,
        children=len(root.children_of(point.parent_id)),
    )
    return summary


def relink_new_child(
    root: Root,
    child_id: str,
    child_dir: Path,
    point: ForkPoint,
    lock: SessionLock,
    *,
    oplog_path: Path | None = None,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    workspace: Workspace | None = None,
    kinds: KindRule | None = None,
) -> RelinkSummary:
    """relink of a fork child ``fork`` has just published and still holds the lock of:
    its fork point is the one fork computed from the source, so the child is not re-read.
    ``workspace`` (old cwd, new cwd): the child was forked into another workspace. ``kinds``
    holds what the fork knows of its source and child, so neither log is read again."""
    summary = RelinkSummary(child_id, point.parent_id, False)
    log = OpLog(oplog_path, clock=clock, warn=summary.warnings.append)
    summary.unlisted = _refresh(root)
    unreadable = unreadable_sessions(root, unlisted=summary.unlisted)
    existing = [_open(e) for e in root.children_of(child_id)]
    point, level = _plan(root, point, existing, set(), summary, unreadable, kinds=kinds)
    _run(
        root,
        level,
        summary,
        _Parent(child_id, child_dir, lock, point.depth),
        log,
        clock=clock,
        new_id=new_id,
        children=len(root.children_of(point.parent_id)),
        workspace=workspace,
        progress=root.progress or SILENT,
    )
    return summary


def relink(
    root: Root,
    fork_child_dir: Path,
    *,
    dry_run: bool = False,
    lock: SessionLock | None = None,
    oplog_path: Path | None = None,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    unreadable: list[dict[str, Any]] | None = None,
    kinds: KindRule | None = None,
    progress: Progress = SILENT,
    refresh: bool = True,
    opener: Opener = _open,
    generation: Generation | None = None,
) -> RelinkSummary:
    """Copy the subagent trees of C's fork chain under the fork child C (semantics §4).

    With ``lock`` the caller already holds C's lock; otherwise C's lock is taken for the
    whole run, or only probed in a dry run. Precondition failures raise their typed error;
    item failures are reported in the summary (see ``RelinkSummary.partial``).
    ``unreadable``: the root's sessions whose header cannot be read, found once by relink
    --all (which warns of those no fork claims once); by default found here, and each one
    not part of C's tree is a warning of this summary. ``kinds``: the rule that tells C from a
    delegation child, with what it has read so far (relink --all settles every fork with one).
    ``refresh=False``: plan against the root's listing as it is, without looking for sessions
    published since it was made (``doctor``'s dry run judges every fork against the one
    listing it reports on, and would otherwise walk every project dir again per fork).
    ``opener``: how a candidate's log is read (``Opener``). ``generation``: C's current
    generation as the caller found it (the lookup, the listing), so C's dir is not listed
    again for it; the read of C under its lock re-lists the dir (format §13).
    """
    if generation is None:
        generation = current_generation(fork_child_dir)
    if generation is None:
        raise SessionNotFound(f"{fork_child_dir} holds no session log", path=str(fork_child_dir))
    header = read_header(generation)
    if not header.is_fork_child:
        raise UsageError(
            f"{header.id} is not a fork child (a fork child is seeded, has a parentSession and "
            "no origin)",
            session=header.id,
        )
    root.entries()  # the listing the run needs anyway: the root's encoding is read from it
    kinds = kinds or KindRule(root)
    _require_user_fork(root, kinds, header.id, fork_child_dir)
    if generation.version < SUPPORTED_VERSION:
        raise unsupported_below_v4(f"fork child {header.id}", generation.version)
    root.require_writable()
    acquired: SessionLock | None = None
    if lock is None and not dry_run:
        acquired = lock = SessionLock(fork_child_dir).acquire()
    elif lock is None and running(fork_child_dir):
        raise SessionLocked(
            f"{header.id} is in use: its session.lock is held by a live process",
            lockPath=str(fork_child_dir / "session.lock"),
        )
    warn = unreadable is None
    try:
        summary = RelinkSummary(header.id, header.parent_session, dry_run)
        log = OpLog(oplog_path, dry_run=dry_run, clock=clock, warn=summary.warnings.append)
        c_log, c_facts = _read_fork_child(generation, fork_child_dir, lock, summary)
        if refresh:  # under C's lock: what a finished run made is listed
            summary.unlisted = _refresh(root)
        if unreadable is None:
            unreadable = unreadable_sessions(root, unlisted=summary.unlisted)
        parent_id = c_log.header.parent_session
        assert parent_id is not None
        parent_entry = root.entry(parent_id)
        if parent_entry is None or parent_entry.header is None:
            why = "missing" if parent_entry is None else "unreadable"
            summary.warnings.append(
                f"the parent {parent_id} is {why}; branch membership uses {header.id}'s "
                "inherited prefix and createdAt only"
            )
        point = fork_point(c_log, c_facts, parent_id, c_facts.cut - 1, header.delegation_depth)
        existing = [_open(e) for e in root.children_of(header.id)]
        own = {e.child_id for e in c_facts.own_catalog() if e.child_id is not None}
        del c_log, c_facts  # its catalog holds a fact per agent of its source: not kept
        point, level = _plan(
            root,
            point,
            existing,
            own,
            summary,
            unreadable,
            kinds=kinds,
            warn_unclaimed=warn,
            opener=opener,
        )
        top = _Parent(header.id, fork_child_dir, lock, header.delegation_depth)
        parent_header = None if parent_entry is None else parent_entry.header
        moved = None if parent_header is None else moved_workspace(parent_header.cwd, header.cwd)
        _run(
            root,
            level,
            summary,
            top,
            log,
            clock=clock,
            new_id=new_id,
            children=len(root.children_of(parent_id)),
            workspace=moved,
            progress=progress,
        )
        return summary
    finally:
        if acquired is not None:
            acquired.release()


def _require_user_fork(root: Root, kinds: KindRule, session_id: str, session_dir: Path) -> None:
    """A seeded session without ``origin`` that its parent catalogues, or that has its own
    descriptor, is a delegation child (dsh-world §4): a subagent tree under it is its own,
    and copying its parent's subagents under it would duplicate them (USAGE, nothing done)."""
    entry = root.entry(session_id)
    if entry is None or entry.session_dir != session_dir:
        entry = next((e for e in root.entries() if e.session_dir == session_dir), None)
    why = None if entry is None else kinds.why(entry)
    if why is not None:
        raise UsageError(
            f"{session_id} is a delegation child, not a fork child: {DELEGATION_WHY[why]}; "
            "relink copies subagent trees under user forks only",
            session=session_id,
        )


def _read_fork_child(
    generation: Generation, fork_child_dir: Path, lock: SessionLock | None, summary: RelinkSummary
) -> tuple[SessionLog, Facts]:
    """C's log and facts: read under its lock, a torn tail repaired first (only reported in a
    dry run, which holds no lock)."""
    if summary.dry_run:
        log = open_log(generation, collect=_APPEND_TYPES)
        if log.torn is not None:
            summary.warnings.append(
                f"{log.header.id} has a torn tail at byte {log.torn.offset}; a real run "
                "repairs it first"
            )
        return log, facts_of(log)
    from . import appending  # a dry run appends nothing

    appended = appending.append(
        fork_child_dir, lambda _log, _facts: [], lock=lock, collect=_APPEND_TYPES
    )
    if appended.repaired_tail:
        summary.warnings.append(f"repaired a torn tail in {appended.log.header.id}")
    return appended.log, appended.facts


class _Within:
    """The progress of one fork child inside ``relink --all``: its agents advance the run's
    one stage; the stage it would start of its own is not started."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def stage(self, what: str, total: int | None = None) -> None:
        return None

    def advance(self, count: int = 1) -> None:
        self._progress.advance(count)


def relink_all(
    root: Root,
    *,
    dry_run: bool = False,
    oplog_path: Path | None = None,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    progress: Progress = SILENT,
) -> RelinkAllResult:
    """Relink every user fork of the root, in (createdAt, id) order; one failing fork child
    (locked, below v4, unreadable) is a failed item and does not stop the others.

    A delegation child whose header looks like a fork's (``kinds.KindRule``) is no fork: its
    subagents are its own. A fork the operation log says was made with ``--no-agents`` is
    left alone (``skipped``): it has no tree on purpose; ``relink FORK_CHILD`` still copies it.
    """
    kinds = KindRule(root)
    forks = kinds.fork_children()
    on_purpose = messages.forks_without_agents(oplog_path)
    refused = unreadable_forks(root)
    result = RelinkAllResult([], [], len(forks) + len(refused), dry_run)
    for item in refused:
        result.failed.append({**item, "forkChild": item["id"]})
    unreadable = unreadable_sessions(root)  # each claimed by the fork whose tree names it
    # one stage for the whole run: the agents of every fork child, counted as they are done
    progress.stage("agents planned" if dry_run else "agents copied")
    within = _Within(progress)
    for entry in forks:
        fork_id = entry.id_or_dir
        if fork_id in on_purpose:
            result.skipped.append({"forkChild": fork_id, "reason": NO_AGENTS_REASON})
            continue
        try:
            summary = relink(
                root,
                entry.session_dir,
                generation=entry.generation,
                dry_run=dry_run,
                oplog_path=oplog_path,
                clock=clock,
                new_id=new_id,
                unreadable=unreadable,
                kinds=kinds,
                progress=within,
            )
        except DshForkError as exc:
            result.failed.append(
                {"id": fork_id, "code": exc.code, "message": exc.message, "forkChild": fork_id}
            )
            continue
        except OSError as exc:  # e.g. a fork child we may not read: this one fails, not all
            error = IoError.of(exc, "access")
            result.failed.append(
                {"id": fork_id, "code": error.code, "message": error.message, "forkChild": fork_id}
            )
            continue
        result.results.append(summary)
        for item in summary.problems():
            result.failed.append({**item, "forkChild": fork_id})
    claimed = {item["id"] for item in result.failed}
    for item in unreadable:
        if item["id"] in claimed:
            continue
        if item["code"] == IoError.code:  # unlisted: may hide any tree, a rerun can read it
            result.failed.append({**item, "forkChild": None})
        else:
            result.notes.append(
                f"{item['id']} cannot be read ({item['message']}); no fork's tree names it, "
                "so relink leaves it out (`dsh-fork doctor` says more)"
            )
    return result


def sweep_abandoned(
    root: Root,
    fork_children: list[str],
    *,
    unlisted: list[Path] | None = None,
    clean: frozenset[str] = frozenset(),
) -> int:
    """Remove the temps interrupted publishes left: in dirs that hold no session (the listing
    skips them) and beside the fork children and their copies (a publish that died between
    its link and its temp removal). writer.sweep_own_temps says what is removed.
    ``unlisted``: the dirs the run's ``_refresh`` left unlisted (no walk of the root);
    ``clean``: ids of copies the run published and removed the temp of (not listed again)."""
    known = root.listed_texts()
    candidates = root.candidate_dirs() if unlisted is None else unlisted
    dirs = [d for d in candidates if str(d) not in known]
    seen: set[str] = set()
    todo = list(fork_children)
    while todo:
        session_id = todo.pop()
        if session_id in seen:
            continue
        seen.add(session_id)
        entry = root.entry(session_id)
        if entry is not None and session_id not in clean:
            dirs.append(entry.session_dir)
        todo.extend(e.id for e in root.children_of(session_id) if e.id is not None)
    return sum(len(writer.sweep_own_temps(d)) for d in dirs)


def relink_arg(
    arg: str,
    root_option: str | None,
    *,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    progress: Progress = SILENT,
) -> RelinkSummary:
    """Resolve a FORK_CHILD argument and relink it (the ``relink`` command)."""
    located = locate(arg, root_option, env)
    located.root.progress = progress
    summary = relink(
        located.root,
        located.session_dir,
        generation=located.generation,
        dry_run=dry_run,
        oplog_path=layout.oplog_path(root_option, env),
        progress=progress,
    )
    summary.warnings[:0] = located.warnings
    if not dry_run and summary.fork_child is not None:  # preconditions held: bad input
        sweep_abandoned(  # never writes
            located.root,
            [summary.fork_child],
            unlisted=summary.unlisted,
            clean=summary.clean_copies(),
        )
    return summary


def relink_all_arg(
    root_option: str | None,
    *,
    dry_run: bool = False,
    progress: Progress = SILENT,
    env: Mapping[str, str] | None = None,
) -> RelinkAllResult:
    """Relink every fork child of the root named by ``--root`` or ``DSH_HOME``."""
    root = Root(layout.resolve_root(root_option, env), progress=progress)
    result = relink_all(
        root,
        dry_run=dry_run,
        oplog_path=layout.oplog_path(root_option, env),
        progress=progress,
    )
    if not dry_run:
        sweep_abandoned(root, [s.fork_child for s in result.results if s.fork_child])
    return result
