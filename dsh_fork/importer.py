"""``import``: publish the sessions of a bundle into a root, parents before children.

Two passes over the archive. The first verifies everything before anything is written: the
manifest, the size and sha256 of every log, and each log itself (a complete v4 log whose header
is the one the manifest lists). The second publishes each session atomically through the writer
(temp, fsync, link) in the project dir of its cwd, re-checking each log's sha256 as it streams.

- Without ``new_ids`` every log is reproduced byte for byte under its own id. An id that exists
  anywhere in the root is refused (``SESSION_ALREADY_EXISTS``), except a session that already
  holds exactly the bytes this import writes, at the path it writes them: that is an earlier,
  interrupted run of the same import, and the rerun completes the rest. When every session is
  already there, there is nothing to import, and that is refused too (the bundle came from, or
  was already imported into, this root).
- With ``new_ids`` each session becomes a seeded session under a new id whose inherited prefix
  is the bundled log byte for byte, followed by its own tagged end-seed (format §10.3), and, for
  a subagent, its own descriptor (format §10.4): the shape of a relink copy, so DSH accepts the
  inherited events, delivery markers naming the old id included (format §10.8). Parent links
  name the new ids; the top session's names the id it was seeded from. Each parent then
  catalogues its new children in its own range, under its lock. The new ids are derived from
  the bundle's manifest, the ``cwd`` option and the old id, so a rerun after a crash finds what
  the first run published and appends only what is missing.
- ``cwd`` moves the family into another workspace: the top session's cwd becomes ``cwd`` and
  every session whose cwd is the top's, or lies inside it, follows (keeping its relative place);
  a session working elsewhere keeps its own cwd. The events stay byte for byte; only headers
  change.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from msgspec import Struct, field

from . import appending, bundle, durable, seeded, tarstream, writer
from . import archivedocs as docs
from . import frames as zframes
from .bundle import BundleSession, CheckedLog, Manifest, Member
from .catalog import fact_from_descriptor
from .discovery import Root
from .errors import CorruptLog, DshForkError, IoError, Partial, SessionAlreadyExists, UsageError
from .fork import check_cwd
from .fsdir import DirFd, open_regular
from .generations import CURRENT_NAME, SUPPORTED_VERSION, list_generations, select
from .ids import ClockMs, now_ms
from .layout import encode_segment, expand_home, project_dir_name, resolve_root
from .model import Facts
from .progress import SILENT, Progress
from .reader import read_header
from .records import encode_header, parse_header
from .results import SCHEMA_VERSION, Documented
from .sessionlog import SessionLog
from .source import FileRun
from .tarstream import Compression, Source
from .workspace import rebase_cwd

Status = Literal["planned", "created", "present", "skipped"]
_ID_NAMESPACE = uuid.UUID("6f1c8d2e-3b4a-4c5d-9e8f-0a1b2c3d4e5f")
_APPEND_TYPES = frozenset(("session/end-seed", "subagent/catalog"))
TEMP_SUFFIX = ".dsh-fork.tmp"


ImportItem = docs.ImportedSession
"""One session of the bundle and what the import does with it: the document's entry itself,
planned in ``_plan`` and updated as the import goes (``status``, ``catalogued``: the new
children it catalogued in its own range with ``new_ids``; ``workspace``: the workspace it
joined, or why none, None when it was not imported)."""


class ImportResult(Documented, Struct):
    """The import's document, built as it is planned, and the warnings beside it."""

    document: docs.ImportDocument
    warnings: list[str] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for item in self.document.sessions if item.status == status)

    def to_document(self) -> docs.ImportDocument:
        return self.document

    def partial(self) -> Partial | None:
        """PARTIAL when a subagent had to be left out (``new_ids``: no catalog fact for it)."""
        items = self.document.sessions
        failed = [
            {"id": i.source, "code": "UNCATALOGABLE", "message": f"{i.source}: {i.reason}"}
            for i in items
            if i.status == "skipped"
        ]
        if not failed:
            return None
        return Partial(f"{len(failed)} of {len(items)} sessions were not imported", failed, self)


class _Checked(Struct):
    """What the first pass learned of one log: enough to plan its seeded copy."""

    session: BundleSession
    event_count: int
    last_time: int | None
    header_frame_end: int
    descriptor: Any
    fact_reason: str | None
    facts: Facts
    expected_sha: str | None = None


class ImportOptions(Struct, frozen=True):
    """What the user chose about an import, handed whole from the command to
    ``import_bundle``: ``new_ids`` imports seeded copies under new ids (a second family);
    ``cwd`` moves the family into another workspace; ``dry_run`` verifies and plans, writing
    nothing; ``workspace`` false leaves DSH's workspace registry alone; ``compression`` is
    ``--format`` (None: detected from the content)."""

    new_ids: bool = False
    cwd: str | None = None
    dry_run: bool = False
    workspace: bool = True
    compression: Compression | None = None


def import_bundle(
    archive_arg: str,
    root_option: str | None,
    options: ImportOptions = ImportOptions(),
    *,
    env: Mapping[str, str] | None = None,
    clock: ClockMs = now_ms,
    progress: Progress = SILENT,
) -> ImportResult:
    """Verify the bundle, plan, and (unless ``dry_run``) publish it into the root; then each
    imported session that is no subagent joins the workspace of its cwd, unless not
    ``workspace``. ``progress`` is told of each session published ("sessions imported").

    ``archive_arg`` ``-`` reads standard input; a pipe is read once, into an unnamed file of
    the root (gone when the import ends), since the import reads the archive twice: once to
    verify everything, once to publish. A dry run writes nothing in the root, not even that:
    its copy goes to an unnamed file of the temp dir (``$TMPDIR``)."""
    stdin = archive_arg == tarstream.STDIN_NAME
    archive = Path(tarstream.STDIN_NAME) if stdin else expand_home(archive_arg).absolute()
    root = Root(resolve_root(root_option, env), progress=progress)
    if options.cwd is not None:
        check_cwd(options.cwd)
    with tarstream.open_source(archive_arg, archive) as opened:
        # a dry run writes nothing in the root
        spool_in = None if options.dry_run else root.path
        source = opened if opened.seekable else _spool(opened, spool_in)
        with source:
            return _import(root, archive, source, options, clock)


def _spool(stream: Source, root: Path | None) -> Source:
    """A pipe copied into an unnamed file of the root (a named temp, unlinked at once, where
    the file system has no unnamed files): the root's own disk holds what the import writes.
    With no root (a dry run, which writes nothing there) the file is one of the temp dir."""
    fd = _unnamed_in(root) if root is not None else _unnamed_temp()
    where = root if root is not None else Path(tempfile.gettempdir())
    try:
        size = 0
        while chunk := os.read(stream.fd, tarstream.PIECE_BYTES):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            size += len(chunk)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError as exc:
        os.close(fd)
        raise IoError.of(exc, "copy standard input into", where=where) from None
    return Source(fd, stream.name, size, owned=True)


def _member_spool(root: Path, dry_run: bool) -> bundle.Spool:
    """Where a large log of the bundle is held while it is checked and published
    (``bundle.members``): an unnamed file of the root, whose disk holds what the import
    writes; of the temp dir for a dry run (it writes nothing in the root) and while the root
    does not exist yet (it is made only once everything is verified)."""

    def make() -> int:
        if not dry_run and os.path.isdir(root):
            return _unnamed_in(root)
        return _unnamed_temp()

    return make


def _unnamed_in(root: Path) -> int:
    try:
        folder = DirFd.open(root, root)
    except FileNotFoundError:
        raise UsageError(f"the root {root} does not exist", path=str(root)) from None
    try:
        fd = folder.create_unnamed()
        if fd is None:
            name = f".dsh-fork-import.{secrets.token_hex(6)}{TEMP_SUFFIX}"
            fd = folder.create_file(name)
            folder.unlink(name)
    except OSError as exc:
        raise IoError.of(exc, where=root) from None
    finally:
        folder.close()
    return fd


def _unnamed_temp() -> int:
    try:
        with tempfile.TemporaryFile() as handle:
            return os.dup(handle.fileno())
    except OSError as exc:
        raise IoError.of(exc, where=Path(tempfile.gettempdir())) from None


def _import(
    root: Root, archive: Path, source: Source, options: ImportOptions, clock: ClockMs
) -> ImportResult:
    compression, new_ids, cwd = options.compression, options.new_ids, options.cwd
    manifest = bundle.read_manifest(source, compression)
    spool = _member_spool(root.path, options.dry_run)
    checked = _verify(source, compression, manifest, cwd if not new_ids else None, spool)
    root.require_writable()
    result = _plan(
        root, archive, manifest, checked, new_ids=new_ids, cwd=cwd, dry_run=options.dry_run
    )
    result.warnings += [
        f"{s.id} was running when it was exported: the bundle holds it as of a stable read"
        for s in manifest.sessions
        if s.lock_held
    ]
    if not options.dry_run:
        _publish_all(root, source, compression, manifest, checked, result, clock, spool)
        if new_ids:
            _catalogue(root, result, checked, clock)
    _join_workspaces(root, manifest, result, options.workspace, clock)
    return result


def _join_workspaces(
    root: Root, manifest: Manifest, result: ImportResult, enabled: bool, clock: ClockMs
) -> None:
    """Each session imported (or, dry, to import) joins the workspace whose path is its
    ``realpath(cwd)`` (dsh-world §1.4.3): one registry edit for the whole bundle."""
    from . import joining

    origins = {s.id: s.origin for s in manifest.sessions}
    items = [i for i in result.document.sessions if i.status != "skipped"]
    requests = [
        joining.Request(i.id, i.cwd, subagent=origins.get(i.source) == "subagent") for i in items
    ]
    if not enabled:
        joined = joining.skipped(requests)
    else:
        joined = joining.join(root.path, requests, dry_run=result.document.dry_run, clock=clock)
    for item, join in zip(items, joined.joins, strict=True):
        item.workspace = join
    result.warnings += joined.warnings


# -- pass 1: verification ---------------------------------------------------------------------


def _verify(
    source: Source,
    compression: Compression | None,
    manifest: Manifest,
    cwd: str | None,
    spool: bundle.Spool,
) -> dict[str, _Checked]:
    """Every member checked before anything is written; a bad one stops the import here."""
    checked: dict[str, _Checked] = {}
    top_cwd = manifest.sessions[0].cwd
    for member in bundle.members(source, manifest, compression, spool):
        log = bundle.check_log(member, source.name)
        above = checked.get(member.session.parent_session or "")
        parent = above.facts if above is not None and member.session.role != "top" else None
        bundle.check_kind(member.session, log, parent, source.name)
        item = _checked(member.session, log)
        if cwd is not None:  # same ids: only the header changes, so the result is known now
            moved = _moved(member.session.cwd, top_cwd, cwd)
            item.expected_sha = _same_id_digest(member, log, moved)
        else:
            item.expected_sha = member.session.file.sha256
        checked[member.session.id] = item
    return checked


def _checked(session: BundleSession, log: CheckedLog) -> _Checked:
    facts = log.facts
    descriptor = facts.descriptor()
    data = None if descriptor is None else descriptor.data
    reason = None
    if session.role == "subagent":
        plan = fact_from_descriptor(data, session.id, session.created_at)
        reason = plan.reason
    return _Checked(
        session=session,
        event_count=log.event_count,
        last_time=log.last_time,
        header_frame_end=log.header_end,
        descriptor=data,
        fact_reason=reason,
        facts=facts,
    )


# -- planning ---------------------------------------------------------------------------------


def _moved(session_cwd: str | None, top_cwd: str | None, cwd: str | None) -> str | None:
    """The cwd a session gets: with ``cwd``, the top's workspace moves there."""
    return session_cwd if cwd is None else rebase_cwd(session_cwd, top_cwd, cwd)


def derived_ids(manifest: Manifest, cwd: str | None) -> dict[str, str]:
    """The new id of each session: the same bundle, cwd and old id always give the same id, so
    a rerun recognises what an interrupted run published. The manifest is encoded and
    digested once, not once per session (a manifest grows with its sessions)."""
    key = "\x00".join((bundle.digest_of(bundle.encoded(manifest)), cwd or "", ""))
    return {s.id: f"session-{uuid.uuid5(_ID_NAMESPACE, key + s.id)}" for s in manifest.sessions}


def _plan(
    root: Root,
    archive: Path,
    manifest: Manifest,
    checked: dict[str, _Checked],
    *,
    new_ids: bool,
    cwd: str | None,
    dry_run: bool,
) -> ImportResult:
    top_cwd = manifest.sessions[0].cwd
    ids = derived_ids(manifest, cwd) if new_ids else {s.id: s.id for s in manifest.sessions}
    items: list[ImportItem] = []
    skipped: set[str] = set()
    for session in manifest.sessions:
        new_cwd = _moved(session.cwd, top_cwd, cwd)
        if session.role == "top":
            parent = session.id if new_ids else session.parent_session
        else:
            parent = ids[session.parent_session] if session.parent_session else None
        new_id = ids[session.id]
        item = ImportItem(
            source=session.id,
            id=new_id,
            role=session.role,
            parent_session=parent,
            cwd=new_cwd,
            path=str(root.path / project_dir_name(new_cwd) / encode_segment(new_id) / CURRENT_NAME),
            status="planned",
            reason=None,
            catalogued=[],
            workspace=None,
        )
        reason = checked[session.id].fact_reason if new_ids else None
        if session.parent_session in skipped:
            reason = f"its parent {session.parent_session} is not imported"
        if reason is not None:
            item.status, item.reason = "skipped", reason
            skipped.add(session.id)
        items.append(item)
    document = docs.ImportDocument(
        schema_version=SCHEMA_VERSION,
        archive=str(archive),
        root=str(root.path),
        top=ids[manifest.top],
        new_ids=new_ids,
        cwd=cwd,
        dry_run=dry_run,
        bytes=manifest.total_bytes,
        sessions=items,
    )
    result = ImportResult(document)
    _check_conflicts(root, result, checked)
    return result


def _check_conflicts(root: Root, result: ImportResult, checked: dict[str, _Checked]) -> None:
    """Existing ids: an earlier run's own output is ``present``; anything else is refused."""
    for item in result.document.sessions:
        if item.status == "skipped":
            continue
        dirs = root.dirs_of(item.id)
        if not dirs:
            continue
        if dirs == [Path(item.path).parent] and _is_ours(
            item, checked[item.source], result.document.new_ids
        ):
            item.status = "present"
            continue
        raise SessionAlreadyExists(
            f"a session {item.id!r} already exists in {dirs[0].parent.name}; nothing was "
            + (
                "imported"
                if result.document.new_ids
                else "imported (use --new-ids for a second copy)"
            ),
            session=item.id,
            path=str(dirs[0]),
        )
    wanted = [i for i in result.document.sessions if i.status != "skipped"]
    if not result.document.new_ids and wanted and all(i.status == "present" for i in wanted):
        raise SessionAlreadyExists(
            f"every session of the bundle ({len(wanted)}) already exists in {root.path}, byte "
            f"for byte (e.g. {wanted[0].id!r}); nothing was imported (use --new-ids for a "
            "second copy)",
            session=wanted[0].id,
            path=str(wanted[0].path),
        )


def _is_ours(item: ImportItem, checked: _Checked, new_ids: bool) -> bool:
    generation = select(list_generations(Path(item.path).parent))
    if generation is None or generation.path != Path(item.path):
        return False
    try:
        if not new_ids:
            return _file_digest(Path(item.path)) == checked.expected_sha
        header = read_header(generation)
    except (DshForkError, OSError):
        return False
    return (header.id, header.parent_session, header.cwd, header.is_seeded) == (
        item.id,
        item.parent_session,
        item.cwd,
        True,
    )


# -- pass 2: publishing -----------------------------------------------------------------------


def _publish_all(
    root: Root,
    source: Source,
    compression: Compression | None,
    manifest: Manifest,
    checked: dict[str, _Checked],
    result: ImportResult,
    clock: ClockMs,
    spool: bundle.Spool,
) -> None:
    items = {item.source: item for item in result.document.sessions}
    depths: dict[str, int] = {}
    progress = root.progress or SILENT
    progress.stage(
        "sessions imported", sum(1 for i in result.document.sessions if i.status == "planned")
    )
    for member in bundle.members(source, manifest, compression, spool):
        item = items[member.session.id]
        check = checked[member.session.id]
        if result.document.new_ids:
            parent = member.session.parent_session
            depths[item.id] = 0
            if item.role == "subagent" and parent is not None:
                depths[item.id] = depths.get(items[parent].id, 0) + 1
        if item.status != "planned":
            continue
        if result.document.new_ids:
            write_seeded_copy(root, item, member, check, depths[item.id], clock)
        else:
            _write_same_id(root, item, member, check)
        item.status = "created"
        progress.advance()


def _same_id_digest(member: Member, log: CheckedLog, cwd: str | None) -> str:
    """The sha256 of the log as this import writes it under its own id: unchanged, or with
    only the header's cwd replaced (the events stay byte for byte)."""
    if cwd == member.session.cwd:
        return member.session.file.sha256
    digest = hashlib.sha256(zframes.encode(_moved_header(log.header.raw, cwd)))
    for piece in bundle.pieces_of(member.data, log.header_end):
        digest.update(piece)
    return digest.hexdigest()


def _body(data: bundle.MemberData, start: int) -> list[bytes | memoryview | FileRun]:
    """The member's frames from ``start`` on, written as they are: a view of a held member,
    or a run of its spool file copied file to file."""
    if start >= len(data):
        return []
    if isinstance(data, bundle.SpoolBytes):
        return [FileRun(data, start, len(data))]
    return [memoryview(data)[start:]]


def _file_digest(path: Path) -> str:
    """The sha256 of a published log, read in pieces (never held whole)."""
    fd = open_regular(path)
    try:
        digest = hashlib.sha256()
        while piece := os.read(fd, tarstream.PIECE_BYTES):
            digest.update(piece)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _moved_header(raw: bytes, cwd: str | None) -> bytes:
    header = parse_header(raw, SUPPORTED_VERSION)
    return encode_header(
        session_id=header.id,
        created_at=header.created_at,
        cwd=cwd,
        parent_session=header.parent_session,
        is_seeded=header.is_seeded,
        origin=header.origin,
        delegation_depth=header.delegation_depth,
        agent_preset=header.agent_preset,
    )


def _write_same_id(root: Root, item: ImportItem, member: Member, check: _Checked) -> None:
    data = member.data
    end = check.header_frame_end
    header_frame = bytes(next(bundle.pieces_of(data))[:end])  # a header frame is small
    header_line = zframes.decode(header_frame, zframes.scan(header_frame, limit=1).frames[0])
    if item.cwd != member.session.cwd:
        header_line = _moved_header(header_line[:-1], item.cwd)
        header_frame = zframes.encode(header_line)
    published = writer.publish_draft(
        _draft(
            root,
            item,
            header_line,
            writer.Body(frames=_body(data, end)),
            header_frame,
        ),
        keep_lock=False,
    )
    if _file_digest(published.path) != check.expected_sha:
        raise CorruptLog(f"{published.path}: the published log differs from the bundle")


def write_seeded_copy(
    root: Root, item: ImportItem, member: Member, check: _Checked, depth: int, clock: ClockMs
) -> None:
    """A seeded session under a new id (``seeded``'s shape: header, inherited events byte for
    byte, tagged end-seed, own events), inheriting the whole bundled log: its body frames are
    written verbatim. A subagent's own event is its descriptor (semantics §1.5's copy shape).
    The marker takes the last inherited event's time, else ``createdAt`` (``seeded``'s rule);
    the log is in the bundle, not in the root, hence this writer rather than ``seeded.write``.
    """
    assert item.parent_session is not None
    created_at = clock()
    subagent = item.role == "subagent"
    own: list[tuple[str, Any]] = []
    if subagent and check.descriptor is not None:
        own.append(("subagent/descriptor", check.descriptor))
    plan = seeded.SeededPlan(
        session_id=item.id,
        created_at=created_at,
        cwd=item.cwd,
        parent_session=item.parent_session,
        origin="subagent" if subagent else None,
        depth=depth if subagent else 0,
        agent_preset=seeded.preset(check.facts, check.event_count),
        inherited=check.event_count,
        marker_time=created_at if check.last_time is None else check.last_time,
        own=own,
    )
    writer.publish_draft(
        _draft(
            root,
            item,
            plan.header_line(),
            writer.Body(frames=_body(member.data, check.header_frame_end), tail=plan.own_lines()),
        ),
        keep_lock=False,
    )


def _draft(
    root: Root,
    item: ImportItem,
    header_line: bytes,
    body: writer.Body,
    header_frame: bytes | None = None,
) -> writer.Draft:
    """The item's session dir (made) and what to publish in it: a publish that fails takes
    away the dirs it made (``writer.publish_draft``)."""
    dirs, fresh = durable.open_session_dir(
        root.path, Path(item.path).parent.parent.name, Path(item.path).parent.name
    )
    return writer.Draft(
        dirs.path, header_line, body, header_frame=header_frame, dirs=dirs, fresh=fresh
    )


# -- catalogues (new ids) -----------------------------------------------------------------------


def _catalogue(
    root: Root, result: ImportResult, checked: dict[str, _Checked], clock: ClockMs
) -> None:
    """Each parent's facts for its new subagent children, in its own range, under its lock;
    a fact already there (an earlier run) is not appended again."""
    by_source = {item.source: item for item in result.document.sessions}
    children: dict[str, list[ImportItem]] = {}
    for item in result.document.sessions:
        session = checked[item.source].session
        if item.role == "subagent" and item.status != "skipped" and session.parent_session:
            children.setdefault(by_source[session.parent_session].id, []).append(item)
    for parent in result.document.sessions:
        kids = children.get(parent.id)
        if not kids or parent.status == "skipped":
            continue
        facts = []
        for kid in kids:
            created_at = read_header(_generation(Path(kid.path))).created_at
            plan = fact_from_descriptor(checked[kid.source].descriptor, kid.id, created_at)
            if plan.data is not None:
                facts.append(plan.data)
        facts.sort(key=lambda f: (f["childCreatedAt"], f["childId"]))

        def build(
            log: SessionLog, current: Facts, facts: list[dict[str, Any]] = facts
        ) -> list[appending.NewEvent]:
            present = {entry.child_id for entry in current.own_catalog()}
            now = clock()
            new = [f for f in facts if f["childId"] not in present]
            return [("subagent/catalog", now, f) for f in new]

        appending.append(Path(parent.path).parent, build, collect=_APPEND_TYPES)
        parent.catalogued = sorted(k.id for k in kids)


def _generation(path: Path) -> Any:
    generation = select(list_generations(path.parent))
    if generation is None:
        raise CorruptLog(f"{path.parent} holds no session log after its import")
    return generation
