"""Seeded sessions: the one writer of a session that starts with another session's events.

A fork child (semantics §1.4, §3.1) and a subagent copy (§1.5, §4.4) are the same thing on disk:
a v4 header, the source's events ``0..inherited-1`` byte for byte, the tagged
``session/end-seed {"inherited": true}`` at seq ``inherited``, then a few events of its own. The
rules they share live here, once:

- **marker time**: the time of the last inherited event; when nothing is inherited, or that
  event has no safe-integer time, the new session's ``createdAt`` (a marker's time is free
  apart from being a safe integer, format §15, so this never refuses a write);
- **preset**: the preset in force at the end of the inherited prefix — the last
  ``agent-preset/selected`` in it, else the source header's (for a copy of a subagent that
  never selected one this is the source header's, as §4.4.1 states);
- **ids**: ``session-<uuid4>``, redrawn on a collision with any session dir of the root, up to
  ``ID_ATTEMPTS`` draws;
- **prefix**: what a session takes from its source (cwd, preset, the last inherited time, the
  verbatim frames and the cut lines) can be taken once (``take``), so that a run planning
  thousands of copies holds those few bytes per copy instead of every source's log;
- **publish**: through ``writer.publish`` (temp, fsync, link, dir fsync), then registered in the
  root's listing so the rest of the run sees it without re-reading the root.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Container
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from . import durable, writer
from .closers import Closer
from .discovery import Root
from .errors import DshForkError, InternalError
from .fsdir import open_regular
from .generations import SUPPORTED_VERSION, Generation
from .ids import IdFactory
from .layout import encode_segment, project_dir_name
from .model import Facts
from .records import encode_event, encode_header
from .sessionlog import SessionLog
from .source import FileBytes, FileRun, Identity, identity_of, stale

MARKER_TYPE = "session/end-seed"
ID_ATTEMPTS = 5


class SeededPlan(Struct):
    """Everything a seeded session is made of, decided before anything is written."""

    session_id: str
    created_at: int
    cwd: str | None
    parent_session: str
    origin: str | None
    depth: int
    agent_preset: str | None
    inherited: int
    """How many source events the session inherits (its cut)."""
    marker_time: int
    own: list[tuple[str, Any]] = field(default_factory=list)
    """Events after the marker (and the closers), as (type, data); they take ``created_at``
    as their time."""
    closing: list[Closer] = field(default_factory=list)
    """The closers of a turn the prefix stops inside (``fork --close-turn``), right after the
    marker: they take the marker's time, the time of the last inherited event."""

    def header_line(self) -> bytes:
        return encode_header(
            session_id=self.session_id,
            created_at=self.created_at,
            cwd=self.cwd,
            parent_session=self.parent_session,
            is_seeded=True,
            origin=self.origin,
            delegation_depth=self.depth,
            agent_preset=self.agent_preset,
        )

    def own_lines(self) -> bytes:
        """The marker and the session's own events, numbered after the inherited ones."""
        lines = encode_event(MARKER_TYPE, self.inherited, self.marker_time, {"inherited": True})
        seq = self.inherited + 1
        for closer in self.closing:
            if closer.seq != seq:  # a closer's id carries its seq: numbered for another place
                raise InternalError(f"closer numbered {closer.seq} at seq {seq}")
            lines += encode_event(closer.type, seq, self.marker_time, closer.data, closer.extra)
            seq += 1
        for offset, (event_type, data) in enumerate(self.own, start=seq):
            lines += encode_event(event_type, offset, self.created_at, data)
        return lines


def marker_time(source: SessionLog, inherited: int, created_at: int) -> int:
    """The marker's time: the last inherited event's, else ``created_at`` (module rule)."""
    return _marker(None if inherited <= 0 else source.event(inherited - 1).time, created_at)


def _marker(last_time: int | None, created_at: int) -> int:
    return created_at if last_time is None else last_time


def preset(facts: Facts, inherited: int) -> str | None:
    """The preset in force at the end of the inherited prefix (module rule)."""
    return facts.preset_at(inherited - 1)


def fresh_id(
    root: Root,
    new_id: IdFactory,
    taken: Container[str] = (),
    *,
    exists: Callable[[str], bool] | None = None,
) -> str:
    """``session-<uuid4>`` not used by any session dir of the root (format §2.7), nor in
    ``taken`` (the ids of a batch not yet published). ``exists`` answers for the root from
    what the caller knows of it (a listing kept up to date), instead of looking in every
    project dir for each draw."""
    used = root.exists if exists is None else exists
    for _ in range(ID_ATTEMPTS):
        candidate = new_id()
        if candidate not in taken and not used(candidate):
            return candidate
    raise InternalError(f"{ID_ATTEMPTS} fresh session ids in a row already exist")


def plan(
    source: SessionLog,
    facts: Facts,
    *,
    session_id: str,
    created_at: int,
    parent_session: str,
    origin: str | None,
    depth: int,
    inherited: int,
    own: list[tuple[str, Any]] | None = None,
) -> SeededPlan:
    """A seeded session inheriting ``source``'s events ``0..inherited-1``."""
    return SeededPlan(
        session_id=session_id,
        created_at=created_at,
        cwd=source.header.cwd,
        parent_session=parent_session,
        origin=origin,
        depth=depth,
        agent_preset=preset(facts, inherited),
        inherited=inherited,
        marker_time=marker_time(source, inherited, created_at),
        own=list(own or ()),
    )


class RunRef(Struct, frozen=True):
    """A verbatim run left in its source file: reopened when it is written, and refused as
    SESSION_STALE if the file is no longer the one read (``source.Identity``)."""

    path: str
    """The source log's path as text: a plan of thousands of copies keeps no ``Path``."""
    identity: Identity
    start: int
    end: int

    def open(self) -> FileRun:
        try:
            fd = open_regular(self.path)
        except FileNotFoundError:
            raise stale(self.path) from None
        try:
            same = identity_of(os.fstat(fd)) == self.identity
        except BaseException:
            os.close(fd)
            raise
        if not same:
            os.close(fd)
            raise stale(self.path)
        return FileRun(FileBytes(fd, Path(self.path), self.identity), self.start, self.end)


class Prefix(Struct, eq=False):
    """What a seeded session takes from its source, taken once (``take``): the source's log
    can then be dropped long before the session is written."""

    cwd: str | None
    agent_preset: str | None
    inherited: int
    last_time: int | None
    """The time of the last inherited event (None: nothing inherited, or no safe integer)."""
    run: bytes | RunRef
    """The whole frames of the prefix, as bytes or as a range of the source file."""
    tail: bytes
    """The lines of the run the cut falls in, to be framed anew."""


def take(
    source: SessionLog,
    facts: Facts,
    inherited: int,
    last_time: int | None,
    *,
    hold: bool = True,
) -> Prefix:
    """The prefix of ``source`` through event ``inherited - 1`` (``last_time`` is that
    event's time, which the caller knows). With ``hold`` the verbatim frames are copied out
    of the log (a small run); without, only their place in the file is kept."""
    run, _, tail = source.prefix_run(inherited - 1)
    held: bytes | RunRef
    if isinstance(run, FileRun):
        held = RunRef(source.where, run.source.identity, run.start, run.end)
    elif hold or not run:
        held = bytes(run)
    else:
        count, _ = source.prefix_frames(inherited - 1)
        start, end = source.body_frames[0].start, source.body_frames[count - 1].end
        same = end - start == len(run)  # the run is those frames, adjacent in the file
        held = RunRef(source.where, source.identity, start, end) if same else bytes(run)
    return Prefix(
        source.header.cwd,
        preset(facts, inherited),
        inherited,
        last_time if inherited > 0 else None,
        held,
        tail,
    )


def plan_prefix(
    prefix: Prefix,
    *,
    session_id: str,
    created_at: int,
    parent_session: str,
    origin: str | None,
    depth: int,
    own: list[tuple[str, Any]] | None = None,
) -> SeededPlan:
    """``plan`` from a taken prefix."""
    return SeededPlan(
        session_id=session_id,
        created_at=created_at,
        cwd=prefix.cwd,
        parent_session=parent_session,
        origin=origin,
        depth=depth,
        agent_preset=prefix.agent_preset,
        inherited=prefix.inherited,
        marker_time=_marker(prefix.last_time, created_at),
        own=list(own or ()),
    )


def draft_prefix(
    root: Root, seeded: SeededPlan, prefix: Prefix, *, deferred: set[Path] | None = None
) -> writer.Draft:
    """``draft`` from a taken prefix; a run left in its file is reopened here. The draft
    keeps the new dir's chain open (``writer.Draft.dirs``) for its publish to lock through."""
    run = prefix.run.open() if isinstance(prefix.run, RunRef) else prefix.run
    return _draft(root, seeded, run, prefix.tail, deferred)


def draft(
    root: Root, seeded: SeededPlan, source: SessionLog, *, deferred: set[Path] | None = None
) -> writer.Draft:
    """The session's dir in ``projectKey(cwd)`` (created) and what to publish in it.

    Whole compressed frames of the prefix are copied verbatim; only the frame holding the last
    inherited event is re-framed (``SessionLog.prefix_run``). With ``deferred`` the new dirs'
    parents are fsynced by the caller (``durable.sync_dirs``) before anything refers to them.
    """
    run, _, cut_lines = source.prefix_run(seeded.inherited - 1)
    return _draft(root, seeded, run, cut_lines, deferred)


def _draft(
    root: Root,
    seeded: SeededPlan,
    run: bytes | memoryview | FileRun,
    cut_lines: bytes,
    deferred: set[Path] | None,
) -> writer.Draft:
    body = writer.Body(frames=[run] if run else [], tail=cut_lines + seeded.own_lines())
    where = (root.path, project_dir_name(seeded.cwd), encode_segment(seeded.session_id))
    dirs, fresh = durable.open_session_dir(*where, deferred=deferred)
    return writer.Draft(dirs.path, seeded.header_line(), body, dirs=dirs, fresh=fresh)


def generation_of(published: writer.Published) -> Generation:
    """The generation a publish wrote: always the current version, compressed."""
    return Generation(published.path, SUPPORTED_VERSION, "zstd")


def register(root: Root, draft: writer.Draft, published: writer.Published) -> None:
    """List the published session in the root's listing, so the rest of the run sees it."""
    with contextlib.suppress(DshForkError, OSError):
        root.register(draft.session_dir, generation_of(published), line=draft.header_line[:-1])


def write(
    root: Root,
    seeded: SeededPlan,
    source: SessionLog,
    *,
    keep_lock: bool,
    deferred: set[Path] | None = None,
) -> writer.Published:
    """Publish the session (``draft``) and register it in the root's listing."""
    made = draft(root, seeded, source, deferred=deferred)
    published = writer.publish_draft(made, keep_lock=keep_lock)
    register(root, made, published)
    return published
