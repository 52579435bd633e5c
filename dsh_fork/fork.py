"""``fork``: a new session seeded with a source's events ``0..boundary`` (semantics §3).

The offline counterpart of DSH's ``SessionStore.fork``: the boundary is checked exactly as DSH's
store checks it (never inside an open turn, never trimmed), the prefix is copied byte for byte,
and the child appears atomically through the writer or not at all.

It is also cheap on huge logs: every frame of the source is decoded once while indexing,
compressed frames wholly inside the prefix are copied verbatim, only the frame holding the
boundary is re-framed, and the only lines parsed are the few a decision needs (the turn event
that governs the boundary, the boundary event, preset selections, and catalog facts for a dry-run
agent plan).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import UNSET, Struct, field
from msgspec.structs import replace

from . import closers, inbox, seeded, titles
from .closers import ClosedTurn
from .discovery import Root
from .errors import (
    DshForkError,
    InvalidBoundary,
    OpenTurn,
    Partial,
    SessionAlreadyExists,
    UsageError,
    unsupported_below_v4,
)
from .generations import CURRENT_NAME, SUPPORTED_VERSION, Generation
from .ids import ClockMs, IdFactory, new_session_id, now_ms
from .kinds import Evidence, KindRule
from .layout import encode_segment, is_absolute_cwd, project_dir_name
from .layout import oplog_path as default_oplog_path
from .locking import SessionLock
from .model import TURN_TYPES, Facts, OpenTurnInfo, derive
from .oplog import NO_AGENTS, OpLog
from .progress import SILENT, Progress
from .reader import open_log
from .results import SCHEMA_VERSION, Documented
from .sessionarg import Located, locate
from .sessionlog import SessionLog
from .times import iso_ms
from .turns import CLOSE_TURN_HINT, open_turn_at
from .workspace import moved_workspace

if TYPE_CHECKING:  # relink is imported only when the subagents are copied
    from . import forkdocs as docs
    from .forkpoint import ForkPoint
    from .joining import WorkspaceJoin
    from .records import Header
    from .relinkresult import RelinkSummary

PRESET_TYPE = "agent-preset/selected"
CATALOG_TYPE = "subagent/catalog"
MAX_SEGMENT_BYTES = 255


SourceReader = Callable[[Generation, list[str]], SessionLog]
"""Reads a fork's source log, with the events of the given types collected."""


class ForkOptions(Struct, frozen=True):
    """What the user chose about the child, handed whole from the command to ``fork`` (and
    built by ``salvage``): the fork's parameters, written once.

    ``at`` is the boundary seq (None: the source's last event); ``child_id`` the child's id
    (None: a fresh ``session-<uuid4>``); ``agents`` copies the source's subagent tree under
    the child; ``cwd`` moves the child into another workspace; ``drop_inbox`` cancels its
    inherited queued input; ``workspace`` false leaves DSH's registry alone; ``title`` names
    the child, ``keep_title`` leaves it the title it inherits; ``close_turn`` takes a
    boundary inside a turn and closes the turn in the child."""

    at: int | None = None
    child_id: str | None = None
    agents: bool = True
    dry_run: bool = False
    cwd: str | None = None
    drop_inbox: bool = False
    workspace: bool = True
    title: str | None = None
    keep_title: bool = False
    close_turn: bool = False


class ForkResult(Documented, Struct):
    """What a fork wrote (or, with ``dry_run``, would write): semantics §3.2. ``child`` is
    the document's child itself, made once where the fork is planned and completed as it is
    written (its time and path)."""

    child: docs.ForkChild
    frames_copied: int
    frames_reencoded: int
    dry_run: bool
    cwd: str | None
    """The child's working dir (the source's, unless ``--cwd``: then also ``child.cwd``)."""
    source_cwd: str | None
    closed_turn: ClosedTurn | None
    """The closers of the turn the boundary lies inside (``--close-turn``), else None;
    ``child.closed_turn`` is what the document says of them."""
    agents: RelinkSummary | None = None
    warnings: list[str] = field(default_factory=list)
    failure: Partial | None = None
    workspace: WorkspaceJoin | None = None
    """The workspace the child joined, or why none (dsh-world §1.4)."""

    @property
    def path(self) -> Path | None:
        """The child's log (``child.path``), once its id is known."""
        path = self.child.path
        return None if path is None else Path(path)

    def partial(self) -> Partial | None:
        """PARTIAL (exit 10) when the child was written but part of its subagent tree was
        not; the error names the command that finishes the work."""
        return self.failure

    def to_document(self) -> docs.ForkDocument:
        from . import forkdocs as docs

        return docs.ForkDocument(
            schema_version=SCHEMA_VERSION,
            child=self.child,
            agents=None if self.agents is None else self.agents.to_summary(),
            workspace=self.workspace,
            dry_run=self.dry_run,
            frames_copied=self.frames_copied,
            frames_reencoded=self.frames_reencoded,
        )


def fork(
    root: Root,
    source: Located,
    options: ForkOptions,
    *,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    oplog_path: Path | None = None,
    read_source: SourceReader | None = None,
) -> ForkResult:
    """Fork ``source`` at ``at`` (default: its last event) into a new session (semantics §3.1).

    Unless ``agents`` is false, the source's subagent tree is copied under the child in the same
    run (relink), while the child's lock is held from its publication to the end. ``cwd``
    moves the child into another workspace, and the subagent copies follow it
    (``workspace.rebase_cwd``); ``drop_inbox`` cancels the inherited queued input in the
    child's own range. The child is titled as DSH's fork buttons title it (``titles``):
    ``title`` (``--title``) instead, no title event with ``keep_title``. With ``close_turn`` a
    boundary inside a turn is taken, and the turn closed in the child (``closers``). Once published,
    the child joins its workspace (``joining``) unless ``workspace`` is false.
    ``read_source`` reads the source instead of ``reader.open_log`` (``salvage``: the part of
    a refused log that DSH would accept).
    """
    child_id = options.child_id
    generation = source.generation
    if generation.version < SUPPORTED_VERSION:
        raise unsupported_below_v4(
            f"the source {source.session_dir.name}", generation.version, path=str(generation.path)
        )
    # With agents, the listing the tree's plan needs anyway: the root's encoding is read from it.
    if options.agents:
        root.entries()
    root.require_writable()
    if options.cwd is not None:
        check_cwd(options.cwd)
    if child_id is not None:
        _check_child_id(root, child_id)
    given_title = titles.given_title(options.title, keep=options.keep_title)

    # The catalog facts of the prefix decide which subagents the child's branch holds; fork
    # hands them to relink with the fork point, so relink never re-reads the child it wrote.
    types = [PRESET_TYPE]
    if options.agents:
        types.append(CATALOG_TYPE)
    if options.drop_inbox:
        types.append(inbox.SPLICE_TYPE)
    # Every frame is decoded and checksum-verified and every line's envelope checked, so each
    # line copied is one DSH accepts (reader.open_log).
    if read_source is None:
        log = open_log(generation, collect=types, stream=True, latest=(titles.TITLE_TYPE,))
    else:
        log = read_source(generation, types)
    facts = derive(log.header, log.event_count, log.collected)
    boundary, enclosing = _boundary(log, options.at, close_turn=options.close_turn)
    last = -1 if boundary is None else boundary
    closed = None
    if enclosing is not None:  # --close-turn at a boundary inside a turn
        state = open_turn_at(log, enclosing.start_seq, last)
        closed = None if state is None else closers.close(state, last + 2)
    whole, cut_frame = log.prefix_frames(last)
    if child_id is None and not options.dry_run:
        child_id = seeded.fresh_id(root, new_id)
    child_cwd = log.header.cwd if options.cwd is None else options.cwd
    project_dir = root.path / project_dir_name(child_cwd)
    cancels = inbox.cancellations(facts.splices, last) if options.drop_inbox else None
    # The source's latest title of its whole log, not only of the prefix (dsh-world §2).
    source_title = titles.latest_title(log)
    child_title = titles.fork_title(source_title, given=given_title, keep=options.keep_title)
    from . import forkdocs

    child = forkdocs.ForkChild(
        id=child_id,
        path=None
        if child_id is None
        else str(project_dir / encode_segment(child_id) / CURRENT_NAME),
        project_dir=str(project_dir),
        parent_session=log.header.id,
        boundary=boundary,
        inherited_events=last + 1,
        agent_preset=seeded.preset(facts, last + 1),
        created_at=None,
        created_at_iso=None,
        title=child_title,
        source_title=source_title,
        # the keys of the options that change the child: only when they were used
        cwd=UNSET if options.cwd is None else options.cwd,
        inbox_canceled=UNSET
        if cancels is None
        else {c["target"]: c["removedCount"] for c in cancels},
        closed_turn=UNSET
        if not options.close_turn
        else None
        if closed is None
        else closed.to_document(),
    )
    result = ForkResult(
        child=child,
        frames_copied=whole,
        frames_reencoded=1 if cut_frame else 0,
        dry_run=options.dry_run,
        cwd=child_cwd,
        source_cwd=log.header.cwd,
        closed_turn=closed,
        warnings=list(source.warnings),
    )
    if closed is not None and closed.outcome_unknown:
        result.warnings.append(closers.unknown_warning(closed, log.header.id))
    if log.torn is not None:
        result.warnings.append(
            f"the source has a torn tail ({log.torn.size} bytes at offset {log.torn.offset}); "
            f"{len(log.recovered)} complete lines of it are forked, as DSH keeps them"
        )
    if options.dry_run:
        if options.agents:
            from .forkpoint import fork_point
            from .relink import plan_new_fork

            point = fork_point(log, facts, log.header.id, last, 0)
            _set_agents(result, plan_new_fork(root, point, _known_kinds(root, facts, None)))
        _join_workspace(root, result, log.header, options.cwd, options.workspace, clock)
        return result

    assert child_id is not None
    child.created_at = created_at = clock()
    child.created_at_iso = iso_ms(created_at)
    own: list[tuple[str, Any]] = [(inbox.SPLICE_TYPE, data) for data in cancels or []]
    if child_title is not None:  # after the marker and the other own events, before any turn
        own.append((titles.TITLE_TYPE, titles.title_data(child_title)))
    plan = seeded.plan(
        log,
        facts,
        session_id=child_id,
        created_at=created_at,
        parent_session=log.header.id,
        origin=None,
        depth=0,
        inherited=last + 1,
        own=own,
    )
    plan.cwd = child_cwd  # --cwd: the child's workspace; its events stay byte for byte
    plan.closing = [] if closed is None else closed.events
    published = seeded.write(root, plan, log, keep_lock=options.agents)
    child.path = str(published.path)
    if not options.agents:  # a fork without its tree on purpose: doctor and relink --all respect it
        OpLog(oplog_path, clock=clock, warn=result.warnings.append).write(
            NO_AGENTS, {"forkChild": child_id, "source": log.header.id}
        )
    if options.agents:
        from .forkpoint import fork_point

        assert published.lock is not None
        point = fork_point(log, facts, log.header.id, last, 0)
        try:
            kinds = _known_kinds(root, facts, child_id)
            _copy_agents(root, result, point, published.lock, oplog_path, clock, new_id, kinds)
        finally:
            published.lock.release()
    _join_workspace(root, result, log.header, options.cwd, options.workspace, clock)
    return result


def fork_session(
    source_arg: str,
    root_option: str | None,
    options: ForkOptions,
    *,
    turn: int | None = None,
    env: Mapping[str, str] | None = None,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    oplog_path: Path | None = None,
    progress: Progress = SILENT,
) -> ForkResult:
    """Resolve a SOURCE argument (semantics §2.2) and fork it: what the command runs.
    ``progress`` is told of the sessions read and of the agents the fork copies.

    The boundary is a seq (``options.at``) or the end of a turn (``turn``, as
    ``inspect --turns`` numbers them), never both. ``oplog_path`` defaults to the contract's
    location for ``root_option`` (semantics §2.1).
    """
    if turn is not None and options.at is not None:
        raise UsageError("give either --at SEQ or --turn N, not both")
    source = locate(source_arg, root_option, env)
    source.root.progress = progress
    if turn is not None:
        from .turns import boundary_of_turn

        turns_log = open_log(source.generation, collect=TURN_TYPES)
        at = boundary_of_turn(turns_log, turn, close_turn=options.close_turn)
        options = replace(options, at=at)
    oplog = oplog_path or default_oplog_path(root_option, env)
    return fork(source.root, source, options, clock=clock, new_id=new_id, oplog_path=oplog)


def _join_workspace(
    root: Root,
    result: ForkResult,
    source: Header,
    cwd: str | None,
    enabled: bool,
    clock: ClockMs,
) -> None:
    """After publication, the child joins the workspace of its source (or of ``cwd``)."""
    from . import joining

    request = joining.fork_request(root, source, result.child.id, cwd)
    if not enabled:
        joined = joining.skipped([request])
    else:
        joined = joining.join(root.path, [request], dry_run=result.dry_run, clock=clock)
    result.workspace = joined.joins[0]
    result.warnings += joined.warnings


# -- the boundary ---------------------------------------------------------------------------


def _boundary(
    log: SessionLog, at: int | None, *, close_turn: bool
) -> tuple[int | None, OpenTurnInfo | None]:
    """The checked boundary seq (None for the empty child of an empty source), and the turn it
    lies inside: always None unless ``close_turn``, without which such a boundary is refused."""
    count = log.event_count
    if at is None:
        if count == 0:
            return None, None
        seq = count - 1
    elif not 0 <= at < count:
        detail = "the source has no events" if count == 0 else f"valid seqs are 0..{count - 1}"
        raise InvalidBoundary(
            f"boundary {at} does not exist: {detail}",
            requested=at,
            eventCount=count,
            session=log.header.id,
        )
    else:
        seq = at
    # Only the last turn event at or before ``seq`` decides (Facts.enclosing_turn); reading
    # back for it spares parsing every turn event of a huge log.
    governing = log.last_event(TURN_TYPES, seq)
    near = derive(log.header, count, [] if governing is None else [governing])
    enclosing = near.enclosing_turn(seq)
    if enclosing is not None and not close_turn:
        raise _open_turn(log, seq, enclosing, default=at is None)
    return seq, enclosing


def _open_turn(log: SessionLog, seq: int, turn: OpenTurnInfo, *, default: bool) -> OpenTurn:
    """OPEN_TURN naming the turn and the nearest valid boundaries (a full turn scan, on error)."""
    full: Facts = derive(log.header, log.event_count, list(log.events(TURN_TYPES)))
    below, above = full.nearest_boundaries(seq)
    nearest = [b for b in (below, above) if b is not None]
    name = "an open turn" if turn.turn is None else f"open turn {turn.turn}"
    what = f"boundary {seq} (the source's last event)" if default else f"boundary {seq}"
    listed = ", ".join(str(b) for b in nearest) or "none"
    message = f"{what} lies inside {name} (started at seq {turn.start_seq}); "
    message += f"nearest valid boundaries: {listed}"
    last_end = full.last_turn_end if default else None
    if default:
        message += "; no turn has ended yet" if last_end is None else f"; last turn/end: {last_end}"
    message += f"; {CLOSE_TURN_HINT}"
    return OpenTurn(
        message,
        requested=seq,
        validBoundaries=nearest,
        openTurn={"turn": turn.turn, "startSeq": turn.start_seq},
        lastTurnEnd=last_end,
        session=log.header.id,
    )


# -- the child id ---------------------------------------------------------------------------


def check_cwd(cwd: str) -> None:
    """A ``--cwd`` must be what a header may hold: a non-empty absolute path (format §2.6)."""
    if not cwd or not is_absolute_cwd(cwd) or "\x00" in cwd:
        raise UsageError(f"--cwd {cwd!r} is not an absolute path", path=cwd)


def _check_child_id(root: Root, child_id: str) -> None:
    if child_id == "":
        raise UsageError("the child id must not be empty")
    if len(encode_segment(child_id).encode()) > MAX_SEGMENT_BYTES:
        raise UsageError(
            f"the child id is too long for a directory name ({MAX_SEGMENT_BYTES} bytes once "
            "encoded)"
        )
    dirs = root.dirs_of(child_id)
    if dirs:
        raise SessionAlreadyExists(
            f"a session {child_id!r} already exists in {dirs[0].parent.name}",
            session=child_id,
            path=str(dirs[0]),
        )


# -- subagents --------------------------------------------------------------------------------


def _copy_agents(
    root: Root,
    result: ForkResult,
    point: ForkPoint,
    lock: SessionLock,
    oplog_path: Path | None,
    clock: ClockMs,
    new_id: IdFactory,
    kinds: KindRule,
) -> None:
    """relink with C = the new child, under the lock its publication took (§3.1 step 9)."""
    from .relink import relink_new_child

    child_id, path = result.child.id, result.child.path
    assert child_id is not None and path is not None
    try:
        summary = relink_new_child(
            root,
            child_id,
            Path(path).parent,
            point,
            lock,
            oplog_path=oplog_path,
            clock=clock,
            new_id=new_id,
            workspace=moved_workspace(result.source_cwd, result.cwd),
            kinds=kinds,
        )
    except DshForkError as error:
        result.failure = Partial(
            f"forked {child_id}, but copying its subagents failed: {error.message}",
            [{"id": child_id, "code": error.code, "message": error.message}],
            result,
            next_command=relink_command(child_id),
        )
        return
    _set_agents(result, summary)


def _known_kinds(root: Root, facts: Facts, child_id: str | None) -> KindRule:
    """The kind rule told what the fork has read: its source's log (``facts``, whose catalog
    settles the source's forks) and its new child (no own descriptor, nothing catalogued), so
    the plan of the child's tree reads neither log again — the source may be larger than
    the memory a run may hold twice."""
    kinds = KindRule(root)
    kinds.learn(facts.header.id, facts)
    if child_id is not None:
        kinds.learn(child_id, Evidence(own_descriptor=False, catalogued=frozenset()))
    return kinds


def _set_agents(result: ForkResult, summary: RelinkSummary) -> None:
    """Attach the relink summary; PARTIAL (exit 10) when it has failed or uncatalogable items."""
    result.agents = summary
    result.warnings += summary.warnings
    partial = summary.partial()
    if partial is not None:
        next_command = None
        if result.dry_run:
            message = f"dry run: the subagent copy would be partial: {partial.message}"
        else:
            child = result.child
            message = f"forked {child.parent_session} into {child.id}, but "
            message += f"the subagent copy is partial: {partial.message}"
            assert child.id is not None
            if any(item.get("code") != "UNCATALOGABLE" for item in partial.failed):
                next_command = relink_command(child.id)  # a rerun can finish these
        result.failure = Partial(message, partial.failed, result, next_command=next_command)


def relink_command(child_id: str) -> str:
    """The command that completes a fork child's subagent tree (a rerun copies what is missing)."""
    import shlex  # only a partial fork names it

    return f"dsh-fork relink {shlex.quote(child_id)}"
