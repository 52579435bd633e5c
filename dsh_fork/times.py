"""Times as the output shows them: epoch ms as stored, and ISO-8601 UTC beside them."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_ms(ms: int | None) -> str | None:
    """``2026-01-02T03:04:05.678Z`` for epoch ms (the form of JavaScript's toISOString and of
    the operation log); None for None or a time no calendar holds."""
    if ms is None:
        return None
    try:
        moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"
