"""Times as the output shows them: epoch ms as stored, and ISO-8601 UTC beside them."""

from __future__ import annotations

from datetime import UTC, datetime
from time import gmtime

_FAST_END = 253_402_300_800
"""Seconds at 10000-01-01: from 1970 up to here ``time.gmtime`` gives the very fields
``datetime`` does (four-digit years), at half the cost; a listing formats two per row."""


_DATES: dict[int, str] = {}
"""The date part per day since 1970: the rows of a listing share few days."""
_DATES_KEPT = 4096


def iso_ms(ms: int | None) -> str | None:
    """``2026-01-02T03:04:05.678Z`` for epoch ms (the form of JavaScript's toISOString and of
    the operation log); None for None or a time no calendar holds."""
    if ms is None:
        return None
    seconds = ms // 1000
    if 0 <= seconds < _FAST_END:
        day, second = divmod(seconds, 86_400)
        date = _DATES.get(day)
        if date is None:
            if len(_DATES) >= _DATES_KEPT:
                _DATES.clear()
            t = gmtime(day * 86_400)
            date = _DATES[day] = f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
        minutes, second = divmod(second, 60)
        hour, minute = divmod(minutes, 60)
        return f"{date}{hour:02d}:{minute:02d}:{second:02d}.{ms % 1000:03d}Z"
    try:
        moment = datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"
