"""Text made safe for a terminal: what human output does to ids and messages it did not write.

Ids, paths and error messages may carry bytes from a hostile log (an id holding ESC could
rewrite the user's terminal; one holding a newline could forge an output line), lone
surrogates (legal in JSON, not in UTF-8), or be huge (a header of 400,000 keys quoted in an
error). ``safe_text`` escapes every control character, makes the text encodable, and caps it.
"""

from __future__ import annotations

import re

MAX_LINE_CHARS = 2000
"""Longest text human output prints for one id or message; the rest is cut and counted."""

CONTROLS = "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
"""What is escaped: compiled on first use (``re``'s cache), since most text is printable ASCII,
which holds none of it."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """Control characters (C0, DEL, C1, line separators, bidi overrides) as visible escapes."""
    if text.isascii() and text.isprintable():  # of ASCII, only C0 and DEL are not printable
        return text
    return re.sub(CONTROLS, _escape, text)


def cap(text: str, limit: int = MAX_LINE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def safe_text(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """Printable, encodable and at most about ``limit`` characters long."""
    text = escape_controls(cap(text, limit))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``1 item``, ``2 items``, ``0 items``: a count with its noun in the right number
    (``plural`` when adding an ``s`` is wrong: ``fork children``)."""
    return f"{count} {singular if count == 1 else plural or singular + 's'}"


MAX_INDENT_LEVELS = 32
"""Deepest level text output indents: a chain of 10,000 sessions would indent its last line
by 20,000 characters (a rich tree's guides by 40,000), and print hundreds of megabytes."""


def indent(depth: int, unit: str = "  ") -> str:
    """The indentation of a row at ``depth``: capped at ``MAX_INDENT_LEVELS``, where a deeper
    row says its depth instead (``capped_note`` tells the reader once)."""
    if depth <= MAX_INDENT_LEVELS:
        return unit * depth
    return unit * MAX_INDENT_LEVELS + f"[depth {depth}] "


def capped_note(deepest: int) -> str | None:
    """The line a text output adds when it capped some rows' indentation, else None."""
    if deepest <= MAX_INDENT_LEVELS:
        return None
    return (
        f"indentation capped at {MAX_INDENT_LEVELS} levels: deeper rows say their depth "
        f"(the deepest is {deepest})"
    )
