"""Sessions dsh-fork writes join their workspace, as DSH's host attaches its own (dsh-world §1.4).

After a session is published (``fork``, ``import``), ``join`` puts it into the workspace the
registry (``registry``) names for it, in one whole-file write for the batch, and says for each
session which workspace it joined, or why none: the registry is missing or not initialised
(DSH sorts sessions itself on its first start), refused (a warning says why), no record
matches (it stays Ungrouped, as DSH's own attach would leave it), a subagent (never attached),
or ``--no-workspace``. A running DSH keeps its own copy of the registry and writes it back on
its next workspace change, losing an offline edit: when a live process holds a session lock of
the root, a warning says so.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from msgspec import Struct

from . import forkdocs as docs
from . import registry
from .discovery import Root
from .errors import DshForkError
from .generations import LOCK_NAME
from .ids import ClockMs, now_ms
from .locking import probe
from .reader import current_generation, read_header
from .records import Header

JoinStatus = Literal["joined", "would-join", "already", "none", "skipped", "refused"]
"""joined: written; would-join: a dry run's plan; already: listed there before; none: no
workspace matches (Ungrouped); skipped: nothing to do by rule (no registry yet, a subagent,
``--no-workspace``); refused: the registry may not be edited, or the edit could not be
written (a warning says why)."""

MAX_ANCESTORS = 64
"""How far up a subagent's parents the nearest listed ancestor is looked for: DSH's trees
are a few levels deep, and a cycle of parent links must end."""

NO_WORKSPACE = "--no-workspace"
FIRST = " (DSH sorts sessions into workspaces on its first start)"
SUBAGENT = "a subagent session never joins a workspace (DSH never attaches one)"


WorkspaceJoin = docs.WorkspaceJoin
"""Which workspace one session joined (or would join), or why none: the document's object
itself, made once in ``_outcome``."""


def unjoined(session: str | None, status: JoinStatus, reason: str | None) -> WorkspaceJoin:
    """No workspace joined, and why."""
    return WorkspaceJoin(session, status, None, None, None, reason, False)


def text(join: WorkspaceJoin) -> str:
    """The human line: ``joined "proj" (/srv/proj)`` or ``none: <why>``."""
    where = f"{join.title!r} ({join.path})"
    archived = "; archived, so DSH hides it until it is unarchived" if join.archived else ""
    if join.status == "joined":
        return f"joined {where}{archived}"
    if join.status == "would-join":
        return f"would join {where}{archived}"
    if join.status == "already":
        return f"already in {where}{archived}"
    return f"{join.status}: {join.reason}"


class Request(Struct, frozen=True):
    """A session to place: a fork child of ``lineage[0]`` (its nearest listed ancestors
    after it, for a subagent source), or, with no lineage, one placed by its cwd."""

    session: str | None
    cwd: str | None
    lineage: tuple[str, ...] = ()
    subagent: bool = False


class Joined(Struct, frozen=True):
    joins: list[WorkspaceJoin]
    warnings: list[str]


def skipped(requests: Sequence[Request], reason: str = NO_WORKSPACE) -> Joined:
    """Nothing looked up (``--no-workspace``)."""
    return Joined([unjoined(r.session, "skipped", reason) for r in requests], [])


def target(reg: registry.Registry, request: Request) -> registry.Target:
    if request.lineage:
        return registry.fork_target(reg, request.lineage, request.cwd)
    return registry.cwd_target(reg, request.cwd)


def join(
    root: Path, requests: Sequence[Request], *, dry_run: bool, clock: ClockMs = now_ms
) -> Joined:
    """Place each request in its workspace: one edit of the registry of ``root``'s home for
    the whole batch (a dry run only reads it). Only subagents: the registry is not read."""
    if all(request.subagent for request in requests):
        return skipped(requests, SUBAGENT)
    home = registry.home_of(root)
    planned: dict[int, registry.Target] = {}

    def decide(reg: registry.Registry) -> Iterator[registry.Change]:
        for index, request in enumerate(requests):
            if request.subagent:
                continue
            found = planned[index] = target(reg, request)
            if found.record is not None and request.session is not None:
                yield registry.Change(request.session, found.record.id)

    if dry_run:
        reg = registry.load(home)
        if reg.ready:
            list(decide(reg))
        written, failure = False, None
    else:
        edit = registry.edit(home, decide, clock())
        reg, written, failure = edit.registry, edit.written, edit.reason
    joins = [
        _outcome(reg, request, planned.get(index), dry_run, written, failure)
        for index, request in enumerate(requests)
    ]
    warnings: list[str] = []
    if reg.state == "refused":
        warnings.append(reg.describe())
    elif failure is not None and any(j.status == "refused" for j in joins):
        warnings.append(f"the workspace registry {reg.path} was not changed: {failure}")
    if written or (dry_run and any(j.status == "would-join" for j in joins)):
        live = live_session(root)
        if live is not None:
            warnings.append(running_dsh_warning(live))
    return Joined(joins, warnings)


def _outcome(
    reg: registry.Registry,
    request: Request,
    found: registry.Target | None,
    dry_run: bool,
    written: bool,
    failure: str | None,
) -> WorkspaceJoin:
    session = request.session
    if request.subagent:
        return unjoined(session, "skipped", SUBAGENT)
    if reg.state == "missing":
        return unjoined(session, "skipped", f"no workspace registry at {reg.path}{FIRST}")
    if reg.state == "uninitialised":
        reason = f"the workspace registry {reg.path} is not initialised{FIRST}"
        return unjoined(session, "skipped", reason)
    if reg.state == "refused" or found is None:
        return unjoined(session, "refused", f"workspace registry {reg.path}: {reg.reason}")
    if found.record is None:
        return unjoined(session, "none", found.reason)
    record = found.record
    status: JoinStatus
    if session is not None and reg.listing(session) == record:
        status = "already"
    elif dry_run:
        status = "would-join"
    elif written:
        status = "joined"
    else:
        return unjoined(session, "refused", failure or "nothing was written")
    archived = session is not None and reg.archived(session)
    return WorkspaceJoin(session, status, record.id, record.title, record.path, None, archived)


def fork_request(root: Root, source: Header, child: str | None, cwd: str | None) -> Request:
    """A fork child's request: by its source's workspace, or (``cwd`` moved) by its cwd."""
    if cwd is not None and cwd != source.cwd:
        return Request(child, cwd)
    return Request(child, source.cwd, lineage_of(root, source))


def lineage_of(root: Root, header: Header) -> tuple[str, ...]:
    """The source's id, then for a subagent its parents' ids, nearest first (DSH attaches a
    fork of a subagent to the first ancestor a workspace lists)."""
    ids = [header.id]
    current: Header | None = header
    while current is not None and current.is_subagent and len(ids) < MAX_ANCESTORS:
        parent = current.parent_session
        if parent is None or parent in ids:
            break
        ids.append(parent)
        current = _header_of(root, parent)
    return tuple(ids)


def _header_of(root: Root, session_id: str) -> Header | None:
    for session_dir in root.dirs_of(session_id):
        generation = current_generation(session_dir)
        if generation is None:
            continue
        try:
            return read_header(generation)
        except (DshForkError, OSError):
            continue
    return None


def live_session(root: Path) -> str | None:
    """A session dir of the root whose ``session.lock`` a live process holds, if any (the
    first found): a running DSH, which will overwrite an offline registry edit."""
    for project in _subdirs(root):
        for session_dir in _subdirs(project):
            if os.path.lexists(session_dir / LOCK_NAME) and probe(session_dir) == "held":
                return session_dir.name
    return None


def _subdirs(path: Path) -> Iterable[Path]:
    try:
        with os.scandir(path) as entries:
            found = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    return sorted(found)


def running_dsh_warning(live: str) -> str:
    return (
        f"a live process holds the session lock of {live}: a running DSH keeps its own copy of "
        "the workspace registry and overwrites this edit on its next workspace change; if the "
        "session shows as Ungrouped, close DSH and run `dsh-fork attach` (or use "
        f"{NO_WORKSPACE})"
    )
