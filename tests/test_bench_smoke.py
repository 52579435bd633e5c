"""``make bench`` works: every case of the harness runs once on tiny data (issue 6).

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
    "fork at the last turn",
    "fork at a middle turn",
    "inspect summary",
    "peak memory: fork",
    "peak memory: inspect",
    "relink (20 children)",
    "list-agents (200 sessions)",
    "tree (200 sessions)",
    "du (200 sessions)",
    "relink --all (10 forks)",
    "tree (10 relinked forks)",
    "du (10 relinked forks)",
)


def test_the_benchmark_runs_every_case_on_tiny_data() -> None:
    missing = [tool for tool in ("zstd", "zstdcat", "jq") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the benchmark's baselines need {', '.join(missing)}")
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
    table = [line for line in lines if line.startswith("| ")]
    header = [cell.strip() for cell in table[0].split("|")[1:-1]]
    assert header == ["case", "ours", "baseline", "ratio", "goal", "pass"]
    rows = {line.split("|")[1].strip(): line for line in table[1:]}
    assert list(rows) == list(CASES)
    for line in rows.values():
        assert line.rstrip("| ").endswith("-")  # quick mode judges no goal
