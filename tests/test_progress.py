"""Progress (issue 35): the library tells a ``Progress`` each stage and unit of its work,
counted in what the user waits for (sessions read, sessions checked, agents copied, sessions
written); the command line draws it on a terminal's stderr only, never with -q or --json."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from relinkkit import fork_of, subagent

from dsh_fork import porcelain
from dsh_fork.cli import progress as cli_progress
from dsh_fork.cli.base import Out, state
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.fork import ForkOptions
from dsh_fork.porcelain import Context
from dsh_fork.progress import SILENT


class Told:
    """A ``Progress`` that records each stage with the units told in it."""

    def __init__(self) -> None:
        self.stages: list[list[object]] = []

    def stage(self, what: str, total: int | None = None) -> None:
        self.stages.append([what, total, 0])

    def advance(self, count: int = 1) -> None:
        self.stages[-1][2] = int(str(self.stages[-1][2])) + count

    def seen(self) -> list[tuple[object, ...]]:
        return [tuple(stage) for stage in self.stages]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "sessions"
    generate(root, sessions=3, agents=2, depth=1, turns=1, seed=2)
    return root


def test_the_fixture_counts_sessions_written(tmp_path: Path) -> None:
    told = Told()
    generate(tmp_path / "s", sessions=2, agents=3, depth=1, turns=1, progress=told)
    assert told.seen() == [("sessions written", 8, 8)]


def test_list_counts_sessions_read_kinds_settled_and_rows_read(home: Path) -> None:
    told = Told()
    ctx = Context.of(str(home))
    porcelain.list_sessions(ctx, project=None, kinds=None, since=None, now_ms=0, progress=told)
    # the three conversations are the rows: their subagents are counted, not read
    assert told.seen() == [("sessions read", 9, 9), ("kinds settled", 9, 9), ("rows read", 3, 3)]


@pytest.mark.parametrize("command", ["tree", "du"])
def test_tree_and_du_count_sessions_then_logs_read(home: Path, command: str) -> None:
    told = Told()
    ctx = Context.of(str(home))
    if command == "tree":
        porcelain.tree(ctx, None, progress=told)
    else:
        porcelain.du(ctx, None, top=None, progress=told)
    logs = 9 if command == "tree" else 0  # du reads the seeded logs only: there are none
    expected = [("sessions read", 9, 9)] + ([("logs read", None, logs)] if logs else [])
    assert told.seen() == expected


def test_doctor_counts_sessions_read_then_checked(home: Path) -> None:
    told = Told()
    porcelain.doctor(Context.of(str(home)), None, progress=told)
    assert told.seen() == [("sessions read", 9, 9), ("sessions checked", 9, 9)]


def test_relink_counts_agents_copied_not_fork_children(root: Path) -> None:
    """Two forks of a parent with three subagents: six agents copied, in one stage."""
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd="/w")
    parent.turn(clock)
    agents = [subagent(clock, f"session-a{i}", parent, label=f"a{i}", cwd="/w") for i in range(3)]
    for agent in agents:
        parent.catalog(clock, agent, label=agent.id)
    parent.turn(clock)
    forks = [fork_of(parent, f"session-F{i}", clock()) for i in range(2)]
    for spec in (parent, *agents, *forks):
        spec.publish(root)

    told = Told()
    result = porcelain.relink_all(Context.of(str(root)), dry_run=False, progress=told)

    assert not result.failed
    assert told.seen() == [("sessions read", 6, 6), ("agents copied", None, 6)]


def test_the_silent_progress_is_the_default(home: Path) -> None:
    SILENT.stage("x", 1)
    SILENT.advance()
    listing = porcelain.list_sessions(
        Context.of(str(home)), project=None, kinds=None, since=None, now_ms=0
    )
    assert listing.total == 9


@pytest.mark.parametrize(
    ("terminal", "quiet", "json_mode", "drawn"),
    [
        (True, False, False, True),
        (False, False, False, False),  # piped: nothing on stderr
        (True, True, False, False),  # -q
        (True, False, True, False),  # --json
    ],
)
def test_the_display_is_drawn_only_on_a_terminal_without_q_or_json(
    monkeypatch: pytest.MonkeyPatch, terminal: bool, quiet: bool, json_mode: bool, drawn: bool
) -> None:
    monkeypatch.setattr(cli_progress, "_stderr_is_terminal", lambda: terminal)
    monkeypatch.setattr(state, "quiet", quiet)
    assert cli_progress.meter(Out(json_mode)).draw is drawn


def test_a_meter_counts_for_the_interrupted_summary() -> None:
    with cli_progress.Meter(draw=False) as bar:
        bar.stage("agents copied")
        bar.advance()
        bar.advance(36)
        assert bar.summary() == "37 agents copied"
        bar.stage("sessions read", 100)
        bar.advance(3)
        assert bar.summary() == "3 of 100 sessions read"


def test_a_piped_run_writes_nothing_on_stderr(home: Path) -> None:
    for args in (["list"], ["doctor"], ["tree"], ["du"]):
        result = run_cli("--root", home, *args)
        assert result.exit_code == 0 and result.stderr == "", args


def test_export_counts_bytes_archived_and_import_sessions_imported(
    home: Path, tmp_path: Path
) -> None:
    from dsh_fork.discovery import Root
    from dsh_fork.export import ExportOptions
    from dsh_fork.importer import ImportOptions

    top = generate_top(home)
    archive = tmp_path / "family.tar.zst"
    told = Told()
    made = porcelain.export(
        Context.of(str(home)), top, str(archive), ExportOptions(), progress=told
    )
    assert [stage[0] for stage in told.seen()] == ["sessions read", "bytes archived"]
    assert told.seen()[1][2] == made.manifest.total_bytes > 0

    target = tmp_path / "other" / "sessions"
    target.mkdir(parents=True)
    told = Told()
    porcelain.import_bundle(
        Context.of(str(target)), str(archive), ImportOptions(workspace=False), progress=told
    )
    assert ("sessions imported", 3, 3) in told.seen()
    assert len(Root(target).entries()) == 3


def generate_top(home: Path) -> str:
    from dsh_fork.discovery import Root

    return next(e.id for e in Root(home).entries() if e.parent is None and e.id is not None)


def test_a_fork_counts_the_agents_it_copies(home: Path) -> None:
    told = Told()
    result = porcelain.fork(
        Context.of(str(home)),
        generate_top(home),
        ForkOptions(child_id="the-fork"),
        progress=told,
    )
    assert result.child.id == "the-fork"
    assert told.seen()[-1] == ("agents copied", 2, 2)
