"""The cases of ``make bench``, in the order they run: each takes the bench, returns rows.

To add a case, write a function ``(bench) -> list[Row]`` and list it in ``CASES``; build its
data through the shared builders below (``big_log``, ``crowded``, ``wide``), which make each
data set once per run, and judge goals with ``bench.judged`` (quick runs judge nothing).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import zstandard

from dsh_fork.fixtures import Clock, Ids, SessionSpec, generate, planted_phrase, write_log_file
from dsh_fork.fork import fork_session
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
    busy_disk,
    copies,
    loadavg,
    log,
    mb,
    seconds,
    shell,
)

MIN_WORK_S = 0.05  # least zstd work (beyond its start-up) a ratio beyond start-up is taken on
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
    baseline: str,
    ratio: str,
    goal: str,
    ok: bool | None,
) -> Row:
    """A table row; the others' CPU is the meter's reading since the last row."""
    judged = None if ok is None else bench.judged(ok)
    contention = bench.contention.taken()
    return Row(case, ours, mb(figures), baseline, ratio, goal, judged, loadavg(), contention)


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
        summary.top_level[0], str(root), at=None, child_id=fork, agents=False, dry_run=False
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


def scan_floor(bench: Bench, root: Path) -> list[str]:
    """The floor of a listing: one listdir of each session dir and one read of its header."""
    code = (
        "import os,sys\n"
        "r=sys.argv[1]\n"
        "for p in os.listdir(r):\n"
        "  pp=os.path.join(r,p)\n"
        "  for s in os.listdir(pp):\n"
        "    d=os.path.join(pp,s)\n"
        "    os.listdir(d)\n"
        f"    with open(os.path.join(d,{CURRENT_NAME!r}),'rb') as h: h.read(4096)\n"
    )
    return [bench.install.python, "-c", code, str(root)]


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


def fork_startup(bench: Bench) -> tuple[Figures, Figures]:
    """(``--version``, a two-turn fork): what every command pays before its real work."""

    def measure() -> tuple[Figures, Figures]:
        small = two_turns(bench)
        version, _ = bench.pair(lambda i: [bench.install.dsh_fork, "--version"], None)
        fork, _ = bench.pair(
            lambda i: bench.dsh(small.root, "fork", small.session_id, "--id", f"bench-two-{i}"),
            None,
            between=drop_forks(small.root),
        )
        return version, fork

    built = bench.cached("fork-startup", measure)
    assert isinstance(built, tuple)
    return built


def startup(bench: Bench) -> list[Row]:
    log("start-up …")
    python, _ = bench.pair(lambda i: [bench.install.python, "-c", "pass"], None)
    typer, _ = bench.pair(lambda i: [bench.install.python, "-c", "import typer"], None)
    version, fork = fork_startup(bench)
    rows = []
    for case, figures, goal, floor, what in (
        ("start-up: --version", version, 0.040, python, "python -c pass"),
        # Every command but a bare --version imports typer: its import is the floor.
        ("start-up: two-turn fork", fork, 0.055, typer, "python -c 'import typer'"),
    ):
        rows.append(
            row(
                bench,
                case,
                seconds(figures),
                figures,
                f"{seconds(floor)} ({what})",
                f"{figures.wall / floor.wall:.2f}×",
                f"≤ {goal * 1000:.0f} ms",
                figures.wall <= goal,
            )
        )
    # Both rows come from the same runs: the second shares the first's reading.
    rows[1] = replace(rows[1], contention=rows[0].contention)
    return rows


def forks(bench: Bench) -> list[Row]:
    """fork as users run it (default: subagents too) and with ``--no-agents``, against
    ``zstd -dc`` of the same log beyond start-up: each round also runs a two-turn fork and
    ``zstd`` on a tiny log, and the ratio is the median over rounds of
    (fork - two-turn fork) / (zstd - tiny zstd)."""
    rows = []
    small = two_turns(bench)
    fixed = fork_argv(bench, small, [])
    tiny = same(["zstd", "-dcq", str(small.log), "-o", os.devnull])
    for mbytes in LOG_MB[bench.profile]:
        big = big_log(bench, mbytes)
        size = size_name(mbytes)
        zstd = same(["zstd", "-dcq", str(big.log), "-o", os.devnull])
        copy = big.root.parent / "cp-copy"
        cp_figures, _ = bench.pair(same(["cp", str(big.log), str(copy)]), None)
        copy.unlink()
        judged = mbytes >= 100
        variants: list[tuple[str, list[str]]] = [
            (f"fork, {size} log", []),
            (f"fork --no-agents, {size} log", ["--no-agents"]),
        ]
        if mbytes != 10:
            mid = str(middle_turn_end(big.log))
            variants.append((f"fork at a middle turn, {size} log", ["--at", mid]))
        drop = drop_forks(big.root, small.root)
        for case, extra in variants:
            log(f"{case} …")
            runs = bench.rounds([fork_argv(bench, big, extra), zstd, fixed, tiny], between=drop)
            ours, floor = Figures.of(runs[0]), Figures.of(runs[1])
            ratios = [
                (mine.wall - start.wall) / (theirs.wall - bare.wall)
                for mine, theirs, start, bare in zip(*runs, strict=True)
            ]
            # Below ~50 ms of zstd work the difference of differences is mostly noise.
            beyond = floor.wall - Figures.of(runs[3]).wall >= MIN_WORK_S
            ratio = statistics.median(ratios) if beyond else None
            default = not extra
            goal_ok = ratio is not None and ratio <= 1.2 and ours.rss_mb <= 100
            rows.append(
                row(
                    bench,
                    case,
                    seconds(ours),
                    ours,
                    f"zstd -dc {seconds(floor)}; cp {seconds(cp_figures)}",
                    f"{ours.wall / floor.wall:.2f}× whole runs"
                    if ratio is None
                    else f"{ratio:.2f}× beyond start-up",
                    "≤ 1.2×, ≤ 100 MB" if default and judged else "report",
                    goal_ok if default and judged else None,
                )
            )
    return rows


def inspects(bench: Bench) -> list[Row]:
    rows = []
    has_jq = shutil.which("jq") is not None and shutil.which("zstdcat") is not None
    for mbytes in LOG_MB[bench.profile]:
        big = big_log(bench, mbytes)
        case = f"inspect, {size_name(mbytes)} log"
        log(f"{case} …")
        pipeline = f"zstdcat {big.log} | jq -c .type | sort | uniq -c > /dev/null"
        ours, slow = bench.pair(
            same(bench.dsh(big.root, "inspect", big.session_id, "--json")),
            shell(pipeline) if has_jq else None,
        )
        judged = mbytes <= 100 and slow is not None
        ratio = "-" if slow is None else f"{ours.wall / slow.wall:.2f}×"
        rows.append(
            row(
                bench,
                case,
                seconds(ours),
                ours,
                "jq not installed"
                if slow is None
                else f"{seconds(slow)} (zstdcat, jq -c .type, sort, uniq -c)",
                ratio,
                "≤ 0.5×" if judged else "report",
                slow is not None and ours.wall / slow.wall <= 0.5 if judged else None,
            )
        )
    return rows


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
            floor = agents / cp.wall
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
                    f"{rate:.0f} agents/s",
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


NEW_COMMANDS = ("list", "tree", "du")  # each within 1.5× of list-agents on 100,000 sessions


def listings(bench: Bench) -> list[Row]:
    """list-agents, then list, tree and du of the whole root, against the listing floor."""
    rows = []
    for total in ROOTS[bench.profile]:
        root, parent = crowded(bench, total)
        floor_argv = scan_floor(bench, root)
        case = f"list-agents, {total} sessions"
        log(f"{case} …")
        agents, floor = bench.pair(
            same(bench.dsh(root, "list-agents", parent, "--json")), floor_argv
        )
        assert floor is not None
        ratio = agents.wall / floor.wall
        if total >= 100_000:
            goal, ok = "≤ 1.3×", ratio <= 1.3
        else:
            goal, ok = "≤ 0.2 s", agents.wall <= 0.2
        floor_text = f"{seconds(floor)} (listdir + header read per dir)"
        rows.append(
            row(bench, case, seconds(agents), agents, floor_text, f"{ratio:.2f}×", goal, ok)
        )
        for command in NEW_COMMANDS:
            case = f"{command}, {total} sessions"
            log(f"{case} …")
            ours, floor = bench.pair(same(bench.dsh(root, command, "--json")), floor_argv)
            assert floor is not None
            judged = total >= 100_000
            rows.append(
                row(
                    bench,
                    case,
                    seconds(ours),
                    ours,
                    f"{seconds(floor)} (listdir + header read per dir)",
                    f"{ours.wall / floor.wall:.2f}×; {ours.wall / agents.wall:.2f}× list-agents",
                    "≤ 1.5× list-agents" if judged else "report",
                    ours.wall <= 1.5 * agents.wall if judged else None,
                )
            )
    return rows


def many_forks(bench: Bench, total: int, forks: int, children: int) -> Path:
    """``forks`` parents with ``children`` subagents each and one fork child per parent, in a
    root of ``total`` sessions, relinked (untimed) so that every fork has its copies."""
    root = bench.base / "forks" / "sessions"
    summary = generate(root, sessions=forks, agents=children, depth=1, turns=2, seed=8)
    for parent in summary.top_level:
        fork_session(parent, str(root), at=None, child_id=None, agents=False, dry_run=False)
    filler(root, max(0, total - summary.sessions - 2 * forks), seed=9)
    bench.run(bench.dsh(root, "relink", "--all"))
    return root


def relinked(bench: Bench) -> list[Row]:
    """tree and du of a root of relinked forks (provenance of every copy exercised)."""
    total = ROOTS[bench.profile][0]
    forks = 10 if bench.quick else 200
    log(f"tree and du of {forks} relinked forks in a root of {total} sessions …")
    root = many_forks(bench, total, forks, 5)
    floor_argv = scan_floor(bench, root)
    rows = []
    for command in ("tree", "du"):
        ours, floor = bench.pair(same(bench.dsh(root, command, "--json")), floor_argv)
        assert floor is not None
        rows.append(
            row(
                bench,
                f"{command}, {forks} relinked forks",
                seconds(ours),
                ours,
                f"{seconds(floor)} (listdir + header read per dir)",
                f"{ours.wall / floor.wall:.2f}×",
                "report",
                None,
            )
        )
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


READ_FLOOR = (
    "import os,sys\n"
    "from dsh_fork import frames as z\n"
    "from dsh_fork.envelopes import checked_run\n"
    "r=sys.argv[1]\n"
    "none=frozenset()\n"
    "for p in sorted(os.listdir(r)):\n"
    "  for s in sorted(os.listdir(os.path.join(r,p))):\n"
    "    d=os.path.join(r,p,s)\n"
    "    names=sorted(n for n in os.listdir(d) if n.startswith('session.v'))\n"
    "    with open(os.path.join(d,names[-1]),'rb') as h: data=h.read()\n"
    "    scan=z.scan(data)\n"
    "    for t in z.decode_all(data,scan.frames[1:],1):\n"
    "      checked_run(t[:-1].split(b'\\n'),none)\n"
)
"""The read floor of issue 34: decompress every frame in-process, split the lines, check
each line's envelope (msgspec), over the same logs; no parsing of any event."""


def cpu_run(bench: Bench, argv: Sequence[str]) -> tuple[float, float, float]:
    """(CPU seconds user+sys, wall, peak MB) of one run: the children's CPU counted by the
    harness process around it (the launcher's own start-up included, on both sides)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = bench.run(argv)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, run.wall, run.rss_mb


def searches(bench: Bench) -> list[Row]:
    """search of a rare phrase and of a common word over the whole root, in CPU time against
    the read floor of the same logs, measured alternately in the same run."""
    rows = []
    for total in SEARCH_ROOTS[bench.profile]:
        root = phrase_root(bench, total)
        floor_argv = [bench.install.python, "-c", READ_FLOOR, str(root)]
        empty = [bench.install.python, "-c", "pass"]
        for what, text, judged in (
            ("a phrase", planted_phrase(7, "", 2), True),
            ("a common word", "thing", False),  # 60,000 hits to decode: reported
        ):
            case = f"search {what}, {total} sessions"
            log(f"{case} …")
            argv = bench.dsh(root, "search", text, "--json")
            if not bench.quick:
                cpu_run(bench, argv)  # warm-up
            ours, floor, idle = [], [], []
            for _ in range(bench.repeat):
                idle.append(cpu_run(bench, empty))
                floor.append(cpu_run(bench, floor_argv))
                ours.append(cpu_run(bench, argv))
            start = statistics.median(c for c, _, _ in idle)
            mine = statistics.median(c for c, _, _ in ours) - start
            base = statistics.median(c for c, _, _ in floor) - start
            wall = statistics.median(w for _, w, _ in ours)
            figures = Figures(wall, max(m for _, _, m in ours))
            ratio = mine / base if base > 0 else float("inf")
            rows.append(
                row(
                    bench,
                    case,
                    f"CPU {mine:.2f} s (wall {wall:.2f} s)",
                    figures,
                    f"read floor CPU {base:.2f} s (wall "
                    f"{statistics.median(w for _, w, _ in floor):.2f} s)",
                    f"{ratio:.2f}× CPU",
                    "≤ 1.5× read floor (CPU)" if judged else "report",
                    ratio <= 1.5 if judged else None,
                )
            )
    return rows


CASES: tuple[Callable[[Bench], list[Row]], ...] = (
    startup,
    forks,
    inspects,
    relinks,
    listings,
    relinked,
    searches,
)
