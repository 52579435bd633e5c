"""Fork titles as DSH's fork buttons make them (dsh-world §2): the one place of the rule.

Both fork buttons of DSH's UI rename the child after the source's title, increased: a title
ending in ``(N)`` gets ``(N+1)``, one ending in full-width ``（N）`` gets ``（N+1）``, any other
gets `` (1)``. Only the source's own title counts, never its siblings', so two forks of "X" are
both "X (1)"; ``fork --title`` is how a user tells them apart. The name is then normalised as
DSH normalises every title it saves (escape sequences and invisible characters removed,
whitespace collapsed, at most 80 UTF-8 bytes), and saved as a ``session/title`` event of the
user's (which also stops DSH from titling the child automatically).

The patterns are written for JavaScript's semantics, which DSH runs: ``.`` does not cross a line
terminator, ``\\s`` is JavaScript's whitespace set and digits are ASCII only, so Python's
shorthands (which differ) are not used.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import UsageError
from .sessionlog import SessionLog

TITLE_TYPE = "session/title"
MAX_TITLE_BYTES = 80
"""DSH's byte budget for a saved title (UTF-8, cut on a code-point boundary)."""

# A JavaScript ``.``: anything but the four line terminators.
_ANY = "[^\n\r\u2028\u2029]"
_NUMBERED = f"({_ANY}*?)\\(([0-9]+)\\)"
_NUMBERED_WIDE = f"({_ANY}*?)\uff08([0-9]+)\uff09"

# What DSH strips from a title, in DSH's order: operating-system commands (up to BEL or ST, or
# to the end when unterminated), control-sequence introducers, other two-byte escapes, C0/C1
# controls that are not whitespace, then bidirectional and invisible format characters.
_STRIPPED = (
    "(?:\x1b\\]|\x9d)(?:(?!\x07|\x1b\\\\)[\\s\\S])*(?:\x07|\x1b\\\\|\\Z)",
    "(?:\x1b\\[|\x9b)[0-?]*[ -/]*[@-~]",
    "\x1b[@-_]",
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]",
    "[\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]",
)
# JavaScript's whitespace (``\s``): its collapsing and trimming see exactly these.
_JS_SPACE = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_SPACES = f"[{_JS_SPACE}]+"
# The patterns are compiled by ``re`` (and cached there) when first used, not at import: a fork
# of a plain title needs none of them, and compiling all eight is a millisecond of every run.


def increased(title: str) -> str:
    """The title DSH's fork buttons give a fork of a session titled ``title``.

    ``N`` is any number of digits, increased exactly (no float, no digit limit): leading
    zeros vanish, so ``(007)`` becomes ``(8)``.
    """
    if title.endswith(")"):
        match = re.fullmatch(_NUMBERED, title)
        if match is not None:
            return f"{match[1]}({_plus_one(match[2])})"
    elif title.endswith("\uff09"):
        match = re.fullmatch(_NUMBERED_WIDE, title)
        if match is not None:
            return f"{match[1]}\uff08{_plus_one(match[2])}\uff09"
    return f"{title} (1)"


def _plus_one(digits: str) -> str:
    """``digits`` + 1 in decimal, without leading zeros. Done on the text: Python refuses to
    convert integers of more than a few thousand digits, and a title may hold any number."""
    kept = digits.lstrip("0")
    nines = len(kept) - len(kept.rstrip("9"))
    head = kept[: len(kept) - nines]
    if not head:
        return "1" + "0" * nines
    return head[:-1] + str(int(head[-1]) + 1) + "0" * nines


def normalized(text: str) -> str:
    """``text`` as DSH saves a title: one trimmed line of at most ``MAX_TITLE_BYTES`` UTF-8
    bytes, free of escape sequences and invisible characters. May be empty (then no title)."""
    if text.isascii() and text.isprintable():
        # No escape, control or invisible character, and the space is its only whitespace:
        # what the patterns would leave is the words joined by single spaces.
        text = " ".join(word for word in text.split(" ") if word)
    else:
        for pattern in _STRIPPED:
            text = re.sub(pattern, "", text)
        text = re.sub(_SPACES, " ", text).strip(" ")
    return _cut(text, MAX_TITLE_BYTES).rstrip(" ")


def _cut(text: str, budget: int) -> str:
    """The longest prefix of whole code points within ``budget`` UTF-8 bytes. A lone surrogate
    (a title read leniently) counts as the three bytes of the replacement DSH encodes."""
    if len(text) * 4 <= budget or len(text.encode("utf-8", "surrogatepass")) <= budget:
        return text
    used = 0
    for index, char in enumerate(text):
        used += len(char.encode("utf-8", "surrogatepass"))
        if used > budget:
            return text[:index]
    return text


def latest_title(log: SessionLog) -> str | None:
    """``data.title`` of the log's latest ``session/title`` (None: none, or not a string):
    noted by the pass that opened the log when it was asked to (``open_log(latest=...)``,
    fork), else read back from the end, which costs the frames after the last title. Either
    way a log of a million titles never holds a list of them all."""
    if TITLE_TYPE in log.latest_of:
        event = log.latest_of[TITLE_TYPE]
    else:
        event = log.last_event((TITLE_TYPE,), log.event_count - 1)
    title = None if event is None or not isinstance(event.data, dict) else event.data.get("title")
    return title if isinstance(title, str) else None


def given_title(text: str | None, *, keep: bool) -> str | None:
    """``--title TEXT`` as it will be saved, checked before anything is read: normalised, and
    refused (USAGE) beside ``--keep-title`` or when nothing is left of it, rather than
    silently giving no title."""
    if text is None:
        return None
    if keep:
        raise UsageError("give either --title TEXT or --keep-title, not both")
    title = normalized(text)
    if not title:
        raise UsageError(
            f"--title {text!r} is empty once normalised as DSH saves titles "
            "(controls and invisible characters removed, whitespace collapsed)"
        )
    return title


def fork_title(source_title: str | None, *, given: str | None, keep: bool) -> str | None:
    """The title a fork child is given, or None for no title event.

    ``given`` (``given_title``) wins; ``keep`` (``--keep-title``) gives none, so the child
    shows what it inherited. Otherwise DSH's rule: the source's latest title increased, then
    normalised (a long title may lose its " (1)" to the byte budget, as in DSH); no title, or an
    empty one, in the source: no title event.
    """
    if given is not None:
        return given
    if keep or not source_title:
        return None
    return normalized(increased(source_title)) or None


def title_data(title: str) -> dict[str, Any]:
    """The ``data`` of a user's ``session/title``: no cited messages, source ``user``."""
    return {"title": title, "messageSeqs": [], "source": {"kind": "user"}}
