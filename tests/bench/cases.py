"""The cases of ``make bench``, in the order they run: each takes the bench, returns rows.

Every figure is CPU time (user + sys of the command's process tree), with wall time beside
it: on a shared machine CPU time moves little with the load, wall time a lot. A goal is set
against a floor measured on the same data in the same rounds: the read floor
(``harness.FLOOR``: decompress every frame in-process, split the lines, check each envelope
with msgspec), or for start-up ``python -c 'import typer'``.

To add a case, write a function ``(bench) -> list[Row]`` and list it in ``CASES``; build its
data through the shared builders below (``big_log``, ``crowded``, ``wide``), which make each
data set once per run, and judge goals with ``bench.judged`` (quick runs judge nothing).
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import zstandard

from dsh_fork.fixtureroot import generate, planted_phrase
from dsh_fork.fixtures import Clock, Ids, SessionSpec, write_log_file
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import CURRENT_NAME, LOCK_NAME, list_generations
from dsh_fork.layout import session_dir
from dsh_fork.reader import open_log

from .harness import (
    SETTLE_S,
    ArgvOf,
    Bench,
    Figures,
    Profile,
    Row,
    Run,
    busy_disk,
    copies,
    cpu,
    loadavg,
    log,
    mb,
    wall,
)

MIN_WORK_S = 0.05  # least floor work (beyond its start-up) a ratio beyond start-up is taken on
STARTUP_SLACK_S = 0.015  # start-up may cost this much CPU beyond importing typer
TURNS_PER_MB = 455  # fixture turns of 250 words: about 2.2 KB of JSON lines each
LOG_MB = {Profile.QUICK: (0.2,), Profile.DEFAULT: (10, 100), Profile.LARGE: (10, 100, 1000)}
AGENTS = {Profile.QUICK: (20,), Profile.DEFAULT: (1000,), Profile.LARGE: (1000, 5000)}
ROOTS = {Profile.QUICK: (200,), Profile.DEFAULT: (10_000, 100_000)}
ROOTS[Profile.LARGE] = ROOTS[Profile.DEFAULT]


def size_name(mbytes: float) -> str:
    return f"{mbytes / 1000:g} GB" if mbytes >= 1000 else f"{mbytes:g} MB"


def row(
    bench: Bench,
    case: str,
    ours: str,
    figures: Figures,
    floor: str,
    ratio: str,
    goal: str,
    ok: bool | None,
) -> Row:
    """A table row; the others' CPU is the meter's reading since the last row."""
    judged = None if ok is None else bench.judged(ok)
    contention = bench.contention.taken()
    return Row(
        case, ours, wall(figures), mb(figures), floor, ratio, goal, judged, loadavg(), contention
    )


def against_floor(
    bench: Bench, case: str, runs: list[list[Run]], what: str, limit: float | None
) -> Row:
    """The row of a case whose runs are (ours, the floor), whole runs: the CPU ratio, judged
    against ``limit`` (None: reported only)."""
    ours, floor = Figures.of(runs[0]), Figures.of(runs[1])
    ratio = ours.cpu / floor.cpu
    return row(
        bench,
        case,
        cpu(ours),
        ours,
        f"{cpu(floor)} ({what})",
        f"{ratio:.2f}×",
        "report" if limit is None else f"≤ {limit}×",
        None if limit is None else ratio <= limit,
    )


# -- shared data ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BigLog:
    root: Path
    session_id: str
    log: Path
    json_mb: float


def big_log(bench: Bench, mbytes: float) -> BigLog:
    """One session of ``mbytes`` MB of JSON lines (about 22 % of that compressed), in frames of
    about 64 KiB, with no subagents: what a long-running session looks like."""

    def build() -> BigLog:
        log(f"building a {size_name(mbytes)} log …")
        root = bench.base / f"big-{mbytes:g}" / "sessions"
        turns = max(10, int(mbytes * TURNS_PER_MB))
        summary = generate(
            root, sessions=1, agents=0, depth=0, turns=turns, words=250, frame_target=65536
        )
        path = next(root.glob(f"*/*/{CURRENT_NAME}"))
        with path.open("rb") as fh:
            reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
            plain = sum(iter(lambda: len(reader.read(1 << 22)), 0))
        log(f"  {path.stat().st_size / 1e6:.2f} MB compressed, {plain / 1e6:.1f} MB of JSON")
        return BigLog(root, summary.top_level[0], path, plain / 1e6)

    built = bench.cached(f"big-{mbytes}", build)
    assert isinstance(built, BigLog)
    return built


EARLIER_FORKS = 5


def forked_before(bench: Bench, big: BigLog) -> BigLog:
    """The large session in a root of its own with ``EARLIER_FORKS`` user forks of it, each
    holding the session's whole history: a fork asks each whether it is a delegation child
    (dsh-world §4), which its own range alone answers."""

    def build() -> BigLog:
        log(f"forking the {big.json_mb:.0f} MB log {EARLIER_FORKS} times …")
        root = big.root.parent.with_name(f"{big.root.parent.name}-forked") / "sessions"
        shutil.copytree(big.root, root, symlinks=True)
        for k in range(EARLIER_FORKS):
            fork_session(big.session_id, str(root), ForkOptions(child_id=f"session-earlier-{k}"))
        return replace(big, root=root, log=root / big.log.relative_to(big.root))

    built = bench.cached(f"forked-before-{big.root}", build)
    assert isinstance(built, BigLog)
    return built


def two_turns(bench: Bench) -> BigLog:
    """The smallest real fork: a session of two turns."""

    def build() -> BigLog:
        root = bench.base / "two-turns" / "sessions"
        summary = generate(root, sessions=1, agents=0, depth=0, turns=2)
        path = next(root.glob(f"*/*/{CURRENT_NAME}"))
        return BigLog(root, summary.top_level[0], path, path.stat().st_size / 1e6)

    built = bench.cached("two-turns", build)
    assert isinstance(built, BigLog)
    return built


def drop_forks(*roots: Path) -> Callable[[], None]:
    """Removes the children the timed forks made (untimed, between runs)."""

    def drop() -> None:
        for root in roots:
            for path in root.glob("*/bench-*"):
                shutil.rmtree(path)

    return drop


def wide(bench: Bench, agents: int) -> tuple[Path, str]:
    """A parent with ``agents`` small children (~20 events each) and a fork child of it made
    with ``--no-agents``: relink's work is to copy every child under the fork."""
    root = bench.base / f"wide-{agents}" / "sessions"
    summary = generate(root, sessions=1, agents=agents, depth=1, turns=3, seed=3)
    fork = "bench-fork"
    fork_session(
        summary.top_level[0],
        str(root),
        ForkOptions(child_id=fork, agents=False),
    )
    return root, fork


def filler(root: Path, count: int, seed: int) -> None:
    """Unrelated small sessions spread over 100 project dirs, written directly (a fixture
    root of 100,000 sessions through the durable writer would take minutes to build)."""
    ids = Ids(seed)
    clock = Clock()
    for i in range(count):
        spec = SessionSpec(id=ids(), created_at=clock(), cwd=f"/bench/filler-{i % 100}")
        spec.turn(clock, "filler")
        spec.flush()
        where = session_dir(root, spec.id, spec.cwd)
        write_log_file(where / CURRENT_NAME, spec.header_line(), spec.frame_plaintexts())
        (where / LOCK_NAME).touch()


def crowded(bench: Bench, total: int) -> tuple[Path, str]:
    """A root of ``total`` sessions, one of them a parent with 50 subagents."""

    def build() -> tuple[Path, str]:
        log(f"building a root of {total} sessions …")
        root = bench.base / f"crowded-{total}" / "sessions"
        summary = generate(root, sessions=1, agents=50, depth=1, turns=2, seed=5)
        filler(root, total - summary.sessions, seed=6)
        os.sync()
        return root, summary.top_level[0]

    built = bench.cached(f"crowded-{total}", build)
    assert isinstance(built, tuple)
    return built


def middle_turn_end(path: Path) -> int:
    """The ``turn/end`` nearest the middle of the log: a boundary inside a frame."""
    generation = list_generations(path.parent)[-1]
    ends = [ev.seq for ev in open_log(generation, collect=("turn/end",)).collected]
    return ends[len(ends) // 2]


# -- cases ----------------------------------------------------------------------------------


def same(argv: Sequence[str]) -> ArgvOf:
    """The same command for every run."""
    return lambda i: argv


def fork_argv(bench: Bench, big: BigLog, extra: Sequence[str]) -> ArgvOf:
    """A fork of the large session into a new child per run."""
    return lambda i: bench.dsh(big.root, "fork", big.session_id, "--id", f"bench-{i}", *extra)


def relink_argv(bench: Bench, targets: Sequence[Path], child: str) -> ArgvOf:
    """relink of the fork child in run i's own prepared copy of the root."""
    return lambda i: bench.dsh(targets[i] / "sessions", "relink", child)


RUNTIME_DEPS = ("msgspec", "orjson", "zstandard")
"""The runtime dependencies every command but a bare ``--version`` imports besides typer."""

IMPORTED = """
import sys
from dsh_fork.cli.app import main
sys.argv = ["dsh-fork", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(" ".join(sorted(m for m in sys.modules if m.startswith("dsh_fork"))), file=sys.stderr)
"""
"""A run of the console script's ``main`` that names the package's modules it imported."""


def empty_modules(base: Path, count: int, python: str) -> list[str]:
    """A package of ``count`` modules in all (the package and ``count - 1`` empty modules in
    it), compiled, on a path of its own; returns the names to import. What importing that
    many modules costs whatever they hold: the import machinery's floor."""
    package = base / "hollow"
    shutil.rmtree(base, ignore_errors=True)
    package.mkdir(parents=True)
    names = ["hollow"]
    (package / "__init__.py").write_text("")
    for i in range(1, count):
        (package / f"m{i}.py").write_text("")
        names.append(f"hollow.m{i}")
    subprocess.run([python, "-m", "compileall", "-q", str(package)], check=True)
    return names


def startup(bench: Bench) -> list[Row]:
    """What every run pays before its work: a bare ``--version`` (answered before typer is
    imported) and a fork of two turns with ``--json``, each against importing typer. Three
    rows beside them say where the fork's start-up goes: importing the runtime dependencies
    (before any of our code), then also as many empty modules as the fork imports of the
    package (the floor of any path through that many modules), then instead the package's
    modules the fork imports; the rest of the fork row is the run itself (typer's parsing,
    the fork, the interpreter's teardown)."""
    log("start-up …")
    small = two_turns(bench)
    fork = fork_argv(bench, small, ["--json"])
    probe = [bench.install.python, "-c", IMPORTED, *fork(0)[1:]]
    found = subprocess.run(probe, capture_output=True, env=bench.env, check=True, text=True)
    modules = found.stderr.strip().splitlines()[-1].split()  # the last line: warnings before
    drop_forks(small.root)()
    deps = "import typer, " + ", ".join(RUNTIME_DEPS)
    hollow_dir = bench.base / "empty-modules"
    hollow = empty_modules(hollow_dir, len(modules), bench.install.python)
    typer = same([bench.install.python, "-c", "import typer"])
    version = same([bench.install.dsh_fork, "--version"])
    imports = same([bench.install.python, "-c", f"{deps}, {', '.join(modules)}"])
    runtime = same([bench.install.python, "-c", deps])
    empty = same(
        [
            bench.install.python,
            "-c",
            f"import sys; sys.path.append({str(hollow_dir)!r}); {deps}, {', '.join(hollow)}",
        ]
    )
    commands = [typer, version, fork, runtime, empty, imports]
    runs = bench.rounds(commands, between=drop_forks(small.root))
    floor = Figures.of(runs[0])
    log(f"  a two-turn fork --json imports {len(modules)} modules of the package")
    rows = []
    for case, figures, goal in (
        ("start-up: --version", Figures.of(runs[1]), True),
        ("start-up: two-turn fork --json", Figures.of(runs[2]), True),
        (f"start-up: import {', '.join(RUNTIME_DEPS)}", Figures.of(runs[3]), False),
        ("start-up: … and as many empty modules", Figures.of(runs[4]), False),
        ("start-up: … and our modules a fork imports", Figures.of(runs[5]), False),
    ):
        beyond = figures.cpu - floor.cpu
        rows.append(
            row(
                bench,
                case,
                cpu(figures),
                figures,
                f"{cpu(floor)} (python -c 'import typer')",
                f"{beyond * 1000:+.0f} ms",
                f"≤ +{STARTUP_SLACK_S * 1000:.0f} ms" if goal else "report",
                beyond <= STARTUP_SLACK_S if goal else None,
            )
        )
    rows[1:] = [replace(r, contention=rows[0].contention) for r in rows[1:]]  # the same rounds
    return rows


def beyond_startup(runs: list[list[Run]]) -> float | None:
    """The median over rounds of (ours − ours on two turns) / (floor − floor on two turns):
    the CPU of the work itself, start-up taken off both; None when the floor's work is too
    small to divide by."""
    ours, floor, small, small_floor = runs
    work = Figures.of(floor).cpu - Figures.of(small_floor).cpu
    if work < MIN_WORK_S:
        return None
    ratios = [
        (mine.cpu - start.cpu) / (theirs.cpu - bare.cpu)
        for mine, theirs, start, bare in zip(ours, floor, small, small_floor, strict=True)
    ]
    return statistics.median(ratios)


def forks(bench: Bench) -> list[Row]:
    """fork as users run it (default: subagents too), with ``--no-agents`` and at a middle
    turn, against the read floor of the same log beyond start-up: each round also runs a
    two-turn fork and the floor of the two-turn log."""
    rows = []
    small = two_turns(bench)
    fixed = fork_argv(bench, small, [])
    tiny = same(bench.floor(small.log))
    for mbytes in LOG_MB[bench.profile]:
        big = big_log(bench, mbytes)
        size = size_name(mbytes)
        floor_argv = same(bench.floor(big.log))
        judged = mbytes >= 100
        forked = forked_before(bench, big)
        variants: list[tuple[str, BigLog, list[str]]] = [
            (f"fork, {size} log", big, []),
            (f"fork --no-agents, {size} log", big, ["--no-agents"]),
        ]
        if mbytes != 10:
            mid = str(middle_turn_end(big.log))
            variants.append((f"fork at a middle turn, {size} log", big, ["--at", mid]))
        variants.append((f"fork, {size} log forked {EARLIER_FORKS}× before", forked, []))
        drop = drop_forks(big.root, forked.root, small.root)
        for case, source, extra in variants:
            log(f"{case} …")
            runs = bench.rounds(
                [fork_argv(bench, source, extra), floor_argv, fixed, tiny], between=drop
            )
            ours, floor = Figures.of(runs[0]), Figures.of(runs[1])
            ratio = beyond_startup(runs)
            default = not extra and source is big
            goal_ok = ratio is not None and ratio <= 1.2 and ours.rss_mb <= 100
            rows.append(
                row(
                    bench,
                    case,
                    cpu(ours),
                    ours,
                    f"{cpu(floor)} (read floor)",
                    f"{ours.cpu / floor.cpu:.2f}× whole runs"
                    if ratio is None
                    else f"{ratio:.2f}× beyond start-up",
                    "≤ 1.2×, ≤ 100 MB" if default and judged else "report",
                    goal_ok if default and judged else None,
                )
            )
    return rows


def inspects(bench: Bench) -> list[Row]:
    rows = []
    for mbytes in LOG_MB[bench.profile]:
        big = big_log(bench, mbytes)
        case = f"inspect, {size_name(mbytes)} log"
        log(f"{case} …")
        runs = bench.rounds(
            [
                same(bench.dsh(big.root, "inspect", big.session_id, "--json")),
                same(bench.floor(big.log)),
            ]
        )
        rows.append(against_floor(bench, case, runs, "read floor", None))
    return rows


def empty(folder: Path) -> None:
    for path in folder.iterdir():
        path.unlink()


def exports(bench: Bench) -> list[Row]:
    """export of the large session (its dir: one log) against the read floor of its log plus
    ``tar`` of the same dir, whole runs; the export floor (``harness.EXPORT_FLOOR``: what an
    export cannot skip) in the same rounds, reported beside it."""
    mbytes = max(LOG_MB[bench.profile][:2])
    big = big_log(bench, mbytes)
    case = f"export, {size_name(mbytes)} log"
    log(f"{case} …")
    out = bench.base / "export-out"
    out.mkdir(exist_ok=True)
    session = big.log.parent
    tar = (
        f"tar -cf {out / 'floor.tar'} -C {session.parent.parent} "
        f"./{session.parent.name}/{session.name}"
    )
    floor_argv = ["/bin/sh", "-c", f"{' '.join(map(shlex.quote, bench.floor(big.log)))} && {tar}"]
    runs = bench.rounds(
        [
            lambda i: bench.dsh(
                big.root, "export", big.session_id, "-o", str(out / f"{i}.tar.zst")
            ),
            same(floor_argv),
            same(bench.export_floor(out / "export-floor.tar", session)),  # report
        ],
        between=lambda: empty(out),
    )
    rows = [against_floor(bench, case, runs[:2], "read floor + tar", 1.0)]
    case = f"export floor, {size_name(mbytes)} log"
    floor_row = against_floor(bench, case, [runs[2], runs[1]], "read floor + tar", None)
    return [*rows, replace(floor_row, contention=rows[0].contention)]  # the same rounds


def imports(bench: Bench) -> list[Row]:
    """import of the large session's export into an empty root (its dir: one log) against the
    read floor of its log plus ``cp`` of it, whole runs; reported (no goal). The archive is
    made outside the timed runs, and the root emptied again after each run."""
    mbytes = max(LOG_MB[bench.profile][:2])
    big = big_log(bench, mbytes)
    case = f"import, {size_name(mbytes)} log"
    log(f"{case} …")
    base = bench.base / "import-case"
    archive = base / "family.tar.zst"
    if not archive.exists():
        base.mkdir(exist_ok=True)
        subprocess.run(
            bench.dsh(big.root, "export", big.session_id, "-o", str(archive)),
            check=True,
            capture_output=True,
        )
    into = base / "into" / "sessions"
    copies = base / "cp"

    def fresh() -> None:
        for path in (into.parent, copies):
            shutil.rmtree(path, ignore_errors=True)
        into.mkdir(parents=True)
        copies.mkdir()

    fresh()
    floor = " ".join(map(shlex.quote, bench.floor(big.log)))
    floor_argv = ["/bin/sh", "-c", f"{floor} && cp {shlex.quote(str(big.log))} {copies}/"]
    runs = bench.rounds(
        [lambda i: bench.dsh(into, "import", str(archive)), same(floor_argv)], between=fresh
    )
    return [against_floor(bench, case, runs, "read floor + cp", None)]


def relinks(bench: Bench) -> list[Row]:
    """relink of a fork child onto N small subagents, on a quiet disk and with another process
    keeping the disk busy; every run on its own copy of the root, prepared in advance."""
    rows = []
    quiet_rss: float | None = None
    for agents in AGENTS[bench.profile]:
        log(f"relink of {agents} agents …")
        root, child = wide(bench, agents)
        tree = root.parent
        runs = bench.repeat + 1
        prepared = copies(tree, 2 * runs + 1, settle_s=0 if bench.quick else SETTLE_S)
        fresh = iter(prepared)

        def settle() -> None:
            os.sync()

        def cp_argv(i: int, source: Path = prepared[-1]) -> list[str]:
            return ["cp", "-a", str(source), str(source.with_name(f"{source.name}-cp{i}"))]

        cp, _ = bench.pair(cp_argv, None)
        for disk in ("quiet", "busy"):
            targets = [next(fresh) for _ in range(runs)]

            argv = relink_argv(bench, targets, child)
            if disk == "quiet":
                ours, _ = bench.pair(argv, None, between=settle)
            else:
                with busy_disk(bench.base):
                    ours, _ = bench.pair(argv, None)
            rate = agents / ours.wall
            floor = agents / cp.wall  # relink waits on the disk: its goal is in wall time
            goal = 1500 if disk == "quiet" else 400
            goal_text = f"≥ {goal}/s"
            ok = rate >= goal
            if disk == "quiet":
                if quiet_rss is not None:
                    goal_text += ", RSS flat"
                    ok = ok and ours.rss_mb <= quiet_rss + 20
                else:
                    quiet_rss = ours.rss_mb
            rows.append(
                row(
                    bench,
                    f"relink, {agents} agents, {disk} disk",
                    f"{cpu(ours)} ({rate:.0f} agents/s)",
                    ours,
                    f"cp -a {floor:.0f} agents/s (no fsync)",
                    f"{rate / floor:.2f}×",
                    goal_text,
                    ok,
                )
            )
        shutil.rmtree(tree)
        for path in tree.parent.glob(f"{tree.name}-copy*"):
            shutil.rmtree(path)
    return rows


ROOT_GOALS = {"list": 1.2, "doctor": 2.5}
"""The root commands judged against the read floor of the whole root; the others report."""


def listings(bench: Bench) -> list[Row]:
    """list, doctor, list-agents, tree and du of a whole root against its read floor (every
    log of the root read and checked), whole runs, at 10,000 and 100,000 sessions; and the
    list floor and the doctor floor (``harness.LIST_FLOOR``, ``harness.DOCTOR_FLOOR``: what a
    listing and doctor cannot skip), reported beside them."""
    rows: list[Row] = []
    for total in ROOTS[bench.profile]:
        root, parent = crowded(bench, total)
        commands = {
            "list": bench.dsh(root, "list", "--json"),
            "list floor": bench.list_floor(root),  # what a listing cannot skip (report)
            "doctor": bench.dsh(root, "doctor", "--json"),
            "doctor floor": bench.doctor_floor(root),  # what doctor cannot skip (report)
            "list-agents": bench.dsh(root, "list-agents", parent, "--json"),
            "tree": bench.dsh(root, "tree", "--json"),
            "du": bench.dsh(root, "du", "--json"),
        }
        log(f"a root of {total} sessions: {', '.join(commands)} …")
        runs = bench.rounds([same(bench.floor(root)), *map(same, commands.values())])
        first = len(rows)
        for command, command_runs in zip(commands, runs[1:], strict=True):
            case = f"{command}, {total} sessions"
            both = [command_runs, runs[0]]
            goal = ROOT_GOALS.get(command)
            rows.append(against_floor(bench, case, both, "read floor of the root", goal))
        for k in range(first + 1, len(rows)):  # the same rounds: the first row's reading
            rows[k] = replace(rows[k], contention=rows[first].contention)
    return rows


def many_forks(bench: Bench, total: int, forks: int, children: int) -> Path:
    """``forks`` parents with ``children`` subagents each and one fork child per parent, in a
    root of ``total`` sessions, relinked (untimed) so that every fork has its copies."""
    root = bench.base / "forks" / "sessions"
    summary = generate(root, sessions=forks, agents=children, depth=1, turns=2, seed=8)
    for parent in summary.top_level:
        fork_session(parent, str(root), ForkOptions(agents=False))
    filler(root, max(0, total - summary.sessions - 2 * forks), seed=9)
    bench.run(bench.dsh(root, "relink", "--all"))
    return root


def relinked(bench: Bench) -> list[Row]:
    """tree and du of a root of relinked forks (provenance of every copy exercised)."""
    total = ROOTS[bench.profile][0]
    forks = 10 if bench.quick else 200
    log(f"tree and du of {forks} relinked forks in a root of {total} sessions …")
    root = many_forks(bench, total, forks, 5)
    rows = []
    for command in ("tree", "du"):
        runs = bench.rounds([same(bench.dsh(root, command, "--json")), same(bench.floor(root))])
        case = f"{command}, {forks} relinked forks"
        rows.append(against_floor(bench, case, runs, "read floor of the root", None))
    shutil.rmtree(root.parent)
    return rows


# -- search ---------------------------------------------------------------------------------

SEARCH_ROOTS = {Profile.QUICK: (200,), Profile.DEFAULT: (10_000,), Profile.LARGE: (10_000,)}
SEARCH_FAMILIES = 20  # fixture trees (two subagents, a relinked fork) among the sessions


def phrase_root(bench: Bench, total: int) -> Path:
    """``total`` sessions whose every user message ends with a phrase said nowhere else: fork
    families from the fixture generator, then sessions of three tool turns written directly."""

    def build() -> Path:
        log(f"building a root of {total} sessions with planted phrases …")
        root = bench.base / f"phrases-{total}" / "sessions"
        families = min(SEARCH_FAMILIES, total // 10)
        summary = generate(
            root, sessions=families, agents=2, turns=3, tools=True, forks=1, relinked=True,
            phrases=True, seed=9,
        )  # fmt: skip
        ids, clock = Ids(10), Clock()
        for i in range(total - summary.sessions):
            spec = SessionSpec(id=ids(), created_at=clock(), cwd=f"/bench/search-{i % 100}")
            for turn in range(1, 4):
                text = f"filler words for a search {planted_phrase(1000 + i, '', turn)}"
                spec.tool_turn(clock, text, "bash", [f"grep -n thing file-{i}-{turn}.py"])
                spec.flush()
            where = session_dir(root, spec.id, spec.cwd)
            write_log_file(where / CURRENT_NAME, spec.header_line(), spec.frame_plaintexts())
            (where / LOCK_NAME).touch()
        os.sync()
        return root

    built = bench.cached(f"phrases-{total}", build)
    assert isinstance(built, Path)
    return built


def searches(bench: Bench) -> list[Row]:
    """search of a rare phrase and of a common word over the whole root, against the read
    floor of the same logs, whole runs, in the same rounds; the search floor (what a search
    cannot skip) in those rounds too, reported."""
    rows = []
    for total in SEARCH_ROOTS[bench.profile]:
        root = phrase_root(bench, total)
        for what, text, judged in (
            ("a phrase", planted_phrase(7, "", 2), True),
            ("a common word", "thing", False),  # 60,000 hits to decode: reported
        ):
            case = f"search {what}, {total} sessions"
            log(f"{case} …")
            ours, floor, search_floor = bench.rounds(
                [
                    same(bench.dsh(root, "search", text, "--json")),
                    same(bench.floor(root)),
                    same(bench.search_floor(root, text)),  # what a search cannot skip (report)
                ]
            )
            goal = 1.5 if judged else None
            rows.append(against_floor(bench, case, [ours, floor], "read floor of the root", goal))
            case = f"search floor, {what}, {total} sessions"
            floor_row = against_floor(
                bench, case, [search_floor, floor], "read floor of the root", None
            )
            rows.append(replace(floor_row, contention=rows[-1].contention))  # the same rounds
    return rows


CASES: tuple[Callable[[Bench], list[Row]], ...] = (
    startup,
    forks,
    inspects,
    exports,
    imports,
    relinks,
    listings,
    relinked,
    searches,
)
