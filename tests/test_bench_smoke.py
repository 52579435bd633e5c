"""``make bench`` works: every case of the harness runs once on tiny data (issues 6 and 15).

Times on tiny data mean nothing, so no goal is judged here (``--quick``); what is checked is
that each case's commands succeed against their baselines and that the table has every row.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CASES = (
    "start-up: --version",
    "start-up: two-turn fork",
    "fork, 0.2 MB log",
    "fork --no-agents, 0.2 MB log",
    "fork at a middle turn, 0.2 MB log",
    "inspect, 0.2 MB log",
    "relink, 20 agents, quiet disk",
    "relink, 20 agents, busy disk",
    "list-agents, 200 sessions",
    "list, 200 sessions",
    "tree, 200 sessions",
    "du, 200 sessions",
    "tree, 10 relinked forks",
    "du, 10 relinked forks",
)


def test_the_benchmark_runs_every_case_on_tiny_data() -> None:
    if shutil.which("zstd") is None:
        pytest.skip("the benchmark's baselines need zstd")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.run", "--quick", "--repeat", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("machine: ") and " cores, Python " in line for line in lines)
    assert any(line.startswith("load average (1 min) before the run: ") for line in lines)
    table = [line for line in lines if line.startswith("| ")]
    header = [cell.strip() for cell in table[0].split("|")[1:-1]]
    assert header == ["case", "ours", "peak RSS", "baseline", "ratio", "goal", "pass", "load"]
    rows = {line.split("|")[1].strip(): line.split("|")[1:-1] for line in table[1:]}
    assert list(rows) == list(CASES)
    for cells in rows.values():
        assert cells[2].strip().endswith(" MB")  # every case reports its peak memory
        assert cells[6].strip() == "-"  # quick mode judges no goal
