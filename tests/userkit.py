"""Commands run as another user: a forked child that drops root, reports in JSON, and is
killed if it hangs (the tests of sessions a user cannot read)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dsh_fork.cli.app import app

TIMEOUT = 60
"""Seconds a child may run before it is killed and the test fails."""

NOBODY = 65534
"""The user the tests run commands as (and give shared roots to)."""


@contextlib.contextmanager
def nobodys_root(
    prefix: str, fill: Callable[[Path], object], *, base_too: bool = False
) -> Iterator[Path]:
    """A sessions root any user can reach (pytest's tmp dirs are private to root): made by
    ``fill``, then every file and dir under its base given to nobody (the base itself too
    with ``base_too``); removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    root = base / "sessions"
    fill(root)
    for dirpath, dirnames, filenames in os.walk(base):
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), NOBODY, NOBODY)
    if base_too:
        os.chown(base, NOBODY, NOBODY)
    try:
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_user(uid: int, action: Callable[[], Any]) -> Any:
    """``action()`` in a forked child running as ``uid`` (setgid, setuid); its JSON result.
    The child is killed after the timeout: a hang fails the test, it never blocks the suite."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, act, report, leave without cleanup handlers
        status = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            payload = json.dumps({"value": action()}).encode()
        except BaseException as exc:
            payload = json.dumps({"crash": f"{type(exc).__name__}: {exc}"}).encode()
            status = 1
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(payload)
        os._exit(status)
    os.close(write_end)
    deadline = time.monotonic() + TIMEOUT
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail(f"the command run as uid {uid} hung")
        time.sleep(0.01)
    with os.fdopen(read_end, "rb") as pipe:
        report = json.loads(pipe.read() or b"{}")
    assert "crash" not in report, report.get("crash")
    return report["value"]


def cli_as(uid: int, *args: str | Path) -> tuple[int, str, str]:
    def action() -> tuple[int, str, str]:
        result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    code, out, err = as_user(uid, action)
    return code, out, err
