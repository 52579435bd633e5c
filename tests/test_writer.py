"""Durable writes (format §14, semantics §2.5): publishing new sessions atomically and
appending whole frames under the lock, with failures injected at every durable step."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard
from conftest import frame_count, log_events, log_lines

from dsh_fork import durable, faults, writer
from dsh_fork import frames as zframes
from dsh_fork.appending import NewEvent, append
from dsh_fork.durable import ensure_session_dir, open_session_dir
from dsh_fork.errors import (
    InternalError,
    IoError,
    SessionAlreadyExists,
    SessionLocked,
    SessionStale,
    UnsupportedFormat,
    UsageError,
)
from dsh_fork.faults import InjectedCrash
from dsh_fork.fixtures import Clock, SessionSpec, write_spec_as
from dsh_fork.fsdir import DirFd
from dsh_fork.generations import CURRENT_NAME, LOCK_NAME, is_temp_name, parse_name
from dsh_fork.locking import SessionLock, probe
from dsh_fork.model import Facts
from dsh_fork.reader import open_log
from dsh_fork.records import encode_header
from dsh_fork.sessionlog import SessionLog
from dsh_fork.writer import Body, Draft, Published, publish


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """Modes are asserted exactly; run under the common 022 umask whatever the caller has."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def header_line(session_id: str = "new") -> bytes:
    return encode_header(
        session_id=session_id,
        created_at=1768000000000,
        cwd="/fixture/project",
        parent_session=None,
        is_seeded=False,
        origin=None,
        delegation_depth=0,
        agent_preset=None,
    )


def body_lines(count: int, first: int = 0) -> list[bytes]:
    return [
        orjson.dumps({"type": "session/title", "seq": first + k, "time": 5, "data": {"k": k}})
        + b"\n"
        for k in range(count)
    ]


def new_dir(root: Path, segment: str = "new") -> Path:
    return ensure_session_dir(root, "--fixture-project--", segment)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def titles(*names: str) -> Any:
    def build(log: SessionLog, facts: Facts) -> list[NewEvent]:
        return [("session/title", 7, {"title": n, "messageSeqs": []}) for n in names]

    return build


def existing(root: Path, clock: Clock, batches: int = 2) -> tuple[Path, SessionSpec]:
    spec = SessionSpec(id="target", created_at=clock())
    for _ in range(batches):
        spec.turn(clock)
        spec.flush()
    return spec.publish(root), spec


# -- publishing -----------------------------------------------------------------------------


def test_publish_creates_private_dirs_and_files(root: Path) -> None:
    session_dir = new_dir(root)
    body = Body()
    body.add_lines(body_lines(3))
    published = publish(session_dir, header_line(), body, keep_lock=False)
    assert published.path == session_dir / CURRENT_NAME
    assert published.size == published.path.stat().st_size
    assert published.lock is None
    for directory in (root, root / "--fixture-project--", session_dir):
        assert mode(directory) == 0o700, directory
    assert mode(published.path) == 0o600
    assert mode(session_dir / LOCK_NAME) == 0o600
    assert sorted(os.listdir(session_dir)) == sorted([CURRENT_NAME, LOCK_NAME])
    assert log_lines(published.path) == [header_line()[:-1]] + [b[:-1] for b in body_lines(3)]
    assert frame_count(published.path) == 2
    assert probe(session_dir) == "free"


def test_publish_copies_verbatim_frames_then_frames_the_tail(root: Path) -> None:
    verbatim = zstandard.ZstdCompressor(write_checksum=False).compress(b"".join(body_lines(2)))
    body = Body(frames=[verbatim])
    body.add_lines(body_lines(2, first=2))
    path = publish(new_dir(root), header_line(), body, keep_lock=False).path
    data = path.read_bytes()
    frames = zframes.scan(data).frames
    assert len(frames) == 3
    assert data[frames[1].start : frames[1].end] == verbatim
    assert frames[2].checksum
    assert open_log(next(iter([_gen(path)]))).event_count == 4


def test_a_session_of_more_frames_than_one_writev_takes_is_written_whole(root: Path) -> None:
    lines = body_lines(3000)
    body = Body(frames=[zstandard.ZstdCompressor().compress(line) for line in lines])
    path = publish(new_dir(root), header_line(), body, keep_lock=False).path
    assert frame_count(path) == 3001
    assert log_lines(path) == [header_line()[:-1]] + [line[:-1] for line in lines]


def test_a_short_writev_is_completed(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_writev = os.writev

    def half(fd: int, buffers: Any) -> int:
        joined = b"".join(bytes(b) for b in buffers)
        return real_writev(fd, [joined[: len(joined) // 2]])

    monkeypatch.setattr(os, "writev", half)
    lines = body_lines(40)
    body = Body(frames=[zstandard.ZstdCompressor().compress(line) for line in lines])
    path = publish(new_dir(root), header_line(), body, keep_lock=False).path
    monkeypatch.undo()
    assert log_lines(path) == [header_line()[:-1]] + [line[:-1] for line in lines]


def _gen(path: Path) -> Any:
    from dsh_fork.generations import Generation

    return Generation(path, 4, "zstd")


def test_a_header_only_session(root: Path) -> None:
    path = publish(new_dir(root), header_line(), Body(), keep_lock=False).path
    assert frame_count(path) == 1
    assert log_lines(path) == [header_line()[:-1]]


def test_publish_can_keep_the_lock(root: Path) -> None:
    session_dir = new_dir(root)
    published = publish(session_dir, header_line(), Body(), keep_lock=True)
    assert published.lock is not None and published.lock.held
    assert probe(session_dir) == "held"
    with pytest.raises(SessionLocked):
        append(session_dir, titles("x"))
    appended = append(session_dir, titles("x"), lock=published.lock)
    assert appended.first_seq == 0 and published.lock.held
    published.lock.release()
    assert probe(session_dir) == "free"


@pytest.mark.parametrize(
    "occupant", ["session.v4.jsonl.zstd", "session.v4.jsonl", "session.v3.jsonl.zstd"]
)
def test_publishing_over_an_existing_generation_is_refused(root: Path, occupant: str) -> None:
    session_dir = new_dir(root)
    (session_dir / occupant).write_bytes(b"someone else's log")
    with pytest.raises(SessionAlreadyExists, match="already holds a session") as caught:
        publish(session_dir, header_line(), Body(), keep_lock=False)
    assert caught.value.exit_code == 5
    assert (session_dir / occupant).read_bytes() == b"someone else's log"
    assert sorted(os.listdir(session_dir)) == sorted([occupant, LOCK_NAME])
    assert probe(session_dir) == "free"


def test_a_leftover_dir_with_temps_is_published_into(root: Path) -> None:
    session_dir = new_dir(root)
    leftover = session_dir / f"{CURRENT_NAME}.0123456789ab.tmp"
    leftover.write_bytes(b"half")
    publish(session_dir, header_line(), Body(), keep_lock=False)
    assert (session_dir / CURRENT_NAME).exists()
    assert leftover.read_bytes() == b"half"


def test_a_symlinked_session_dir_is_not_written_through(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    project = root / "--fixture-project--"
    project.mkdir(parents=True)
    (project / "new").symlink_to(target, target_is_directory=True)
    with pytest.raises(IoError, match="refusing to write through the symbolic link"):
        new_dir(root)
    assert list(target.iterdir()) == []


def test_a_symlinked_project_dir_is_not_written_through(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    root.mkdir(parents=True)
    (root / "--fixture-project--").symlink_to(target, target_is_directory=True)
    with pytest.raises(IoError, match="symbolic link"):
        new_dir(root)
    assert list(target.iterdir()) == []


def test_a_file_where_a_dir_belongs_is_refused(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "--fixture-project--").write_text("file")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        new_dir(root)


def publish_steps(root: Path) -> list[tuple[str, str]]:
    with faults.install("crash", 0) as plan:
        publish(new_dir(root), header_line(), body_with(3), keep_lock=False)
    return plan.log


def body_with(count: int) -> Body:
    body = Body(frames=[zframes.encode(b"".join(body_lines(1)))])
    body.add_lines(body_lines(count - 1, first=1))
    return body


def assert_no_half_session(session_dir: Path, expected_events: int) -> bool:
    """Either no canonical file or a complete, valid one; every other name is ignored."""
    names = os.listdir(session_dir) if session_dir.exists() else []
    for name in names:
        if name not in (CURRENT_NAME, LOCK_NAME):
            assert parse_name(name) is None and is_temp_name(name), name
    if CURRENT_NAME not in names:
        return False
    log = open_log(_gen(session_dir / CURRENT_NAME))
    assert log.torn is None
    assert log.event_count == expected_events
    return True


def test_a_crash_after_any_publish_step_leaves_no_half_session(
    root: Path, tmp_path: Path, temps: str
) -> None:
    steps = publish_steps(tmp_path / "measure")
    kinds = [kind for kind, _ in steps]
    if temps == "named":
        assert kinds[-4:] == ["fsync", "link", "fsync-dir", "unlink"]
    else:  # nothing to remove after the link
        assert kinds[-4:] == ["write", "fsync", "link", "fsync-dir"]
    for k in range(1, len(steps) + 1):
        run_root = tmp_path / f"crash-{k}"
        with faults.install("crash", k), pytest.raises(InjectedCrash):
            publish(new_dir(run_root), header_line(), body_with(3), keep_lock=False)
        session_dir = run_root / "--fixture-project--" / "new"
        published = assert_no_half_session(session_dir, 3)
        assert published == (k >= kinds.index("link") + 1), k
        if temps == "unnamed" and session_dir.exists():  # it went with the process
            assert not [n for n in os.listdir(session_dir) if is_temp_name(n)], k
        if session_dir.exists():
            assert probe(session_dir) != "held"  # the crash took the lock with it
        if published:
            with pytest.raises(SessionAlreadyExists):
                publish(new_dir(run_root), header_line(), body_with(3), keep_lock=False)
        else:  # a rerun succeeds beside whatever the crash left
            publish(new_dir(run_root), header_line(), body_with(3), keep_lock=False)
        assert assert_no_half_session(session_dir, 3)


@pytest.mark.parametrize("action", ["enospc", "eacces", "eio"])
def test_a_failing_publish_step_cleans_up_and_releases(
    tmp_path: Path, action: str, temps: str
) -> None:
    steps = publish_steps(tmp_path / "measure")
    kinds = [kind for kind, _ in steps]
    link_step = kinds.index("link") + 1
    unlink_step = kinds.index("unlink") + 1 if temps == "named" else None
    for k in range(1, len(steps) + 1):
        run_root = tmp_path / f"{action}-{k}"
        session_dir = run_root / "--fixture-project--" / "new"
        if k == unlink_step:
            # The session exists once linked: a temp that cannot be removed is no failure.
            with faults.install(action, k):
                publish(new_dir(run_root), header_line(), body_with(2), keep_lock=False)
            assert assert_no_half_session(session_dir, 2)
            assert [n for n in os.listdir(session_dir) if is_temp_name(n)] != []
            append(session_dir, titles())  # the next writer under the lock sweeps it
            assert not [n for n in os.listdir(session_dir) if is_temp_name(n)]
            continue
        with faults.install(action, k), pytest.raises(IoError) as caught:
            publish(new_dir(run_root), header_line(), body_with(2), keep_lock=False)
        assert caught.value.exit_code == 11 and caught.value.code == "IO_ERROR"
        published = assert_no_half_session(session_dir, 2)
        # A failure after the link (the dir fsync) cannot undo the publication; it says so.
        assert published == (k > link_step), k
        assert ("published" in caught.value.message) == published, caught.value.message
        if session_dir.exists():
            assert not [n for n in os.listdir(session_dir) if is_temp_name(n)], k
            assert probe(session_dir) != "held"


def test_an_unnamed_temp_is_never_seen_in_the_dir(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written and synced, the temp has no name: the dir holds the lock alone until the link
    names the log."""
    monkeypatch.setattr(writer, "UNNAMED_TEMPS", True)
    session_dir = new_dir(root)
    seen: list[list[str]] = []
    link = DirFd.link_unnamed

    def looking(handle: DirFd, fd: int, target: str) -> None:
        seen.append(sorted(os.listdir(session_dir)))
        link(handle, fd, target)

    monkeypatch.setattr(DirFd, "link_unnamed", looking)
    publish(session_dir, header_line(), body_with(3), keep_lock=False)
    assert seen == [[LOCK_NAME]]
    assert sorted(os.listdir(session_dir)) == [LOCK_NAME, CURRENT_NAME]
    assert assert_no_half_session(session_dir, 3)


def test_a_system_without_unnamed_files_gets_named_temps(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "UNNAMED_TEMPS", True)
    monkeypatch.setattr(DirFd, "create_unnamed", lambda handle, mode=0o600: None)
    steps = publish_steps(root)
    assert [kind for kind, _ in steps][-1] == "unlink"  # a named temp, removed
    assert writer.UNNAMED_TEMPS is False  # and the process names its temps from now on


@pytest.mark.parametrize("refusal", [errno.EOPNOTSUPP, errno.ENOENT, errno.EACCES])
def test_a_file_system_that_cannot_link_an_unnamed_file_gets_a_named_copy(
    root: Path, monkeypatch: pytest.MonkeyPatch, refusal: int
) -> None:
    monkeypatch.setattr(writer, "UNNAMED_TEMPS", True)

    def refused(handle: DirFd, fd: int, target: str) -> None:
        raise OSError(refusal, os.strerror(refusal))

    monkeypatch.setattr(DirFd, "link_unnamed", refused)
    session_dir = new_dir(root)
    with faults.install("crash", 0) as plan:  # a plan that never fires: the steps counted
        published = publish(session_dir, header_line(), body_with(3), keep_lock=False)
    assert [kind for kind, _ in plan.log].count("link") == 1
    assert published.path == session_dir / CURRENT_NAME and not published.temp_left
    assert sorted(os.listdir(session_dir)) == [LOCK_NAME, CURRENT_NAME]
    assert assert_no_half_session(session_dir, 3)
    assert writer.UNNAMED_TEMPS is False


def test_an_io_error_linking_an_unnamed_temp_fails_the_publish_and_leaves_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "UNNAMED_TEMPS", True)

    def failing(handle: DirFd, fd: int, target: str) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(DirFd, "link_unnamed", failing)
    session_dir = new_dir(root)
    with pytest.raises(IoError) as caught:
        publish(session_dir, header_line(), body_with(3), keep_lock=False)
    assert caught.value.exit_code == 11
    assert sorted(os.listdir(session_dir)) == [LOCK_NAME]
    assert probe(session_dir) == "free" and writer.UNNAMED_TEMPS is True


def test_a_name_taken_before_the_unnamed_temp_is_linked_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's log appears between the check and the link: the link refuses to
    replace it, and the unnamed temp goes with its descriptor."""
    monkeypatch.setattr(writer, "UNNAMED_TEMPS", True)
    session_dir = new_dir(root)
    link = DirFd.link_unnamed

    def raced(handle: DirFd, fd: int, target: str) -> None:
        (session_dir / CURRENT_NAME).write_bytes(b"theirs")
        link(handle, fd, target)

    monkeypatch.setattr(DirFd, "link_unnamed", raced)
    with pytest.raises(SessionAlreadyExists):
        publish(session_dir, header_line(), body_with(3), keep_lock=False)
    assert (session_dir / CURRENT_NAME).read_bytes() == b"theirs"
    assert sorted(os.listdir(session_dir)) == [LOCK_NAME, CURRENT_NAME]
    assert probe(session_dir) == "free"


def test_publish_under_a_held_lock_is_refused(root: Path, hold_lock: Any) -> None:
    session_dir = new_dir(root)
    hold_lock(session_dir)
    with pytest.raises(SessionLocked) as caught:
        publish(session_dir, header_line(), Body(), keep_lock=False)
    assert caught.value.exit_code == 6
    assert sorted(os.listdir(session_dir)) == [LOCK_NAME]


# -- appending ------------------------------------------------------------------------------


def test_one_complete_frame_per_append(root: Path, clock: Clock) -> None:
    session_dir, spec = existing(root, clock)
    path = session_dir / CURRENT_NAME
    before = path.read_bytes()
    frames_before = frame_count(path)
    appended = append(session_dir, titles("a", "b", "c"))
    assert (appended.first_seq, appended.count, appended.repaired_tail) == (
        len(spec.lines),
        3,
        False,
    )
    after = path.read_bytes()
    assert after.startswith(before)
    assert frame_count(path) == frames_before + 1
    new_frame = zframes.scan(after).frames[-1]
    assert (new_frame.start, new_frame.end, new_frame.checksum) == (len(before), len(after), True)
    events = log_events(path)
    assert [e["seq"] for e in events] == list(range(len(spec.lines) + 3))
    assert events[-1] == {
        "type": "session/title",
        "seq": len(spec.lines) + 2,
        "time": 7,
        "data": {"title": "c", "messageSeqs": []},
    }
    assert probe(session_dir) == "free"


def test_an_empty_build_appends_nothing(root: Path, clock: Clock) -> None:
    session_dir, spec = existing(root, clock)
    before = (session_dir / CURRENT_NAME).read_bytes()
    appended = append(session_dir, titles())
    assert (appended.first_seq, appended.count) == (len(spec.lines), 0)
    assert (session_dir / CURRENT_NAME).read_bytes() == before


def test_the_builder_sees_the_log_as_read_under_the_lock(root: Path, clock: Clock) -> None:
    session_dir, spec = existing(root, clock)
    seen: list[int] = []

    def build(log: SessionLog, facts: Facts) -> list[NewEvent]:
        seen.append(log.event_count)
        assert probe(session_dir) == "held"
        return [("session/title", 1, {"title": "x", "messageSeqs": []})]

    append(session_dir, build)
    append(session_dir, build)
    assert seen == [len(spec.lines), len(spec.lines) + 1]


def append_steps(root: Path, clock: Clock) -> int:
    session_dir, _ = existing(root, clock)
    with faults.install("crash", 0) as plan:
        append(session_dir, titles("x"))
    return plan.count


@pytest.mark.parametrize("action", ["enospc", "eio"])
def test_a_failed_append_is_rolled_back(
    root: Path, clock: Clock, tmp_path: Path, action: str
) -> None:
    steps = append_steps(tmp_path / "measure", clock)
    assert steps == 2  # write, fsync
    for k in range(1, steps + 1):
        session_dir, _ = existing(root / str(k), clock)
        path = session_dir / CURRENT_NAME
        before = path.read_bytes()
        with faults.install(action, k), pytest.raises(IoError):
            append(session_dir, titles("x", "y"))
        assert path.read_bytes() == before, k
        assert probe(session_dir) == "free"
        append(session_dir, titles("x", "y"))
        assert [e["data"]["title"] for e in log_events(path)[-2:]] == ["x", "y"]


def test_a_short_write_is_completed(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_dir, _ = existing(root, clock)
    real_write = os.write

    def dribble(fd: int, data: Any) -> int:
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(os, "write", dribble)
    append(session_dir, titles("slow"))
    monkeypatch.undo()
    assert log_events(session_dir / CURRENT_NAME)[-1]["data"]["title"] == "slow"


def write_torn_frame(path: Path, lines: list[bytes], keep_blocks: int) -> int:
    """Append one frame of one block per line, cut after ``keep_blocks`` whole blocks."""
    compressor = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    out = b""
    for line in lines[:keep_blocks]:
        out += compressor.compress(line) + compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    if keep_blocks == 0:
        out = zframes.encode(b"".join(lines))[:8]
    else:
        out += compressor.compress(lines[keep_blocks]) if keep_blocks < len(lines) else b""
    offset = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(out)
    return offset


def test_a_torn_tail_is_repaired_before_appending(root: Path, clock: Clock) -> None:
    """Format §5.3: truncate at the torn frame, re-append the recovered lines that continue
    the seqs as one frame, then append the batch."""
    session_dir, spec = existing(root, clock)
    path = session_dir / CURRENT_NAME
    committed = path.read_bytes()
    n = len(spec.lines)
    recovered = body_lines(2, first=n)
    write_torn_frame(path, [*recovered, *body_lines(1, first=n + 2)], keep_blocks=2)
    appended = append(session_dir, titles("after"))
    assert appended.repaired_tail
    assert appended.first_seq == n + 2
    data = path.read_bytes()
    assert data.startswith(committed)
    frames = zframes.scan(data).frames
    assert frames[-2].start == len(committed)
    assert zframes.decode(data, frames[-2]) == b"".join(recovered)
    assert [e["seq"] for e in log_events(path)] == list(range(n + 3))
    assert log_events(path)[-1]["data"]["title"] == "after"
    assert zframes.scan(data).torn_start is None


def test_recovered_lines_that_do_not_continue_the_seqs_are_dropped(
    root: Path, clock: Clock
) -> None:
    session_dir, spec = existing(root, clock)
    path = session_dir / CURRENT_NAME
    committed = path.read_bytes()
    n = len(spec.lines)
    write_torn_frame(path, [*body_lines(1, first=n + 5), *body_lines(1, first=n)], keep_blocks=2)
    appended = append(session_dir, titles("after"))
    assert appended.repaired_tail and appended.first_seq == n
    data = path.read_bytes()
    assert data.startswith(committed)
    assert len(zframes.scan(data).frames) == len(zframes.scan(committed).frames) + 1


def test_a_torn_tail_without_recoverable_lines_is_truncated(root: Path, clock: Clock) -> None:
    session_dir, spec = existing(root, clock)
    path = session_dir / CURRENT_NAME
    committed = path.read_bytes()
    write_torn_frame(path, body_lines(2, first=len(spec.lines)), keep_blocks=0)
    assert append(session_dir, titles()).repaired_tail
    assert path.read_bytes() == committed


def test_a_crash_mid_append_is_finished_by_the_next_append(root: Path, clock: Clock) -> None:
    session_dir, _ = existing(root, clock)
    path = session_dir / CURRENT_NAME
    committed = path.read_bytes()
    with faults.install("tear", 1), pytest.raises(InjectedCrash):
        append(session_dir, titles("lost"))
    assert len(path.read_bytes()) > len(committed)
    assert open_log(_gen(path)).torn is not None
    assert probe(session_dir) == "free"
    appended = append(session_dir, titles("again"))
    assert appended.repaired_tail
    titles_now = [e["data"]["title"] for e in log_events(path) if e["type"] == "session/title"]
    assert titles_now == ["again"]
    assert path.read_bytes().startswith(committed)


def test_append_under_a_held_lock_changes_nothing(root: Path, clock: Clock, hold_lock: Any) -> None:
    session_dir, _ = existing(root, clock)
    before = (session_dir / CURRENT_NAME).read_bytes()
    hold_lock(session_dir)
    with pytest.raises(SessionLocked, match=r"session\.lock is held by a live process") as caught:
        append(session_dir, titles("x"))
    assert caught.value.exit_code == 6
    assert caught.value.details == {"lockPath": str(session_dir / LOCK_NAME)}
    assert (session_dir / CURRENT_NAME).read_bytes() == before


def test_a_held_lock_blocks_even_the_torn_tail_repair(
    root: Path, clock: Clock, hold_lock: Any
) -> None:
    session_dir, spec = existing(root, clock)
    path = session_dir / CURRENT_NAME
    write_torn_frame(path, body_lines(2, first=len(spec.lines)), keep_blocks=1)
    before = path.read_bytes()
    hold_lock(session_dir)
    with pytest.raises(SessionLocked):
        append(session_dir, titles("x"))
    assert path.read_bytes() == before


@pytest.mark.parametrize(("version", "encoding"), [(3, "zstd"), (4, "plain"), (0, "zstd")])
def test_only_v4_zstd_logs_are_appended_to(
    root: Path, clock: Clock, version: int, encoding: str
) -> None:
    spec = SessionSpec(id="old", created_at=clock())
    spec.turn(clock)
    path = write_spec_as(spec, root, version, encoding=encoding)
    before = path.read_bytes()
    with pytest.raises(UnsupportedFormat, match="only v4 zstd logs are written") as caught:
        append(path.parent, titles("x"))
    assert caught.value.exit_code == 8
    assert path.read_bytes() == before


def catalog(child_id: str, **extra: Any) -> dict[str, Any]:
    return {"version": 0, "childId": child_id, "childCreatedAt": 5, "mode": "one-shot", **extra}


def returning(events: list[NewEvent]) -> Any:
    return lambda log, facts: events


def test_catalog_facts_are_checked_before_writing(root: Path, clock: Clock) -> None:
    session_dir, _ = existing(root, clock)
    path = session_dir / CURRENT_NAME
    append(session_dir, lambda log, facts: [("subagent/catalog", 1, catalog("c1"))])
    before = path.read_bytes()
    bad_batches: list[list[NewEvent]] = [
        [("subagent/catalog", 1, catalog("c1"))],  # already in the own range
        [("subagent/catalog", 1, catalog("c2")), ("subagent/catalog", 1, catalog("c2"))],
        [("subagent/catalog", 1, catalog("c3", callId="x"))],  # strict schema
        [("subagent/catalog", 1, {**catalog("c4"), "mode": "continuable"})],  # needs a label
    ]
    for bad in bad_batches:
        with pytest.raises(InternalError, match="refusing to append an invalid catalog fact"):
            append(session_dir, returning(bad))
        assert path.read_bytes() == before


def test_a_fact_in_the_inherited_prefix_does_not_block_an_own_one(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="forked", created_at=clock(), parent="p", is_seeded=True)
    spec.turn(clock)
    spec.add("subagent/catalog", clock(), catalog("c1"))
    spec.end_seed(clock())
    session_dir = spec.publish(root)
    appended = append(session_dir, lambda log, facts: [("subagent/catalog", 1, catalog("c1"))])
    assert appended.count == 1
    assert [f.child_id for f in appended.facts.inherited_catalog()] == ["c1"]


def test_appending_to_a_dir_without_a_session(root: Path) -> None:
    session_dir = new_dir(root)
    with pytest.raises(InternalError, match="holds no session"):
        append(session_dir, titles("x"))


def test_the_lock_file_is_created_when_missing(root: Path, clock: Clock) -> None:
    session_dir, _ = existing(root, clock)
    (session_dir / LOCK_NAME).unlink()
    append(session_dir, titles("x"))
    assert mode(session_dir / LOCK_NAME) == 0o600
    with SessionLock(session_dir):
        assert probe(session_dir) == "held"


# -- a dir moved away or swapped for a link at the worst moment (issue 11) ---------------------


def swap_at(monkeypatch: pytest.MonkeyPatch, kind: str, session_dir: Path, away: Path) -> None:
    """At the writer's ``kind`` step, move the session dir out of the root and put a link to
    it in its place: writes through the held descriptor would now land outside the root."""
    real_step = faults.step

    def step(step_kind: str, path: Path | str) -> None:
        if step_kind == kind and not away.exists():
            os.rename(session_dir, away)
            session_dir.symlink_to(away, target_is_directory=True)
        real_step(step_kind, path)

    monkeypatch.setattr(faults, "step", step)


@pytest.mark.parametrize("kind", ["create", "write", "fsync", "link"])
def test_a_session_dir_moved_out_during_publish_is_left_without_a_session(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    session_dir = new_dir(root)
    away = tmp_path / "away"
    swap_at(monkeypatch, kind, session_dir, away)

    with pytest.raises(SessionStale, match="moved or replaced while it was being written"):
        publish(session_dir, header_line(), Body(), keep_lock=False)

    assert sorted(os.listdir(away)) == [LOCK_NAME]  # no log, no temp: only what moved with it
    assert session_dir.is_symlink()


def test_a_session_dir_moved_out_during_append_is_not_appended_to(
    root: Path, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_dir, _ = existing(root, clock)
    lock = SessionLock(session_dir).acquire()
    away = tmp_path / "away"
    before = (session_dir / CURRENT_NAME).read_bytes()
    os.rename(session_dir, away)
    session_dir.symlink_to(away, target_is_directory=True)
    try:
        with pytest.raises(SessionStale, match="moved or replaced"):
            append(session_dir, titles("a"), lock=lock)
    finally:
        lock.release()
    assert (away / CURRENT_NAME).read_bytes() == before


def test_a_log_replaced_between_the_read_and_the_append_is_not_appended_to(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_dir, _ = existing(root, clock)
    log = session_dir / CURRENT_NAME
    original = log.read_bytes()

    def build(read: SessionLog, facts: Facts) -> list[NewEvent]:
        log.rename(session_dir / "kept-aside")
        log.write_bytes(original)  # same bytes, another file
        return [("session/title", 7, {"title": "x", "messageSeqs": []})]

    with pytest.raises(SessionStale, match="replaced while it was being read"):
        append(session_dir, build)
    assert log.read_bytes() == original
    assert (session_dir / "kept-aside").read_bytes() == original


def test_a_hard_linked_log_is_never_changed_in_place(root: Path, clock: Clock) -> None:
    session_dir, _ = existing(root, clock)
    log = session_dir / CURRENT_NAME
    backup = root.parent / "backup.zstd"
    os.link(log, backup)
    before = backup.read_bytes()

    with pytest.raises(IoError, match="it has 2 hard links") as caught:
        append(session_dir, titles("a"))

    assert backup.read_bytes() == before == log.read_bytes()
    assert caught.value.exit_code == 11
    assert "cp without -l" in caught.value.message


def test_a_hard_linked_log_with_a_torn_tail_is_not_repaired_in_place(
    root: Path, clock: Clock
) -> None:
    session_dir, _ = existing(root, clock)
    log = session_dir / CURRENT_NAME
    with log.open("ab") as handle:
        handle.write(zframes.encode(b"x" * 1000)[:20])
    backup = root.parent / "backup.zstd"
    os.link(log, backup)
    before = backup.read_bytes()

    with pytest.raises(IoError, match="hard links"):
        append(session_dir, titles("a"))
    assert backup.read_bytes() == before


# -- publishing a batch -----------------------------------------------------------------------


def batch_of(root: Path, count: int, *, made: bool) -> list[Draft]:
    """``count`` drafts in new dirs; with ``made`` each made by ``open_session_dir`` (its
    dirs left open for the publish, the dir known fresh), else by ``ensure_session_dir``."""
    drafts = []
    for k in range(count):
        body = Body()
        body.add_lines(body_lines(2 + k))
        segment = f"new-{k:02d}"
        if made:
            dirs, fresh = open_session_dir(root, "--fixture-project--", segment)
            drafts.append(Draft(dirs.path, header_line(segment), body, dirs=dirs, fresh=fresh))
        else:
            drafts.append(Draft(new_dir(root, segment), header_line(segment), body))
    return drafts


@pytest.mark.parametrize("threads", [True, False], ids=["threads", "in-turn"])
@pytest.mark.parametrize("made", [True, False], ids=["made-dirs", "existing-dirs"])
def test_a_batch_keeps_each_sessions_outcome(
    root: Path, monkeypatch: pytest.MonkeyPatch, threads: bool, made: bool
) -> None:
    """Ten sessions published as one batch (their fsyncs overlapping on the pool, or in turn):
    one whose dir already holds a log is refused, one whose temp fsync fails leaves nothing,
    one whose dir fsync fails is published and says so; the seven others are whole."""
    drafts = batch_of(root, 10, made=made)
    (drafts[2].session_dir / CURRENT_NAME).write_bytes(b"someone else's log")
    plain_fsync, plain_fsync_dir = durable._fsync, durable._fsync_dir_fd

    def failing_fsync(fd: int, path: Path) -> None:
        if path.parent.name == "new-05":
            raise OSError(5, "Input/output error")
        plain_fsync(fd, path)

    def failing_fsync_dir(handle: DirFd) -> None:
        if handle.path.name == "new-07":
            raise OSError(5, "Input/output error")
        plain_fsync_dir(handle)

    monkeypatch.setattr(writer, "_fsync", failing_fsync)
    monkeypatch.setattr(writer, "_fsync_dir_fd", failing_fsync_dir)
    if threads:
        with writer.sync_threads():
            outcomes = writer.publish_batch(drafts, keep_lock=False)
    else:
        outcomes = writer.publish_batch(drafts, keep_lock=False)

    assert isinstance(outcomes[2], SessionAlreadyExists)
    assert isinstance(outcomes[5], IoError) and not outcomes[5].details.get("published")
    assert isinstance(outcomes[7], IoError) and outcomes[7].details.get("published")
    for k, (draft, outcome) in enumerate(zip(drafts, outcomes, strict=True)):
        assert draft.dirs is None, k  # taken over by the publish, closed with its lock
        if k == 5 and made:  # a dir made for a publish that failed goes again
            assert not draft.session_dir.exists()
            continue
        names = sorted(os.listdir(draft.session_dir))
        assert probe(draft.session_dir) == "free", k
        if k == 2:
            assert (draft.session_dir / CURRENT_NAME).read_bytes() == b"someone else's log"
        elif k == 5:
            assert names == [LOCK_NAME]
        else:
            assert names == sorted([CURRENT_NAME, LOCK_NAME]), k
            path = draft.session_dir / CURRENT_NAME
            assert log_lines(path) == [header_line(f"new-{k:02d}")[:-1]] + [
                line[:-1] for line in body_lines(2 + k)
            ]
            if k != 7:
                assert isinstance(outcome, Published) and outcome.path == path


def test_only_a_dir_it_made_is_fresh_and_an_existing_one_is_checked(root: Path) -> None:
    """``open_session_dir`` says whether it made the dir: only a dir it made (empty, under a
    new name) skips the publish's listing; one that existed is listed and its session kept."""
    first, made = open_session_dir(root, "--fixture-project--", "twice")
    first.close()
    again, made_again = open_session_dir(root, "--fixture-project--", "twice")
    assert (made, made_again) == (True, False)
    (again.path / CURRENT_NAME).write_bytes(b"a log that appeared")
    draft = Draft(again.path, header_line(), Body(), dirs=again, fresh=made_again)
    (outcome,) = writer.publish_batch([draft], keep_lock=False)
    assert isinstance(outcome, SessionAlreadyExists)
    assert (again.path / CURRENT_NAME).read_bytes() == b"a log that appeared"
