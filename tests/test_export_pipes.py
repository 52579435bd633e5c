"""Pipes: ``export -o -`` writes the archive to standard output, ``import -`` reads one.

Scenarios: an export piped into an import (``ssh host dsh-fork export S -o - | dsh-fork
import -``) gives the same root as one through a file, in every compression, detected by its
magic number or named by ``--format``; a terminal is never written to or read from, ``-o -``
with ``--json`` is refused (both want standard output), a ``--format`` that contradicts
the file name is refused before anything is read, and a dry run from a pipe writes nothing in
the root.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import cli_launcher
import pytest
from conftest import log_lines, run_cli, tree_digest
from userkit import NOBODY, as_user

import dsh_fork
from dsh_fork.errors import DshForkError
from dsh_fork.fixtureroot import generate
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.importer import ImportOptions, import_bundle

TIMEOUT = 120


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "a" / "sessions"
    top = generate(root, sessions=1, agents=2, depth=2, turns=2, seed=9).top_level[0]
    return root, top


def piped(
    root: Path, top: str, target: Path, *export_args: str, import_args: tuple[str, ...] = ()
) -> tuple[int, str, subprocess.CompletedProcess[str]]:
    """``export -o -`` into ``import -`` as two processes joined by a pipe."""
    target.mkdir(parents=True, exist_ok=True)
    writer = subprocess.Popen(
        cli_launcher.argv("--root", str(root), "export", top, "-o", "-", *export_args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert writer.stdout is not None
    reader = subprocess.run(
        cli_launcher.argv("--root", str(target), "import", "-", *import_args),
        stdin=writer.stdout,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    writer.stdout.close()
    writer.wait(TIMEOUT)
    assert writer.stderr is not None
    return writer.returncode, writer.stderr.read().decode(), reader


def logs_of(root: Path) -> dict[str, list[bytes]]:
    return {
        str(path.relative_to(root)): log_lines(path)
        for path in sorted(root.glob(f"*/*/{CURRENT_NAME}"))
    }


@pytest.mark.parametrize("compression", ["zst", "gz", "xz", "bz2", "tar"])
def test_an_export_piped_into_an_import_gives_the_root_a_file_gives(
    source: tuple[Path, str], tmp_path: Path, compression: str
) -> None:
    root, top = source
    suffix = "tar" if compression == "tar" else f"tar.{compression}"
    archive = tmp_path / f"family.{suffix}"
    assert run_cli("--root", root, "export", top, "-o", archive).exit_code == 0
    by_file = tmp_path / "file" / "sessions"
    by_file.mkdir(parents=True)
    assert run_cli("--root", by_file, "import", archive).exit_code == 0

    code, stderr, imported = piped(
        root, top, tmp_path / "pipe" / "sessions", "--format", compression
    )

    assert code == 0, stderr
    assert (
        "to standard output" in stderr
        and f"({'none' if compression == 'tar' else compression})" in stderr
    )
    assert imported.returncode == 0, imported.stderr
    assert "Imported 7 sessions of standard input" in imported.stdout
    by_pipe = tmp_path / "pipe" / "sessions"
    assert tree_digest(by_pipe) == tree_digest(by_file)
    assert logs_of(by_pipe) == logs_of(by_file) == logs_of(root)


def test_a_named_format_reads_the_stream_as_that(source: tuple[Path, str], tmp_path: Path) -> None:
    root, top = source

    code, _, imported = piped(
        root, top, tmp_path / "b" / "sessions", "--format", "gz", import_args=("--format", "gz")
    )
    assert code == 0 and imported.returncode == 0, imported.stderr

    code, _, wrong = piped(
        root, top, tmp_path / "c" / "sessions", "--format", "zst", import_args=("--format", "gz")
    )
    assert wrong.returncode == 9, wrong.stderr
    assert list((tmp_path / "c" / "sessions").iterdir()) == []


def test_a_terminal_is_never_written_to_nor_read_from(
    source: tuple[Path, str], tmp_path: Path
) -> None:
    root, top = source
    target = tmp_path / "b" / "sessions"
    target.mkdir(parents=True)
    main, other = os.openpty()
    try:
        wrote = subprocess.run(
            cli_launcher.argv("--root", str(root), "export", top, "-o", "-"),
            stdout=other,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        read = subprocess.run(
            cli_launcher.argv("--root", str(target), "import", "-"),
            stdin=other,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    finally:
        os.close(main)
        os.close(other)

    assert wrote.returncode == 2
    assert "refusing to write an archive to a terminal" in wrote.stderr
    assert read.returncode == 2
    assert "refusing to read an archive from a terminal" in read.stderr
    assert list(target.iterdir()) == []


def test_standard_output_and_json_are_refused_together(source: tuple[Path, str]) -> None:
    root, top = source

    result = run_cli("--root", root, "export", top, "-o", "-", "--json")

    assert result.exit_code == 2
    assert result.json()["error"]["code"] == "USAGE"


def test_a_format_contradicting_the_name_is_refused(
    source: tuple[Path, str], tmp_path: Path
) -> None:
    root, top = source

    result = run_cli("--root", root, "export", top, "-o", tmp_path / "f.tar.gz", "--format", "zst")

    assert result.exit_code == 2
    assert "the name says gz, --format says zst" in result.stderr
    assert not (tmp_path / "f.tar.gz").exists()


def test_an_unknown_format_is_a_usage_error(source: tuple[Path, str], tmp_path: Path) -> None:
    root, top = source

    result = run_cli("--root", root, "export", top, "-o", "-", "--format", "rar")

    assert result.exit_code == 2
    assert "use zst, gz, xz, bz2 or tar" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user")
def test_a_dry_run_from_a_pipe_writes_nothing_in_a_root_it_cannot_write(
    source: tuple[Path, str], tmp_path: Path
) -> None:
    """``import - --dry-run`` reads a pipe twice, so it keeps a copy of it: in the temp dir,
    never in the root, which a dry run leaves as it is (here: one its user cannot write)."""
    root, top = source
    archive = tmp_path / "family.tar.zst"
    assert run_cli("--root", root, "export", top, "-o", archive).exit_code == 0
    data = archive.read_bytes()
    base = Path(tempfile.mkdtemp(prefix="dsh-fork-dry-"))
    try:
        base.chmod(0o755)
        target = base / "sessions"
        generate(target, sessions=1, agents=0, depth=0, turns=1, seed=3)
        for path in (base, target, *target.iterdir()):
            path.chmod(0o755)  # readable by everyone, writable by root alone
        before = tree_digest(target)
        for module in pkgutil.walk_packages(dsh_fork.__path__, "dsh_fork."):
            importlib.import_module(module.name)  # the child cannot read the interpreter's dir

        def dry_run() -> object:
            read_end, write_end = os.pipe()

            def feed() -> None:
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(data)

            threading.Thread(target=feed, daemon=True).start()
            sys.stdin = os.fdopen(read_end, "rb")
            try:
                result = import_bundle("-", str(target), ImportOptions(dry_run=True, new_ids=True))
            except DshForkError as exc:
                return exc.code
            return [item.status for item in result.document.sessions]

        assert as_user(NOBODY, dry_run) == ["planned"] * 7
        assert tree_digest(target) == before
    finally:
        shutil.rmtree(base, ignore_errors=True)
