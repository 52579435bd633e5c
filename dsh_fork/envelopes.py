"""The fast form of the envelope check every copied line passes (``records.dense_run``).

Checking each line with ``orjson.loads`` builds every object of every event only to look at
two fields, which made that check cost more than decompressing the log. msgspec decodes a line
into its ``type`` and ``seq`` alone and validates the rest of it in C without building
anything: about four times faster. It accepts a subset of what ``dense_run`` accepts (it
refuses lenient spellings that DSH reads: lone surrogate escapes, a ``seq`` of ``5.0``, big
integers; and nesting near orjson's depth limit), and whatever it refuses goes to
``dense_run``, which decides and names the defect. So the verdict on a line never depends on
whether msgspec is installed; without it every line takes ``dense_run``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from .generations import MAX_SAFE_INTEGER
from .records import dense_run, parse_event

try:
    import msgspec
except ImportError:  # pragma: no cover - the pure-orjson path
    msgspec = None  # type: ignore[assignment]


if msgspec is not None:

    class _Envelope(msgspec.Struct):
        """The two fields an event line must hold; the rest is validated and skipped."""

        type: str
        seq: Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INTEGER)]

    _decode: Callable[[bytes], _Envelope] | None = msgspec.json.Decoder(_Envelope).decode
    # Deep nesting meets the interpreter's recursion limit inside msgspec: refused here too.
    _Refused: tuple[type[Exception], ...] = (msgspec.DecodeError, RecursionError)
else:  # pragma: no cover
    _decode = None
    _Refused = ()


def checked_types(lines: list[bytes]) -> tuple[int, list[str]] | None:
    """(first seq, each line's type) when every line is an envelope DSH accepts and the seqs
    are dense; None when one is not (``records.parse_event`` then names the defect).

    The types are those DSH reads (after any escapes), so a caller can pick the lines of the
    types it wants without searching the text.
    """
    if _decode is not None and lines:
        try:
            envelopes = [_decode(line) for line in lines]
        except _Refused:
            pass
        else:
            first = envelopes[0].seq
            if [e.seq for e in envelopes] == list(range(first, first + len(lines))):
                return first, [e.type for e in envelopes]
    first_seq = dense_run(lines)
    if first_seq is None:
        return None
    return first_seq, _types(lines)


def _types(lines: list[bytes]) -> list[str]:
    """Each line's type, for lines ``dense_run`` accepted (the slow path: lenient lines)."""
    return [parse_event(line, None).type for line in lines]
