"""The fixture generator writes a root of any size holding one top-level tree at a time.

A 100,000-session root (``fixture R --sessions 25000 --agents 3``) used to be built whole in
memory before its first session was written (327 MB); now each tree's events are let go once
its sessions are written, and what stays per session is its id (and, per tree, the top and its
last leaf without their events). Measured with ``tracemalloc``: the peak while writing 1,600
sessions, per session.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from dsh_fork.fixtureroot import generate

PER_SESSION_BYTES = 1_500
"""The peak per session (one tree at a time: about 600 bytes; the whole root in memory held
about 3,100)."""


def test_a_root_is_written_one_tree_at_a_time(tmp_path: Path) -> None:
    generate(tmp_path / "warm" / "sessions", sessions=1, agents=3, depth=1, turns=1)
    tracemalloc.start()
    try:
        summary = generate(tmp_path / "big" / "sessions", sessions=400, agents=3, depth=1, turns=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary.sessions == 1_600
    assert peak / summary.sessions < PER_SESSION_BYTES
