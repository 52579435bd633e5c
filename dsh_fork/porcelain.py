"""The entry point of every command: the root, the session and the operation log resolved once.

The CLI parses its arguments into one call here and renders the result it gets back; every
function returns a typed result of the protocol in ``results`` (or raises a typed error).
Commands over a whole root (list, doctor, relink --all; tree and du without SESSION) refuse
a root that cannot be one (``lookup.check_root``); commands given a SESSION get the same
check through the lookup.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from msgspec import Struct

from .errors import UsageError
from .layout import oplog_path, resolve_root
from .lookup import check_root
from .progress import SILENT, Progress

if TYPE_CHECKING:  # each command imports only the library it runs
    from .agents import AgentTree
    from .attach import AttachResult
    from .diff import DiffResult
    from .discovery import Root
    from .doctor import DoctorReport
    from .du import DiskUsage
    from .export import ExportOptions, ExportResult
    from .fixtureroot import FixtureSummary
    from .fork import ForkOptions, ForkResult
    from .importer import ImportOptions, ImportResult
    from .inspect import InspectReport
    from .lineage import Lineage
    from .listing import SessionList
    from .relinkresult import RelinkAllResult, RelinkSummary
    from .salvage import SalvageResult
    from .search import SearchResult
    from .sessionarg import Located
    from .trash import EmptyResult, RestoreResult, TrashList, TrashResult


class Context(Struct, frozen=True):
    """Where a command works: ``--root`` as given, the environment, and what they resolve to."""

    root_option: str | None
    env: Mapping[str, str]
    root: Path
    oplog: Path

    @classmethod
    def of(cls, root_option: str | None, env: Mapping[str, str] | None = None) -> Context:
        env = dict(os.environ) if env is None else env
        return cls(root_option, env, resolve_root(root_option, env), oplog_path(root_option, env))

    def whole_root(self) -> Path:
        """The root of a command over all of it, checked (missing, a file, a DSH home)."""
        check_root(self.root)
        return self.root


def fork(
    ctx: Context,
    source: str,
    options: ForkOptions,
    *,
    turn: int | None = None,
    progress: Progress = SILENT,
) -> ForkResult:
    """``fork``: at a seq (``options.at``), or at the end of a turn (``turn``), never both;
    the rest of what shapes the child is ``options`` (``fork.ForkOptions``)."""
    from .fork import fork_session

    return fork_session(
        source,
        ctx.root_option,
        options,
        turn=turn,
        env=ctx.env,
        oplog_path=ctx.oplog,
        progress=progress,
    )


def export(
    ctx: Context,
    session: str,
    output: str,
    options: ExportOptions,
    *,
    stdout: IO[bytes] | None = None,
    progress: Progress = SILENT,
) -> ExportResult:
    """``export``: the session and its family into one archive (``-``: ``stdout``); what
    the user chose about it is ``options`` (``export.ExportOptions``)."""
    from .export import export_session

    return export_session(
        session, output, ctx.root_option, options, env=ctx.env, stdout=stdout, progress=progress
    )


def import_bundle(
    ctx: Context, archive: str, options: ImportOptions, *, progress: Progress = SILENT
) -> ImportResult:
    """``import``: verify an archive, then publish its sessions into the root (and their
    workspaces, unless ``options.workspace`` is false)."""
    from .importer import import_bundle as run_import

    return run_import(archive, ctx.root_option, options, env=ctx.env, progress=progress)


def attach(ctx: Context, sessions: list[str], *, every: bool, dry_run: bool) -> AttachResult:
    """``attach``: the named sessions, or every visible one (``every``), into the workspace
    their cwd belongs to; ``every`` reads the whole root, so it is checked like one."""
    from .attach import attach_arg

    if every:
        ctx.whole_root()
    return attach_arg(sessions, ctx.root_option, every=every, dry_run=dry_run, env=ctx.env)


def relink(
    ctx: Context, fork_child: str, *, dry_run: bool, progress: Progress = SILENT
) -> RelinkSummary:
    from .relink import relink_arg

    return relink_arg(fork_child, ctx.root_option, dry_run=dry_run, env=ctx.env, progress=progress)


def relink_all(ctx: Context, *, dry_run: bool, progress: Progress = SILENT) -> RelinkAllResult:
    from .relink import relink_all_arg

    ctx.whole_root()
    return relink_all_arg(ctx.root_option, dry_run=dry_run, progress=progress, env=ctx.env)


def inspect(ctx: Context, session: str, *, events: bool, turns: bool = False) -> InspectReport:
    from .inspect import inspect_arg

    return inspect_arg(session, ctx.root_option, events=events, turns=turns, env=ctx.env)


def list_agents(ctx: Context, session: str, *, recursive: bool) -> AgentTree:
    from .agents import list_agents_arg

    return list_agents_arg(session, ctx.root_option, recursive=recursive, env=ctx.env)


def doctor(
    ctx: Context, sessions: list[str] | None, *, progress: Progress = SILENT
) -> DoctorReport:
    from .doctor import doctor_arg

    ctx.whole_root()
    return doctor_arg(ctx.root_option, sessions, env=ctx.env, progress=progress)


def list_sessions(
    ctx: Context,
    *,
    project: str | None,
    kinds: list[str] | None,
    since: str | None,
    now_ms: int,
    everything: bool = False,
    workspace: str | None = None,
    progress: Progress = SILENT,
) -> SessionList:
    from .discovery import Root
    from .listing import list_sessions as list_root
    from .listing import parse_since

    start = None if since is None else parse_since(since, now_ms)
    root = Root(ctx.whole_root(), progress=progress)
    listing = list_root(
        root,
        project=project,
        kinds=kinds,
        since=start,
        everything=everything,
        workspace=workspace,
    )
    return listing


def search(
    ctx: Context,
    text: str,
    *,
    regex: bool,
    scopes: list[str] | None,
    inherited: bool,
    since: str | None,
    project: str | None,
    limit: int,
    now_ms: int,
) -> SearchResult:
    """``search``: the whole root, one pass per log."""
    from .discovery import Root
    from .listing import parse_since
    from .search import search as search_root

    start = None if since is None else parse_since(since, now_ms)
    root = Root(ctx.whole_root())
    return search_root(
        root,
        text,
        regex=regex,
        scopes=scopes,
        inherited=inherited,
        since=start,
        project=project,
        limit=limit,
    )


def salvage(
    ctx: Context,
    session: str,
    *,
    child_id: str | None,
    title: str | None,
    dry_run: bool,
    close_turn: bool = False,
) -> SalvageResult:
    """``salvage``: the readable prefix of a refused log, forked."""
    from .salvage import salvage as salvage_session

    return salvage_session(
        session,
        ctx.root_option,
        child_id=child_id,
        dry_run=dry_run,
        env=ctx.env,
        oplog_path=ctx.oplog,
        title=title,
        close_turn=close_turn,
    )


def trash(
    ctx: Context, sessions: list[str], *, with_forks: bool, force: bool, dry_run: bool
) -> TrashResult:
    """``trash``: the sessions with their families into a new trash entry."""
    from .trash import trash as trash_sessions

    return trash_sessions(
        ctx.whole_root(),
        sessions,
        root_option=ctx.root_option,
        env=dict(ctx.env),
        with_forks=with_forks,
        force=force,
        dry_run=dry_run,
    )


def trash_list(ctx: Context) -> TrashList:
    from .trash import list_trash

    return list_trash(ctx.whole_root())


def trash_empty(ctx: Context, *, older_than: str | None, dry_run: bool) -> EmptyResult:
    from .ids import now_ms
    from .trash import empty, parse_age

    age = None if older_than is None else parse_age(older_than)
    return empty(ctx.whole_root(), older_than=age, now=now_ms(), dry_run=dry_run)


def restore(ctx: Context, what: str, *, dry_run: bool) -> RestoreResult:
    from .trash import restore as restore_entry

    return restore_entry(ctx.whole_root(), what, dry_run=dry_run)


def _scope(ctx: Context, session: str | None, progress: Progress = SILENT) -> Root | Located:
    """What ``tree`` and ``du`` read: the whole root (checked), or SESSION's family;
    ``progress`` is told of each session dir read."""
    from .discovery import Root
    from .sessionarg import locate

    if session is None:
        return Root(ctx.whole_root(), progress=progress)
    located = locate(session, ctx.root_option, ctx.env)
    located.root.progress = progress
    return located


TREE_FORMATS = ("text", "mermaid", "dot")


def tree(
    ctx: Context,
    session: str | None,
    *,
    fmt: str = "text",
    as_json: bool = False,
    depth: int | None = None,
    progress: Progress = SILENT,
) -> Lineage:
    """``tree``: the lineage; ``--format mermaid|dot`` is a picture's source, which has no
    JSON document, so it is refused beside ``--json`` rather than silently dropped."""
    from .lineage import lineage_of

    if fmt not in TREE_FORMATS:
        raise UsageError(f"unknown --format {fmt!r}: give one of {', '.join(TREE_FORMATS)}")
    if as_json and fmt != "text":
        raise UsageError(
            f"--format {fmt} prints a picture's source, not a JSON document; "
            "give --format or --json, not both"
        )
    from .progress import counter
    from .tree import narrow

    count = counter(progress, "logs read")
    found = lineage_of(
        _scope(ctx, session, progress),
        session=session,
        hook=lambda _node, _log: count(),
        workspaces=True,
    )
    return narrow(found, depth)


def diff(ctx: Context, a: str, b: str) -> DiffResult:
    from .diff import diff as diff_sessions
    from .sessionarg import locate

    return diff_sessions(locate(a, ctx.root_option, ctx.env), locate(b, ctx.root_option, ctx.env))


def du(
    ctx: Context, session: str | None, *, top: int | None, progress: Progress = SILENT
) -> DiskUsage:
    from .du import disk_usage_of

    return disk_usage_of(
        _scope(ctx, session, progress), session=session, top=top, progress=progress
    )


def fixture(out_root: Path, **options: Any) -> FixtureSummary:
    """``fixture``: the options are those of ``fixtureroot.generate``, passed through."""
    from .fixtureroot import generate

    return generate(out_root, **options)
