"""Attacks on a hostile or busy root (issue 11): swaps, FIFOs, decompression bombs, hard links,
unreadable sessions, terminal escapes.

Each attack is run as a hostile user or a careless operator would run it, and each test checks
the same promises: nothing outside the root changes, no command exceeds its memory bound or
hangs (every subprocess runs under a timeout), every session a command cannot read is named,
and every line written is one the reader accepts. Loop sizes grow under ``DSH_FORK_FUZZ=deep``.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import resource
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import log_events, log_header, run_cli, tree_digest
from relinkkit import CWD, plugin_scenario
from safetykit import count, peak_rss_run
from userkit import NOBODY, as_user, cli_as, nobodys_root

from dsh_fork import frames as zframes
from dsh_fork.cli.base import Out, run
from dsh_fork.discovery import Root
from dsh_fork.display import MAX_LINE_CHARS, safe_text
from dsh_fork.errors import DshForkError, IoError
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.fork import ForkOptions, fork_session
from dsh_fork.generations import CURRENT_NAME, LOCK_NAME
from dsh_fork.layout import encode_segment, project_key
from dsh_fork.locking import SessionLock, probe
from dsh_fork.oplog import OpLog
from dsh_fork.reader import open_log, read_header_line, stable_read
from dsh_fork.relink import relink

PROJECT = project_key(CWD)
SOURCE = "session-P_A"
FORK = "session-C_A"
DEEP = os.environ.get("DSH_FORK_FUZZ") == "deep"
OUTSIDE_WRITES = "swap races that changed anything outside the root (must be 0)"
TIMEOUT = 60


def loops(default: int, deep: int) -> int:
    return deep if DEEP else default


@pytest.fixture
def tree(root: Path) -> Path:
    plugin_scenario(root, Clock(), children=2)
    return root


def listing(path: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``path`` (links not followed): kind, mode and content of files."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            data = Path(full).read_bytes() if stat.S_ISREG(st.st_mode) else b""
            out[os.path.relpath(full, path)] = (stat.filemode(st.st_mode), st.st_nlink, data)
    return out


def cli(
    *args: str | Path, user: int | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own, under a timeout: a hang fails the test."""
    command = [sys.executable, "-m", "dsh_fork", *map(str, args)]
    env = {k: v for k, v in os.environ.items() if k != "DSH_HOME"}
    env["HOME"] = kwargs.pop("home", env.get("HOME", "/nonexistent"))
    return subprocess.run(
        command,
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        user=user,
        group=user,
        **kwargs,
    )


# -- a dir swapped for a symbolic link while a command writes ------------------------------------


def _swap_loop(target: str, outside: str, stop: Any) -> None:
    """rename the dir aside, put a link to ``outside`` in its place, put it back; forever."""
    aside = target + ".aside"
    while not stop.is_set():
        try:
            os.rename(target, aside)
        except OSError:
            time.sleep(0.0001)
            continue
        try:
            os.symlink(outside, target)
            time.sleep(0.00005)
            os.unlink(target)
        except OSError:
            pass
        finally:
            try:
                os.rename(aside, target)
            except OSError:  # the command made a new dir there meanwhile: keep both
                os.rename(aside, f"{target}.aside-{time.monotonic_ns()}")
        time.sleep(0.00005)


class Swapper:
    """A process racing the test: ``target`` is a link to ``outside`` part of the time."""

    def __init__(self, target: Path, outside: Path) -> None:
        context = multiprocessing.get_context("fork")
        self.stop = context.Event()
        self.process = context.Process(
            target=_swap_loop, args=(str(target), str(outside), self.stop), daemon=True
        )

    def __enter__(self) -> Swapper:
        self.process.start()
        time.sleep(0.005)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.process.join(10)
        assert not self.process.is_alive()


def _fork_under_swaps(root: Path, child_id: str) -> str:
    try:
        result = fork_session(SOURCE, str(root), ForkOptions(child_id=child_id, agents=False))
    except DshForkError as exc:
        assert "internal error" not in exc.message, exc.message
        return exc.code
    except OSError as exc:  # a dir gone in the middle of a lookup: IO_ERROR on the CLI
        return errno.errorcode.get(exc.errno or 0, "OSError")
    assert result.child.id == child_id
    return "ok"


def _assert_published_inside(root: Path, child_id: str) -> None:
    path = root / PROJECT / encode_segment(child_id) / CURRENT_NAME
    assert not path.parent.is_symlink()
    assert log_header(path)["id"] == child_id
    entry = Root(root).entry(child_id)
    assert entry is not None and entry.generation is not None
    assert open_log(entry.generation).event_count > 0


@pytest.mark.parametrize("swapped", ["session dir", "project dir"])
def test_a_dir_swapped_for_a_link_during_forks_is_never_written_through(
    tree: Path, tmp_path: Path, swapped: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    runs = loops(40, 400)
    outcomes: dict[str, int] = {}
    for k in range(runs):
        child_id = f"swap-child-{k}"
        session_dir = tree / PROJECT / encode_segment(child_id)
        if swapped == "session dir":
            session_dir.mkdir(mode=0o700)
            target = session_dir
        else:
            target = tree / PROJECT
        with Swapper(target, outside):
            outcome = _fork_under_swaps(tree, child_id)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome == "ok":
            _assert_published_inside(tree, child_id)
        outside_writes = int(listing(outside) != {})
        count(OUTSIDE_WRITES, outside_writes)
        assert not outside_writes, f"run {k} wrote outside the root ({outcome})"
    count(f"swap races: fork, {swapped} swapped for a link", runs)
    print(f"fork under {swapped} swaps: {outcomes}")
    assert len(outcomes) > 1  # the race did hit: some forks were refused, some went through


def test_a_fork_child_dir_swapped_for_a_link_during_relink_is_never_appended_through(
    tmp_path: Path,
) -> None:
    runs = loops(12, 100)
    outcomes: dict[str, int] = {}
    for k in range(runs):
        root = tmp_path / f"r{k}" / "sessions"
        plugin_scenario(root, Clock(), children=1)
        fork_dir = root / PROJECT / encode_segment(FORK)
        outside = tmp_path / f"outside{k}"
        shutil.copytree(fork_dir, outside)  # a look-alike of C: a tempting target
        before = listing(outside)
        root_index = Root(root)
        with Swapper(fork_dir, outside):
            try:
                summary = relink(root_index, fork_dir)
                outcome = "ok" if not summary.failed else "partial"
            except DshForkError as exc:
                assert "internal error" not in exc.message, exc.message
                outcome = exc.code
            except OSError as exc:  # a dir gone in the middle of a lookup: IO_ERROR on the CLI
                outcome = errno.errorcode.get(exc.errno or 0, "OSError")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        outside_writes = int(listing(outside) != before)
        count(OUTSIDE_WRITES, outside_writes)
        assert not outside_writes, f"run {k} changed the file outside the root"
        log_events(fork_dir / CURRENT_NAME)  # whatever was appended is whole and readable
    count("swap races: relink, fork child dir swapped for a link", runs)
    print(f"relink under swaps: {outcomes}")


def test_a_dir_that_is_a_link_when_the_lock_is_taken_is_refused(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    link = tree / PROJECT / "linked"
    link.symlink_to(outside)

    with pytest.raises(DshForkError, match="symbolic link"):
        SessionLock(link).acquire()
    assert listing(outside) == {}


def test_a_dir_moved_while_its_lock_is_held_is_not_written(tree: Path) -> None:
    fork_dir = tree / PROJECT / encode_segment(FORK)
    lock = SessionLock(fork_dir).acquire()
    moved = tree / PROJECT / "moved-away"
    try:
        os.rename(fork_dir, moved)
        fork_dir.mkdir()
        with pytest.raises(DshForkError, match="moved or replaced") as caught:
            lock.dirs.verify()
    finally:
        lock.release()
    assert caught.value.exit_code == 7


# -- FIFOs and links where a regular file belongs ------------------------------------------------


def test_a_fifo_in_place_of_a_subagents_log_is_named_and_never_waited_on(tree: Path) -> None:
    child_log = tree / PROJECT / "a-child-02" / CURRENT_NAME
    child_log.unlink()
    os.mkfifo(child_log)

    unreadable = {e.session_dir.name: e.error for e in Root(tree).unreadable()}
    relinked = cli("--root", tree, "relink", FORK)
    inspected = cli("--root", tree, "inspect", child_log.parent)

    assert "a-child-02" in unreadable
    assert "FIFO" in str(unreadable["a-child-02"])
    assert "Traceback" not in relinked.stderr + inspected.stderr
    assert inspected.returncode == 11
    assert "it is a FIFO, not a regular file" in inspected.stderr
    count("FIFO attacks (no hang)")


def test_a_fifo_read_by_path_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / CURRENT_NAME
    os.mkfifo(fifo)
    with pytest.raises(IoError, match="FIFO"):
        stable_read(fifo)
    with pytest.raises(IoError, match="FIFO"):
        read_header_line(fifo, "zstd")
    count("FIFO attacks (no hang)", 2)


def test_a_fifo_as_session_lock_is_refused_and_not_waited_on(tree: Path) -> None:
    fork_dir = tree / PROJECT / encode_segment(FORK)
    (fork_dir / LOCK_NAME).unlink(missing_ok=True)
    os.mkfifo(fork_dir / LOCK_NAME)

    relinked = cli("--root", tree, "relink", FORK)

    assert probe(fork_dir) == "unknown"
    assert relinked.returncode != 0
    assert "FIFO" in relinked.stderr
    count("FIFO attacks (no hang)")


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_the_operation_log_is_never_followed_or_waited_on(
    tree: Path, tmp_path: Path, kind: str
) -> None:
    oplog = tree.parent / "dsh-fork-relink.log"
    target = tmp_path / "elsewhere.log"
    target.write_bytes(b"")
    if kind == "fifo":
        os.mkfifo(oplog)
    else:
        oplog.symlink_to(target)

    relinked = cli("--root", tree, "relink", FORK)

    assert relinked.returncode == 0, relinked.stderr
    assert "cannot write the operation log" in relinked.stderr
    assert target.read_bytes() == b""
    count("FIFO attacks (no hang)")


def test_an_operation_log_warning_names_a_link(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"")
    (tmp_path / "op.log").symlink_to(tmp_path / "target")
    warnings: list[str] = []
    OpLog(tmp_path / "op.log", warn=warnings.append).write("m", None)
    assert warnings == [
        f"cannot write the operation log: refusing to open {tmp_path / 'op.log'}: it is a "
        "symbolic link, not a regular file"
    ]


# -- decompression bombs -------------------------------------------------------------------------


def rle_bomb(blocks: int, byte: bytes = b"a") -> bytes:
    """One zstd frame of ``blocks`` RLE blocks of 128 KiB each: 4 bytes a block on disk."""
    window = bytes([(20 - 10) << 3])  # a 1 MiB window, no content size, no checksum
    block = ((128 * 1024) << 3) | (1 << 1)
    body = b"".join((block | (k == blocks - 1)).to_bytes(3, "little") + byte for k in range(blocks))
    return zframes._MAGIC_BYTES + b"\x00" + window + body


GIB_BLOCKS = 8192  # 8192 x 128 KiB = 1 GiB from 33 KB


def _bomb_root(root: Path, *, in_header: bool, blocks: int = GIB_BLOCKS) -> tuple[str, str]:
    clock = Clock()
    victim = SessionSpec(id="bombed", created_at=clock(), cwd=CWD)
    victim.turn(clock)
    victim.publish(root)
    other = SessionSpec(id="unrelated", created_at=clock(), cwd=CWD)
    other.turn(clock)
    other.publish(root)
    log = root / PROJECT / "bombed" / CURRENT_NAME
    data = log.read_bytes()
    first = zframes.scan(data).frames[0]
    if in_header:
        log.write_bytes(rle_bomb(blocks) + data[first.end :])
    else:
        log.write_bytes(data + rle_bomb(blocks))
    return "bombed", "unrelated"


def _limited(megabytes: int) -> Any:
    def apply() -> None:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _peak_rss_mb(*args: str | Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the CLI in a child limited to 700 MB of address space; its peak RSS."""
    return peak_rss_run(args, limit=_limited(700), timeout=TIMEOUT)


MEMORY_BOUND_MB = 100


BOMBS = [GIB_BLOCKS, 8 * GIB_BLOCKS] if DEEP else [GIB_BLOCKS]


@pytest.mark.parametrize("blocks", BOMBS, ids=lambda b: f"{b // 8192} GiB")
@pytest.mark.parametrize("in_header", [False, True], ids=["body frame", "header frame"])
def test_a_gigabyte_rle_bomb_is_corruption_within_the_memory_bound(
    root: Path, in_header: bool, blocks: int
) -> None:
    bombed, unrelated = _bomb_root(root, in_header=in_header, blocks=blocks)

    inspected, inspect_peak = _peak_rss_mb("--root", root, "inspect", bombed)
    forked, fork_peak = _peak_rss_mb("--root", root, "fork", unrelated, "--no-agents", "--json")
    own, own_peak = _peak_rss_mb("--root", root, "fork", bombed, "--no-agents")

    assert inspected.returncode == 9, inspected.stderr
    assert "more than" in inspected.stderr and "MemoryError" not in inspected.stderr
    assert forked.returncode == 0, forked.stderr  # another session's bomb blocks nothing
    assert own.returncode == 9, own.stderr
    peaks = (inspect_peak, fork_peak, own_peak)
    assert max(peaks) < MEMORY_BOUND_MB, peaks
    where = "header" if in_header else "body"
    print(f"peak RSS on the {blocks // 8192} GiB RLE bomb ({where}): {peaks} MB")
    count(f"RLE bombs, 1 GiB from 33 KB (peak RSS < {MEMORY_BOUND_MB} MB)", 3)


def test_a_bomb_in_a_subagent_is_a_failed_child_not_an_abort(tree: Path) -> None:
    log = tree / PROJECT / "a-child-02" / CURRENT_NAME
    log.write_bytes(log.read_bytes() + rle_bomb(GIB_BLOCKS))

    relinked, peak = _peak_rss_mb("--root", tree, "relink", FORK, "--json")

    assert relinked.returncode == 10, relinked.stdout + relinked.stderr
    failed = json.loads(relinked.stdout)["error"]["failed"]
    assert [item["id"] for item in failed] == ["a-child-02"]
    assert failed[0]["code"] == "CORRUPT_LOG"
    assert peak < MEMORY_BOUND_MB
    print(f"peak RSS on the 1 GiB RLE bomb in a subagent: {peak} MB")
    count(f"RLE bombs, 1 GiB from 33 KB (peak RSS < {MEMORY_BOUND_MB} MB)")


def test_every_decode_stops_at_its_bound() -> None:
    bomb = rle_bomb(64)  # 8 MiB
    frame = zframes.scan(bomb).frames[0]
    assert len(zframes.decode(bomb, frame)) == 64 * 128 * 1024
    with pytest.raises(DshForkError, match="more than 1,048,576 bytes"):
        zframes.decode(bomb, frame, 0, zframes.MAX_HEADER_PLAINTEXT)
    with pytest.raises(DshForkError, match="more than"):
        zframes.decode_torn(bomb[:-3], 0, 0, 1024 * 1024)
    with pytest.raises(DshForkError, match="more than"):
        list(zframes.decode_many(rle_bomb(GIB_BLOCKS), zframes.scan(rle_bomb(GIB_BLOCKS)).frames))
    two = bomb + bomb
    frames = zframes.scan(two).frames
    assert len(b"".join(zframes.decode_many(two, frames, 0, 16 * 1024 * 1024))) == 16 << 20
    with pytest.raises(DshForkError, match="frames up to this one decode to more than"):
        list(zframes.decode_many(two, frames, 0, 12 * 1024 * 1024))


# -- hard links ----------------------------------------------------------------------------------


def test_a_hard_linked_backup_is_never_changed_by_a_relink(tree: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    subprocess.run(["cp", "-al", str(tree), str(backup)], check=True, timeout=TIMEOUT)
    before = tree_digest(backup)

    relinked = cli("--root", tree, "relink", FORK)

    assert tree_digest(backup) == before
    assert relinked.returncode == 11, relinked.stderr
    assert "hard links" in relinked.stderr and "cp -al" in relinked.stderr
    count("hard-link attacks")


# -- sessions a user cannot read -----------------------------------------------------------------


def _can_switch_user() -> bool:
    return os.geteuid() == 0 and hasattr(os, "setuid")


@pytest.fixture
def shared_tree() -> Iterator[Path]:
    """A root any user can reach (pytest's tmp dirs are private to root), owned by nobody."""

    def fill(root: Path) -> None:
        plugin_scenario(root, Clock(), children=3)
        other = SessionSpec(id="session-unrelated", created_at=10, cwd="/home/u/other")
        other.turn(Clock())
        other.publish(root)

    with nobodys_root("dsh-fork-nobody-", fill, base_too=True) as root:
        yield root


@pytest.mark.skipif(not _can_switch_user(), reason="needs root to run commands as another user")
def test_sessions_another_user_cannot_read_are_named_and_block_nothing(shared_tree: Path) -> None:
    root = shared_tree
    hidden_dir = root / PROJECT / "a-child-02"
    hidden_log = root / PROJECT / "a-child-03" / CURRENT_NAME
    os.chown(hidden_dir, 0, 0)
    hidden_dir.chmod(0o700)
    os.chown(hidden_log, 0, 0)
    hidden_log.chmod(0o600)

    unreadable = as_user(
        NOBODY, lambda: {e.session_dir.name: str(e.error) for e in Root(root).unreadable()}
    )
    forked = cli_as(NOBODY, "--root", root, "fork", "session-unrelated", "--no-agents")
    doctored = cli_as(NOBODY, "--root", root, "doctor", "--json")

    assert "Permission denied" in unreadable["a-child-02"]
    assert "Permission denied" in unreadable["a-child-03"]
    assert forked[0] == 0, forked
    assert doctored[0] == 10, doctored
    paths = {f.get("path") for f in json.loads(doctored[1])["findings"]}
    assert str(hidden_dir) in paths
    count("unreadable sessions named (as uid 65534)", 2)


# -- what human output prints --------------------------------------------------------------------


def test_control_characters_in_ids_are_escaped_in_human_output(tree: Path) -> None:
    """``--id`` refuses them (USAGE); a session already on disk with such an id (written by
    the library here) is printed escaped."""
    hostile = "evil\x1b[2J\x1b]0;owned\x07\nforged line"
    refused = run_cli("--root", tree, "fork", SOURCE, "--id", hostile, "--no-agents")
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1
    fork_session(SOURCE, str(tree), ForkOptions(child_id=hostile, agents=False))

    result = run_cli("--root", tree, "list", "--kind", "fork")

    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[2J" in result.stdout
    assert "\\x0aforged line" in result.stdout
    assert not any(line.startswith("forged line") for line in result.stdout.splitlines())


def test_a_header_of_400k_keys_gives_one_short_error_line(root: Path) -> None:
    session_dir = root / PROJECT / "wide"
    session_dir.mkdir(parents=True)
    keys = ",".join(f'"k{k}":0' for k in range(400_000))
    header = ('{"version":4,"id":"wide","cwd":"' + CWD + '","createdAt":1,' + keys + "}").encode()
    (session_dir / CURRENT_NAME).write_bytes(zframes.encode(header + b"\n"))

    result = run_cli("--root", root, "inspect", "wide")

    assert result.exit_code == 9
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) < MAX_LINE_CHARS + 100, len(result.stderr)


def test_safe_text_escapes_and_caps() -> None:
    assert safe_text("a\x1b[31mb\nc\x7f\u202e") == "a\\x1b[31mb\\x0ac\\x7f\\u202e"
    assert safe_text("lone \ud800") == "lone \\ud800"
    long = safe_text("x" * 10_000)
    assert long.startswith("x" * MAX_LINE_CHARS) and long.endswith("(8,000 more characters)")


def test_every_character_is_escaped_as_the_control_pattern_says() -> None:
    """The printable-ASCII shortcut changes nothing: each code point, alone and inside
    printable ASCII, is escaped exactly as the pattern alone escapes it."""
    import re

    from dsh_fork.display import CONTROLS, escape_controls

    def by_pattern(text: str) -> str:
        def escape(match: re.Match[str]) -> str:
            code = ord(match.group())
            return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

        return re.sub(CONTROLS, escape, text)

    escaped = 0
    for code in [*range(0x3000), 0xFEFF, 0xFFFF, 0x1F600, 0x10FFFF]:
        char = chr(code)
        for text in (char, f"id-{char}-x", char * 3):
            assert escape_controls(text) == by_pattern(text), hex(code)
        escaped += escape_controls(char) != char
    assert escaped == 0x20 + 0x21 + 2 + 5 + 4  # C0, DEL and C1, 2028-2029, 202A-202E, 2066-2069


def test_out_of_memory_is_one_clean_line(capsys: pytest.CaptureFixture[str]) -> None:
    def explode() -> None:
        raise MemoryError

    with pytest.raises(Exception) as caught:
        run(Out(json_mode=False), explode)
    assert getattr(caught.value, "exit_code", None) == 11
    err = capsys.readouterr().err
    assert err == "Error: out of memory: the input needs more than this process may use\n"


def test_no_errno_is_lost_when_a_lock_file_is_a_link(tree: Path, tmp_path: Path) -> None:
    fork_dir = tree / PROJECT / encode_segment(FORK)
    (fork_dir / LOCK_NAME).unlink(missing_ok=True)
    (fork_dir / LOCK_NAME).symlink_to(tmp_path / "lock-target")
    with pytest.raises(IoError) as caught:
        SessionLock(fork_dir).acquire()
    assert caught.value.errno == errno.ELOOP
    assert not (tmp_path / "lock-target").exists()


def test_the_terminal_console_escapes_what_rich_would_pass_through() -> None:
    import io

    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text
    from rich.tree import Tree

    from dsh_fork.cli.console import SafeConsole

    hostile = "id\x1b]0;owned\x07\x1b[2J"
    buffer = io.StringIO()
    console = SafeConsole(file=buffer, force_terminal=True, no_color=True, width=200)
    table = Table(title=hostile)
    table.add_column(hostile)
    table.add_row(hostile)
    tree = Tree(Text(hostile, style="bold"))
    tree.add(Text(hostile))
    console.print(table)
    console.print(Panel(Text(hostile), title=hostile))
    console.print(tree)
    console.print(hostile, markup=False)

    shown = buffer.getvalue()
    assert "\x1b]" not in shown and "\x1b[2J" not in shown and "\x07" not in shown
    assert shown.count("id\\x1b]0;owned") >= 5  # each one shown, escaped


def test_an_error_line_is_capped_whatever_its_message(capsys: pytest.CaptureFixture[str]) -> None:
    def fail_long() -> None:
        raise DshForkError("bad header keys: " + ", ".join(f"k{k}" for k in range(400_000)))

    with pytest.raises(Exception) as caught:
        run(Out(json_mode=False), fail_long)
    assert getattr(caught.value, "exit_code", None) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < MAX_LINE_CHARS + 100
    assert err.endswith("more characters)\n")


def test_a_json_error_message_is_capped_whatever_its_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fail_long() -> None:
        raise DshForkError("bad header keys: " + ", ".join(f"k{k}" for k in range(400_000)))

    with pytest.raises(Exception) as caught:
        run(Out(json_mode=True), fail_long)
    assert getattr(caught.value, "exit_code", None) == 1
    document = json.loads(capsys.readouterr().out)
    message = document["error"]["message"]
    assert message.startswith("bad header keys: k0, k1")
    assert len(message) < MAX_LINE_CHARS + 100
    assert message.endswith("more characters)")
