"""The frame index of a framed log: which run of frames holds which seqs (format §5, §13).

A log's complete frames are summarised one at a time (their line count, where a line ends
last, which lines carry the event types a caller collects) and grouped into ``Chunk``s, runs
of adjacent frames whose plaintexts end on a line boundary; a ``FrameIndex`` lists them in seq
order, so an event is found by bisecting, and its frame decoded only when it is asked for.
Apart from the representations (``sessionlog``) because it works on bytes and frames alone,
before any event exists, and the streamed and the whole-file reads build it the same way.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterable, Iterator

import msgspec
from msgspec import Struct, field

from . import budget
from . import frames as zframes
from .errors import CorruptLog
from .records import Event, parse_event

MAX_RUN_BYTES = budget.MAX_RECORD_BYTES
"""The most plaintext a run of several frames may hold (a record spread over frames and the
lines around it): memory stays bounded even when no frame of a damaged log ends a line (DSH
writes every frame on a line boundary, so its runs are single frames)."""


GROUP_BYTES = 1 << 20
"""A run's lines are split and handed on about this many bytes of whole lines at a time: a
frame of 16 MiB of empty lines would otherwise be a list of 16 million entries."""


class TornTail(Struct, frozen=True):
    """An incomplete final frame (or final line): what DSH truncates on its next write.

    ``recovered`` holds its complete lines; those that parse and continue the seqs are kept
    as events (``SessionLog.recovered``), as DSH keeps them.
    """

    offset: int
    size: int
    recovered: tuple[bytes, ...]


def kept_events(torn: TornTail | None, next_seq: int, where: str) -> list[Event]:
    """The events of a torn tail's complete lines that DSH keeps: those that parse and
    continue the seqs from ``next_seq``, up to the first that does not."""
    events: list[Event] = []
    for line in torn.recovered if torn is not None else ():
        try:
            events.append(parse_event(line, next_seq + len(events), where=where))
        except CorruptLog:
            break
    return events


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
                checked = checked_run(group, wanted, size=len(text))
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
    latest: frozenset[str] = frozenset(),
) -> tuple[list[Chunk], list[Event], dict[str, Event]]:
    """The chunks of ``frames``, the events of the types in ``wanted`` (from seq
    ``collect_from`` on: ``open_log``) and the last event of each type in ``latest`` (only
    the last is held: a log of a million titles keeps one).

    The frames are summarised one by one (``frames.map_frames``); from the first frame
    that does not hold whole lines continuing the seqs (a record split across frames, an empty
    frame, a defect) the rest is read in one pass that groups frames into runs and names the
    first defect.
    """
    keep_from = 0 if latest else collect_from
    summaries = zframes.map_frames(data, frames, summarizer(wanted | latest, keep_from), 1)
    chunks: list[Chunk] = []
    collected: list[Event] = []
    last: dict[str, Event] = {}
    seq = 0
    rest = len(frames)
    with contextlib.closing(summaries):
        for i, (frame, (first, count, hits)) in enumerate(zip(frames, summaries, strict=True)):
            if first != seq:
                rest = i
                break
            for offset, line in hits:
                if seq + offset < keep_from:
                    continue  # its envelope is checked; the caller parsed it in its first read
                ev = parse_event(line, seq + offset, where=where)
                if ev.type in latest:
                    last[ev.type] = ev
                if ev.type in wanted and ev.seq >= collect_from:
                    collected.append(ev)
            chunks.append(Chunk((frame,), seq, count, i))
            seq += count
    for ev in _run_events(_line_runs(data, frames[rest:], rest, seq, where, chunks), where):
        if ev.type in latest:
            last[ev.type] = ev
        if ev.type in wanted and ev.seq >= collect_from:
            collected.append(ev)
    return chunks, collected, last


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


def _run_events(runs: Iterator[tuple[int, int, list[bytes]]], where: str) -> Iterator[Event]:
    """Every event of the runs of ``_line_runs`` (which appends their chunks), parsed and
    checked in order."""
    for k, first, lines in runs:
        try:
            for seq, line in enumerate(lines, first):
                yield parse_event(line, seq, where=where)
        except CorruptLog as exc:
            raise _run_error(exc, lines, k, where) from None
