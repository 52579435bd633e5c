"""``make bench``: every case timed side by side with a baseline measured in the same run.

Absolute times on shared machines are noisy, so each figure is set against a baseline that
does comparable work on the same data, in the same run; the two run alternately and each
figure is the median of several runs. The commands run as a user runs them: the installed
``dsh-fork`` in a subprocess (bytecode cached after a warm-up run), with the default options
a user types (``fork`` copies subagents unless ``--no-agents``). Every run is measured by a
small launcher process: wall time and the peak resident memory of the command.

Data comes from the project's fixture layer and is prepared outside the timed runs: a case
that writes gets a fresh copy of its root per run, made in advance, flushed and left to
settle (a root deleted and copied just before a run makes the file system walk freshly
freed inodes inside the timing).

Run: ``python -m tests.bench.run [--quick | --large] [--repeat N] [--only TEXT]``.
``--quick`` builds tiny data and judges no goal (the test suite runs it); ``--large`` adds
the 1 GB log and the 5,000-agent relink. Cases live in ``tests/bench/cases.py``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .cases import CASES
from .harness import Bench, Profile, Row, development_install, loadavg, wheel_install


def print_table(rows: list[Row]) -> None:
    header = ("case", "ours", "peak RSS", "baseline", "ratio", "goal", "pass", "load")
    verdict = {True: "pass", False: "FAIL", None: "-"}
    cells = [header] + [
        (r.case, r.ours, r.rss, r.baseline, r.ratio, r.goal, verdict[r.ok], r.load) for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for k, row in enumerate(cells):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def machine() -> str:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 0
    return (
        f"machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def raise_priority() -> str:
    """Ask for a higher scheduling priority (inherited by every command run), so that other
    work on a shared machine disturbs the measurements less; baselines get the same."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except (OSError, AttributeError):
        return "normal scheduling priority"
    return "run at nice -10"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny data, no goal judged")
    size.add_argument("--large", action="store_true", help="add the 1 GB log and 5,000 agents")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median)")
    parser.add_argument("--only", action="append", default=[], help="cases whose name has TEXT")
    args = parser.parse_args(argv)
    if shutil.which("zstd") is None:
        print("the baselines need zstd on PATH", file=sys.stderr)
        return 2
    profile = Profile.QUICK if args.quick else Profile.LARGE if args.large else Profile.DEFAULT
    started = time.perf_counter()
    load_before = loadavg()
    priority = raise_priority()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="dsh-fork-bench-") as tmp:
        base = Path(tmp)
        install = development_install() if args.quick else wheel_install(base)
        bench = Bench(base, max(1, args.repeat), profile, install)
        for case in CASES:
            if args.only and not any(text in case.__name__ for text in args.only):
                continue
            rows += case(bench)
    print()
    print(machine())
    print(f"dsh-fork measured: {install.how}")
    print(f"load average (1 min) before the run: {load_before}, after: {loadavg()}; {priority}")
    if shutil.which("jq") is None:
        print("jq is not installed: the inspect rows have no zstdcat|jq baseline")
    busy = max([float(load_before)] + [float(r.load) for r in rows if r.load != "-"])
    if busy >= 1.0 and profile is not Profile.QUICK:
        print(f"the machine was busy (load up to {busy:.2f}): verdicts are not claims")
    print_table(rows)
    print(f"\nbench took {time.perf_counter() - started:.0f} s")
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
