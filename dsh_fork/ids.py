"""New session ids and the wall clock, injectable so tests and fixtures stay deterministic."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

IdFactory = Callable[[], str]
ClockMs = Callable[[], int]


def new_session_id() -> str:
    """``session-<uuid4>``, the id shape DSH itself uses."""
    return f"session-{uuid.uuid4()}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_id_problem(session_id: str) -> str | None:
    """Why a user-given new id is refused, or None: a control character would break every line
    that prints the id, and a lone surrogate is no text at all (it cannot be UTF-8). Printable
    ASCII holds neither, so the usual id is passed without loading the Unicode tables."""
    if session_id.isascii() and session_id.isprintable():
        return None
    import unicodedata

    for ch in session_id:
        category = unicodedata.category(ch)
        if category == "Cc":
            return f"the child id holds the control character U+{ord(ch):04X}"
        if category == "Cs":
            return f"the child id holds a lone surrogate U+{ord(ch):04X} (not valid UTF-8)"
    return None
