"""Crash at any write (issue 5, guarantees 1 and 2): fork with agents and relink on the plugin
scenario (semantics §10.4), killed, torn or failed after every one of their durable steps.

After each failure: every session of the root passes the v4 checklist, nothing DSH reads is
half made (only dsh-fork's own temps and empty dirs remain), every pre-existing file is
byte-identical or kept its committed bytes and gained whole frames; an injected I/O error
ends the command with one line and its contract code. After the operator's rerun (the same
command; for a fork whose child exists already, ``relink`` of that child) the tree is exactly
the tree of an uninterrupted run, no temp of ours is left, and one more run changes nothing.
Real processes are killed too: at a random durable step (``DSH_FORK_FAULT=kill:K``) and by a
timer at a random moment.

The default run is exhaustive over every step of small trees; ``DSH_FORK_FUZZ=deep`` uses the
full plugin scenario (11 children) and many more random kills.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cli_launcher
import orjson
import pytest
from conftest import log_lines, run_cli, tree_digest
from relinkkit import CWD, log_of, own_catalog, plugin_scenario, repair_tree, without_ids
from safetykit import (
    canonical_tree,
    count,
    crash_state_problems,
    files_under,
    original_lines,
    snapshot,
)

from dsh_fork import faults, writer
from dsh_fork.discovery import Root
from dsh_fork.durable import is_own_temp
from dsh_fork.errors import SessionAlreadyExists
from dsh_fork.fixtures import Clock, Ids
from dsh_fork.fork import ForkOptions, fork, fork_session
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import encode_segment, project_key
from dsh_fork.reader import current_generation, open_log
from dsh_fork.relink import relink, relink_arg
from dsh_fork.relinkresult import RelinkSummary
from dsh_fork.sessionarg import locate

DEEP = os.environ.get("DSH_FORK_FUZZ") == "deep"
NOW = 1_800_000_000_000
CHILD = "session-child"
WRITE_STEPS = ("write", "append")
ERRNOS = ("enospc", "eacces", "erofs", "eio")


# -- the scenarios ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One writing operation on one pristine root, and what an operator reruns after it."""

    name: str
    build: Callable[[Path], None]
    run: Callable[[Path], object]
    resume: Callable[[Path], object]
    argv: Callable[[Path], list[str]]
    never_written: tuple[str, ...]
    """Ids of the sessions the operation only reads (their bytes never change)."""
    expect: Callable[[Path], None] | None = None
    """Checks of the uninterrupted run's tree, which every resumed tree then equals."""
    plan: Callable[[Path], RelinkSummary] | None = None
    """The dry run of the rerun: in every crashed state it predicts the rerun's outcome."""


def plugin_tree(root: Path) -> None:
    plugin_scenario(root, Clock(), children=11 if DEEP else 3)


def relink_c_a(root: Path) -> object:
    located = Root(root)
    return relink(located, located.find("session-C_A"), clock=Clock(NOW, 1), new_id=Ids(77))


def resume_relink(fork_id: str) -> Callable[[Path], object]:
    def resume(root: Path) -> object:
        return relink_arg(fork_id, str(root), env={})

    return resume


def fork_p_a(root: Path) -> object:
    located = locate("session-P_A", str(root))
    return fork(
        located.root,
        located,
        ForkOptions(child_id=CHILD),
        clock=Clock(NOW, 1),
        new_id=Ids(77),
    )


def resume_fork(root: Path) -> object:
    """The operator's rerun: the same fork; when its child exists already (exit 5), relink
    that child, as the PARTIAL message of an interrupted fork says."""
    try:
        return fork_session(
            "session-P_A",
            str(root),
            ForkOptions(child_id=CHILD),
            env={},
        )
    except SessionAlreadyExists:
        return relink_arg(CHILD, str(root), env={})


def relink_c(root: Path) -> object:
    located = Root(root)
    return relink(located, located.find("session-C"), clock=Clock(NOW, 1), new_id=Ids(77))


def plan_relink(fork_id: str) -> Callable[[Path], RelinkSummary]:
    def plan(root: Path) -> RelinkSummary:
        return relink_arg(fork_id, str(root), dry_run=True, env={})

    return plan


def source_of(root: Path, copy_id: str, candidates: tuple[str, ...]) -> str:
    """The one candidate whose lines through its last turn/end start the copy, byte for byte."""
    copy = log_lines(log_of(root, copy_id))[1:]
    matches = []
    for candidate in candidates:
        source = log_lines(log_of(root, candidate))[1:]
        last = max(i for i, line in enumerate(source) if b'"turn/end"' in line)
        if copy[: last + 1] == source[: last + 1]:
            matches.append(candidate)
    assert len(matches) == 1, (copy_id, matches)
    return matches[0]


def legacy_tree_complete(root: Path) -> None:
    """One copy per source, each catalogued exactly once, g1 copied under c1's copy, the
    legacy copy kept (and given its own descriptor), no torn tail anywhere."""
    sources = ("c1", "c2", "c3")
    copies = [e.id or "" for e in Root(root).children_of("session-C")]
    assert len(copies) == 3, copies
    by_source = {source_of(root, copy, sources): copy for copy in copies}
    assert sorted(by_source) == list(sources)
    assert by_source["c3"] == "legacy-c3"
    facts = own_catalog(log_of(root, "session-C"))
    assert sorted(f["childId"] for f in facts) == sorted(copies)
    grand = [e.id or "" for e in Root(root).children_of(by_source["c1"])]
    assert len(grand) == 1 and source_of(root, grand[0], ("g1",)) == "g1"
    assert [f["childId"] for f in own_catalog(log_of(root, by_source["c1"]))] == grand
    legacy = log_lines(log_of(root, "legacy-c3"))[1:]
    assert len([line for line in legacy if b"subagent/descriptor" in line]) == 2
    for entry in Root(root).entries():
        generation = current_generation(entry.session_dir)
        assert generation is not None
        assert open_log(generation).torn is None, entry.id


PLUGIN_SOURCES = (
    "session-P_A",
    "a-grand",
    "a-open",
    "session-other",
    "z-other",
    *(f"a-child-{k:02d}" for k in range(1, 12)),
)

SCENARIOS = [
    Scenario(
        "relink-plugin",
        plugin_tree,
        relink_c_a,
        resume_relink("session-C_A"),
        lambda root: ["--root", str(root), "relink", "session-C_A"],
        PLUGIN_SOURCES,
        plan=plan_relink("session-C_A"),
    ),
    Scenario(
        "fork-with-agents",
        plugin_tree,
        fork_p_a,
        resume_fork,
        lambda root: ["--root", str(root), "fork", "session-P_A", "--id", CHILD],
        (*PLUGIN_SOURCES, "session-C_A"),
    ),
    Scenario(
        "relink-legacy",
        repair_tree,
        relink_c,
        resume_relink("session-C"),
        lambda root: ["--root", str(root), "relink", "session-C"],
        ("session-P", "c1", "g1", "c2", "c3"),
        expect=legacy_tree_complete,
        plan=plan_relink("session-C"),
    ),
]


@dataclass
class Pristine:
    """A scenario's pristine root, its step count and the tree an uninterrupted run leaves."""

    scenario: Scenario
    root: Path
    files: dict[str, bytes]
    existing: set[str]
    originals: dict[str, list[bytes]]
    steps: list[tuple[str, str]]
    expected: Any
    frozen: list[str]

    def fresh(self, target: Path) -> Path:
        shutil.copytree(self.root, target)
        return target

    def problems_after_failure(self, root: Path, *, torn_ok: bool) -> list[str]:
        return crash_state_problems(
            root, self.files, self.frozen, self.existing, torn_ok=torn_ok, own_temps_ok=True
        )

    def assert_resumes(self, root: Path, what: str) -> None:
        """The rerun finishes exactly the expected tree (and does what its dry run said);
        a further run changes nothing."""
        plan = None if self.scenario.plan is None else self.scenario.plan(root)
        resumed = self.scenario.resume(root)
        if plan is not None:
            assert isinstance(resumed, RelinkSummary)
            assert without_ids(plan.to_json(), plan) == without_ids(resumed.to_json(), resumed), (
                what
            )
        problems = crash_state_problems(
            root, self.files, self.frozen, self.existing, torn_ok=False, own_temps_ok=False
        )
        assert problems == [], f"{what}, after the rerun: {problems}"
        assert canonical_tree(root, self.originals) == self.expected, what
        settled = tree_digest(root)
        self.scenario.resume(root)
        assert tree_digest(root) == settled, f"{what}: a further run changed the root"


def _frozen_paths(files: dict[str, bytes], ids: tuple[str, ...]) -> list[str]:
    segments = {encode_segment(i) for i in ids}
    return [rel for rel in files if Path(rel).parent.name in segments]


@pytest.fixture(scope="module", params=SCENARIOS, ids=lambda s: s.name)
def pristine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    scenario: Scenario = request.param
    base = tmp_path_factory.mktemp(scenario.name)
    root = base / "pristine" / "sessions"
    scenario.build(root)
    files = snapshot(root)
    reference = base / "reference" / "sessions"
    shutil.copytree(root, reference)
    with faults.install("crash", 0) as plan:
        scenario.run(reference)
    if scenario.expect is not None:
        scenario.expect(reference)
    originals = original_lines(root)
    return Pristine(
        scenario,
        root,
        files,
        files_under(root),
        originals,
        plan.log,
        canonical_tree(reference, originals),
        _frozen_paths(files, scenario.never_written),
    )


# -- crash and tear after every durable step --------------------------------------------------


def test_the_steps_cover_every_kind_of_durable_write(pristine: Pristine) -> None:
    kinds = {kind for kind, _ in pristine.steps}
    assert {"mkdir", "lock", "create", "write", "fsync", "link", "fsync-dir"} <= kinds
    assert "append" in kinds  # catalog facts
    assert len(pristine.steps) >= 30


def crash_points(pristine: Pristine) -> Iterator[tuple[str, int]]:
    """Every step crashes; a write step is also torn (half its bytes, then death)."""
    for k, (kind, _) in enumerate(pristine.steps, start=1):
        yield "crash", k
        if kind in WRITE_STEPS:
            yield "tear", k


def test_a_run_dying_after_any_step_leaves_a_sound_root_and_is_finished_by_a_rerun(
    pristine: Pristine, tmp_path: Path
) -> None:
    points = list(crash_points(pristine))
    for action, k in points:
        what = f"{pristine.scenario.name}: {action} after step {k} {pristine.steps[k - 1]}"
        root = pristine.fresh(tmp_path / f"{action}-{k}")
        with pytest.raises(faults.InjectedCrash), faults.install(action, k):
            pristine.scenario.run(root)
        problems = pristine.problems_after_failure(root, torn_ok=action == "tear")
        assert problems == [], f"{what}: {problems}"
        pristine.assert_resumes(root, what)
        shutil.rmtree(root)
    count(f"crash points ({pristine.scenario.name})", len(points))


# -- disk full, permission denied, read-only, I/O error -----------------------------------------


def errno_points(pristine: Pristine) -> Iterator[tuple[str, int]]:
    """Every step fails once; the errno rotates over the steps (all four at every step in the
    deep profile)."""
    for k in range(1, len(pristine.steps) + 1):
        if DEEP:
            for action in ERRNOS:
                yield action, k
        else:
            yield ERRNOS[k % len(ERRNOS)], k


def test_an_io_error_at_any_step_is_one_line_with_its_code_and_nothing_half_written(
    pristine: Pristine, tmp_path: Path
) -> None:
    points = list(errno_points(pristine))
    for action, k in points:
        kind = pristine.steps[k - 1][0]
        what = f"{pristine.scenario.name}: {action} at step {k} {pristine.steps[k - 1]}"
        root = pristine.fresh(tmp_path / f"{action}-{k}")
        argv = pristine.scenario.argv(root)
        result = run_cli(*argv, env={faults.ENV_VAR: f"{action}:{k}"})
        faults.load_from_env()  # the in-process CLI left its plan installed
        if kind == "unlink":  # a linked temp that cannot be removed is no failure
            assert result.exit_code == 0, f"{what}: {result.stderr}"
        else:
            assert result.exit_code in (11, 10), f"{what}: {result.exit_code} {result.stderr}"
            errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
            assert len(errors) == 1, f"{what}: {result.stderr}"
            assert "Traceback" not in result.stderr and "internal error" not in result.stderr
            detail = result.stderr.splitlines()
            named = "\n".join(detail)
            assert os.strerror(_errno(action)) in named, f"{what}: {result.stderr}"
            if result.exit_code == 10:
                assert any(line.startswith("  failed: ") for line in detail), what
            else:
                assert errors[0].startswith(("Error: cannot write ", "Error: published ")), what
        problems = pristine.problems_after_failure(root, torn_ok=False)
        assert problems == [], f"{what}: {problems}"
        pristine.assert_resumes(root, what)
        shutil.rmtree(root)
    count(f"I/O error points ({pristine.scenario.name})", len(points))


def _errno(action: str) -> int:
    import errno

    return {
        "enospc": errno.ENOSPC,
        "eacces": errno.EACCES,
        "erofs": errno.EROFS,
        "eio": errno.EIO,
    }[action]


def test_an_io_error_with_json_is_one_document(pristine: Pristine, tmp_path: Path) -> None:
    first_write = next(k for k, (kind, _) in enumerate(pristine.steps, 1) if kind == "write")
    root = pristine.fresh(tmp_path / "json")
    result = run_cli(
        *pristine.scenario.argv(root), "--json", env={faults.ENV_VAR: f"enospc:{first_write}"}
    )
    faults.load_from_env()
    error = result.json()["error"]
    if result.exit_code == 11:
        assert error["code"] == "IO_ERROR"
        assert error["message"].endswith(": No space left on device")
        name = Path(error["path"]).name  # the log an unnamed temp was to become, or the temp
        assert name == CURRENT_NAME if writer.UNNAMED_TEMPS else name.endswith(".dsh-fork.tmp")
    else:
        assert result.exit_code == 10 and error["code"] == "PARTIAL"
        assert [item["code"] for item in error["failed"]] == ["IO_ERROR"]


# -- real processes, really killed -------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DSH_HOME", faults.ENV_VAR)}
    return env


def _cli(root: Path, pristine: Pristine) -> list[str]:
    return cli_launcher.argv(*pristine.scenario.argv(root))


KILL_RUNS = 60 if DEEP else 6
TIMER_RUNS = 40 if DEEP else 5


def test_a_process_killed_at_a_random_step_is_finished_by_a_rerun(
    pristine: Pristine, tmp_path: Path
) -> None:
    rng = random.Random(f"kill-{pristine.scenario.name}")
    steps = len(pristine.steps)
    chosen = sorted(rng.sample(range(1, steps + 1), min(KILL_RUNS, steps)))
    for k in chosen:
        what = f"{pristine.scenario.name}: SIGKILL after step {k} {pristine.steps[k - 1]}"
        root = pristine.fresh(tmp_path / f"kill-{k}")
        proc = subprocess.run(
            _cli(root, pristine),
            env={**_env(), faults.ENV_VAR: f"kill:{k}"},
            capture_output=True,
            check=False,
        )
        assert proc.returncode == -signal.SIGKILL, f"{what}: {proc.stderr!r}"
        problems = pristine.problems_after_failure(root, torn_ok=False)
        assert problems == [], f"{what}: {problems}"
        pristine.assert_resumes(root, what)
        shutil.rmtree(root)
    count("SIGKILL at a step", len(chosen))


def test_a_process_killed_at_a_random_moment_is_finished_by_a_rerun(
    pristine: Pristine, tmp_path: Path
) -> None:
    """A timer kills the process somewhere between its start and its end: wherever that
    falls (start-up, reading, mid-write), the same checks hold."""
    probe_root = pristine.fresh(tmp_path / "timing")
    started = time.monotonic()
    subprocess.run(_cli(probe_root, pristine), env=_env(), capture_output=True, check=True)
    duration = time.monotonic() - started
    rng = random.Random(f"timer-{pristine.scenario.name}")
    outcomes: list[int] = []
    for run_index in range(TIMER_RUNS):
        delay = duration * rng.uniform(0.3, 1.0)
        what = f"{pristine.scenario.name}: SIGKILL after {delay:.3f}s (run {run_index})"
        root = pristine.fresh(tmp_path / f"timer-{run_index}")
        proc = subprocess.Popen(
            _cli(root, pristine),
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        outcomes.append(proc.wait(timeout=60))
        problems = pristine.problems_after_failure(root, torn_ok=True)
        assert problems == [], f"{what}: {problems}"
        pristine.assert_resumes(root, what)
        shutil.rmtree(root)
    assert set(outcomes) <= {0, -signal.SIGKILL}
    count("SIGKILL by timer", TIMER_RUNS)


# -- leftovers: ours are swept, never anyone else's ---------------------------------------------


def test_leftover_temps_are_swept_only_when_they_are_ours(tmp_path: Path) -> None:
    """A rerun removes the temps of dsh-fork runs that died (under each dir's lock), and
    never a temp of DSH (``<final>.<12 hex>.tmp``) or of another tool, nor a dir's lock."""
    root = tmp_path / "sessions"
    plugin_tree(root)
    originals = original_lines(root)
    project = root / project_key(CWD)
    dead = project / "session-dead-copy"
    dead.mkdir(mode=0o700)
    (dead / "session.lock").touch()
    ours = dead / "session.v4.jsonl.zstd.0123456789ab.dsh-fork.tmp"
    ours.write_bytes(b"half a copy")
    theirs = dead / "session.v4.jsonl.zstd.0123456789ab.tmp"
    theirs.write_bytes(b"DSH's own publish")
    live = project / "a-child-02" / "session.v4.jsonl.zstd.fedcba987654.tmp"
    live.write_bytes(b"DSH publishing")
    stray = project / "session-P_A" / "session.migration.0123456789abcdef.jsonl.zstd.tmp"
    stray.write_bytes(b"DSH migrating")
    assert is_own_temp(ours.name) and not is_own_temp(theirs.name)

    result = run_cli("--root", root, "relink", "session-C_A")

    assert result.exit_code == 0, result.stderr
    assert not ours.exists()
    assert theirs.read_bytes() == b"DSH's own publish"
    assert live.read_bytes() == b"DSH publishing"
    assert stray.read_bytes() == b"DSH migrating"
    assert sorted(p.name for p in dead.iterdir()) == sorted(["session.lock", theirs.name])
    assert len(canonical_tree(root, originals)) > len(originals)


def test_a_dir_whose_lock_is_held_keeps_its_temps(tmp_path: Path, hold_lock: Any) -> None:
    """A temp in a dir whose lock another process holds may belong to a live publish."""
    root = tmp_path / "sessions"
    plugin_tree(root)
    busy = root / project_key(CWD) / "session-busy"
    busy.mkdir(mode=0o700)
    temp = busy / "session.v4.jsonl.zstd.0123456789ab.dsh-fork.tmp"
    temp.write_bytes(b"being written")
    hold_lock(busy)

    assert run_cli("--root", root, "relink", "session-C_A").exit_code == 0

    assert temp.read_bytes() == b"being written"


def test_a_fork_rerun_sweeps_its_own_temp_and_keeps_dshs(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    plugin_tree(root)
    child_dir = root / project_key(CWD) / CHILD
    child_dir.mkdir(mode=0o700)
    (child_dir / "session.lock").touch()
    ours = child_dir / "session.v4.jsonl.zstd.00000000beef.dsh-fork.tmp"
    ours.write_bytes(b"a dead fork")
    theirs = child_dir / "session.v4.jsonl.zstd.00000000beef.tmp"
    theirs.write_bytes(b"not ours")

    result = run_cli("--root", root, "fork", "session-P_A", "--id", CHILD, "--json")

    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["child"]["id"] == CHILD
    names = sorted(p.name for p in child_dir.iterdir())
    assert names == sorted(["session.lock", "session.v4.jsonl.zstd", theirs.name])
