"""``make bench`` works: every case of the harness runs once on tiny data (issues 6 and 15).

Times on tiny data mean nothing, so no goal is judged here (``--quick``); what is checked is
that each case's commands succeed against their baselines and that the table has every row.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from bench import harness
from bench.harness import Contention, Row
from bench.run import OTHERS_BUSY, STEAL_BUSY, idle_verdict
from conftest import log_lines, run_cli

from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import generate, planted_phrase
from dsh_fork.fixtures import write_log_file
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.search import search

REPO = Path(__file__).resolve().parent.parent
CASES = (
    "start-up: --version",
    "start-up: two-turn fork --json",
    "start-up: import msgspec, orjson, zstandard",
    "start-up: … and as many empty modules",
    "start-up: … and our modules a fork imports",
    "fork, 0.2 MB log",
    "fork --no-agents, 0.2 MB log",
    "fork at a middle turn, 0.2 MB log",
    "fork, 0.2 MB log forked 5× before",
    "inspect, 0.2 MB log",
    "export, 0.2 MB log",
    "export floor, 0.2 MB log",
    "import, 0.2 MB log",
    "relink, 20 agents, quiet disk",
    "relink, 20 agents, busy disk",
    "list, 200 sessions",
    "list floor, 200 sessions",
    "doctor, 200 sessions",
    "doctor floor, 200 sessions",
    "list-agents, 200 sessions",
    "tree, 200 sessions",
    "du, 200 sessions",
    "tree, 10 relinked forks",
    "du, 10 relinked forks",
    "search a phrase, 200 sessions",
    "search floor, a phrase, 200 sessions",
    "search a common word, 200 sessions",
    "search floor, a common word, 200 sessions",
)


def test_the_benchmark_runs_every_case_on_tiny_data() -> None:
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
    assert header == [
        "case", "CPU", "wall", "peak RSS", "floor (CPU)", "ratio", "goal", "pass", "load", "others"
    ]  # fmt: skip
    rows = {line.split("|")[1].strip(): line.split("|")[1:-1] for line in table[1:]}
    assert list(rows) == list(CASES)
    for cells in rows.values():
        assert re.match(r"\d+(\.\d+)? m?s\b", cells[1].strip()), cells[1]  # CPU time
        assert re.fullmatch(r"\d+(\.\d+)? m?s", cells[2].strip()), cells[2]  # wall time
        assert cells[3].strip().endswith(" MB")  # every case reports its peak memory
        assert cells[7].strip() == "-"  # quick mode judges no goal
        if Path("/proc/stat").exists():  # every case measured what the rest took of the CPUs
            assert re.fullmatch(r"\d+%(, steal \d+%)?", cells[9].strip()), cells[9]


def test_the_search_floor_counts_the_events_search_finds_with_inherited(tmp_path: Path) -> None:
    # The floor matches every event of the searched types, inherited prefixes included: on
    # planted phrases (said once, copied into forks and copies) it counts what search
    # --inherited counts, so it does the work a search does, no less.
    root = tmp_path / "sessions"
    generate(root, sessions=3, agents=1, turns=2, tools=True, forks=1, relinked=True, phrases=True)
    found = []
    for phrase in (planted_phrase(0, "", 1), planted_phrase(1, "", 2), planted_phrase(2, "1", 1)):
        floor = subprocess.run(
            [sys.executable, "-c", harness.SEARCH_FLOOR, str(root), phrase],
            capture_output=True,
            text=True,
            check=True,
        )
        total = search(Root(root), phrase, inherited=True).document.total
        assert int(floor.stdout) == total
        found.append(total)
    assert min(found) >= 2  # each said once and inherited at least once


def test_the_export_floor_hashes_and_archives_what_export_does(tmp_path: Path) -> None:
    # The floor prints the sha256 export's manifest records for each log, and its tar holds
    # each session dir's log byte for byte: it does the work an export cannot skip, no less.
    root = tmp_path / "sessions"
    top = generate(root, sessions=1, agents=2, depth=1, turns=3).top_level[0]
    result = run_cli("--root", root, "export", top, "-o", tmp_path / "f.tar.zst", "--json")
    assert result.exit_code == 0, result.stderr
    files = [session["file"] for session in result.json()["manifest"]["sessions"]]
    dirs = [root / Path(file["path"]).parent.relative_to("sessions") for file in files]
    floor = subprocess.run(
        [sys.executable, "-c", harness.EXPORT_FLOOR, str(tmp_path / "floor.tar"), *map(str, dirs)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert floor.stdout.split() == [file["sha256"] for file in files]
    with tarfile.open(tmp_path / "floor.tar") as tar:
        for file in files:
            member = tar.extractfile(str(Path(file["path"]).relative_to("sessions")))
            assert member is not None
            assert member.read() == (root.parent / file["path"]).read_bytes()


def test_the_export_floor_refuses_a_log_whose_seqs_skip(tmp_path: Path) -> None:
    # DSH refuses such a log, so an export checks every seq: the floor must too.
    root = tmp_path / "sessions"
    top = generate(root, sessions=1, agents=0, turns=3).top_level[0]
    session = next(root.glob(f"*/{top}"))
    header, *events = log_lines(session / CURRENT_NAME)
    del events[1]  # the seqs now go 0, 2, 3, …
    write_log_file(session / CURRENT_NAME, header, [line + b"\n" for line in events])
    floor = subprocess.run(
        [sys.executable, "-c", harness.EXPORT_FLOOR, str(tmp_path / "floor.tar"), str(session)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert floor.returncode == 1
    assert "seq 1 skipped" in floor.stderr


def _row(case: str, ok: bool | None, shares: tuple[float, float] | None) -> Row:
    return Row(case, "1 s", "2 s", "9 MB", "-", "1×", "≤ 1×", ok, "2.00", shares)


def test_a_machine_busy_only_with_our_own_processes_is_judged_idle() -> None:
    # Load 2 on two cores is our own listing; others took 3 %: idle.
    rows = [_row("list, 10 sessions", True, (0.03, 0.0)), _row("inspect", None, (0.9, 0.0))]
    verdict = idle_verdict(rows, load_before=2.0)
    assert verdict.startswith("the machine was idle for the judged cases")
    assert "up to 3% of the CPUs" in verdict  # a report-only row (inspect) is not judged


def test_others_or_steal_beyond_their_bound_make_the_run_busy() -> None:
    others = idle_verdict([_row("tree", False, (OTHERS_BUSY, 0.0))], load_before=0.0)
    assert others.startswith("the machine was busy") and "worst: tree" in others
    stolen = idle_verdict([_row("du", True, (0.0, STEAL_BUSY))], load_before=0.0)
    assert stolen.startswith("the machine was busy") and "steal up to 5%" in stolen
    # the worst case is the one furthest beyond its bound, each share against its own
    both = [_row("tree", True, (0.11, 0.0)), _row("du", True, (0.0, 0.2))]
    assert "worst: du" in idle_verdict(both, load_before=0.0)
    # the busy-disk case keeps another process busy on purpose: never held against the run
    hog = idle_verdict([_row("relink, 9 agents, busy disk", True, (0.5, 0.0))], 0.0)
    assert hog == "no judged case measured the others' CPU: judge by the load column"


def test_the_meter_subtracts_our_own_cpu_and_reports_steal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Scripted counters: the machine busy 3.0 CPU-s over a run, 2.5 of them ours (the
    # command and its waited children), 0.2 s stolen, on 2 CPUs.
    machine = iter([(100.0, 10.0, 2), (103.0, 10.2, 2)])
    ours = iter([7.0, 9.5])
    monkeypatch.setattr(harness, "_cpu_counters", lambda: next(machine))
    monkeypatch.setattr(harness, "_own_cpu", lambda: next(ours))
    meter = Contention()
    with meter.measuring():
        pass
    assert meter.foreign == pytest.approx(0.5) and meter.steal == pytest.approx(0.2)
    assert meter.cpus == 2
    assert meter.wall > 0
    # over 1 s of runs on 2 CPUs: a quarter taken by others, a tenth stolen
    assert Contention(wall=1.0, foreign=0.5, steal=0.2, cpus=2).shares() == pytest.approx(
        (0.25, 0.1)
    )
    assert meter.taken() is not None
    assert meter.taken() is None  # taken: the next case starts from nothing


def test_the_meter_reads_nothing_without_proc_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "_cpu_counters", lambda: None)
    meter = Contention()
    with meter.measuring():
        pass
    assert meter.taken() is None


def test_the_counters_of_this_machine_are_read_when_it_has_them() -> None:
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat here")
    counters = harness._cpu_counters()
    assert counters is not None
    busy, stolen, cpus = counters
    assert busy > 0 and stolen >= 0 and cpus >= 1
    # The child spins until it has used 0.1 s of its own CPU, however busy the machine is (its
    # clock is CPU time, not wall time), so the count below does not depend on the load.
    spin = [sys.executable, "-c", "import time\nwhile time.process_time() < 0.1: pass"]
    before = harness._own_cpu()
    subprocess.run(spin, check=True)
    assert harness._own_cpu() - before >= 0.1  # a waited child's CPU is counted as ours


def test_a_row_shows_others_and_steal_only_when_there_is_steal() -> None:
    assert _row("a", True, (0.03, 0.0)).others == "3%"
    assert _row("a", True, (0.01, 0.13)).others == "1%, steal 13%"
    assert _row("a", True, None).others == "-"
