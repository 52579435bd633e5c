"""Opening one session log: the stable read, the header, the generation to read (format §13).

``open_log`` reads a generation file whole (or, past a size, in pieces: ``open_streamed``),
checks its container the way DSH reads it — the complete frames' plaintexts are one text (a
record may span a frame edge, a frame may be empty) that must end on a line boundary, and the
complete lines of a torn final frame that parse and continue the seqs are events too (format
§5.3) — and hands back a ``SessionLog`` (``sessionlog``) over a frame index (``logindex``).
The header alone is read from the first frame without the rest (``read_header``,
``peek_fields``), and every read of a log file opens it through ``open_fd``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from . import budget
from . import frames as zframes
from .errors import CorruptLog, SessionStale, UnsupportedFormat
from .fsdir import open_regular
from .generations import (
    SUPPORTED_VERSION,
    Encoding,
    Generation,
    list_generations,
    scan_names,
    select,
)
from .logindex import Chunk, TornTail, kept_events, summarizer
from .records import Event, Header, LineError, parse_event, parse_header, parse_line, split_lines
from .sessionlog import Committed, FramedLog, Identity, PackedLog, SessionLog
from .source import FileBytes, identity_of

_NO_HEADER_FRAME = "{where}: no complete frame: an empty or header-less log"
HEADER_PROBE_BYTES = 16 * 1024
HEADER_FIRST_READ = 4 * 1024
HEADER_MAX_READ = 2 * zframes.MAX_HEADER_PLAINTEXT
"""A compressed header frame never exceeds its plaintext by much (raw blocks add 3 bytes each)."""

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
    path: Path,
    *,
    retries: int = 1,
    limit: int | None = None,
    stated: os.stat_result | None = None,
) -> tuple[bytes, Identity]:
    """stat → read → stat, one retry; a file that keeps changing is SESSION_STALE. With
    ``limit`` a file larger than that is refused as too large before a byte is read (its size
    may be a sparse hole: it is never trusted to be memory one may take). ``stated``: the
    path's stat the caller has just made (``open_log`` chose by its size), the first
    attempt's "before" instead of a second stat of the same path."""
    for _ in range(retries + 1):
        try:
            before = _identity(stated if stated is not None else os.stat(path))
            stated = None  # a retry stats again
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


# -- opening --------------------------------------------------------------------------------


def check_current(generation: Generation) -> None:
    """The re-list after a read (format §13 step 2): SESSION_STALE when the dir's highest
    generation is no longer the one read. The names alone: no Path or Generation is built for
    a dir that holds still."""
    path = generation.path
    names = scan_names(path.parent)
    if not names or names[-1][2] != path.name:
        raise SessionStale(
            f"{path.parent}: its generations changed while being read", path=str(path)
        )


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
    latest: Iterable[str] = (),
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
    ``latest``: types whose last event the same pass keeps (``log.latest_of``), for a caller
    that would otherwise read the log back from its end for it (fork's source title); only a
    framed log indexed at open tracks them.
    """
    check_version(generation)
    wanted = frozenset(collect)
    tracked = frozenset(latest)
    streamed = framed_lines(generation)
    stated = None
    if streamed and not stream:
        stated = _stat(generation.path)
        streamed = stated is not None and stated.st_size > budget.MAX_WHOLE_READ
    if streamed:
        log: SessionLog = open_streamed(generation, wanted, tracked)
    else:
        data, identity = stable_read(generation.path, limit=budget.MAX_WHOLE_READ, stated=stated)
    if check_dir:
        check_current(generation)
    if streamed:
        return log
    where = str(generation.path)
    if generation.encoding == "plain":
        header_end = data.find(b"\n")
        if header_end == -1:
            raise CorruptLog(f"{where}: no complete header line", path=where)
        header = parse_header(data[:header_end], generation.version, where=where)
        end = data.rfind(b"\n") + 1
        torn = None
        if end < len(data):
            torn = TornTail(end, len(data) - end, ())
        body = data[header_end + 1 : end]
        committed = Committed(generation, data, identity, header, header_end + 1, (), torn)
        if generation.version < 2:
            return PackedLog(committed, body, wanted=wanted)
        framed = FramedLog(committed)
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
    body_frames = scan.frames[1:]
    committed = Committed(
        generation, data, identity, header, scan.frames[0].end, body_frames, _torn(data, scan)
    )
    if generation.version < 2:
        plaintexts = zframes.decode_many(data, body_frames, 1, zframes.MAX_WHOLE_PLAINTEXT)
        return PackedLog(committed, b"".join(plaintexts), wanted=wanted)
    framed = FramedLog(committed, wanted=wanted, collect_from=collect_from, latest=tracked)
    if index:
        framed.build_index()
    return framed


def _stat(path: Path) -> os.stat_result | None:
    """The stat by which ``open_log`` chooses a whole or a windowed read, and which the whole
    read starts from; None for a file gone (the read that follows says so)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def parse_recovered(log: SessionLog) -> list[bytes]:
    """The torn tail's complete lines that DSH keeps: parsable and continuing the seqs."""
    return list(log.recovered)


def open_streamed(
    generation: Generation, wanted: frozenset[str], latest: frozenset[str] = frozenset()
) -> FramedLog:
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
            log = _index_streamed(generation, source, wanted, latest)
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


def _torn(data: zframes.Data, scan: zframes.FrameScan) -> TornTail | None:
    """The torn tail after the last complete frame, with the whole lines DSH recovers of it
    (the lines a torn tail still holds whole), or None."""
    if scan.torn_start is None:
        return None
    tail = zframes.decode_torn(data, scan.torn_start, len(scan.frames))
    complete = tail[: tail.rfind(b"\n") + 1]
    lines = tuple(complete[:-1].split(b"\n")) if complete else ()
    return TornTail(scan.torn_start, scan.size - scan.torn_start, lines)


def _index_streamed(
    generation: Generation, source: FileBytes, wanted: frozenset[str], latest: frozenset[str]
) -> FramedLog:
    where = str(generation.path)
    scan = zframes.scan_file(source)
    if not scan.frames:
        raise CorruptLog(_NO_HEADER_FRAME.format(where=where), path=where)
    header = parse_header(
        _header_line(source, scan.frames[0], where), generation.version, where=where
    )
    committed = Committed(
        generation,
        b"",
        source.identity,
        header,
        scan.frames[0].end,
        scan.frames[1:],
        _torn(source, scan),
    )
    framed = FramedLog(committed, wanted=wanted, source=source, latest=latest)
    framed.build_index()
    return framed


class NotFromEnd(Exception):
    """A log ``latest_event`` cannot read from its end: not framed zstd v2+, or a frame that
    does not hold whole lines whose seqs run on into the next (a record spread over frames,
    an empty frame, a defect). Only the read from its start (``open_log``) says what it holds."""


def framed_lines(generation: Generation) -> bool:
    """Whether a generation is zstd frames of JSON lines (v2+): one ``open_log`` may read in
    windows and ``latest_event`` reads from its end."""
    return generation.encoding == "zstd" and generation.version >= 2


def latest_event(
    generation: Generation, types: Iterable[str], decisive: Callable[[Event], bool]
) -> Event | None:
    """The last event of ``types`` that is ``decisive``, read from the log's end: the frames
    are decoded last first and the read stops at that event, so a question the end of a log
    answers (what lies after its cut) costs the frames after the answer, not the whole log.
    None when no event of the log is. The header, the torn tail's kept lines and every frame
    decoded are checked as ``open_log`` checks them (checksums, envelopes, seqs running on to
    the end); the frames before the answer are not read. ``NotFromEnd`` when the log is one
    this read cannot take (the caller then reads it from its start)."""
    if not framed_lines(generation):
        raise NotFromEnd(str(generation.path))
    check_version(generation)
    path = generation.path
    where = str(path)
    wanted = frozenset(types)
    # As open_streamed: stat, then open, so a stat that fails leaves no descriptor open.
    before = _identity(os.stat(path))
    source = FileBytes(open_fd(path), path, before)
    try:
        scan = zframes.scan_file(source)
        if not scan.frames:
            raise CorruptLog(_NO_HEADER_FRAME.format(where=where), path=where)
        parse_header(_header_line(source, scan.frames[0], where), generation.version, where=where)
        found: Event | None = None
        parts = _parts_from_end(source, scan.frames[1:], _torn(source, scan), wanted, where)
        for events in parts:
            for ev in reversed(events):
                if ev.type in wanted and decisive(ev):
                    found = ev
                    break
            if found is not None:
                break
        source.check()
        return found
    finally:
        source.close()


def _parts_from_end(
    source: FileBytes,
    body: tuple[zframes.Frame, ...],
    torn: TornTail | None,
    wanted: frozenset[str],
    where: str,
) -> Iterator[list[Event]]:
    """The events of ``wanted`` types (every kept one of the torn tail), part by part from
    the end: the torn tail's kept lines, then each body frame's, last first. Each frame must
    hold whole lines whose seqs end where the next frame's begin, the first from seq 0."""
    summarize = summarizer(wanted)
    end: int | None = None  # the first seq of the part after this one
    for k in range(len(body) - 1, -1, -1):
        pieces = zframes.map_frames(source, (body[k],), summarize, k + 1)
        with contextlib.closing(pieces):
            first, count, hits = next(pieces)
        if first < 0 or (end is not None and first + count != end) or (k == 0 and first != 0):
            raise NotFromEnd(where)
        if end is None:
            yield kept_events(torn, first + count, where)
        yield [parse_event(line, first + offset, where=where) for offset, line in hits]
        end = first
    if end is None:  # no body frame: the tail's lines are the log's from seq 0
        yield kept_events(torn, 0, where)
