"""The memory budget of a large root (issue 33): beyond 10,000 sessions a command may hold
about 1 KB more per session, no more. A root of 100,000 sessions is too slow to build in a
test, so the bound is asserted per session: the traced peak of a listing of 2,000 sessions
less that of 200, over the 1,800 sessions between (the fixed costs cancel out).

Measured so (``tracemalloc``, the Python heap of the listing's own objects), a listing holds
about 1.0-1.1 KB per session of this shape; before each entry shed its header line and facts
once its row was made, it held 1.4-1.8 KB.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import generate
from dsh_fork.listing import list_sessions

PER_SESSION_BYTES = 1_200
"""The bound: the ~1 KB a session may cost, with room for the allocator's rounding."""

SMALL, LARGE = 50, 500
"""Top-level sessions of the two roots, each with three subagents: 200 and 2,000 sessions."""


def _peak(root: Path, everything: bool) -> int:
    tracemalloc.start()
    try:
        listing = list_sessions(Root(root), everything=everything)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert listing.total == len(list(root.glob("*/*")))
    return peak


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("scale")
    small, large = base / "small", base / "large"
    generate(small, sessions=SMALL, agents=3, depth=1, turns=1, seed=11)
    generate(large, sessions=LARGE, agents=3, depth=1, turns=1, seed=12)
    return small, large


@pytest.mark.parametrize("everything", [False, True], ids=["conversations", "all"])
def test_a_listing_holds_about_a_kilobyte_per_session(
    roots: tuple[Path, Path], everything: bool
) -> None:
    small, large = roots
    list_sessions(Root(small), everything=everything)  # what it imports is not per session
    per_session = (_peak(large, everything) - _peak(small, everything)) / (4 * (LARGE - SMALL))
    assert per_session <= PER_SESSION_BYTES, f"{per_session:.0f} bytes per session"
