"""A long listing is split with a forked child: the entries are the ones one process makes.

``Root.entries`` lists the last dirs of a long root in a child process while this process
lists the first (``discovery._list_jobs``). These tests force that split on small roots and
hold every entry's answers (paths, names, lineage, header, error, raw fields, a list row's
facts) against the listing of one process: on every fixture oddity, on hostile dirs (a FIFO
where the log belongs, a link, a damaged header, a future generation, a dir without a log,
a file where a dir belongs), on every foreign DSH root, and when the child fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import every_foreign_root
from lineagekit import generate_oddities

from dsh_fork import discovery, generations, parallel
from dsh_fork.discovery import Root, SessionEntry
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file
from dsh_fork.generations import CURRENT_NAME, LOCK_NAME, dir_bytes
from dsh_fork.layout import session_dir


def view(entry: SessionEntry) -> tuple[Any, ...]:
    """Everything a command may ask a listed entry."""
    error = entry.error
    return (
        entry.dir_text,
        entry.log_path,
        entry.version,
        sorted(entry.encodings),
        [(g.version, g.encoding, g.name) for g in entry.generations],
        entry.id,
        entry.parent,
        entry.is_subagent,
        entry.created_at,
        entry.header,
        None if error is None else (type(error), error.message, error.details),
        entry.raw_fields,
        entry.glance,
        entry.glanced,
        entry.sizes,
    )


def listing(
    root: Path, *, glance: bool, sizes: bool = False
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    listed = Root(root)
    entries = [view(e) for e in listed.entries(glance=glance, sizes=sizes)]
    return entries, [view(e) for e in listed.unlisted()]


def split_always(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Split every listing of two dirs or more; the returned list counts the children."""
    if not parallel.available():
        pytest.skip("no second core (or not a single-threaded process): no child is forked")
    started: list[int] = []
    start = parallel.start

    def counted(work: Callable[[], Any]) -> parallel.Child | None:
        child = start(work)
        if child is not None:
            started.append(1)
        return child

    monkeypatch.setattr(discovery, "SPLIT_MIN_DIRS", 2)
    monkeypatch.setattr(parallel, "start", counted)
    return started


def one_process(
    root: Path, glance: bool, monkeypatch: pytest.MonkeyPatch, sizes: bool = False
) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(discovery, "SPLIT_MIN_DIRS", 1 << 60)
        return listing(root, glance=glance, sizes=sizes)


def hostile(root: Path) -> None:
    """Dirs a listing must name, not skip, beside plain sessions."""
    clock = Clock()
    cwd = "/home/ana/hostile"

    def plain(session_id: str) -> Path:
        spec = SessionSpec(id=session_id, created_at=clock(), cwd=cwd)
        spec.turn(clock)
        spec.flush()
        where = session_dir(root, spec.id, spec.cwd)
        write_log_file(where / CURRENT_NAME, spec.header_line(), spec.frame_plaintexts())
        (where / LOCK_NAME).touch()
        return where

    for k in range(6):
        plain(f"session-plain-{k}")
    fifo = plain("session-fifo")
    (fifo / CURRENT_NAME).unlink()
    os.mkfifo(fifo / CURRENT_NAME)
    linked = plain("session-linked")
    target = linked.parent / "elsewhere.zstd"
    (linked / CURRENT_NAME).rename(target)
    (linked / CURRENT_NAME).symlink_to(target)
    damaged = plain("session-damaged")
    (damaged / CURRENT_NAME).write_bytes(b"\x28\xb5\x2f\xfd not a frame")
    future = plain("session-future")
    (future / "session.v9.jsonl.zstd").write_bytes((future / CURRENT_NAME).read_bytes())
    (plain("session-empty") / CURRENT_NAME).unlink()
    (root / "not-a-project").write_bytes(b"a file where a project dir belongs")


@pytest.mark.parametrize(
    ("glance", "sizes"),
    [(False, False), (True, False), (False, True)],
    ids=["headers", "list rows", "du sizes"],
)
def test_a_split_listing_of_every_fixture_oddity_is_the_one_process_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, glance: bool, sizes: bool
) -> None:
    root = tmp_path / "sessions"
    generate_oddities(root)
    hostile(root)
    expected = one_process(root, glance, monkeypatch, sizes)
    started = split_always(monkeypatch)

    split = listing(root, glance=glance, sizes=sizes)

    assert started == [1]
    assert split == expected
    entries, _ = split
    assert len(entries) > 40
    assert any(e[10] is not None for e in entries)  # damaged, FIFO, link, future: named
    assert glance == any(e[12] is not None for e in entries)
    assert sizes == all(e[14] is not None for e in entries)
    if sizes:  # what du would measure itself
        assert all(e[14] == dir_bytes(e[0]) for e in entries)


def test_a_split_listing_of_every_foreign_root_is_the_one_process_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    roots = every_foreign_root()
    expected = {r.name: one_process(r, True, monkeypatch) for r in roots}
    started = split_always(monkeypatch)

    for root in roots:
        assert listing(root, glance=True) == expected[root.name], root.name
    several = [r for r in roots if sum(len(os.listdir(p)) for p in r.iterdir() if p.is_dir()) > 1]
    assert len(started) == len(several) > 20  # every root of two dirs or more was split


def test_when_the_child_fails_this_process_lists_its_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "sessions"
    hostile(root)
    expected = one_process(root, False, monkeypatch)
    started = split_always(monkeypatch)

    def broken(entry: SessionEntry | None) -> object:
        raise RuntimeError("the child cannot send its entries")  # in the child only

    monkeypatch.setattr(discovery, "_pack", broken)

    assert listing(root, glance=False) == expected
    assert started == [1]


def test_the_child_lists_the_last_dirs_and_sends_common_entries_as_tuples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "sessions"
    hostile(root)
    split_always(monkeypatch)
    sent: list[object] = []
    unpack = discovery._unpack

    def recorded(item: Any) -> SessionEntry | None:
        sent.append(item)
        return unpack(item)

    monkeypatch.setattr(discovery, "_unpack", recorded)

    entries = Root(root).entries()

    dirs = sorted(str(d) for p in root.iterdir() if p.is_dir() for d in p.iterdir() if d.is_dir())
    assert len(sent) == int(len(dirs) * discovery.SPLIT_SHARE)  # the child's share, no more
    tuples = [item for item in sent if isinstance(item, tuple)]
    assert tuples  # the plain sessions, as (dir, names, header line, glance, glanced)
    assert all(item[0] in dirs[-len(sent) :] for item in tuples)  # from the last dirs
    assert [e.dir_text for e in entries[-len(tuples) :]] == [item[0] for item in tuples]


@pytest.mark.parametrize("split", [False, True], ids=["one process", "split"])
def test_a_listing_shares_one_names_value_for_every_dir_with_only_the_current_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    """Nearly every session dir holds just ``session.v4.jsonl.zstd``: its entries all keep the
    one shared value for that (``generations.CURRENT_ONLY``), also those a listing child sent;
    a dir with another generation keeps its own."""
    root = tmp_path / "sessions"
    clock = Clock()
    for k in range(6):
        SessionSpec(id=f"session-{k}", created_at=clock(), cwd="/work/x").publish(root)
    odd = SessionSpec(id="session-odd", created_at=clock(), cwd="/work/x").publish(root)
    (odd / "session.v3.jsonl.zstd").write_bytes((odd / CURRENT_NAME).read_bytes())
    started = split_always(monkeypatch) if split else []
    if not split:
        monkeypatch.setattr(discovery, "SPLIT_MIN_DIRS", 1 << 60)
    entries = {e.id: e for e in Root(root).entries()}
    assert started == ([1] if split else [])
    assert all(entries[f"session-{k}"]._names is generations.CURRENT_ONLY for k in range(6))
    assert [name for _, _, name in entries["session-odd"]._names] == [
        "session.v3.jsonl.zstd",
        CURRENT_NAME,
    ]


def test_a_header_the_child_validated_for_a_list_row_is_sent_as_its_fields_not_validated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For ``list`` the child validates each small log's header to fold its row; it sends
    the header's fields with the line, and this process rebuilds the header from them: the
    one the one-process listing validates, and no validation here."""
    root = tmp_path / "sessions"
    hostile(root)
    expected = {e.dir_text: e.header for e in Root(root).entries(glance=True)}
    split_always(monkeypatch)
    sent: list[object] = []
    unpack = discovery._unpack

    def recorded(item: Any) -> SessionEntry | None:
        sent.append(item)
        return unpack(item)

    monkeypatch.setattr(discovery, "_unpack", recorded)
    entries = Root(root).entries(glance=True)
    with_fields = [item for item in sent if isinstance(item, tuple) and item[-1] is not None]
    assert with_fields  # the plain small logs
    by_dir = {e.dir_text: e for e in entries}

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a header the child validated was validated again")

    monkeypatch.setattr(discovery, "parse_header", refused)
    for item in with_fields:
        entry = by_dir[item[0]]
        assert entry._line is None
        assert entry.header == expected[entry.dir_text]
        assert entry.header is not None and entry.header.raw == item[2]
