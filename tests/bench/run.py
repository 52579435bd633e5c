"""``make bench``: every case timed side by side with a baseline measured in the same run.

Absolute times on shared machines are noisy, so each figure is reported as a ratio against a
baseline that does comparable work on the same data, in the same run. Data comes from the
project's own fixture layer. Run: ``python tests/bench/run.py [--quick] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from dsh_fork.fixtures import Clock, Ids, SessionSpec, generate

BIN = Path(sys.executable).parent
DSH_FORK = str(BIN / "dsh-fork")


@dataclass
class Row:
    case: str
    ours: str
    baseline: str
    ratio: str
    goal: str
    ok: bool


def timed(argv: Sequence[str], *, env: dict[str, str] | None = None, shell: bool = False) -> float:
    """Wall time of one subprocess run; stdout discarded; a failure aborts the benchmark."""
    start = time.perf_counter()
    proc = subprocess.run(
        argv if not shell else argv[0],
        shell=shell,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {argv}\n{proc.stderr!r}")
    return elapsed


def peak_rss_mb(argv: Sequence[str]) -> float:
    """Peak resident set size of one subprocess, from its own rusage."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"benchmark command failed: {argv}")
    return usage.ru_maxrss / 1024


def best(samples: list[float]) -> float:
    """The median: robust to one slow run on a shared machine."""
    return statistics.median(samples)


def repeat(n: int, action: Callable[[], float], reset: Callable[[], None] | None = None) -> float:
    samples = []
    for _ in range(n):
        if reset is not None:
            reset()
        samples.append(action())
    return best(samples)


# -- data -----------------------------------------------------------------------------------


def big_session(base: Path, turns: int, words: int) -> tuple[Path, str, Path]:
    """One large session: ~100 MB and ~300k events at full size, frames of ~64 KiB."""
    root = base / "big" / "sessions"
    summary = generate(
        root, sessions=1, agents=0, depth=0, turns=turns, words=words, frame_target=65536
    )
    session_id = summary.top_level[0]
    log = next(root.glob("*/*/session.v4.jsonl.zstd"))
    return root, session_id, log


def wide_parent(base: Path, children: int) -> tuple[Path, str]:
    """A parent with many small children (~20 events each), plus a fork child of it."""
    root = base / "wide" / "sessions"
    summary = generate(root, sessions=1, agents=children, depth=1, turns=3, seed=3)
    parent = summary.top_level[0]
    subprocess.run(
        [DSH_FORK, "--root", str(root), "fork", parent, "--id", "bench-fork", "--no-agents"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return root, "bench-fork"


def filler(root: Path, count: int, seed: int) -> None:
    """Unrelated small sessions spread over 100 project dirs."""
    ids = Ids(seed)
    clock = Clock()
    for i in range(count):
        spec = SessionSpec(id=ids(), created_at=clock(), cwd=f"/bench/filler-{i % 100}")
        spec.turn(clock, "filler")
        spec.flush()
        spec.publish(root)


def crowded_root(base: Path, total: int, children: int) -> tuple[Path, str]:
    """``total`` sessions, one of them a parent with ``children`` subagents."""
    root = base / "crowded" / "sessions"
    summary = generate(root, sessions=1, agents=children, depth=1, turns=2, seed=5)
    filler(root, total - summary.sessions, seed=6)
    return root, summary.top_level[0]


def many_forks(base: Path, total: int, forks: int, children: int) -> Path:
    """``forks`` parents with ``children`` subagents each, one fork child per parent."""
    root = base / "forks" / "sessions"
    summary = generate(root, sessions=forks, agents=children, depth=1, turns=2, seed=8)
    for parent in summary.top_level:
        subprocess.run(
            [DSH_FORK, "--root", str(root), "fork", parent, "--no-agents"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    filler(root, max(0, total - summary.sessions - forks), seed=9)
    return root


def first_bytes_loop(root: Path) -> float:
    """Baseline for list-agents: open every log of the root and read its first 64 bytes."""
    code = (
        "import os,sys\n"
        "r=sys.argv[1]\n"
        "for p in os.listdir(r):\n"
        "  pp=os.path.join(r,p)\n"
        "  for s in os.listdir(pp):\n"
        "    f=os.path.join(pp,s,'session.v4.jsonl.zstd')\n"
        "    with open(f,'rb') as h: h.read(64)\n"
    )
    return timed([sys.executable, "-c", code, str(root)])


# -- cases ----------------------------------------------------------------------------------


def run(quick: bool, n: int) -> list[Row]:
    rows: list[Row] = []
    scale = 0.05 if quick else 1.0
    with tempfile.TemporaryDirectory(prefix="dsh-fork-bench-") as tmp:
        base = Path(tmp)
        print("building data …", file=sys.stderr)
        big_root, big_id, big_log = big_session(base, int(50_000 * scale) or 10, words=250)
        size_mb = big_log.stat().st_size / 1e6
        print(f"  big session: {size_mb:.1f} MB compressed", file=sys.stderr)

        def drop_forks() -> None:
            for path in big_root.glob("*/bench-*"):
                shutil.rmtree(path)

        zstd_floor = repeat(n, lambda: timed(["zstd", "-dcq", str(big_log), "-o", os.devnull]))
        fork_last = repeat(
            n,
            lambda: timed(
                [
                    DSH_FORK,
                    "--root",
                    str(big_root),
                    "fork",
                    big_id,
                    "--id",
                    "bench-last",
                    "--no-agents",
                ]
            ),
            drop_forks,
        )
        rows.append(ratio_row("fork at the last turn", fork_last, zstd_floor, 1.5, "zstd -dc"))
        events = read_event_count(big_root, big_id)
        mid = middle_turn_end(big_root, big_id, events)
        fork_mid = repeat(
            n,
            lambda: timed(
                [
                    DSH_FORK,
                    "--root",
                    str(big_root),
                    "fork",
                    big_id,
                    "--at",
                    str(mid),
                    "--id",
                    "bench-mid",
                    "--no-agents",
                ]
            ),
            drop_forks,
        )
        drop_forks()
        rows.append(ratio_row("fork at a middle turn", fork_mid, zstd_floor, 1.5, "zstd -dc"))
        inspect = repeat(
            n, lambda: timed([DSH_FORK, "--root", str(big_root), "inspect", big_id, "--json"])
        )
        jq = repeat(
            max(1, n // 2),
            lambda: timed(
                [f"zstdcat {big_log} | jq -c .type | sort | uniq -c > /dev/null"], shell=True
            ),
        )
        rows.append(ratio_row("inspect summary", inspect, jq, 0.5, "zstdcat|jq|sort|uniq"))

        rss_fork = peak_rss_mb(
            [DSH_FORK, "--root", str(big_root), "fork", big_id, "--id", "bench-rss", "--no-agents"]
        )
        drop_forks()
        rss_inspect = peak_rss_mb([DSH_FORK, "--root", str(big_root), "inspect", big_id, "--json"])
        full = not quick
        rows.append(
            Row(
                "peak memory: fork",
                f"{rss_fork:.0f} MB",
                "-",
                "-",
                "≤ 100 MB",
                rss_fork <= 100 or not full,
            )
        )
        rows.append(
            Row(
                "peak memory: inspect",
                f"{rss_inspect:.0f} MB",
                "-",
                "-",
                "≤ 300 MB",
                rss_inspect <= 300 or not full,
            )
        )

        agents = max(20, int(1000 * scale))
        wide_root, fork_child = wide_parent(base, agents)
        pristine = base / "wide-pristine"
        shutil.copytree(wide_root.parent, pristine)

        def reset_wide() -> None:
            shutil.rmtree(wide_root.parent)
            shutil.copytree(pristine, wide_root.parent)

        relink_time = repeat(
            n, lambda: timed([DSH_FORK, "--root", str(wide_root), "relink", fork_child]), reset_wide
        )
        rate = agents / relink_time
        rows.append(
            Row(
                "relink",
                f"{rate:.0f} agents/s",
                "0.29 agents/s (plugin)",
                f"{rate / 0.29:.0f}×",
                "≥ 300 agents/s",
                rate >= 300,
            )
        )

        total = max(200, int(10_000 * scale))
        crowded, parent = crowded_root(base, total, 50)
        listing = repeat(
            n, lambda: timed([DSH_FORK, "--root", str(crowded), "list-agents", parent, "--json"])
        )
        loop = repeat(n, lambda: first_bytes_loop(crowded))
        rows.append(
            Row(
                "list-agents",
                f"{listing:.3f} s",
                f"{loop:.3f} s",
                f"{listing / loop:.2f}×",
                "≤ 3× and ≤ 1 s",
                listing <= 3 * loop and listing <= 1.0,
            )
        )

        forks_root = many_forks(base, total, max(10, int(200 * scale)), 5)
        sessions = sum(1 for _ in forks_root.glob("*/*"))
        relink_all = timed([DSH_FORK, "--root", str(forks_root), "relink", "--all"])
        rows.append(
            Row(
                "relink --all",
                f"{sessions / relink_all:.0f} sessions/s",
                f"{sessions} sessions",
                f"{relink_all:.2f} s",
                "report",
                True,
            )
        )
    return rows


def ratio_row(case: str, ours: float, base: float, goal: float, what: str) -> Row:
    ratio = ours / base
    return Row(
        case,
        f"{ours:.3f} s",
        f"{base:.3f} s ({what})",
        f"{ratio:.2f}×",
        f"≤ {goal}×",
        ratio <= goal,
    )


def read_event_count(root: Path, session_id: str) -> int:
    out = subprocess.run(
        [DSH_FORK, "--root", str(root), "inspect", session_id, "--json"],
        check=True,
        capture_output=True,
    ).stdout
    report = orjson.loads(out)
    return int(report["events"]["total"])


def middle_turn_end(root: Path, session_id: str, events: int) -> int:
    """A turn/end near the middle: the fixture's turns are 6 events long after seq 0."""
    del root, session_id
    turn = (events // 6) // 2
    return turn * 6 + 5


def print_table(rows: list[Row]) -> None:
    header = ("case", "ours", "baseline", "ratio", "goal", "pass")
    cells = [header] + [
        (r.case, r.ours, r.baseline, r.ratio, r.goal, "pass" if r.ok else "FAIL") for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for k, row in enumerate(cells):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny data: a smoke run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median)")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = run(args.quick, args.repeat)
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print_table(rows)
    print(f"\nbench took {time.perf_counter() - started:.0f} s")
    if not all(r.ok for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
