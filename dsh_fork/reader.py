"""Reading one session log: stable read, header, frame index, lazy event access (format §13).

One reading interface (``SessionLog``), two representations:

- ``FramedLog``, a v2+ log: JSON lines in zstd frames (or one plain body), indexed by a
  ``FrameIndex`` of line-aligned runs of frames. Every complete frame is decoded once and
  every line's envelope is checked (a fork copies only lines DSH accepts), while only the
  lines a caller asks for are parsed into events.
- ``PackedLog``, a v0/v1 log: its packed rows are expanded into events once.

The container is read as DSH reads it: the complete frames' plaintexts are one text (a record
may span a frame edge, a frame may be empty) that must end on a line boundary, and the complete
lines of a torn final frame that parse and continue the seqs are events too (format §5.3).
"""

from __future__ import annotations

import abc
import bisect
import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec
from msgspec import Struct, field

from . import budget
from . import frames as zframes
from .errors import CorruptLog, SessionStale, UnsupportedFormat
from .fsdir import open_regular
from .generations import SUPPORTED_VERSION, Encoding, Generation, list_generations, select
from .records import (
    Event,
    Header,
    LineError,
    parse_event,
    parse_header,
    parse_line,
    parse_v0_line,
    split_lines,
)
from .source import FileBytes, FileRun, identity_of

MAX_RUN_BYTES = budget.MAX_RECORD_BYTES
"""The most plaintext a run of several frames may hold (a record spread over frames and the
lines around it): memory stays bounded even when no frame of a damaged log ends a line (DSH
writes every frame on a line boundary, so its runs are single frames)."""
GROUP_BYTES = 1 << 20
"""A run's lines are split and handed on about this many bytes of whole lines at a time: a
frame of 16 MiB of empty lines would otherwise be a list of 16 million entries."""
_NO_HEADER_FRAME = "{where}: no complete frame: an empty or header-less log"
HEADER_PROBE_BYTES = 16 * 1024
HEADER_FIRST_READ = 4 * 1024
HEADER_MAX_READ = 2 * zframes.MAX_HEADER_PLAINTEXT
"""A compressed header frame never exceeds its plaintext by much (raw blocks add 3 bytes each)."""

Identity = tuple[int, int, int, int, int]
_identity = identity_of


def open_fd(file: Path) -> int:
    """Open a log for reading: never through a link, never blocking on a FIFO, a regular
    file or a refusal (``fsdir.open_regular``). Every read of a log opens it here, so that a
    test patching ``reader.open_fd`` sees each one."""
    return open_regular(file)


def read_fd(fd: int, size: int) -> bytes:
    """The bytes of an open file expected to hold ``size``: one ``read`` of ``size + 1``
    (a longer result says the file grew; the caller's stat says so too), more only after a
    short read. No buffered file object: it would cost four more system calls per read,
    which is a third of a small log's read."""
    data = os.read(fd, size + 1)
    if len(data) >= size:
        return data
    parts = [data]
    while chunk := os.read(fd, 1 << 20):
        parts.append(chunk)
    return b"".join(parts)


def stable_read(
    path: Path, *, retries: int = 1, limit: int | None = None
) -> tuple[bytes, Identity]:
    """stat → read → stat, one retry; a file that keeps changing is SESSION_STALE. With
    ``limit`` a file larger than that is refused as too large before a byte is read (its size
    may be a sparse hole: it is never trusted to be memory one may take)."""
    for _ in range(retries + 1):
        try:
            before = _identity(os.stat(path))
            if limit is not None and before[2] > limit:
                raise CorruptLog(
                    f"{path}: a log of {before[2]:,} bytes is read whole here: "
                    + budget.too_large("a log read whole", limit),
                    path=str(path),
                )
            fd = open_fd(path)
            try:
                data = read_fd(fd, before[2])
            finally:
                os.close(fd)
            after = _identity(os.stat(path))
        except FileNotFoundError:
            # Listed a moment ago, gone now: the session dir changed under the read.
            raise SessionStale(
                f"{path} disappeared while it was being read", path=str(path)
            ) from None
        if before == after and len(data) == after[2]:
            return data, after
    raise SessionStale(f"{path} changed while it was being read", path=str(path))


class TornTail(Struct, frozen=True):
    """An incomplete final frame (or final line): what DSH truncates on its next write.

    ``recovered`` holds its complete lines; those that parse and continue the seqs are kept
    as events (``SessionLog.recovered``), as DSH keeps them.
    """

    offset: int
    size: int
    recovered: tuple[bytes, ...]


class Chunk(Struct, frozen=True):
    """A run of whole body lines: adjacent zstd frames whose plaintexts end on a line boundary
    (usually one frame), the whole body of a plain log (no frames), or the kept lines of a torn
    tail (no frames, ``recovered``)."""

    frames: tuple[zframes.Frame, ...]
    first_seq: int
    count: int
    first_frame: int = 0
    """Index of ``frames[0]`` among the body frames (frame ``first_frame + 2`` of the file)."""
    recovered: bool = False

    @property
    def end_seq(self) -> int:
        return self.first_seq + self.count


class FrameIndex(Struct):
    """Where each seq lives: the chunks in seq order. Built in one pass, in parts, or from the
    frame summaries of ``build``."""

    chunks: list[Chunk] = field(default_factory=list)

    @property
    def count(self) -> int:
        return self.chunks[-1].end_seq if self.chunks else 0

    def chunk_of(self, seq: int) -> int:
        starts = [c.first_seq for c in self.chunks]
        return bisect.bisect_right(starts, seq) - 1


class SessionLog(abc.ABC):
    """The committed part of one generation file (plus what DSH recovers of a torn tail)."""

    def __init__(
        self,
        generation: Generation,
        data: bytes,
        identity: Identity,
        header: Header,
        header_end: int,
        body_frames: tuple[zframes.Frame, ...],
        torn: TornTail | None,
    ) -> None:
        self.generation = generation
        self.data = data
        self.identity = identity
        self.header = header
        self.header_end = header_end
        self.body_frames = body_frames
        """Every complete frame after the header frame (empty for a plain log)."""
        self.torn = torn
        self.collected: list[Event] = []

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
        self,
        generation: Generation,
        data: bytes,
        identity: Identity,
        header: Header,
        header_end: int,
        body_frames: tuple[zframes.Frame, ...],
        torn: TornTail | None,
        body: bytes,
        *,
        wanted: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(generation, data, identity, header, header_end, body_frames, torn)
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
        generation: Generation,
        data: bytes,
        identity: Identity,
        header: Header,
        header_end: int,
        body_frames: tuple[zframes.Frame, ...],
        torn: TornTail | None,
        *,
        wanted: frozenset[str] = frozenset(),
        source: FileBytes | None = None,
        collect_from: int = 0,
    ) -> None:
        super().__init__(generation, data, identity, header, header_end, body_frames, torn)
        self.source = source
        """The open file, when the log is read on demand (``open_log(stream=True)``)."""
        self._src: zframes.Data = data if source is None else source
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
            chunks, collected = _index_frames(
                self._src, self.body_frames, self._wanted, self.where, self._collect_from
            )
            collected.extend(self._finish(chunks, chunks[-1].end_seq if chunks else 0))
            self._index = FrameIndex(chunks)
            self.collected = collected
        return self._index

    def _adopt(self, chunks: list[Chunk], collected: list[Event] | None = None) -> None:
        self._index = FrameIndex(chunks)
        if collected is not None:
            self.collected = collected

    def _finish(self, chunks: list[Chunk], next_seq: int) -> list[Event]:
        """Keep the torn tail's recoverable lines as the last chunk; their wanted events."""
        events = list(self._tail(next_seq, chunks))
        return [ev for ev in events if ev.type in self._wanted]

    def _tail(self, next_seq: int, chunks: list[Chunk]) -> Iterator[Event]:
        kept: list[bytes] = []
        events: list[Event] = []
        for line in self.torn.recovered if self.torn is not None else ():
            try:
                events.append(parse_event(line, next_seq + len(kept), where=self.where))
            except CorruptLog:
                break
            kept.append(line)
        self._kept = tuple(kept)
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
        yield from _run_events(
            self._src, self.pending_frames[start:stop], start, first_seq, self.where, chunks
        )

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


def type_tokens(types: Iterable[str]) -> list[bytes]:
    """The byte strings a line holding an event of one of ``types`` must contain.

    A type is found as its quoted name, as JSON.stringify and orjson write it, or with ``\\/``
    for ``/``, the one escape other JSON writers commonly add (PHP does by default). Rarer
    spellings (``\\u`` escapes of plain ASCII) are not searched for.
    """
    tokens: list[bytes] = []
    for name in types:
        quoted = f'"{name}"'.encode()
        tokens.append(quoted)
        if b"/" in quoted:
            tokens.append(quoted.replace(b"/", b"\\/"))
    return tokens


def _matching_lines(plaintext: bytes, tokens: list[bytes]) -> Iterator[tuple[int, bytes]]:
    """(line offset, line) of every line holding one of ``tokens``, in order, each once."""
    hits: list[int] = []
    for token in tokens:
        pos = plaintext.find(token)
        while pos != -1:
            hits.append(pos)
            pos = plaintext.find(token, pos + 1)
    if not hits:
        return
    hits.sort()
    line_no = 0
    scanned = 0
    last_start = -1
    for pos in hits:
        line_no += plaintext.count(b"\n", scanned, pos)
        scanned = pos
        start = plaintext.rfind(b"\n", 0, pos) + 1
        if start == last_start:
            continue
        last_start = start
        end = plaintext.find(b"\n", pos)
        yield line_no, plaintext[start:end]


# -- building the index -----------------------------------------------------------------------


_FrameSummary = tuple[int, int, list[tuple[int, bytes]]]
"""What indexing needs from one frame: (first seq, line count, candidate lines), first seq -1
when the frame does not hold whole checked lines."""


SUMMARY_PIECE = 1 << 20
"""Bytes of a frame's plaintext whose lines are split and checked at once: a frame may hold
up to 64 MiB, and its lines as objects (with their envelopes) would take about twice that
again; in pieces, the transient stays the plaintext and one piece's lines."""


def summarizer(
    wanted: frozenset[str], keep_from: int = 0
) -> Callable[[Iterable[bytes]], _FrameSummary]:
    """The per-frame reduction, run wherever the frame is decoded (it reads only its argument):
    every line's envelope is checked, so each line a fork copies is one DSH accepts; the same
    check reads each line's type, which picks the lines of the types asked for. The lines are
    split and checked a piece of whole lines (about ``SUMMARY_PIECE`` bytes) at a time, so a
    frame is usually one piece; a large frame comes in pieces as it decodes
    (``frames.map_frames``), and only a piece and its lines are held. ``keep_from``: lines
    of a wanted type below this seq are checked but not kept (a writer re-reading the log
    it read before needs only its own range, not a catalog fact per agent inherited)."""

    # The envelope check is imported only by the reads that check copied lines (start-up).
    from .envelopes import checked_run

    def summarize(pieces: Iterable[bytes]) -> _FrameSummary:
        if type(pieces) is tuple and len(pieces) == 1:  # a small frame, decoded whole
            text = pieces[0]
            if 0 < len(text) <= SUMMARY_PIECE and text[-1] == 0x0A:  # one group of lines
                group = text[:-1].split(b"\n")  # what ``_line_groups`` yields for it
                checked = checked_run(group, wanted)
                if checked is None:
                    return (-1, 0, [])
                first, offsets = checked
                kept = [(k, group[k]) for k in offsets if first + k >= keep_from]
                return (first, len(group), kept)
        first = -1
        count = 0
        hits: list[tuple[int, bytes]] = []
        for lines in _line_groups(pieces):
            checked = None if lines is None else checked_run(lines, wanted)
            if lines is None or checked is None:
                return (-1, 0, [])
            piece_first, offsets = checked
            if count == 0:
                first = piece_first
            elif piece_first != first + count:  # the seqs must run on across pieces
                return (-1, 0, [])
            base = first + count
            hits.extend((count + k, lines[k]) for k in offsets if base + k >= keep_from)
            count += len(lines)
        return (first, count, hits)

    return summarize


def _line_groups(pieces: Iterable[bytes]) -> Iterator[list[bytes] | None]:
    """The lines of a plaintext given in pieces, about ``SUMMARY_PIECE`` bytes of whole lines
    at a time (one piece is split without copying it whole again); a final None when the
    plaintext is empty or does not end with a line end (the frame holds a torn record).
    A line that runs on across pieces is kept as its pieces and joined once it ends, so text
    that never ends a line (a decompression bomb) is never copied while it grows."""
    pending: list[bytes] = []
    empty = True
    for piece in pieces:
        if not piece:
            continue
        empty = False
        if pending:
            pending.append(piece)
            if piece.find(b"\n") == -1:
                continue
            text = b"".join(pending)
            pending = []
        else:
            text = piece
        del piece  # only ``text`` is held while its lines are checked
        start = 0
        end = len(text)
        while start < end:
            stop = text.find(b"\n", min(start + SUMMARY_PIECE, end - 1))
            if stop == -1:  # a piece cut inside a line: its whole lines now, the rest later
                stop = text.rfind(b"\n", start)
                if stop == -1:
                    break
            yield text[start:stop].split(b"\n")
            start = stop + 1
        if start < end:
            pending.append(text[start:])
        del text
    if pending or empty:
        yield None


def _index_frames(
    data: zframes.Data,
    frames: tuple[zframes.Frame, ...],
    wanted: frozenset[str],
    where: str,
    collect_from: int = 0,
) -> tuple[list[Chunk], list[Event]]:
    """The chunks of ``frames`` and the events of the types in ``wanted`` (from seq
    ``collect_from`` on: ``open_log``).

    The frames are summarised one by one (``frames.map_frames``); from the first frame
    that does not hold whole lines continuing the seqs (a record split across frames, an empty
    frame, a defect) the rest is read in one pass that groups frames into runs and names the
    first defect.
    """
    summaries = zframes.map_frames(data, frames, summarizer(wanted, collect_from), 1)
    chunks: list[Chunk] = []
    collected: list[Event] = []
    seq = 0
    rest = len(frames)
    with contextlib.closing(summaries):
        for i, (frame, (first, count, hits)) in enumerate(zip(frames, summaries, strict=True)):
            if first != seq:
                rest = i
                break
            for offset, line in hits:
                if seq + offset < collect_from:
                    continue  # its envelope is checked; the caller parsed it in its first read
                ev = parse_event(line, seq + offset, where=where)
                if ev.type in wanted:
                    collected.append(ev)
            chunks.append(Chunk((frame,), seq, count, i))
            seq += count
    for ev in _run_events(data, frames[rest:], rest, seq, where, chunks):
        if ev.type in wanted and ev.seq >= collect_from:
            collected.append(ev)
    return chunks, collected


def _runs(
    data: zframes.Data, frames: tuple[zframes.Frame, ...], first_index: int, where: str
) -> Iterator[tuple[int, tuple[zframes.Frame, ...], bytes]]:
    """(index of the first frame, frames, plaintext) of each run of adjacent frames whose
    plaintexts end on a line boundary; trailing empty frames come as a run with no plaintext.
    Plaintext that never reaches a line boundary is a torn record (format §5.3); a run of
    several frames beyond ``MAX_RUN_BYTES`` is too large (``budget``)."""
    pending: list[zframes.Frame] = []
    parts: list[bytes] = []
    size = 0
    start = first_index
    plaintexts = zframes.decode_many(data, frames, first_index + 1)
    with contextlib.closing(plaintexts):
        for k, (frame, plaintext) in enumerate(zip(frames, plaintexts, strict=True), first_index):
            if not pending:
                start = k
            pending.append(frame)
            if plaintext:
                parts.append(plaintext)
                size += len(plaintext)
                if len(parts) > 1 and size > MAX_RUN_BYTES:
                    parts.clear()
                    raise CorruptLog(
                        f"{where}: a record spans frames {start + 2}..{k + 2}, more than "
                        f"{MAX_RUN_BYTES:,} bytes: " + budget.too_large("a record", MAX_RUN_BYTES),
                        frame=k + 1,
                    )
                if plaintext[-1] == 0x0A:
                    run, text = tuple(pending), parts[0] if len(parts) == 1 else b"".join(parts)
                    pending, parts, size = [], [], 0
                    yield start, run, text
                    del text
    if parts:
        raise CorruptLog(
            f"{where}: complete frame {start + len(pending) + 1} contains a torn JSONL record",
            frame=start + len(pending),
        )
    if pending:
        yield start, tuple(pending), b""


def line_groups(text: bytes, size: int = GROUP_BYTES) -> Iterator[list[bytes]]:
    """The lines of ``text`` (which ends with 0x0A), about ``size`` bytes of whole lines at a
    time: a list of lines is never longer than the lines of one group."""
    start = 0
    end = len(text)
    while start < end:
        stop = text.find(b"\n", min(start + size, end - 1))
        yield text[start:stop].split(b"\n")
        start = stop + 1


def _line_runs(
    data: zframes.Data,
    frames: tuple[zframes.Frame, ...],
    first_index: int,
    first_seq: int,
    where: str,
    chunks: list[Chunk],
) -> Iterator[tuple[int, int, list[bytes]]]:
    """(index of the first frame, first seq, lines) of each group of lines of each run of
    ``frames`` (``line_groups``); a run's chunk is appended once the caller is done with its
    last group (its events are then all checked)."""
    seq = first_seq
    for k, run, plaintext in _runs(data, frames, first_index, where):
        if not plaintext:
            last = chunks[-1] if chunks else None
            if last is not None and not last.recovered and last.end_seq == seq:
                chunks[-1] = msgspec.structs.replace(last, frames=last.frames + run)
            else:
                chunks.append(Chunk(run, seq, 0, k))
            continue
        first = seq
        for lines in line_groups(plaintext):
            yield k, seq, lines
            seq += len(lines)
        chunks.append(Chunk(run, first, seq - first, k))


def _run_error(error: CorruptLog, lines: list[bytes], k: int, where: str) -> CorruptLog:
    """The defect to name for a run of lines one of which did not parse: an empty line is
    named as such, not as bad JSON."""
    if b"" in lines:
        return CorruptLog(f"{where}: empty line in frame {k + 2}", frame=k + 1)
    return error


def _run_events(
    data: zframes.Data,
    frames: tuple[zframes.Frame, ...],
    first_index: int,
    first_seq: int,
    where: str,
    chunks: list[Chunk],
) -> Iterator[Event]:
    """Every event of ``frames``, parsed and checked in order, their chunks appended."""
    for k, first, lines in _line_runs(data, frames, first_index, first_seq, where, chunks):
        try:
            for seq, line in enumerate(lines, first):
                yield parse_event(line, seq, where=where)
        except CorruptLog as exc:
            raise _run_error(exc, lines, k, where) from None


# -- opening --------------------------------------------------------------------------------


def current_generation(session_dir: Path) -> Generation | None:
    return select(list_generations(session_dir))


def check_version(generation: Generation) -> None:
    """A generation above v4 is refused for any use, read or write (contract §1.1)."""
    if generation.version > SUPPORTED_VERSION:
        raise UnsupportedFormat(
            f"{generation.path}: generation v{generation.version} is newer than "
            f"v{SUPPORTED_VERSION} (written by a newer harness)",
            version=generation.version,
            path=str(generation.path),
        )


def read_header(generation: Generation) -> Header:
    """The header alone: the first frame (or first line) only, as DSH lists sessions."""
    check_version(generation)
    line = read_header_line(generation.path, generation.encoding)
    return parse_header(line, generation.version, where=str(generation.path))


def read_header_line(path: str | Path, encoding: Encoding) -> bytes:
    """The stored header line (without 0x0A): frame 1 (or line 1) only, container checked,
    the record itself not yet validated (``parse_header`` does that)."""
    where = str(path)
    # Unbuffered reads: listing a root calls this once per session, and a buffered file
    # object costs more than the read itself. A header frame is rarely above a few hundred
    # bytes, so the first read is small and a longer header just takes more reads.
    fd = open_regular(path)  # never through a link, never blocking on a FIFO
    try:
        data = os.read(fd, HEADER_FIRST_READ)
        if encoding != "plain":
            line = zframes.first_line(data)
            if line is not None:
                return line
        while True:
            if len(data) > HEADER_MAX_READ:  # bounded like its decode (frames module)
                raise CorruptLog(
                    f"{where}: no complete header within its first {HEADER_MAX_READ:,} bytes",
                    path=where,
                )
            if encoding == "plain":
                end = data.find(b"\n")
                if end != -1:
                    return data[:end]
            else:
                scan = zframes.scan(data, limit=1)
                if scan.frames:
                    return _header_line(data, scan.frames[0], where)
            more = os.read(fd, max(len(data), HEADER_PROBE_BYTES))
            if not more:
                raise CorruptLog(_NO_HEADER_FRAME.format(where=where), path=where)
            data += more
    finally:
        os.close(fd)


def peek_fields(generation: Generation) -> dict[str, object] | None:
    """The raw header object without any validation: to attribute an unreadable session."""
    try:
        fd = open_regular(generation.path)
        try:
            data = os.read(fd, HEADER_PROBE_BYTES)
        finally:
            os.close(fd)
        if generation.encoding == "plain":
            line = data.split(b"\n", 1)[0]
        else:
            scan = zframes.scan(data, limit=1)
            if not scan.frames:
                return None
            plaintext = zframes.decode(data, scan.frames[0], 0, zframes.MAX_HEADER_PLAINTEXT)
            line = plaintext.split(b"\n", 1)[0]
        value, _ = parse_line(line)
    except (OSError, CorruptLog, LineError):
        return None
    return value if isinstance(value, dict) else None


def header_line(data: zframes.Data, frame: zframes.Frame, where: str) -> bytes:
    """The header line of frame 0 (decoded within the header bound), checked to be one line."""
    return _header_line(data, frame, where)


def _header_line(data: zframes.Data, frame: zframes.Frame, where: str) -> bytes:
    plaintext = zframes.decode(data, frame, 0, zframes.MAX_HEADER_PLAINTEXT)
    if not plaintext or plaintext.find(b"\n") != len(plaintext) - 1:
        raise CorruptLog(f"{where}: first frame is not exactly one header line", frame=0)
    return plaintext[:-1]


def open_log(
    generation: Generation,
    *,
    collect: Iterable[str] = (),
    check_dir: bool = True,
    index: bool = True,
    stream: bool = False,
    collect_from: int = 0,
) -> SessionLog:
    """Stable-read and index one generation (format §13 steps 2–6).

    Events whose type is in ``collect`` are parsed during the same pass and kept in
    ``log.collected``, so a caller that needs a few types decodes every frame only once.
    ``collect_from``: collected events below this seq may be left out (the zstd v2+ read
    leaves them out; their lines are still checked). A writer re-reading, under the lock it
    has held throughout, a log whose cut it read before needs only the own range: a parent
    that inherited a catalog fact per agent would otherwise parse them all again.
    A caller that will read every event anyway (inspect, validation) passes ``index=False``:
    the frames are then indexed by its first ``events()`` pass, and each is decoded once.
    With ``stream`` a framed log is indexed at once and never held whole (``open_streamed``).
    """
    check_version(generation)
    wanted = frozenset(collect)
    streamed = generation.encoding == "zstd" and generation.version >= 2
    streamed = streamed and (stream or _larger(generation.path, budget.MAX_WHOLE_READ))
    if streamed:
        log: SessionLog = open_streamed(generation, wanted)
    else:
        data, identity = stable_read(generation.path, limit=budget.MAX_WHOLE_READ)
    if check_dir:
        now = current_generation(generation.path.parent)
        if now is None or now.path != generation.path:
            raise SessionStale(
                f"{generation.path.parent}: its generations changed while being read",
                path=str(generation.path),
            )
    if streamed:
        return log
    where = str(generation.path)
    if generation.encoding == "plain":
        header_end = data.find(b"\n")
        if header_end == -1:
            raise CorruptLog(f"{where}: no complete header line", path=where)
        header = parse_header(data[:header_end], generation.version, where=where)
        committed = data.rfind(b"\n") + 1
        torn = None
        if committed < len(data):
            torn = TornTail(committed, len(data) - committed, ())
        body = data[header_end + 1 : committed]
        if generation.version < 2:
            return PackedLog(
                generation, data, identity, header, header_end + 1, (), torn, body, wanted=wanted
            )
        framed = FramedLog(generation, data, identity, header, header_end + 1, (), torn)
        lines = split_lines(body, where=where)
        collected = []
        for offset, line in enumerate(lines):
            ev = parse_event(line, offset, where=where)
            if ev.type in wanted:
                collected.append(ev)
        framed.adopt_index([Chunk((), 0, len(lines))] if lines else [], collected)
        return framed
    scan = zframes.scan(data)
    if not scan.frames:
        raise CorruptLog(_NO_HEADER_FRAME.format(where=where), path=where)
    header_line = _header_line(data, scan.frames[0], where)
    header = parse_header(header_line, generation.version, where=where)
    torn = None
    if scan.torn_start is not None:
        tail = zframes.decode_torn(data, scan.torn_start, len(scan.frames))
        complete = tail[: tail.rfind(b"\n") + 1]
        lines_ = tuple(complete[:-1].split(b"\n")) if complete else ()
        torn = TornTail(scan.torn_start, scan.size - scan.torn_start, lines_)
    body_frames = scan.frames[1:]
    header_end = scan.frames[0].end
    if generation.version < 2:
        plaintexts = zframes.decode_many(data, body_frames, 1, zframes.MAX_WHOLE_PLAINTEXT)
        plaintext = b"".join(plaintexts)
        return PackedLog(
            generation,
            data,
            identity,
            header,
            header_end,
            body_frames,
            torn,
            plaintext,
            wanted=wanted,
        )
    framed = FramedLog(
        generation,
        data,
        identity,
        header,
        header_end,
        body_frames,
        torn,
        wanted=wanted,
        collect_from=collect_from,
    )
    if index:
        framed.build_index()
    return framed


def _larger(path: Path, size: int) -> bool:
    """Whether the file at ``path`` holds more than ``size`` bytes (a file gone is not: the
    read that follows says so)."""
    try:
        return os.stat(path).st_size > size
    except FileNotFoundError:
        return False


def parse_recovered(log: SessionLog) -> list[bytes]:
    """The torn tail's complete lines that DSH keeps: parsable and continuing the seqs."""
    return list(log.recovered)


def open_streamed(generation: Generation, wanted: frozenset[str]) -> FramedLog:
    """A framed log indexed from its descriptor in bounded windows: only the frame offsets and
    per-frame summaries are kept, each frame decoded once and its plaintext dropped (memory
    stays flat whatever the file's size). Stable like ``stable_read``: the file must be the
    one stat'ed before it was opened until the index is built (one retry), and it stays open
    so that a copy of its frames can check that again (``FileBytes.check``)."""
    path = generation.path
    for _ in range(2):
        try:
            before = _identity(os.stat(path))
            fd = open_fd(path)
        except FileNotFoundError:
            raise SessionStale(
                f"{path} disappeared while it was being read", path=str(path)
            ) from None
        source = FileBytes(fd, path, before)
        try:
            log = _index_streamed(generation, source, wanted)
            source.check()
            return log
        except SessionStale:
            pass  # the file changed (a short read, or another identity): read it again
        except CorruptLog:
            with contextlib.suppress(SessionStale):
                source.check()
                raise  # the file read is the file there: its defect stands
        source.close()
    raise SessionStale(f"{path} changed while it was being read", path=str(path))


def _index_streamed(generation: Generation, source: FileBytes, wanted: frozenset[str]) -> FramedLog:
    where = str(generation.path)
    scan = zframes.scan_file(source)
    if not scan.frames:
        raise CorruptLog(_NO_HEADER_FRAME.format(where=where), path=where)
    header = parse_header(
        _header_line(source, scan.frames[0], where), generation.version, where=where
    )
    torn = None
    if scan.torn_start is not None:
        tail = zframes.decode_torn(source, scan.torn_start, len(scan.frames))
        complete = tail[: tail.rfind(b"\n") + 1]
        lines = tuple(complete[:-1].split(b"\n")) if complete else ()
        torn = TornTail(scan.torn_start, scan.size - scan.torn_start, lines)
    framed = FramedLog(
        generation,
        b"",
        source.identity,
        header,
        scan.frames[0].end,
        scan.frames[1:],
        torn,
        wanted=wanted,
        source=source,
    )
    framed.build_index()
    return framed
