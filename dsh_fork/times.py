"""Times as the output shows them: epoch ms as stored, and ISO-8601 UTC beside them."""

from __future__ import annotations

from datetime import UTC, datetime
from time import gmtime

_FAST_END_MS = 253_402_300_800_000
"""Epoch ms at 10000-01-01: from 1970 up to here ``time.gmtime`` gives the very fields
``datetime`` does (four-digit years), at two thirds of the cost; a listing formats two per
row."""


def iso_ms(ms: int | None) -> str | None:
    """``2026-01-02T03:04:05.678Z`` for epoch ms (the form of JavaScript's toISOString and of
    the operation log); None for None or a time no calendar holds."""
    if ms is None:
        return None
    if 0 <= ms < _FAST_END_MS:
        t = gmtime(ms // 1000)
        return (
            f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{ms % 1000:03d}Z"
        )
    try:
        moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"
