"""ISO-8601 texts of epoch ms: the form of JavaScript's ``toISOString`` (and of the operation
log) over the whole calendar, through the fast path (1970 to 9999) and the general one."""

from __future__ import annotations

import pytest

from dsh_fork.times import iso_ms


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (999, "1970-01-01T00:00:00.999Z"),
        (1_767_227_187_005, "2026-01-01T00:26:27.005Z"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (-62_135_596_800_000, "0001-01-01T00:00:00.000Z"),
    ],
)
def test_epoch_ms_read_as_javascript_writes_them(ms: int, text: str) -> None:
    assert iso_ms(ms) == text


@pytest.mark.parametrize("ms", [None, 253_402_300_800_000, 10**20, -(10**20)])
def test_no_text_for_no_time_or_one_no_calendar_holds(ms: int | None) -> None:
    assert iso_ms(ms) is None
