"""Times as the output shows them: epoch ms as stored, and ISO-8601 UTC beside them."""

from __future__ import annotations

from datetime import UTC, datetime
from time import gmtime

_FAST_END_MS = 253_402_300_800_000
"""Epoch ms at 10000-01-01: from 1970 up to here ``time.gmtime`` gives the very fields
``datetime`` does (four-digit years), at half the cost; a listing formats two per row."""

_MINUTES: dict[int, str] = {}
"""``2026-01-02T03:04:`` per minute since 1970: a listing formats two times per row, and its
rows share far fewer minutes than times."""
_MINUTES_KEPT = 8192


def iso_ms(ms: int | None) -> str | None:
    """``2026-01-02T03:04:05.678Z`` for epoch ms (the form of JavaScript's toISOString and of
    the operation log); None for None or a time no calendar holds."""
    if ms is None:
        return None
    if 0 <= ms < _FAST_END_MS:
        minute, rest = divmod(ms, 60_000)
        head = _MINUTES.get(minute)
        if head is None:
            if len(_MINUTES) >= _MINUTES_KEPT:
                _MINUTES.clear()
            head = _MINUTES[minute] = _minute_text(minute)
        text = str(100_000 + rest)  # "1SSmmm": seconds and ms, zero-padded, in one call
        return f"{head}{text[1:3]}.{text[3:]}Z"
    try:
        moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def _minute_text(minute: int) -> str:
    """The date, hour and minute of a minute since 1970, as ``iso_ms`` begins them."""
    day, of_day = divmod(minute, 1440)
    t = gmtime(day * 86_400)
    hour, minute_of_hour = divmod(of_day, 60)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{hour:02d}:{minute_of_hour:02d}:"
