"""One reading interface (``SessionLog``), two representations (format §13):

- ``FramedLog``, a v2+ log: JSON lines in zstd frames (or one plain body), indexed by a
  ``FrameIndex`` (``logindex``) of line-aligned runs of frames. Every complete frame is decoded
  once and every line's envelope is checked (a fork copies only lines DSH accepts), while only
  the lines a caller asks for are parsed into events.
- ``PackedLog``, a v0/v1 log: its packed rows are expanded into events once.

Apart from opening a log (``reader``: stable reads, headers, which generation) because this is
what a command holds once a log is open, and what it asks of it: events by seq, by type, the
prefix of a fork, the torn tail DSH would truncate.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from msgspec import Struct

from . import frames as zframes
from .errors import CorruptLog, UnsupportedFormat
from .generations import Generation
from .logindex import (
    Chunk,
    FrameIndex,
    TornTail,
    _index_frames,
    _line_runs,
    _matching_lines,
    _run_error,
    _run_events,
    kept_events,
    type_tokens,
)
from .records import Event, Header, parse_event, parse_v0_line, split_lines
from .source import FileBytes, FileRun

Identity = tuple[int, int, int, int, int]


class Committed(Struct, frozen=True):
    """What opening a generation file found, handed whole to the representation that reads
    it (``PackedLog`` or ``FramedLog``): one value, so the list is written once."""

    generation: Generation
    data: bytes
    identity: Identity
    header: Header
    header_end: int
    body_frames: tuple[zframes.Frame, ...]
    """Every complete frame after the header frame (empty for a plain log)."""
    torn: TornTail | None


class SessionLog(abc.ABC):
    """The committed part of one generation file (plus what DSH recovers of a torn tail)."""

    def __init__(self, committed: Committed) -> None:
        self.generation = committed.generation
        self.data = committed.data
        self.identity = committed.identity
        self.header = committed.header
        self.header_end = committed.header_end
        self.body_frames = committed.body_frames
        """Every complete frame after the header frame (empty for a plain log)."""
        self.torn = committed.torn
        self.collected: list[Event] = []
        self.latest_of: dict[str, Event | None] = {}
        """For each type the log was opened to track (``open_log``'s ``latest``), its last
        event, or None when it has none; a type not tracked is not a key (read it back with
        ``last_event``)."""

    @property
    def path(self) -> Path:
        return self.generation.path

    @property
    def size(self) -> int:
        """The bytes of the file as read (held in ``data``, or read on demand): what a
        writer appends after and truncates back to."""
        return self.identity[2]

    @property
    def content(self) -> zframes.Data:
        """The log's bytes: ``data`` when held whole, else read on demand from the open file
        (``FramedLog.source``); ``data`` is then empty."""
        return self.data

    @property
    def session_dir(self) -> Path:
        return self.generation.path.parent

    @property
    def version(self) -> int:
        return self.generation.version

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    @abc.abstractmethod
    def event_count(self) -> int:
        """Events DSH restores: the committed ones and the kept lines of a torn tail."""

    @property
    @abc.abstractmethod
    def recovered(self) -> tuple[bytes, ...]:
        """The torn tail's lines DSH keeps (and re-appends on its next write)."""

    @property
    def chunks(self) -> list[Chunk]:
        return []

    @property
    def pending_frames(self) -> tuple[zframes.Frame, ...]:
        """Body frames not indexed yet (``open_log(index=False)``)."""
        return ()

    @abc.abstractmethod
    def event(self, seq: int) -> Event:
        """Random access to one event by seq."""

    @abc.abstractmethod
    def events(self, types: Iterable[str] | None = None) -> Iterator[Event]:
        """Events in seq order; with ``types``, only events of those types."""

    @abc.abstractmethod
    def last_event(self, types: Iterable[str], through: int) -> Event | None:
        """The last event of ``types`` at or before seq ``through``, or None."""

    def raw_lines(self, first: int, last: int) -> Iterator[bytes]:
        """Stored line bytes (without 0x0A) of events ``first..last`` inclusive (v2+ only)."""
        raise UnsupportedFormat("raw lines of a packed-row generation", version=self.version)

    def prefix_run(self, last: int) -> tuple[bytes | memoryview | FileRun, int, bytes]:
        """The body through seq ``last`` as (whole frames' bytes, how many frames, plaintext);
        the whole frames are a view of the log's bytes (or their range in a log read on
        demand), never a copy of them."""
        raise UnsupportedFormat("prefix of a packed-row generation", version=self.version)

    def prefix(self, last: int) -> tuple[list[bytes], bytes]:
        """``prefix_run`` with the whole frames one by one."""
        raise UnsupportedFormat("prefix of a packed-row generation", version=self.version)

    def prefix_frames(self, last: int) -> tuple[int, bool]:
        """What ``prefix_run(last)`` gives, without copying: (how many frames it copies
        verbatim, whether lines of a cut run are re-encoded)."""
        raise UnsupportedFormat("prefix of a packed-row generation", version=self.version)


class PackedLog(SessionLog):
    """A v0/v1 log: packed rows expanded into events once (format §9)."""

    def __init__(
        self, committed: Committed, body: bytes, *, wanted: frozenset[str] = frozenset()
    ) -> None:
        super().__init__(committed)
        torn, header = committed.torn, committed.header
        where = self.where
        events: list[Event] = []
        for line in split_lines(body, where=where):
            events.extend(parse_v0_line(line, len(events), where=where))
        kept: list[bytes] = []
        for line in torn.recovered if torn is not None else ():
            try:
                events.extend(parse_v0_line(line, len(events), where=where))
            except CorruptLog:
                break
            kept.append(line)
        seed_length = header.seed_length
        if seed_length is not None and seed_length > len(events):
            raise CorruptLog(
                f"{where}: header seedLength {seed_length} exceeds the {len(events)} events "
                "(format §7.4)"
            )
        self._events = events
        self._kept = tuple(kept)
        self.collected = [ev for ev in events if ev.type in wanted]

    @property
    def event_count(self) -> int:
        return len(self._events)

    @property
    def recovered(self) -> tuple[bytes, ...]:
        return self._kept

    def event(self, seq: int) -> Event:
        if not 0 <= seq < len(self._events):
            raise IndexError(seq)
        return self._events[seq]

    def events(self, types: Iterable[str] | None = None) -> Iterator[Event]:
        wanted = None if types is None else frozenset(types)
        for ev in self._events:
            if wanted is None or ev.type in wanted:
                yield ev

    def last_event(self, types: Iterable[str], through: int) -> Event | None:
        wanted = frozenset(types)
        for ev in reversed(self._events[: through + 1] if through >= 0 else []):
            if ev.type in wanted:
                return ev
        return None


class FramedLog(SessionLog):
    """A v2+ log: lines in zstd frames, or one plain body, behind a ``FrameIndex``.

    The index is built at open, or (``index=False``) by the first full ``events()`` pass or a
    pass in parts (``part_events``, ``tail_events``, ``adopt_index``); any other access builds
    it first.
    """

    def __init__(
        self,
        committed: Committed,
        *,
        wanted: frozenset[str] = frozenset(),
        source: FileBytes | None = None,
        collect_from: int = 0,
        latest: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(committed)
        self._latest = latest
        self.source = source
        """The open file, when the log is read on demand (``open_log(stream=True)``)."""
        self._src: zframes.Data = committed.data if source is None else source
        self._index: FrameIndex | None = None
        self._wanted = wanted
        self._collect_from = collect_from
        self._kept: tuple[bytes, ...] = ()
        self._cache: tuple[int, list[bytes]] | None = None

    @property
    def content(self) -> zframes.Data:
        return self._src

    # -- the index --------------------------------------------------------------------------

    @property
    def index(self) -> FrameIndex:
        return self.build_index()

    def build_index(self) -> FrameIndex:
        """The index, built now if no pass has built it yet (with the torn tail's kept lines:
        they are known once the committed count is)."""
        if self._index is None:
            latest = self._latest
            chunks, collected, last = _index_frames(
                self._src, self.body_frames, self._wanted, self.where, self._collect_from, latest
            )
            for ev in self._tail(chunks[-1].end_seq if chunks else 0, chunks):
                if ev.type in latest:
                    last[ev.type] = ev
                if ev.type in self._wanted:
                    collected.append(ev)
            self._index = FrameIndex(chunks)
            self.collected = collected
            self.latest_of = {name: last.get(name) for name in latest}
        return self._index

    def _adopt(self, chunks: list[Chunk], collected: list[Event] | None = None) -> None:
        self._index = FrameIndex(chunks)
        if collected is not None:
            self.collected = collected

    def _tail(self, next_seq: int, chunks: list[Chunk]) -> Iterator[Event]:
        events = kept_events(self.torn, next_seq, self.where)
        kept = self.torn.recovered[: len(events)] if self.torn is not None else ()
        self._kept = kept
        if kept:
            chunks.append(Chunk((), next_seq, len(kept), len(self.body_frames), recovered=True))
        yield from events

    @property
    def chunks(self) -> list[Chunk]:
        return self.index.chunks

    @property
    def event_count(self) -> int:
        return self.index.count

    @property
    def recovered(self) -> tuple[bytes, ...]:
        self.build_index()
        return self._kept

    @property
    def pending_frames(self) -> tuple[zframes.Frame, ...]:
        return self.body_frames if self._index is None else ()

    def part_events(
        self, start: int, stop: int, first_seq: int, chunks: list[Chunk]
    ) -> Iterator[Event]:
        """Every event of pending frames ``start..stop-1``, checked and numbered from
        ``first_seq``; each run's ``Chunk`` is appended to ``chunks`` once its events are out.
        For a pass split between processes (``inspect``); ``tail_events`` and ``adopt_index``
        end it."""
        runs = _line_runs(
            self._src, self.pending_frames[start:stop], start, first_seq, self.where, chunks
        )
        yield from _run_events(runs, self.where)

    def fold_parts(
        self,
        start: int,
        stop: int,
        first_seq: int,
        chunks: list[Chunk],
        fold: Callable[[list[bytes], int], None],
    ) -> None:
        """``part_events`` for a caller that parses the lines itself: ``fold(lines, first
        seq)`` for each run of adjacent frames, which must check every line as
        ``parse_event`` does (a ``CorruptLog`` it raises is named as ``part_events`` names
        it)."""
        runs = _line_runs(
            self._src, self.pending_frames[start:stop], start, first_seq, self.where, chunks
        )
        for k, seq, lines in runs:
            try:
                fold(lines, seq)
            except CorruptLog as exc:
                raise _run_error(exc, lines, k, self.where) from None

    def tail_events(self, next_seq: int, chunks: list[Chunk]) -> Iterator[Event]:
        """The torn tail's kept events after a pass in parts (its chunk goes to ``chunks``)."""
        return self._tail(next_seq, chunks)

    def adopt_index(self, chunks: list[Chunk], collected: list[Event] | None = None) -> None:
        """The index of every pending frame, built by ``part_events`` passes (and the events
        of the types asked for at open, when the pass gathered them)."""
        self._adopt(chunks, collected)

    # -- lines ------------------------------------------------------------------------------

    def _chunk_plaintext(self, index: int) -> bytes:
        chunk = self.chunks[index]
        if chunk.recovered:
            return b"".join(line + b"\n" for line in self._kept)
        if not chunk.frames:
            end = self.torn.offset if self.torn else len(self.data)
            return self.data[self.header_end : end]
        if len(chunk.frames) == 1:
            return zframes.decode(self._src, chunk.frames[0], chunk.first_frame + 1)
        return b"".join(zframes.decode_many(self._src, chunk.frames, chunk.first_frame + 1))

    def chunk_lines(self, index: int) -> list[bytes]:
        if self._cache is not None and self._cache[0] == index:
            return self._cache[1]
        lines = split_lines(self._chunk_plaintext(index), where=self.where)
        self._cache = (index, lines)
        return lines

    # -- events -----------------------------------------------------------------------------

    def event(self, seq: int) -> Event:
        if not 0 <= seq < self.event_count:
            raise IndexError(seq)
        index = self.index.chunk_of(seq)
        chunk = self.chunks[index]
        line = self.chunk_lines(index)[seq - chunk.first_seq]
        return parse_event(line, seq, where=self.where)

    def events(self, types: Iterable[str] | None = None) -> Iterator[Event]:
        """The type filter looks for the quoted type name in the raw line, as JSON.stringify
        and orjson write it; every candidate is parsed and checked, so a mention inside a
        message is not mistaken for an event of that type."""
        wanted = None if types is None else frozenset(types)
        if self._index is None and self.body_frames:
            yield from self._index_pass(wanted)
            return
        tokens = None if wanted is None else type_tokens(wanted)
        where = self.where
        for index, chunk in enumerate(self.chunks):
            if tokens is None:
                for seq, line in enumerate(self.chunk_lines(index), chunk.first_seq):
                    yield parse_event(line, seq, where=where)
                continue
            plaintext = self._chunk_plaintext(index)
            for offset, line in _matching_lines(plaintext, tokens):
                ev = parse_event(line, chunk.first_seq + offset, where=where)
                if wanted is not None and ev.type in wanted:
                    yield ev

    def _index_pass(self, wanted: frozenset[str] | None) -> Iterator[Event]:
        """Every event, parsed in order, while the frames are indexed: one decode per frame.

        The index (and ``collected``) is kept only when the pass reaches the end; an abandoned
        pass leaves the log unindexed, to be indexed on its next use.
        """
        collect = self._wanted
        chunks: list[Chunk] = []
        collected: list[Event] = []
        body = self.body_frames
        passes = (
            self.part_events(0, len(body), 0, chunks),
            _later(lambda: self.tail_events(chunks[-1].end_seq if chunks else 0, chunks)),
        )
        for part in passes:
            for ev in part:
                if ev.type in collect:
                    collected.append(ev)
                if wanted is None or ev.type in wanted:
                    yield ev
        if self._index is None:
            self._adopt(chunks, collected)

    def last_event(self, types: Iterable[str], through: int) -> Event | None:
        """Reads back from ``through`` one chunk at a time and parses only candidate lines, so
        a question about one seq (which turn event governs it?) costs a frame or two."""
        wanted = frozenset(types)
        if through < 0 or not self.chunks or self.event_count == 0:
            return None
        tokens = type_tokens(wanted)
        start = self.index.chunk_of(min(through, self.event_count - 1))
        for index in range(start, -1, -1):
            first = self.chunks[index].first_seq
            hits = list(_matching_lines(self._chunk_plaintext(index), tokens))
            for offset, line in reversed(hits):
                if first + offset > through:
                    continue
                ev = parse_event(line, first + offset, where=self.where)
                if ev.type in wanted:
                    return ev
        return None

    def raw_lines(self, first: int, last: int) -> Iterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            lo, hi = chunk.first_seq, chunk.end_seq - 1
            if hi < first or lo > last or chunk.count == 0:
                continue
            lines = self.chunk_lines(index)
            yield from lines[max(first, lo) - lo : min(last, hi) - lo + 1]

    def prefix(self, last: int) -> tuple[list[bytes], bytes]:
        """Frames that lie wholly inside the prefix are returned byte for byte; only the run
        holding ``last`` is cut, and its lines are returned as plaintext to be re-encoded."""
        run, count, tail = self.prefix_run(last)
        if not count:
            return [], tail
        frames = [f for chunk in self.chunks[: self._whole_chunks(last)] for f in chunk.frames]
        if isinstance(run, FileRun):
            return [run.source.read(f.start, f.end) for f in frames], tail
        start = frames[0].start
        return [bytes(run[f.start - start : f.end - start]) for f in frames], tail

    def prefix_run(self, last: int) -> tuple[bytes | memoryview | FileRun, int, bytes]:
        """The whole frames are adjacent in the file, so they are one run, written with one call
        (a fork of a 100 MB log copies thousands of them) from a view of the bytes read: the
        log is never held twice."""
        if last < 0:
            return b"", 0, b""
        whole = self._whole_chunks(last)
        run: bytes | memoryview | FileRun = b""
        count = sum(len(chunk.frames) for chunk in self.chunks[:whole])
        if whole:
            first, end = self.chunks[0].frames[0], self.chunks[whole - 1].frames[-1]
            if self.source is not None:
                run = FileRun(self.source, first.start, end.end)
            else:
                run = memoryview(self.data)[first.start : end.end]
        tail = b""
        if whole < len(self.chunks) and self.chunks[whole].first_seq <= last:
            chunk = self.chunks[whole]
            lines = self.chunk_lines(whole)[: last - chunk.first_seq + 1]
            tail = b"".join(line + b"\n" for line in lines)
        return run, count, tail

    def prefix_frames(self, last: int) -> tuple[int, bool]:
        if last < 0:
            return 0, False
        whole = self._whole_chunks(last)
        count = sum(len(chunk.frames) for chunk in self.chunks[:whole])
        return count, whole < len(self.chunks) and self.chunks[whole].first_seq <= last

    def _whole_chunks(self, last: int) -> int:
        """How many leading chunks hold only events ``0..last`` (0 for a plain log)."""
        whole = 0
        for chunk in self.chunks:
            if not chunk.frames or chunk.end_seq - 1 > last:
                break
            whole += 1
        return whole


def _later(make: Callable[[], Iterator[Event]]) -> Iterator[Event]:
    """``make()``'s events, made only when the first is asked for."""
    yield from make()
