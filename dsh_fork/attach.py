"""``attach``: sessions into the workspace their cwd belongs to (dsh-world §1.2, §1.4).

For sessions that show as Ungrouped in DSH's web UI although a workspace's path is their
``realpath(cwd)`` (made offline, imported, or created before the workspace), and for sessions
still listed under a workspace whose path is no longer their cwd (moved): each joins the
workspace whose path is its ``realpath(cwd)``, and leaves every other, in one registry write
for the whole batch (``joining.join``). ``--all`` takes every visible session of the root
(visible as DSH's UI counts it: not a subagent, not archived, with a ``turn/start``); named
sessions are taken as they are (an archived one too: the result says so; a subagent never).
A second run changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
from msgspec import Struct, field

from . import joining, registry
from . import registrydocs as docs
from .discovery import Root
from .errors import DshForkError, Partial, UsageError
from .generations import Generation
from .ids import ClockMs, now_ms
from .layout import resolve_root
from .reader import open_log, read_header
from .records import Header
from .results import SCHEMA_VERSION, Documented
from .sessionarg import locate
from .sessionentry import SessionEntry

TURN_START = "turn/start"


AttachItem = docs.PlacedSession
"""One session attach placed, or would place, or could not: its join (``_placed``),
its cwd, and the title of the workspace that listed it before (a moved session), else None."""


class AttachResult(Documented, Struct):
    """The attach document, built as the root is read and the batch is placed, and the
    warnings beside it."""

    document: docs.AttachDocument
    warnings: list[str] = field(default_factory=list)

    def count(self, *statuses: str) -> int:
        return sum(1 for item in self.document.sessions if item.status in statuses)

    def to_document(self) -> docs.AttachDocument:
        return self.document

    def partial(self) -> Partial | None:
        """PARTIAL when the registry could not be edited: the sessions it should have placed
        are named."""
        failed = [
            {"id": i.session, "code": "REGISTRY_REFUSED", "message": str(i.reason)}
            for i in self.document.sessions
            if i.status == "refused"
        ]
        if not failed:
            return None
        return Partial(f"{len(failed)} sessions were not attached", failed, self)


def attach_arg(
    sessions: Sequence[str],
    root_option: str | None,
    *,
    every: bool,
    dry_run: bool,
    env: Mapping[str, str] | None = None,
    clock: ClockMs = now_ms,
) -> AttachResult:
    """What the command runs: the named SESSIONs, or with ``every`` the whole root."""
    if every == bool(sessions):
        raise UsageError("give SESSION ids or --all, not both and not neither")
    if every:
        return attach_all(Root(resolve_root(root_option, env)), dry_run=dry_run, clock=clock)
    located = [locate(arg, root_option, env) for arg in sessions]
    roots = {item.root.path for item in located}
    if len(roots) > 1:
        raise UsageError("the sessions lie in different roots: attach them one root at a time")
    headers = [read_header(item.generation) for item in located]
    return attach(located[0].root, headers, dry_run=dry_run, clock=clock)


def attach(
    root: Root, headers: Sequence[Header], *, dry_run: bool, clock: ClockMs = now_ms
) -> AttachResult:
    """The named sessions, each into the workspace of its cwd."""
    reg = registry.load(registry.home_of(root.path))
    unique = list({h.id: h for h in headers}.values())
    return _place(root.path, reg, unique, dry_run, clock, _empty(root, reg))


def attach_all(root: Root, *, dry_run: bool, clock: ClockMs = now_ms) -> AttachResult:
    """Every visible session of the root that a workspace's path matches and that is not its
    member yet (Ungrouped, or listed under a workspace that is no longer its cwd's)."""
    reg = registry.load(registry.home_of(root.path))
    result = _empty(root, reg)
    doc = result.document
    if not reg.present:
        return _place(root.path, reg, [], dry_run, clock, result)
    chosen: list[Header] = []
    for entry in root.entries():
        header = entry.header
        if header is None:
            doc.unreadable.append(_unreadable(entry, entry.error))
            continue
        if header.origin == "subagent" or reg.archived(header.id):
            continue
        if reg.is_member(header.id, header.cwd):
            doc.members += 1
            continue
        if registry.cwd_target(reg, header.cwd).record is None:
            if reg.listing(header.id) is None and _started(entry, result):
                doc.sessions.append(_ungrouped(reg, header))
            continue
        if _started(entry, result):
            chosen.append(header)
    doc.unreadable += [_unreadable(entry, entry.error) for entry in root.unlisted()]
    if doc.unreadable:
        result.warnings.append(
            f"{len(doc.unreadable)} sessions could not be read, so not attached (named in "
            "the result; `dsh-fork doctor` says more)"
        )
    return _place(root.path, reg, chosen, dry_run, clock, result)


def _empty(root: Root, reg: registry.Registry) -> AttachResult:
    """Nothing placed yet: the registry's state, and why it may not be edited (unless
    ready)."""
    document = docs.AttachDocument(
        schema_version=SCHEMA_VERSION,
        root=str(root.path),
        registry=str(reg.path),
        registry_state=reg.state,
        registry_reason=None if reg.ready else reg.reason,
        dry_run=False,
        sessions=[],
        members=0,
        unreadable=[],
    )
    return AttachResult(document)


def _place(
    root: Path,
    reg: registry.Registry,
    headers: Sequence[Header],
    dry_run: bool,
    clock: ClockMs,
    result: AttachResult,
) -> AttachResult:
    """One edit for the batch; each session's previous workspace named when it moves."""
    requests = [joining.Request(h.id, h.cwd, subagent=h.origin == "subagent") for h in headers]
    joined = joining.join(root, requests, dry_run=dry_run, clock=clock)
    result.document.dry_run = dry_run
    placed = [
        _placed(join, h.cwd, _was(reg, h.id, join))
        for h, join in zip(headers, joined.joins, strict=True)
    ]
    result.document.sessions[:0] = placed
    result.warnings += joined.warnings
    return result


def _was(reg: registry.Registry, session: str, join: joining.WorkspaceJoin) -> str | None:
    before = reg.listing(session)
    return None if before is None or before.id == join.workspace else before.title


def _placed(join: joining.WorkspaceJoin, cwd: str | None, was: str | None) -> AttachItem:
    """An attached session's entry: its join, with its cwd and the title of the workspace
    that listed it before (a moved session), else None."""
    return AttachItem(**msgspec.structs.asdict(join), cwd=cwd, was=was)


def _ungrouped(reg: registry.Registry, header: Header) -> AttachItem:
    target = registry.cwd_target(reg, header.cwd)
    join = joining.unjoined(header.id, "none", target.reason)
    return _placed(join, header.cwd, None)


def has_turn(generation: Generation) -> bool:
    """Whether the log has a ``turn/start``: DSH's UI hides a blank session (dsh-world §1.2).
    Raises what reading the log raises."""
    return bool(open_log(generation, collect=(TURN_START,)).collected)


def _started(entry: SessionEntry, result: AttachResult) -> bool:
    """``has_turn``, a log that cannot be read named in the result."""
    generation = entry.generation
    if generation is None:
        return False
    try:
        return has_turn(generation)
    except (DshForkError, OSError) as exc:
        result.document.unreadable.append(_unreadable(entry, exc))
        return False


def _unreadable(entry: SessionEntry, error: BaseException | None) -> docs.UnreadableSession:
    if isinstance(error, DshForkError):
        code, message = error.code, error.message
    elif isinstance(error, OSError):
        code, message = "IO_ERROR", error.strerror or str(error)
    else:
        code, message = "CORRUPT_LOG", "its header cannot be read"
    return docs.UnreadableSession(entry.dir_text, code, message)
