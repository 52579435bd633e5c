"""``salvage``: the part of a log DSH refuses that DSH would accept, forked into a new child.

DSH refuses a whole log for one defect: a seq gap or repeat, a line that is not an event, a
frame that does not decode, a record torn in the middle, events of a second writer that
restarted the seqs. ``salvage`` reads the log as the reader does, frame by frame and line by
line, and stops at the first defect: everything before it is what DSH would read. The child
is a fork of that prefix (``fork.fork`` with this module's reader), cut at the last seq outside
an open turn, with the branch's subagent tree, its title and its workspace as any fork. The
source is never written. The result names what was left behind: from which seq and byte, why.

The prefix's bytes are copied as they are: whole frames before the defect verbatim, and the
good lines of the frame holding it (the only frame made anew, as a fork's cut frame is).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from . import forkdocs as docs
from . import frames as zframes
from .errors import CorruptLog, UsageError
from .fork import ForkOptions, ForkResult, fork
from .generations import SUPPORTED_VERSION, Generation
from .ids import ClockMs, IdFactory, new_session_id, now_ms
from .layout import oplog_path as default_oplog_path
from .model import TURN_TYPES, derive
from .reader import header_line, open_log, stable_read
from .records import parse_event, parse_header
from .results import Documented
from .sessionarg import locate
from .sessionlog import Committed, FramedLog, SessionLog

MAX_SALVAGE_BYTES = 32 << 20
"""Salvage reads a log whole (and holds the readable prefix beside it): larger ones are
refused, so memory stays under 100 MB whatever the input."""


LeftBehind = docs.LeftBehind
"""What the child does not hold: from which seq and byte of the source, and why."""


class SalvageResult(Documented, Struct):
    """The fork of the readable prefix and what was left behind."""

    fork: ForkResult
    left: LeftBehind

    @property
    def warnings(self) -> list[str]:
        return self.fork.warnings

    def partial(self) -> Any:
        return self.fork.partial()

    def to_document(self) -> docs.SalvageDocument:
        fork = self.fork.to_document()
        return docs.SalvageDocument(**msgspec.structs.asdict(fork), left_behind=self.left)


class _Readable(Struct):
    """The readable prefix of a refused log, as bytes a reader accepts."""

    generation: Generation
    data: bytes
    identity: Any
    header_end: int
    events: int
    from_byte: int | None
    reason: str
    size: int

    def open(self, generation: Generation, collect: list[str] | tuple[str, ...]) -> SessionLog:
        """The prefix as a log, indexed, the events of ``collect`` gathered (``fork``'s
        ``read_source``)."""
        scan = zframes.scan(self.data)
        header = parse_header(
            header_line(self.data, scan.frames[0], str(generation.path)),
            generation.version,
            where=str(generation.path),
        )
        committed = Committed(
            generation, self.data, self.identity, header, self.header_end, scan.frames[1:], None
        )
        log = FramedLog(committed, wanted=frozenset(collect))
        log.build_index()
        return log


def readable_prefix(generation: Generation) -> _Readable:
    """Read the log as the reader does and stop at the first defect (format §5, §13)."""
    where = str(generation.path)
    size = generation.path.stat().st_size
    if size > MAX_SALVAGE_BYTES:
        raise UsageError(
            f"{where}: {size:,} bytes, more than salvage reads ({MAX_SALVAGE_BYTES >> 20} MiB)",
            path=where,
        )
    data, identity = stable_read(generation.path)
    structural: CorruptLog | None = None
    try:
        scan = zframes.scan(data)
    except CorruptLog as exc:  # bad magic, a reserved block: the frames before it stand
        structural = exc
        offset = exc.details.get("offset")
        scan = zframes.scan(data[: offset if isinstance(offset, int) else 0])
    if not scan.frames:
        raise CorruptLog(f"{where}: no complete header frame: nothing to salvage", path=where)
    frames = scan.frames
    parse_header(header_line(data, frames[0], where), generation.version, where=where)
    seq = 0
    good_end = frames[0].end
    parts: list[bytes] = []
    start: int | None = None
    kept: list[bytes] = []
    reason: str | None = None
    for k, frame in enumerate(frames[1:], 1):
        try:
            plaintext = zframes.decode(data, frame, k)
        except CorruptLog as exc:
            reason = exc.message
            start = frame.start if start is None else start
            break
        if start is None:
            start = frame.start
        parts.append(plaintext)
        if not plaintext or plaintext[-1] != 0x0A:
            continue  # a record across frames (or an empty frame): on to its line end
        lines = b"".join(parts)[:-1].split(b"\n")
        for line in lines:
            try:
                parse_event(line, seq, where=where)
            except CorruptLog as exc:
                reason = exc.message if line else f"{where}: empty line at seq {seq}"
                break
            kept.append(line)
            seq += 1
        if reason is not None:
            break
        parts, kept, start, good_end = [], [], None, frame.end
    else:
        if parts:
            reason = f"{where}: the last complete frames end inside a record (torn)"
    if reason is None and structural is not None:
        offset = structural.details.get("offset")
        reason, start = structural.message, offset if isinstance(offset, int) else good_end
    if reason is None:
        raise UsageError(f"{where}: nothing is refused here")  # open_log refused, this did not
    body = data[:good_end]
    if kept:  # the good lines of the run holding the defect: one frame made anew
        body += zframes.encode(b"".join(line + b"\n" for line in kept))
    return _Readable(
        generation,
        body,
        identity,
        frames[0].end,
        seq,
        start,
        reason,
        len(data),
    )


def salvage(
    source_arg: str,
    root_option: str | None,
    *,
    child_id: str | None,
    dry_run: bool,
    env: Mapping[str, str] | None = None,
    clock: ClockMs = now_ms,
    new_id: IdFactory = new_session_id,
    oplog_path: Path | None = None,
    title: str | None = None,
    close_turn: bool = False,
) -> SalvageResult:
    """Fork the readable prefix of a log DSH refuses, at its last seq outside an open turn;
    with ``close_turn`` at its last readable seq, a turn left open there closed in the child
    as ``fork --close-turn`` closes it."""
    source = locate(source_arg, root_option, env)
    generation = source.generation
    if generation.version < SUPPORTED_VERSION or generation.encoding != "zstd":
        raise UsageError(
            f"{source.session_dir.name} is stored as a v{generation.version} "
            f"{generation.encoding} log; salvage reads v4 zstd logs (open it once in DSH)"
        )
    try:
        open_log(generation, stream=True)
    except CorruptLog:
        pass
    else:
        raise UsageError(
            f"{source.session_dir.name}: DSH reads this log whole, nothing to salvage; use "
            "`dsh-fork fork`",
            hint="dsh-fork fork",
        )
    readable = readable_prefix(generation)
    turns = readable.open(generation, TURN_TYPES)
    facts = derive(turns.header, turns.event_count, turns.collected)
    if close_turn and readable.events > 0:
        boundary: int | None = readable.events - 1
    else:
        boundary = next(
            (s for s in range(readable.events - 1, -1, -1) if facts.enclosing_turn(s) is None),
            None,
        )
    if boundary is None:
        raise CorruptLog(
            f"{source.session_dir.name}: no event DSH would read lies outside an open turn "
            f"({readable.reason}); nothing to salvage without --close-turn",
            path=str(generation.path),
        )
    options = ForkOptions(
        at=boundary, child_id=child_id, dry_run=dry_run, title=title, close_turn=close_turn
    )
    result = fork(
        source.root,
        source,
        options,
        clock=clock,
        new_id=new_id,
        oplog_path=oplog_path or default_oplog_path(root_option, env),
        read_source=readable.open,
    )
    left = LeftBehind(
        boundary + 1,
        readable.events,
        readable.from_byte,
        readable.reason,
        readable.events - boundary - 1,
        readable.size - (readable.from_byte or readable.size),
    )
    return SalvageResult(result, left)
