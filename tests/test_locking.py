"""``session.lock`` (format §11): the liveness probe and the exclusive ``flock`` write lock."""

from __future__ import annotations

import fcntl
import io
import os
import tokenize
from pathlib import Path
from typing import Any

import pytest

import dsh_fork
from dsh_fork.errors import IoError, SessionLocked
from dsh_fork.locking import SessionLock, lock_path, probe

PACKAGE = Path(dsh_fork.__file__).resolve().parent


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    path = tmp_path / "s"
    path.mkdir()
    return path


def test_probe_states(session_dir: Path, hold_lock: Any) -> None:
    assert probe(session_dir) == "absent"
    assert not lock_path(session_dir).exists()  # probing never creates the file
    lock_path(session_dir).touch()
    assert probe(session_dir) == "free"
    holder = hold_lock(session_dir)
    assert probe(session_dir) == "held"
    holder.release()
    assert probe(session_dir) == "free"  # released by the holder's exit: no stale lock


def test_a_killed_holder_leaves_no_stale_lock(session_dir: Path, hold_lock: Any) -> None:
    holder = hold_lock(session_dir)
    assert probe(session_dir) == "held"
    holder.proc.kill()
    holder.proc.wait(timeout=10)
    assert probe(session_dir) == "free"


def test_the_write_lock_is_exclusive(session_dir: Path) -> None:
    lock = SessionLock(session_dir).acquire()
    assert lock.held
    assert os.stat(lock.path).st_size == 0
    assert probe(session_dir) == "held"
    with pytest.raises(SessionLocked):
        SessionLock(session_dir).acquire()
    lock.release()
    assert not lock.held
    assert probe(session_dir) == "free"
    lock.release()  # releasing twice is harmless


def test_the_lock_as_a_context_manager(session_dir: Path) -> None:
    with SessionLock(session_dir) as lock:
        assert lock.held and probe(session_dir) == "held"
    assert probe(session_dir) == "free"
    taken = SessionLock(session_dir).acquire()
    with taken as same:  # an already held lock is used as is
        assert same is taken
    assert not taken.held


def test_a_lock_held_by_another_process(session_dir: Path, hold_lock: Any) -> None:
    hold_lock(session_dir)
    with pytest.raises(SessionLocked) as caught:
        SessionLock(session_dir).acquire()
    assert caught.value.exit_code == 6
    assert caught.value.message == "s is in use: its session.lock is held by a live process"
    assert caught.value.details == {"lockPath": str(lock_path(session_dir))}


def test_the_lock_file_is_private_and_never_deleted(session_dir: Path) -> None:
    previous = os.umask(0o022)
    try:
        with SessionLock(session_dir):
            pass
    finally:
        os.umask(previous)
    assert lock_path(session_dir).exists()
    assert lock_path(session_dir).stat().st_mode & 0o777 == 0o600


def test_a_symlinked_lock_file_is_not_followed(session_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    lock_path(session_dir).symlink_to(target)
    with pytest.raises(OSError):
        SessionLock(session_dir).acquire()
    assert not target.exists()


def test_a_replaced_lock_file_is_locked_again(
    session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format §11.1 step 4: after flock, (dev, inode) of the fd and the path must agree."""
    real_flock = fcntl.flock
    replacements = [1]

    def flock_then_replace(fd: int, operation: int) -> None:
        real_flock(fd, operation)
        if replacements:
            replacements.pop()
            os.unlink(lock_path(session_dir))
            lock_path(session_dir).touch()

    monkeypatch.setattr(fcntl, "flock", flock_then_replace)
    lock = SessionLock(session_dir).acquire()
    assert lock._fd is not None
    assert os.fstat(lock._fd).st_ino == os.stat(lock_path(session_dir)).st_ino
    lock.release()


def test_a_lock_file_that_keeps_being_replaced(
    session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_flock = fcntl.flock
    attempts: list[int] = []

    def flock_then_replace(fd: int, operation: int) -> None:
        real_flock(fd, operation)
        attempts.append(fd)
        os.unlink(lock_path(session_dir))
        lock_path(session_dir).touch()

    monkeypatch.setattr(fcntl, "flock", flock_then_replace)
    with pytest.raises(SessionLocked, match="kept being replaced"):
        SessionLock(session_dir).acquire()
    assert len(attempts) == 3


def code_names(path: Path) -> set[str]:
    """Identifiers used as code (not in comments or strings) in one source file."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return {tok.string for tok in tokens if tok.type == tokenize.NAME}


def test_the_source_never_uses_posix_record_locks() -> None:
    """Format §11.2: lockf/fcntl locks cannot see DSH's flock and vanish on any close."""
    forbidden = {"lockf", "F_SETLK", "F_SETLKW", "F_GETLK", "F_OFD_SETLK", "F_OFD_SETLKW"}
    sources = sorted(PACKAGE.rglob("*.py"))
    assert PACKAGE / "locking.py" in sources
    for source in sources:
        assert not code_names(source) & forbidden, source
    assert "flock" in code_names(PACKAGE / "locking.py")


def test_a_fifo_as_lock_file_is_refused_without_blocking(session_dir: Path) -> None:
    os.mkfifo(lock_path(session_dir))

    assert probe(session_dir) == "unknown"  # a FIFO says nothing about liveness
    with pytest.raises(IoError, match="it is a FIFO, not a regular file"):
        SessionLock(session_dir).acquire()


def test_the_lock_holds_the_dir_it_locked(session_dir: Path) -> None:
    with SessionLock(session_dir) as lock:
        held = lock.dirs.session
        assert (held.dev, held.ino) == (session_dir.stat().st_dev, session_dir.stat().st_ino)
        lock.dirs.verify()
    with pytest.raises(RuntimeError):
        _ = lock.dirs
