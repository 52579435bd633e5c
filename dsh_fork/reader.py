"""Reading one session log: stable read, header, frame index, lazy event access (format §13).

A log is indexed frame by frame: every complete frame is decoded once (checksums verified, line
boundaries checked, lines counted) while only the lines a caller asks for are parsed. That keeps
a fork of a 100 MB log from parsing 300,000 JSON lines it only copies.
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from . import frames as zframes
from .errors import CorruptLog, SessionStale, UnsupportedFormat
from .fsdir import open_regular
from .generations import SUPPORTED_VERSION, Encoding, Generation, list_generations, select
from .records import (
    Event,
    Header,
    LineError,
    nonneg_int,
    parse_event,
    parse_header,
    parse_line,
    parse_v0_line,
    split_lines,
)

HEADER_PROBE_BYTES = 16 * 1024
HEADER_FIRST_READ = 4 * 1024
HEADER_MAX_READ = 2 * zframes.MAX_HEADER_PLAINTEXT
"""A compressed header frame never exceeds its plaintext by much (raw blocks add 3 bytes each)."""
# re finds a two-byte needle ~2.5x faster than ``bytes.__contains__``.
_EMPTY_LINE = re.compile(b"\n\n")

Identity = tuple[int, int, int, int, int]


def _identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def open(file: Path, mode: str = "rb") -> IO[bytes]:  # the builtin's name, on purpose
    """Open a log for reading: never through a link, never blocking on a FIFO, a regular
    file or a refusal (``fsdir.open_regular``). It keeps the builtin's name so that a test
    patching ``reader.open`` still sees every read of a log."""
    return builtins.open(open_regular(file), mode)


def stable_read(path: Path, *, retries: int = 1) -> tuple[bytes, Identity]:
    """stat → read → stat, one retry; a file that keeps changing is SESSION_STALE."""
    for _ in range(retries + 1):
        try:
            before = _identity(os.stat(path))
            with open(path, "rb") as handle:  # this module's open: no link, no FIFO
                data = handle.read()
            after = _identity(os.stat(path))
        except FileNotFoundError:
            # Listed a moment ago, gone now: the session dir changed under the read.
            raise SessionStale(
                f"{path} disappeared while it was being read", path=str(path)
            ) from None
        if before == after and len(data) == after[2]:
            return data, after
    raise SessionStale(f"{path} changed while it was being read", path=str(path))


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete final frame (or final line): what DSH would truncate and recover."""

    offset: int
    size: int
    recovered: tuple[bytes, ...]


@dataclass(slots=True)
class Chunk:
    """A run of body lines: one zstd frame, or the whole body of a plain log."""

    frame: zframes.Frame | None
    first_seq: int
    count: int
    lines: int


@dataclass
class SessionLog:
    """The committed part of one generation file, indexed but not fully parsed."""

    generation: Generation
    data: bytes
    identity: Identity
    header: Header
    header_end: int
    chunks: list[Chunk] = field(default_factory=list)
    torn: TornTail | None = None
    _count: int = 0
    collected: list[Event] = field(default_factory=list)
    _expanded: list[Event] | None = None
    _cache: tuple[int, list[bytes]] | None = None
    _unindexed: tuple[zframes.Frame, ...] | None = None
    """Body frames not indexed yet (``open_log(index=False)``): the first full ``events()``
    pass indexes them, any other access indexes them first."""
    _wanted: frozenset[str] = frozenset()

    @property
    def event_count(self) -> int:
        self._require_index()
        return self._count

    @event_count.setter
    def event_count(self, value: int) -> None:
        self._count = value

    def _require_index(self) -> None:
        if self._unindexed is not None:
            frames, self._unindexed = self._unindexed, None
            _build_index(self, frames, self._wanted)

    @property
    def path(self) -> Path:
        return self.generation.path

    @property
    def session_dir(self) -> Path:
        return self.generation.path.parent

    @property
    def version(self) -> int:
        return self.generation.version

    @property
    def where(self) -> str:
        return str(self.path)

    # -- lines ------------------------------------------------------------------------------

    def _chunk_plaintext(self, index: int) -> bytes:
        chunk = self.chunks[index]
        if chunk.frame is None:
            end = self.torn.offset if self.torn else len(self.data)
            return self.data[self.header_end : end]
        return zframes.decode(self.data, chunk.frame, index + 1)

    def chunk_lines(self, index: int) -> list[bytes]:
        self._require_index()
        if self._cache is not None and self._cache[0] == index:
            return self._cache[1]
        lines = split_lines(self._chunk_plaintext(index), where=self.where)
        chunk = self.chunks[index]
        if len(lines) != chunk.count:  # an index built without counting lines is held to it
            raise CorruptLog(
                f"{self.where}: frame {index + 2} holds {len(lines)} lines, but its seqs "
                f"{chunk.first_seq}..{chunk.first_seq + chunk.count - 1} need {chunk.count}",
                frame=index + 1,
            )
        self._cache = (index, lines)
        return lines

    def _chunk_of(self, seq: int) -> int:
        self._require_index()
        starts = [c.first_seq for c in self.chunks]
        return bisect.bisect_right(starts, seq) - 1

    # -- events -----------------------------------------------------------------------------

    def event(self, seq: int) -> Event:
        """Random access to one event by seq."""
        if not 0 <= seq < self.event_count:
            raise IndexError(seq)
        if self._expanded is not None:
            return self._expanded[seq]
        index = self._chunk_of(seq)
        chunk = self.chunks[index]
        line = self.chunk_lines(index)[seq - chunk.first_seq]
        return parse_event(line, seq, where=self.where)

    def events(self, types: Iterable[str] | None = None) -> Iterator[Event]:
        """Events in seq order; with ``types``, only events of those types are parsed.

        The type filter looks for the quoted type name in the raw line, as JSON.stringify and
        orjson write it; every candidate is parsed and checked, so a mention inside a message
        is not mistaken for an event of that type.
        """
        wanted = None if types is None else frozenset(types)
        if self._expanded is not None:
            for ev in self._expanded:
                if wanted is None or ev.type in wanted:
                    yield ev
            return
        if self._unindexed is not None:
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
        frames = self._unindexed
        assert frames is not None
        collect = self._wanted
        chunks: list[Chunk] = []
        collected: list[Event] = []
        for ev in self.part_events(0, len(frames), 0, chunks):
            if ev.type in collect:
                collected.append(ev)
            if wanted is None or ev.type in wanted:
                yield ev
        if self._unindexed is frames:
            self.adopt_index(chunks)
            self.collected = collected

    @property
    def pending_frames(self) -> tuple[zframes.Frame, ...]:
        """The body frames of a log opened with ``index=False`` and not indexed yet."""
        return self._unindexed or ()

    def part_events(
        self, start: int, stop: int, first_seq: int, chunks: list[Chunk]
    ) -> Iterator[Event]:
        """Every event of pending frames ``start..stop-1``, checked and numbered from
        ``first_seq``; each frame's ``Chunk`` is appended to ``chunks`` once its events are
        out. For a pass split between processes (``inspect``); ``adopt_index`` ends it."""
        frames = self.pending_frames[start:stop]
        where = self.where
        seq = first_seq
        plaintexts = zframes.decode_many(self.data, frames, start + 1)
        with contextlib.closing(plaintexts):
            for i, (frame, plaintext) in enumerate(zip(frames, plaintexts, strict=True), start):
                problem = _shape_problem(plaintext)
                if problem is not None:
                    raise _frame_error(problem, i, where)
                lines = plaintext[:-1].split(b"\n")
                first = seq
                try:
                    for line in lines:
                        yield parse_event(line, seq, where=where)
                        seq += 1
                except CorruptLog:
                    if b"" in lines:  # an empty line is named as such, not as bad JSON
                        raise _frame_error("empty line", i, where) from None
                    raise
                chunks.append(Chunk(frame, first, len(lines), len(lines)))

    def adopt_index(self, chunks: list[Chunk]) -> None:
        """The index of every pending frame, built by ``part_events`` passes."""
        self._unindexed = None
        self.chunks = chunks
        self._count = chunks[-1].first_seq + chunks[-1].count if chunks else 0

    def last_event(self, types: Iterable[str], through: int) -> Event | None:
        """The last event of ``types`` at or before seq ``through``, or None.

        Reads back from ``through`` one frame at a time and parses only candidate lines, so a
        question about one seq (which turn event governs it?) costs a frame or two, not a parse
        of every event of those types in the log.
        """
        wanted = frozenset(types)
        if self._expanded is not None:
            for ev in reversed(self._expanded[: through + 1]):
                if ev.type in wanted:
                    return ev
            return None
        self._require_index()
        if through < 0 or not self.chunks:
            return None
        tokens = type_tokens(wanted)
        for index in range(self._chunk_of(min(through, self.event_count - 1)), -1, -1):
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
        """Stored line bytes (without 0x0A) of events ``first..last`` inclusive (v2+ only)."""
        if self._expanded is not None:
            raise UnsupportedFormat("raw lines of a packed-row generation", version=self.version)
        self._require_index()
        for index, chunk in enumerate(self.chunks):
            lo, hi = chunk.first_seq, chunk.first_seq + chunk.count - 1
            if hi < first or lo > last:
                continue
            lines = self.chunk_lines(index)
            yield from lines[max(first, lo) - lo : min(last, hi) - lo + 1]

    def prefix(self, last: int) -> tuple[list[bytes], bytes]:
        """The body through seq ``last`` as (whole compressed frames, re-framed plaintext).

        Frames that lie wholly inside the prefix are returned byte for byte; only the frame
        holding ``last`` is cut, and its lines are returned as plaintext to be re-encoded.
        """
        run, whole, tail = self.prefix_run(last)
        if not whole:
            return [], tail
        frames = [chunk.frame for chunk in self.chunks[:whole]]
        start = frames[0].start if frames[0] is not None else 0
        return [run[f.start - start : f.end - start] for f in frames if f is not None], tail

    def prefix_run(self, last: int) -> tuple[bytes, int, bytes]:
        """``prefix`` as one run: (the whole frames' bytes, how many frames, plaintext tail).

        The whole frames are adjacent in the file, so they are copied as one run and written
        with one call (a fork of a 100 MB log copies thousands of them).
        """
        if self._expanded is not None:
            raise UnsupportedFormat("prefix of a packed-row generation", version=self.version)
        if last < 0:
            return b"", 0, b""
        whole = self.whole_frames(last)
        run = b""
        if whole:
            first, end = self.chunks[0].frame, self.chunks[whole - 1].frame
            assert first is not None and end is not None
            run = self.data[first.start : end.end]
        tail = b""
        if whole < len(self.chunks) and self.chunks[whole].first_seq <= last:
            chunk = self.chunks[whole]
            lines = self.chunk_lines(whole)[: last - chunk.first_seq + 1]
            tail = b"".join(line + b"\n" for line in lines)
        return run, whole, tail

    def whole_frames(self, last: int) -> int:
        """How many leading body frames hold only events ``0..last`` (0 for a plain log)."""
        self._require_index()
        whole = 0
        for chunk in self.chunks:
            if chunk.frame is None or chunk.first_seq + chunk.count - 1 > last:
                break
            whole += 1
        return whole


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
                raise CorruptLog(f"{where}: no complete header", path=where)
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


def _header_line(data: bytes, frame: zframes.Frame, where: str) -> bytes:
    plaintext = zframes.decode(data, frame, 0, zframes.MAX_HEADER_PLAINTEXT)
    if not plaintext or plaintext.find(b"\n") != len(plaintext) - 1:
        raise CorruptLog(f"{where}: first frame is not exactly one header line", frame=0)
    return plaintext[:-1]


def _header_from_frame(
    data: bytes, frame: zframes.Frame, generation: Generation, where: str
) -> Header:
    return parse_header(_header_line(data, frame, where), generation.version, where=where)


def open_log(
    generation: Generation,
    *,
    collect: Iterable[str] = (),
    check_dir: bool = True,
    index: bool = True,
    count_lines: bool = True,
) -> SessionLog:
    """Stable-read and index one generation (format §13 steps 2–6).

    Events whose type is in ``collect`` are parsed during the same pass and kept in
    ``log.collected``, so a caller that needs a few types decodes every frame only once.
    A caller that will read every event anyway (inspect, validation) passes ``index=False``:
    the frames are then indexed by its first ``events()`` pass, and each is decoded once.
    ``count_lines=False`` takes each frame's line count from its last line's seq instead of
    counting (see ``_build_index``): for a caller that copies frames it never reads.
    """
    check_version(generation)
    data, identity = stable_read(generation.path)
    if check_dir:
        now = current_generation(generation.path.parent)
        if now is None or now.path != generation.path:
            raise SessionStale(
                f"{generation.path.parent}: its generations changed while being read",
                path=str(generation.path),
            )
    wanted = frozenset(collect)
    if generation.encoding == "plain":
        log = _index_plain(generation, data, identity)
        if wanted:
            log.collected = list(log.events(wanted))
        return log
    return _index_zstd(generation, data, identity, wanted, index=index, count_lines=count_lines)


def _index_zstd(
    generation: Generation,
    data: bytes,
    identity: Identity,
    wanted: frozenset[str],
    *,
    index: bool = True,
    count_lines: bool = True,
) -> SessionLog:
    where = str(generation.path)
    scan = zframes.scan(data)
    if not scan.frames:
        raise CorruptLog(f"{where}: no complete frame", path=where)
    header = _header_from_frame(data, scan.frames[0], generation, where)
    log = SessionLog(generation, data, identity, header, scan.frames[0].end)
    if scan.torn_start is not None:
        tail = zframes.decode_torn(data, scan.torn_start, len(scan.frames))
        complete = tail[: tail.rfind(b"\n") + 1]
        recovered = tuple(complete[:-1].split(b"\n")) if complete else ()
        log.torn = TornTail(scan.torn_start, scan.size - scan.torn_start, recovered)
    body = scan.frames[1:]
    if generation.version < 2:
        plaintexts = zframes.decode_many(data, body, 1, zframes.MAX_WHOLE_PLAINTEXT)
        _expand_all(log, b"".join(plaintexts), where)
        log.collected = [ev for ev in log._expanded or () if ev.type in wanted]
        return log
    log._wanted = wanted
    if index:
        _build_index(log, body, wanted, count_lines)
    else:
        log._unindexed = body
    return log


_FrameSummary = tuple[str | None, int, bytes, bytes, list[tuple[int, bytes]]]
"""What indexing needs from one frame: (shape problem, line count, first line, last line,
candidate lines). Plain values, so that a child process can compute and send it."""


def _summarizer(tokens: list[bytes], count_lines: bool) -> Callable[[bytes], _FrameSummary]:
    """The per-frame reduction, run wherever the frame is decoded (it reads only its argument).

    Without ``count_lines`` the count is 1 for a one-line frame and 0 (unknown) otherwise.
    """

    def summarize(plaintext: bytes) -> _FrameSummary:
        problem = _shape_problem(plaintext)
        if problem is not None:
            return (problem, 0, b"", b"", [])
        first_end = plaintext.find(b"\n")
        last_start = plaintext.rfind(b"\n", 0, len(plaintext) - 1) + 1
        hits = list(_matching_lines(plaintext, tokens)) if tokens else []
        if count_lines:
            count = plaintext.count(b"\n")
        else:
            count = 1 if first_end == len(plaintext) - 1 else 0
        return (None, count, plaintext[:first_end], plaintext[last_start:-1], hits)

    return summarize


def _shape_problem(plaintext: bytes) -> str | None:
    if not plaintext:
        return "empty frame"
    if plaintext[-1] != 0x0A:
        return "torn record"
    if plaintext[0] == 0x0A:
        return "empty line"
    return None


def _frame_error(problem: str, i: int, where: str) -> CorruptLog:
    """The corruption of body frame ``i`` (frame ``i + 2`` of the file, counting from 1)."""
    if problem == "empty frame":
        message = f"{where}: empty frame {i + 2}"
    elif problem == "torn record":
        message = f"{where}: complete frame {i + 2} contains a torn JSONL record"
    else:
        message = f"{where}: empty line in frame {i + 2}"
    return CorruptLog(message, frame=i + 1)


def _build_index(
    log: SessionLog,
    frames: tuple[zframes.Frame, ...],
    wanted: frozenset[str],
    count_lines: bool = True,
) -> None:
    """Index every body frame: decoded and checked once, only edge and candidate lines parsed.

    Seq density is checked at every frame edge: the first line's seq continues the previous
    frame and, with ``count_lines``, the last line's seq matches the frame's line count.
    Without it the last line's seq says how many lines the frame holds (a fork copies
    thousands of frames it never splits, and counting their lines costs a fifth of the
    fork); a frame that is split later is held to that count (``chunk_lines``). The lines of
    the types in ``wanted`` are parsed into ``collected``.
    """
    where = log.where
    summarize = _summarizer(type_tokens(wanted), count_lines)
    summaries = zframes.map_frames(log.data, frames, summarize, 1)
    seq = 0
    with contextlib.closing(summaries):
        for i, (frame, (problem, counted, first, last, hits)) in enumerate(
            zip(frames, summaries, strict=True)
        ):
            count = counted
            if problem is not None:
                raise _frame_error(problem, i, where)
            try:
                parse_event(first, seq, where=where)
                if count == 0:
                    count = parse_event(last, None, where=where).seq - seq + 1
                    if count < 2:
                        raise CorruptLog(
                            f"{where}: frame {i + 2} ends with seq {seq + count - 1}, not after "
                            f"its first seq {seq}",
                            frame=i + 1,
                        )
                elif count > 1:
                    parse_event(last, seq + count - 1, where=where)
            except CorruptLog:
                _name_first_bad_line(log, frame, i, seq)
                raise
            for offset, line in hits:
                ev = parse_event(line, seq + offset, where=where)
                if ev.type in wanted:
                    log.collected.append(ev)
            log.chunks.append(Chunk(frame, seq, count, count))
            seq += count
    log.event_count = seq


def _name_first_bad_line(log: SessionLog, frame: zframes.Frame, i: int, first_seq: int) -> None:
    """A wrong frame edge: parse the frame's lines in order, so that the error names the first
    bad line rather than the edge where the damage became visible (an empty line shifts the
    edge seqs, so it is looked for only here, never on the hot path)."""
    plaintext = zframes.decode(log.data, frame, i + 1)
    if _EMPTY_LINE.search(plaintext):
        raise _frame_error("empty line", i, log.where)
    for seq, line in enumerate(plaintext[:-1].split(b"\n"), first_seq):
        parse_event(line, seq, where=log.where)


def _index_plain(generation: Generation, data: bytes, identity: Identity) -> SessionLog:
    where = str(generation.path)
    header_end = data.find(b"\n")
    if header_end == -1:
        raise CorruptLog(f"{where}: no complete header line", path=where)
    header = parse_header(data[:header_end], generation.version, where=where)
    log = SessionLog(generation, data, identity, header, header_end + 1)
    committed = data.rfind(b"\n") + 1
    if committed < len(data):
        log.torn = TornTail(committed, len(data) - committed, ())
    body = data[header_end + 1 : committed]
    if generation.version < 2:
        _expand_all(log, body, where)
        return log
    lines = split_lines(body, where=where)
    for offset, line in enumerate(lines):
        parse_event(line, offset, where=where)
    log.chunks.append(Chunk(None, 0, len(lines), len(lines)))
    log.event_count = len(lines)
    return log


def _expand_all(log: SessionLog, body: bytes, where: str) -> None:
    events: list[Event] = []
    for line in split_lines(body, where=where):
        events.extend(parse_v0_line(line, len(events), where=where))
    seed_length = log.header.seed_length
    if seed_length is not None and seed_length > len(events):
        raise CorruptLog(
            f"{where}: header seedLength {seed_length} exceeds the {len(events)} events "
            "(format §7.4)"
        )
    log._expanded = events
    log.event_count = len(events)


def parse_recovered(log: SessionLog) -> list[bytes]:
    """The torn tail's complete lines that DSH would keep: parsable and continuing the seqs."""
    kept: list[bytes] = []
    if log.torn is None:
        return kept
    for line in log.torn.recovered:
        try:
            value, _ = parse_line(line)
        except LineError:
            break
        expected = log.event_count + len(kept)
        if not isinstance(value, dict) or nonneg_int(value.get("seq")) != expected:
            break
        kept.append(line)
    return kept
