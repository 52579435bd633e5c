"""``make bench``: every case measured side by side with its floor, in the same run.

Each figure is the CPU time (user + sys) of the command's process tree, wall time beside it:
on a shared machine CPU time moves little with the load and wall time a lot. Each is set
against a floor that does the work no reader can skip on the same data (``harness.FLOOR``),
measured in the same rounds; the commands run in turns and each figure is the median of
several runs. The commands run as a user runs them: the installed
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
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .cases import CASES
from .harness import Bench, Profile, Row, development_install, loadavg, wheel_install


def print_table(rows: list[Row]) -> None:
    header = (
        "case", "CPU", "wall", "peak RSS", "floor (CPU)", "ratio", "goal", "pass", "load", "others"
    )  # fmt: skip
    verdict = {True: "pass", False: "FAIL", None: "-"}
    cells = [header] + [
        (r.case, r.ours, r.wall, r.rss, r.floor, r.ratio, r.goal, verdict[r.ok], r.load, r.others)
        for r in rows
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


OTHERS_BUSY = 0.10
"""Other processes' share of all CPUs during a case's runs from which a machine is busy."""
STEAL_BUSY = 0.05
"""The hypervisor's stolen share from which a virtual machine is busy."""


def idle_verdict(rows: list[Row], load_before: float) -> str:
    """Whether the machine was idle while the goals were measured: judged on the CPU the rest
    of the machine took during each judged case (``harness.Contention``), which the load
    average cannot separate from our own processes. The busy-disk case is busy by design."""
    judged = [r for r in rows if r.ok is not None and "busy disk" not in r.case]
    measured = [(r, r.contention) for r in judged if r.contention is not None]
    if not measured:  # no /proc/stat, or no judged case
        if load_before >= 1.0:
            return f"the machine was busy (load {load_before:.2f} before): verdicts are not claims"
        return "no judged case measured the others' CPU: judge by the load column"
    others = max(shares[0] for _, shares in measured)
    stolen = max(shares[1] for _, shares in measured)
    summary = f"other processes took up to {others:.0%} of the CPUs, steal up to {stolen:.0%}"
    if others >= OTHERS_BUSY or stolen >= STEAL_BUSY:
        worst = max(measured, key=lambda m: max(m[1][0] / OTHERS_BUSY, m[1][1] / STEAL_BUSY))[0]
        return f"the machine was busy ({summary}; worst: {worst.case}): verdicts are not claims"
    return f"the machine was idle for the judged cases ({summary})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny data, no goal judged")
    size.add_argument("--large", action="store_true", help="add the 1 GB log and 5,000 agents")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median)")
    parser.add_argument("--only", action="append", default=[], help="cases whose name has TEXT")
    args = parser.parse_args(argv)
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
    if profile is not Profile.QUICK:
        print(idle_verdict(rows, float(load_before)))
    print_table(rows)
    print(f"\nbench took {time.perf_counter() - started:.0f} s")
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
