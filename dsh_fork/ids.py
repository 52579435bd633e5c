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
