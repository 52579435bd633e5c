"""The memory budget for everything read from untrusted log bytes: every limit in one place.

dsh-fork promises that every command stays under 100 MB of memory whatever the logs under the
root hold (docs/safety.md, as measured). The interpreter and the libraries take about 22 MB;
the rest is split so that the largest things a pass may hold at once fit beside each other:
one frame's plaintext, one record that runs on across frames, and the Python objects one
parsed record becomes. DSH states no bound of its own for a frame or a record (its frames
hold one append batch, kilobytes; a record is one event), so a log beyond these limits is
refused as CORRUPT_LOG (exit 9) with a message that says "too large" and names the cap,
never read on until memory runs out.

The limits are enforced where the bytes enter: the frame decoder (``frames``), the line and
record assembly and the whole-file reads (``reader``), and the JSON parse of one line
(``records``). No command has bounds of its own.
"""

from __future__ import annotations

import functools
import re

from .errors import CorruptLog

MIB = 1 << 20

MAX_FRAME_PLAINTEXT = 16 * MIB
"""The most plaintext one frame may decode to. A 1 GiB RLE bomb of 33 KB stops here."""
MAX_HEADER_PLAINTEXT = 1 * MIB
"""The bound on a header frame (one line of a few hundred bytes in every DSH log)."""
MAX_RECORD_BYTES = 16 * MIB
"""The longest line (one record) that is read, in one frame or spread over several: a line is
held whole while it is checked, and the text of one that never ends is never held beyond it."""
MAX_JSON_VALUES = 250_000
"""The most JSON values (containers, scalars and object keys) one parsed line may hold. A
parsed value costs up to about 120 bytes as a Python object (a small string or integer in a
list), so a line of ``{}`` repeated 21 million times would be 2 GB: such a line is refused
before it is parsed. Lines shorter than ``2 * MAX_JSON_VALUES`` bytes cannot exceed it and are
not counted; their objects stay within about 40 times their size (20 MB)."""
MAX_WHOLE_READ = 16 * MIB
"""The largest log file read into memory whole. A zstd log of v2 or later above it is read in
bounded windows from its descriptor instead (``reader.open_streamed``); a log that must be held
whole (a plain JSONL log, a v0/v1 log whose packed rows are expanded) is refused above it. A
file's size is never trusted beyond this: a sparse file of 20 GB is read in windows and stops
at the first bytes that are not a frame."""
MAX_WHOLE_PLAINTEXT = 16 * MIB
"""The bound on the plaintext of a body read whole (v0/v1 logs, whose packed rows are expanded
into events in one piece)."""

CHECK_MIN_BYTES = 2 * MAX_JSON_VALUES
"""Lines shorter than this cannot hold more than ``MAX_JSON_VALUES`` values (each needs a byte
besides its comma): the one test the usual line costs."""
_SEPARATORS = (b",", b":", b"[", b"{")


@functools.cache
def _string() -> re.Pattern[bytes]:
    """A JSON string (the unrolled form: no backtracking on long strings); compiled on first
    use, which only a line with many separators makes."""
    return re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def too_large(per: str, cap: int, unit: str = "bytes") -> str:
    """The one wording of every refusal by size: "too large" and the cap, e.g. "too large
    (dsh-fork's cap: 16 MiB a frame)"."""
    amount = f"{cap // MIB} MiB" if unit == "bytes" and cap % MIB == 0 else f"{cap:,} {unit}"
    return f"too large (dsh-fork's cap: {amount} {per})"


def json_values(line: bytes) -> int:
    """The values a JSON line parses to, counted without parsing it (or, past the cap, a
    number above the cap): every value after the first in a container follows a comma, every
    key is followed by a colon and every container opens with a bracket, so those bytes
    outside strings count the values. The usual large line (a few long strings) costs four
    ``count`` calls and one match per string; nothing is copied."""
    counted = sum(map(line.count, _SEPARATORS)) + 1
    if counted <= MAX_JSON_VALUES:
        return counted
    inside = 0
    for strings, match in enumerate(_string().finditer(line), 1):
        if strings > MAX_JSON_VALUES:  # each string is a value or a key
            return strings
        start, end = match.span()
        if end - start > 2:
            inside += sum(line.count(sep, start, end) for sep in _SEPARATORS)
    return counted - inside


def line_problem(line: bytes) -> str | None:
    """Why ``line`` may not be parsed into objects (too long, too many values), or None. Cheap
    for the usual line: one length test."""
    size = len(line)
    if size < CHECK_MIN_BYTES:
        return None
    if size > MAX_RECORD_BYTES:
        return f"{size:,} bytes, " + too_large("a record", MAX_RECORD_BYTES)
    values = json_values(line)
    if values > MAX_JSON_VALUES:
        return f"{values:,} JSON values, " + too_large("a record", MAX_JSON_VALUES, "JSON values")
    return None


def check_line(line: bytes, where: str, label: int | str) -> None:
    """CORRUPT_LOG naming the record when ``line`` is beyond the budget (``line_problem``)."""
    problem = line_problem(line)
    if problem is not None:
        raise CorruptLog(f"{where}: event {label}: {problem}", line=label)
