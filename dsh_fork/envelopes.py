"""The fast form of the envelope check every copied line passes (``records.dense_run``).

Checking each line with ``orjson.loads`` builds every object of every event only to look at
two fields, which made that check cost more than decompressing the log. msgspec decodes a line
into its ``type`` and ``seq`` alone and validates the rest of it in C without building
anything: about four times faster. It accepts a subset of what ``dense_run`` accepts (it
refuses lenient spellings that DSH reads: lone surrogate escapes, a ``seq`` of ``5.0``, big
integers; and nesting near orjson's depth limit), and whatever it refuses goes to
``dense_run``, which decides and names the defect: the verdict on a line is ``dense_run``'s
either way. A frame of one line takes ``dense_run`` too (``FAST_MIN_LINES``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from operator import attrgetter
from typing import Annotated, Protocol, cast

from .budget import CHECK_MIN_BYTES, line_problem
from .generations import MAX_SAFE_INTEGER
from .records import dense_run

FAST_MIN_LINES = 2
"""A frame of one line takes the orjson form, as quick on one line. From two lines on the
envelope form is quicker (2.2 against 3.4 µs on six short lines), and building its decoder
once costs 0.09 ms: the small frames of a listing of 100,000 logs or of a relink of small
agents gain, and a short fork gains about what it pays."""


class _Envelope(Protocol):
    type: str
    seq: int


_FastForm = tuple[Callable[[bytes], _Envelope] | None, tuple[type[Exception], ...]]
"""msgspec's decoder of an envelope and the errors that mean "refused"."""

_fast: _FastForm | None = None  # loaded on first use


def _load() -> _FastForm:
    import msgspec

    # The two fields an event line must hold; the rest is validated and skipped. Untracked by
    # the garbage collector: a frame makes hundreds of them.
    seq = Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INTEGER)]
    envelope = msgspec.defstruct("Envelope", [("type", str), ("seq", seq)], gc=False)
    # Deep nesting meets the interpreter's recursion limit inside msgspec: refused here too.
    decode = cast(Callable[[bytes], _Envelope], msgspec.json.Decoder(envelope).decode)  # its fields
    return decode, (msgspec.DecodeError, RecursionError)


def fast_form() -> _FastForm:
    """The msgspec form, built the first time a frame is long enough to use it."""
    global _fast
    if _fast is None:
        _fast = _load()
    return _fast


_ORJSON_MAX_DEPTH = 1024
_seq = attrgetter("seq")
_type = attrgetter("type")


def checked_run(
    lines: list[bytes], wanted: frozenset[str], *, size: int | None = None
) -> tuple[int, list[int]] | None:
    """(first seq, offsets of the lines whose type is in ``wanted``) when every line is an
    envelope DSH accepts and the seqs are dense; None when one is not (``records.parse_event``
    then names the defect).

    The types are those DSH reads (after any escapes), so the lines of the types asked for are
    picked without searching the text. ``size``: the bytes the lines were split from, when
    known; under ``CHECK_MIN_BYTES`` no line can be beyond the record budget, and the lengths
    are not looked at (a pass over every line: a tenth of the check's cost on small events).
    """
    envelopes = _fast_envelopes(lines)
    if envelopes is not None:
        large = size is None or size >= CHECK_MIN_BYTES
        if large and max(map(len, lines)) >= CHECK_MIN_BYTES and any(map(line_problem, lines)):
            return None  # beyond the budget: records.parse_event names it
        first = envelopes[0].seq
        if _dense(envelopes, first):
            if wanted.isdisjoint(map(_type, envelopes)):
                return first, []
            return first, [k for k, e in enumerate(envelopes) if e.type in wanted]
    # The slow path (lenient lines): each line's type as parse_event reads it, from the one
    # parse that checks it.
    checked = dense_run(lines)
    if checked is None:
        return None
    first_seq, types = checked
    return first_seq, [k for k, name in enumerate(types) if name in wanted]


def typed_run(lines: list[bytes]) -> tuple[int, list[str]] | None:
    """(first seq, each line's type) when every line is an envelope DSH accepts and the seqs
    are dense; None when one is not. ``checked_run`` with the types themselves, for a pass
    that needs where each type lies (``search`` counts turns and picks its candidates)."""
    envelopes = _fast_envelopes(lines)
    if envelopes is not None and _dense(envelopes, first := envelopes[0].seq):
        return first, list(map(_type, envelopes))
    return dense_run(lines)


def _fast_envelopes(lines: list[bytes]) -> list[_Envelope] | None:
    """Each line's envelope by the fast form, or None where it does not apply (too few
    lines, a line it refuses): the caller then takes the slow path.

    msgspec's nesting bound is the interpreter's recursion limit, orjson's 1024 levels: only
    under a limit below that is every line msgspec accepts one orjson accepts too."""
    decode, refused = fast_form() if len(lines) >= FAST_MIN_LINES else (None, ())
    if decode is None or not lines or sys.getrecursionlimit() > _ORJSON_MAX_DEPTH:
        return None
    try:
        return list(map(decode, lines))
    except refused:
        return None


def _dense(envelopes: list[_Envelope], first: int) -> bool:
    """The envelopes' seqs run ``first``, ``first + 1``, ... without a gap."""
    return list(map(_seq, envelopes)) == list(range(first, first + len(envelopes)))
