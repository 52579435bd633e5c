"""A list row's facts of a log (title, completed turns, last activity) from one read.

``list`` shows two facts that need more than the header: the title and the completed turns.
The full read (``reader.open_log``) answers them, with a stable-read, a second listing of the
session dir, the header validated again and the frames indexed through the reader's objects;
on a root of many small logs that machinery costs several times the read itself. ``glance``
reads a log of the plain shape (zstd, v2 or later, every frame complete and holding whole
lines that continue the seqs, no torn tail) with the same checks as the full read, through the
same functions (``frames.scan`` and ``frames.decode``, ``envelopes.checked_run``,
``records.parse_event``, ``model.derive``), and nothing else. Whatever is not plainly so (a
torn tail, a record split across frames, an empty frame, a line the fast check refuses, a file
that changed, a large log) returns None, and the caller takes the full read, which gives the
verdict and names the defect; so a row never differs from the full read's
(``test_the_lean_read_never_differs_from_the_full_read``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from . import frames as zframes
from .errors import DshForkError
from .fsdir import open_regular_stat
from .logindex import summarizer
from .model import Facts, derive
from .records import Event, Header, parse_event

LEAN_MAX_BYTES = 1024 * 1024
"""Larger logs take the full read: it keeps them on the reader's bounded, split paths, and
the per-session costs the lean read saves are negligible beside their decoding."""

ROW_TYPES = frozenset(("turn/start", "turn/end", "session/title", "subagent/descriptor"))
"""The events a row's facts are folded from (``model.Facts``: title, completed turns)."""

_summarize = summarizer(ROW_TYPES)


class Glance(NamedTuple):
    """A list row's facts of a log. A named tuple: a listing's child sends one per session,
    and a tuple is unpickled without the per-object field walk of a frozen dataclass."""

    title: str | None
    turns: int
    mtime_ms: int
    label: str | None = None
    """A subagent's label, from its descriptor (``label_of``)."""


def glance(path: str, header: Header) -> Glance | None:
    """The row facts of the log at ``path`` (whose validated header is ``header``), or None
    when the log is not of the plain shape and the full read must decide."""
    if header.version < 2 or not path.endswith(".zstd"):
        return None
    try:
        fd, stat = open_regular_stat(path)  # never through a link, never blocking on a FIFO
        try:
            if stat.st_size > LEAN_MAX_BYTES:
                return None
            data = os.read(fd, stat.st_size + 1)
        finally:
            os.close(fd)
    except (OSError, DshForkError):
        return None
    if len(data) != stat.st_size:  # changing under the read: the full read decides
        return None
    return fold(data, header, path, stat.st_mtime_ns // 1_000_000)


def fold(
    data: bytes, header: Header, where: str, mtime_ms: int, *, header_read: bool = False
) -> Glance | None:
    """``glance`` of a log's whole bytes, read once: None unless they are of the plain shape
    and begin with ``header``. With ``header_read`` the caller took the header line from
    these very bytes (the listing's own read), so its frame is not decoded again."""
    if header.version < 2:
        return None
    try:
        return _fold(data, header, where, mtime_ms, header_read)
    except DshForkError:  # a defect: the full read names it
        return None


def fold_listed(data: bytes, header: Header, where: str, mtime_ms: int) -> Glance | None:
    """``fold`` of the bytes a listing read whole, its header line taken from them."""
    return fold(data, header, where, mtime_ms, header_read=True)


def _fold(
    data: bytes, header: Header, where: str, mtime_ms: int, header_read: bool
) -> Glance | None:
    scan = zframes.scan(data)
    if scan.torn_start is not None or not scan.frames:
        return None
    if not header_read:
        head = zframes.decode(data, scan.frames[0], 0, zframes.MAX_HEADER_PLAINTEXT)
        if head != header.raw + b"\n":
            return None  # not the header that was validated
    collected: list[Event] = []
    seq = 0
    for plaintext in zframes.decode_all(data, scan.frames[1:], 1):
        first, count, hits = _summarize((plaintext,))  # the full read's own per-frame check
        if first != seq:
            return None
        for offset, line in hits:
            event = parse_event(line, seq + offset, where=where)
            if event.type in ROW_TYPES:
                collected.append(event)
        seq += count
    facts = derive(header, seq, collected)
    return Glance(facts.title, len(facts.turn_ends), mtime_ms, label_of(facts))


def label_of(facts: Facts) -> str | None:
    """The label a subagent's descriptor gives it (what ``tree`` shows; ``list`` shows it as
    a subagent's title, since DSH titles no subagent)."""
    descriptor = facts.descriptor()
    if descriptor is None or not isinstance(descriptor.data, dict):
        return None
    label = descriptor.data.get("label")
    return label if isinstance(label, str) else None
