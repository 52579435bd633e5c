"""relink's walk: replays a plan (``relinkplan``) top-down and writes it (semantics §4.4).

New copies are published through ``seeded`` in batches whose fsyncs overlap, each under its
own lock while its subtree is walked; catalog facts and lost descriptors are appended to
their parents through ``writer``, one frame per parent. A dry run walks the same plan and only
records it, so a plan and a real run report the same outcome. Apart from the planner because
this is the only half that writes: every durable step of a relink is here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgspec import Struct

from . import appending, durable, layout, seeded, writer
from . import oplog as messages
from .catalog import fact_from_descriptor
from .discovery import Root
from .errors import DshForkError, IoError, SessionLocked
from .forkpoint import _APPEND_TYPES
from .generations import Generation
from .ids import ClockMs, IdFactory
from .locking import SessionLock
from .model import Facts
from .oplog import OpLog
from .progress import SILENT, Progress
from .records import dumps_record, held, parse_line
from .relinkplan import _Copy, _Fail, _Level, _Match, _Opened, _Parent, _Skip, _Uncat
from .relinkresult import RelinkSummary
from .sessionlog import SessionLog
from .workspace import Workspace, rebase_cwd


class _NewFact(Struct, frozen=True):
    """A catalog fact the walk will append to a parent, held encoded until the append parses
    it again (about 170 bytes, where its parsed dict takes about 500: a level of thousands
    of copies holds one per copy until its parent's frame is written)."""

    created_at: int
    child_id: str
    encoded: bytes

    @classmethod
    def of(cls, fact: dict[str, Any]) -> _NewFact:
        encoded = held(dumps_record(fact))
        return cls(fact["childCreatedAt"], fact["childId"], encoded)

    def data(self) -> Any:
        """The fact as parsed values again (``dumps_record`` then ``parse_line``: equal)."""
        return parse_line(self.encoded)[0]


COPY_BATCH = 32
"""Copies of one level published together: their fsyncs overlap. Each keeps its lock (four
descriptors) until its subtree is done, so a batch is also bounded by ``LOCKS_HELD_MAX``."""


LOCKS_HELD_MAX = 128
"""Copy locks a walk holds at once before its batches shrink (to one copy at a time)."""


class _Walker:
    """Replays a plan top-down; writes unless ``dry_run`` (semantics §4.4)."""

    def __init__(
        self,
        root: Root,
        summary: RelinkSummary,
        log: OpLog,
        *,
        clock: ClockMs,
        new_id: IdFactory,
        total: int,
    ) -> None:
        self.root = root
        self.summary = summary
        self.log = log
        self.dry_run = summary.dry_run
        self.clock = clock
        self.new_id = new_id
        self.total = total
        self.done = 0
        self.created: set[str] = set()
        self.unsynced: set[Path] = set()
        self.held = 0
        """Copy locks held by the batches of the levels being walked."""
        self.workspace: Workspace | None = None
        self.progress: Progress = SILENT
        """Told of each agent done (copied, skipped or failed), as the operation log is."""
        self.catalogs: dict[str, frozenset[str]] = {}
        """The own-range catalog of each parent the walk appended to, as it stood under the
        parent's lock once the frame was written: the read-back (``resumable``) takes it
        instead of reading a parent that is no copy (the fork child) once more."""
        self.written: dict[str, Generation] = {}
        """The generation each copy was published as: the read-back (``resumable``) reads
        it there, without looking the copy up in the root again."""
        self._listed: set[str] | None = None
        self._names: set[str] = set()

    def sync(self) -> None:
        """Make the new copies' directory entries durable before anything refers to them."""
        if self.unsynced:
            durable.sync_dirs(self.unsynced)

    # -- bookkeeping --------------------------------------------------------------------------

    def _tick(self) -> None:
        self.done += 1
        self.progress.advance()
        if self.done % messages.PROGRESS_EVERY == 0 and self.done < self.total:
            self.log.write(
                messages.PROGRESS,
                {"forkChild": self.summary.fork_child, "done": self.done, "total": self.total},
            )

    def _skip(self, child_id: str, reason: str) -> None:
        """A normal outcome; a running child is also logged (the plugin's record of it)."""
        self.summary.skipped.append({"id": child_id, "reason": reason})
        if reason == "running":
            self.log.write(
                messages.SKIPPED_RUNNING,
                {"forkChild": self.summary.fork_child, "childId": child_id, "reason": reason},
            )

    def _fail(self, child_id: str, code: str, message: str) -> None:
        self.summary.failed.append({"id": child_id, "code": code, "message": message})
        self.log.write(
            messages.CHILD_FAILED,
            {
                "forkChild": self.summary.fork_child,
                "childId": child_id,
                "code": code,
                "message": message,
            },
        )

    # -- levels -------------------------------------------------------------------------------

    def level(self, level: _Level, parent: _Parent) -> None:
        self.summary.unrelated.extend(level.unrelated)
        new_facts: list[_NewFact] = []
        self._items(level, parent, new_facts)
        for outcome in level.existing_outcomes:
            if isinstance(outcome, _Fail):
                self._fail(outcome.id, outcome.code, outcome.message)
            else:
                self._skip(outcome.id, outcome.reason)
        for child, data in level.descriptor_repairs:
            self._repair_descriptor(child, data)
        self._append_to_parent(level, parent, new_facts)

    def _items(self, level: _Level, parent: _Parent, new_facts: list[_NewFact]) -> None:
        """Walk a level's items, in batches of copies. A plan is walked once: each item is
        freed once walked, so a wide tree's plan shrinks as its copies are written."""
        batch: list[_Copy] = []
        pending, level.items = level.items[::-1], []
        while pending:
            item = pending.pop()
            if isinstance(item, _Copy) and not self.dry_run:
                batch.append(item)
                if len(batch) >= max(1, min(COPY_BATCH, LOCKS_HELD_MAX - self.held)):
                    self._copies(batch, parent, new_facts)
                    batch = []
                continue
            if batch:
                self._copies(batch, parent, new_facts)
                batch = []
            if isinstance(item, _Fail):
                self._tick()
                self._fail(item.id, item.code, item.message)
            elif isinstance(item, _Skip):
                self._tick()
                self._skip(item.id, item.reason)
            elif isinstance(item, _Uncat):
                self._tick()
                self.summary.uncatalogable.append(
                    {"id": item.id, "source": item.id, "reason": item.reason}
                )
            elif isinstance(item, _Copy):
                self._tick()
                self._copy(item, parent)
            else:
                self._match(item)
        if batch:
            self._copies(batch, parent, new_facts)

    def _copy(self, item: _Copy, parent: _Parent) -> None:
        """A planned copy of a dry run: recorded with no id, its subtree planned under it."""
        depth = parent.depth + 1
        self._record_copy(item, None, parent.id, depth)
        if item.level is not None:
            self.level(item.level, _Parent(None, None, None, depth))

    def _copies(self, items: list[_Copy], parent: _Parent, new_facts: list[_NewFact]) -> None:
        """Publish a batch of one level's copies together (``writer.publish_batch``: their
        fsyncs overlap), then walk each copy's subtree under the copy's own lock."""
        depth = parent.depth + 1
        assert parent.id is not None
        ready: list[tuple[_Copy, str, dict[str, Any], writer.Draft]] = []
        try:
            self._drafts(items, parent.id, depth, ready)
        except BaseException:
            for _, _, _, draft in ready:  # the publish never took their open dirs over
                if draft.dirs is not None:
                    draft.dirs.close()
            raise
        outcomes = writer.publish_batch([d for _, _, _, d in ready], keep_lock=True)
        locks: list[SessionLock | None] = []
        for (_, copy_id, _, draft), outcome in zip(ready, outcomes, strict=True):
            if isinstance(outcome, writer.Published):
                seeded.register(self.root, draft, outcome)
                self.written[copy_id] = seeded.generation_of(outcome)
                if outcome.temp_left:
                    self.summary.temp_left.add(copy_id)
                locks.append(outcome.lock)
                self.held += 1
            else:
                locks.append(None)
        try:
            for index, ((item, copy_id, fact, draft), outcome) in enumerate(
                zip(ready, outcomes, strict=True)
            ):
                source = item.source
                if isinstance(outcome, DshForkError):
                    what = "" if outcome.details.get("published") else " the copy was not written:"
                    self._fail(source.id, outcome.code, f"{source.id}:{what} {outcome}")
                    continue
                lock = locks[index]
                assert lock is not None
                self.created.add(copy_id)
                self._record_copy(item, copy_id, parent.id, depth)
                new_facts.append(_NewFact.of(fact))
                if item.level is not None:
                    self.level(item.level, _Parent(copy_id, draft.session_dir, lock, depth))
                lock.release()
                locks[index] = None
                self.held -= 1
        finally:
            for held in locks:
                if held is not None:
                    held.release()
                    self.held -= 1

    def _drafts(
        self,
        items: list[_Copy],
        parent_id: str,
        depth: int,
        ready: list[tuple[_Copy, str, dict[str, Any], writer.Draft]],
    ) -> None:
        """Draft each copy of a batch into ``ready``; one that cannot be drafted fails alone."""
        taken: set[str] = set()
        for item in items:  # each source's lock was probed once, by the plan (§4.2.5)
            self._tick()
            source = item.source
            try:
                if parent_id in self.created:
                    self.sync()  # a copy's header names its parent: that parent must be durable
                copy_id, fact, draft = self._draft(item, parent_id, depth, taken)
            except DshForkError as exc:
                self._fail(source.id, exc.code, f"{source.id}: the copy was not written: {exc}")
                continue
            except OSError as exc:  # its run, reread from its file (seeded.RunRef)
                error = IoError.of(exc, "read")
                self._fail(source.id, error.code, f"{source.id}: the copy was not written: {error}")
                continue
            taken.add(copy_id)
            ready.append((item, copy_id, fact, draft))

    def _draft(
        self, item: _Copy, parent_id: str, depth: int, taken: set[str]
    ) -> tuple[str, dict[str, Any], writer.Draft]:
        """The copy to write (semantics §1.5, §4.4.1): S's events ``0..K(S)-1`` verbatim,
        the marker, S's descriptor, in a new session dir; and the catalog fact that will
        name it in its parent, from the same parse of the descriptor."""
        prefix, item.prefix = item.prefix, None  # held no longer than the copy needs it
        assert prefix is not None
        copy_id = seeded.fresh_id(self.root, self.new_id, taken, exists=self._exists)
        created_at = self.clock()
        descriptor = item.descriptor_data()
        fact = fact_from_descriptor(descriptor, copy_id, created_at).data
        assert fact is not None  # the plan made it once already (``_classify``)
        plan = seeded.plan_prefix(
            prefix,
            session_id=copy_id,
            created_at=created_at,
            parent_session=parent_id,
            origin="subagent",
            depth=depth,
            own=[("subagent/descriptor", descriptor)],
        )
        if self.workspace is not None:  # a fork moved to another workspace: copies follow
            plan.cwd = rebase_cwd(plan.cwd, *self.workspace)
        draft = seeded.draft_prefix(self.root, plan, prefix, deferred=self.unsynced)
        self._names.add(draft.session_dir.name)
        return copy_id, fact, draft

    def _exists(self, session_id: str) -> bool:
        """Whether a session dir of the root is named for this id: from the listing (made
        under the fork child's lock) and the copies this walk drafted, not a look into every
        project dir per copy."""
        if self._listed is None:
            self._listed = {os.path.basename(e.dir_text) for e in self.root.entries()}
            self._listed.update(os.path.basename(e.dir_text) for e in self.root.unlisted())
        segment = layout.encode_segment(session_id)
        return segment in self._listed or segment in self._names

    def _record_copy(
        self, item: _Copy, copy_id: str | None, parent_id: str | None, depth: int
    ) -> None:
        self.summary.copied.append(
            {"source": item.source.id, "copy": copy_id, "parent": parent_id, "depth": depth}
        )

    def _match(self, item: _Match) -> None:
        copy = item.existing
        level = item.level
        header = copy.entry.header
        assert header is not None
        if isinstance(level.blocked, _Fail):
            self._fail(level.blocked.id, level.blocked.code, level.blocked.message)
            return
        if isinstance(level.blocked, _Skip):
            self._skip(copy.id, "running")
            return
        parent = _Parent(copy.id, copy.entry.session_dir, None, header.delegation_depth)
        if self.dry_run or not level.writes_parent():
            self.level(level, parent)
            return
        try:
            parent.lock = SessionLock(copy.entry.session_dir).acquire()
        except SessionLocked:
            self._skip(copy.id, "running")
            return
        try:
            self.level(level, parent)
        finally:
            parent.lock.release()

    def _repair_descriptor(self, child: _Opened, data: Any) -> None:
        """Append a copy's lost descriptor under the copy's own lock (semantics §4.4.2)."""
        if self.dry_run:
            self.summary.descriptors_repaired.append(child.id)
            return
        appended: list[str] = []

        def build(log: SessionLog, facts: Facts) -> list[appending.NewEvent]:
            if facts.own_descriptors():
                return []
            appended.append(child.id)
            return [("subagent/descriptor", self.clock(), data)]

        try:
            appending.append(child.entry.session_dir, build, collect=_APPEND_TYPES)
        except SessionLocked:
            self._skip(child.id, "running")
            return
        except DshForkError as exc:
            self._fail(child.id, exc.code, exc.message)
            return
        self.summary.descriptors_repaired.extend(appended)

    def _append_to_parent(self, level: _Level, parent: _Parent, new_facts: list[_NewFact]) -> None:
        """One frame for the parent: its lost descriptor, repair facts and the new copies'
        facts, sorted by (childCreatedAt, childId); ids already in its own range are skipped."""
        repaired = [r for r in level.repairs if r.fact is not None]
        for repair in level.repairs:
            if repair.fact is None:
                assert repair.reason is not None
                self.summary.uncatalogable.append(
                    {"id": repair.child.id, "source": repair.source_id, "reason": repair.reason}
                )
        facts = [_NewFact.of(r.fact) for r in repaired if r.fact is not None] + new_facts
        facts.sort(key=lambda f: (f.created_at, f.child_id))
        repaired_ids = {r.child.id for r in repaired}
        own_descriptor = level.own_descriptor
        if self.dry_run or parent.session_dir is None:
            self.summary.catalogued.extend(r.child.id for r in repaired)
            if own_descriptor is not None and parent.id is not None:
                self.summary.descriptors_repaired.append(parent.id)
            return
        if not facts and own_descriptor is None:
            return
        catalogued: list[str] = []
        descriptor_added: list[bool] = []
        present: set[str] = set()

        def build(log: SessionLog, current: Facts) -> Iterator[appending.NewEvent]:
            """The events to append, each fact parsed as the writer takes it (one at a time)."""
            now = self.clock()
            if own_descriptor is not None and not current.own_descriptors():
                descriptor_added.append(True)
                yield ("subagent/descriptor", now, own_descriptor)
            present.update(e.child_id for e in current.own_catalog() if e.child_id is not None)
            for fact in facts:
                if fact.child_id in present:
                    continue
                present.add(fact.child_id)
                if fact.child_id in repaired_ids:
                    catalogued.append(fact.child_id)
                yield ("subagent/catalog", now, fact.data())

        assert parent.id is not None
        try:
            self.sync()
            appending.append(
                parent.session_dir,
                build,
                lock=parent.lock,
                collect=_APPEND_TYPES,
                cut=level.point.cut,  # its inherited facts (one per agent) are not parsed again
            )
        except DshForkError as exc:
            self._fail(parent.id, exc.code, f"{parent.id}: catalog facts not appended: {exc}")
            return
        self.catalogs[parent.id] = frozenset(present)
        self.summary.catalogued.extend(catalogued)
        if descriptor_added:
            self.summary.descriptors_repaired.append(parent.id)
