"""Shared test helpers: roots built with the project's own fixture layer, CLI runs, digests."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from safetykit import CASES, STATS, guarded, is_moving, is_read_only, roots_of
from schemakit import check_run
from typer.testing import CliRunner

from dsh_fork import faults
from dsh_fork import frames as zframes
from dsh_fork.cli.app import app
from dsh_fork.fixtures import Clock, Ids

faults.enable_env()  # in-process runs honour DSH_FORK_FAULT; the installed command never does

SHARED = (Path(__file__).resolve().parent.parent.parent / "shared").resolve()
"""The shared data beside the clone, resolved as the command line resolves ``--root``: with
``../shared`` a link, the library calls of a test name the same paths as the commands."""
SAMPLES = SHARED / "samples"
FOREIGN = SAMPLES.parent / "foreign"

NON_CANONICAL_NAMES = (
    "session.v0.jsonl.zstd",
    "session.v04.jsonl.zstd",
    "session.V4.jsonl.zstd",
    "session.v4.jsonl.zstd.tmp",
    "session.v4.jsonl.zstd.repair",
)
"""The ``child-h`` names of the generation-scan scenario (semantics §10.1): never a log."""


def require_samples() -> None:
    """The foreign sample home lies beside the checkout (``../shared/samples``), as in CI.

    Outside CI a checkout without it skips the sample tests with a visible reason; in CI
    (``CI=true``) its absence is a failure, so the foreign-data tests can never vanish there.
    """
    if (SAMPLES / "facts.json").exists():
        return
    message = f"the shared sample home is missing at {SAMPLES}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_foreign() -> None:
    """The foreign DSH roots with DSH's verdicts (``../shared/foreign``), like the samples."""
    if (FOREIGN / "verdicts.json").exists():
        return
    message = f"the shared foreign roots are missing at {FOREIGN}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


def every_foreign_root() -> list[Path]:
    """Every foreign root dir, sorted (after ``require_foreign``): more than a hundred."""
    require_foreign()
    roots = sorted(p for p in (FOREIGN / "roots").iterdir() if p.is_dir())
    assert len(roots) > 100
    return roots


@pytest.fixture(autouse=True)
def _no_dsh_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach the developer's own DSH home: DSH_HOME is unset unless a test sets it
    (the operation log then lands beside the test's root)."""
    monkeypatch.delenv("DSH_HOME", raising=False)


@pytest.fixture(autouse=True)
def _temps_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish that found it cannot name an unnamed temp turns them off for the process
    (``writer.UNNAMED_TEMPS``): each test starts from the configured value again."""
    from dsh_fork import writer

    monkeypatch.setattr(writer, "UNNAMED_TEMPS", writer.UNNAMED_TEMPS)


@pytest.fixture(params=["unnamed", "named"])
def temps(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both kinds of temp a publish writes: unnamed (``O_TMPFILE``, where the system allows
    it) and named (the fallback elsewhere)."""
    from dsh_fork import writer

    monkeypatch.setattr(writer, "UNNAMED_TEMPS", request.param == "unnamed")
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty sessions root (``<tmp>/home/sessions``) that does not exist yet."""
    return tmp_path / "home" / "sessions"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ids() -> Ids:
    return Ids(1234)


def log_lines(path: Path) -> list[bytes]:
    """Decompressed lines (without 0x0A) of a whole generation file, header first."""
    data = path.read_bytes()
    scan = zframes.scan(data)
    plaintext = b"".join(zframes.decode(data, f) for f in scan.frames)
    return plaintext.split(b"\n")[:-1]


def log_events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in log_lines(path)[1:]]


def log_header(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads(log_lines(path)[0])
    return value


def frame_count(path: Path) -> int:
    return len(zframes.scan(path.read_bytes()).frames)


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative path → digest)."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def tree_listing(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file and dir under ``root``: what a dry run must not change."""
    out: dict[str, tuple[int, int]] = {}
    for path in sorted(root.rglob("*")):
        st = path.stat()
        out[str(path.relative_to(root))] = (st.st_size if path.is_file() else 0, st.st_mtime_ns)
    return out


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return orjson.loads(self.stdout)


def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process with separate stdout and stderr.

    Every run is checked by the source guard (``safetykit``): each generation file under the
    roots the command line names stays byte-identical, or — for fork and relink — keeps its
    committed bytes and gains only whole frames; read-only commands change nothing at all.
    A ``--json`` document is checked against its schema (``schemakit``).
    """
    argv = [str(a) for a in args]
    runner = CliRunner()
    moving = is_moving(argv) and "--empty" not in argv  # --empty deletes only the trash
    with guarded(
        roots_of(argv, env), read_only=is_read_only(argv), what=" ".join(argv), moving=moving
    ):
        result = runner.invoke(app, argv, env=env, catch_exceptions=False)
    check_run(argv, result.stdout)
    return Result(result.exit_code, result.stdout, result.stderr)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Make the safety counts visible in every run's output (issue 5)."""
    if STATS["runs"]:
        terminalreporter.write_line(
            f"source guard: {STATS['runs']} command runs checked (CLI and library), "
            f"{STATS['files']} generation files compared before/after"
        )
    if CASES:
        cases = ", ".join(f"{kind} {n}" for kind, n in sorted(CASES.items()))
        terminalreporter.write_line(f"safety cases: {sum(CASES.values())} ({cases})")


class LockHolder:
    """Another process holding ``flock`` on a session's lock, as a live DSH writer does."""

    def __init__(self, session_dir: Path) -> None:
        code = textwrap.dedent(
            """
            import fcntl, os, sys
            fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            sys.stdout.write("locked\\n"); sys.stdout.flush()
            sys.stdin.read()
            """
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(session_dir / "session.lock")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


@pytest.fixture
def hold_lock() -> Iterator[Any]:
    """``hold_lock(session_dir)`` starts a holder; every holder is released at teardown."""
    holders: list[LockHolder] = []

    def start(session_dir: Path) -> LockHolder:
        holder = LockHolder(session_dir)
        holders.append(holder)
        return holder

    yield start
    for holder in holders:
        holder.release()


@pytest.fixture
def samples_root(tmp_path: Path) -> Path:
    """A private copy of the foreign sample home's sessions root."""
    import shutil

    require_samples()

    target = tmp_path / "samples-home"
    shutil.copytree(SAMPLES / "home", target)
    for path in target.rglob("*"):
        os.chmod(path, 0o700 if path.is_dir() else 0o600)
    return target / "sessions"
