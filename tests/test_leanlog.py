"""``list``'s lean read of a log (``leanlog``): a row never differs from the full read's.

The lean read folds a row's title and completed turns from the listing's own read of a small
log; any doubt sends the row to the full read (``reader.open_log``). These tests hold the two
side by side: on every oddity the fixture generator makes, on every foreign DSH root, and on
every cut and a bit flip in every byte of logs of several shapes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import every_foreign_root
from lineagekit import generate_oddities

from dsh_fork import frames as zframes
from dsh_fork import leanlog, listing
from dsh_fork.discovery import Root
from dsh_fork.errors import DshForkError
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import Generation
from dsh_fork.leanlog import ROW_TYPES, Glance
from dsh_fork.model import derive
from dsh_fork.reader import open_log

CWD = "/home/ana/lean"


def documents(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """``list``'s document of ``root`` with the lean read, and with the full read alone."""
    lean = listing.list_sessions(Root(root)).to_json()
    with monkeypatch.context() as patch:
        patch.setattr(leanlog, "fold", lambda *args, **kwargs: None)
        patch.setattr(listing, "glance", lambda *args, **kwargs: None)
        full = listing.list_sessions(Root(root)).to_json()
    return lean, full


def test_list_reads_every_fixture_oddity_as_the_full_read_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "sessions"
    generate_oddities(root)

    lean, full = documents(root, monkeypatch)

    assert lean == full
    entries = Root(root).entries(glance=True)
    folded = [e for e in entries if e.glance is not None]
    declined = [e for e in entries if e.glanced and e.glance is None]
    assert len(folded) > len(entries) // 2  # the lean read does read the plain logs
    assert declined  # and leaves the torn tails to the full read


def test_list_reads_every_foreign_root_as_the_full_read_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    roots = every_foreign_root()
    for root in roots:
        lean, full = documents(root, monkeypatch)
        assert lean == full, root.name


# -- every cut and flip ------------------------------------------------------------------------


def full_read(path: Path) -> tuple[str | None, int] | str:
    """The reference: the row facts by the full read, or its error code."""
    try:
        log = open_log(Generation(path, 4, "zstd"), collect=ROW_TYPES)
    except DshForkError as exc:
        return exc.code
    except OSError:
        return "os"
    facts = derive(log.header, log.event_count, log.collected)
    return facts.title, len(facts.turn_ends)


def shapes() -> dict[str, SessionSpec]:
    """Logs whose lean read must succeed: titles, several frames, a fork's seeded prefix."""
    clock = Clock()
    one = SessionSpec(id="lean-one", created_at=clock(), cwd=CWD)
    one.turn(clock)
    titled = SessionSpec(id="lean-titled", created_at=clock(), cwd=CWD)
    titled.turn(clock)
    titled.title(clock, "first")
    titled.flush()
    titled.turn(clock)
    titled.title(clock, "second")
    titled.flush()
    titled.add("turn/start", clock(), {"turn": 3})  # an open last turn
    seeded = SessionSpec(id="lean-seeded", created_at=clock(), cwd=CWD, parent="p", is_seeded=True)
    seeded.turn(clock)
    seeded.flush()
    seeded.end_seed(clock())
    seeded.flush()
    seeded.turn(clock)
    return {"one turn": one, "titled, three frames": titled, "seeded": seeded}


def lean_of(root: Path) -> tuple[bool, Glance | None, Glance | None]:
    """(whether the listing folded, its fold, the stand-alone glance) of the root's session."""
    (entry,) = Root(root).entries(glance=True)
    header = entry.header
    alone = (
        None if header is None or entry.log_path is None else leanlog.glance(entry.log_path, header)
    )
    return entry.glanced, entry.glance, alone


@pytest.mark.parametrize("name", list(shapes()))
def test_the_lean_read_never_differs_from_the_full_read(tmp_path: Path, name: str) -> None:
    """Every cut of the log and a bit flip in every byte (a different bit in each): the lean
    read either declines (the full read then decides) or gives the full read's very facts;
    it never reads facts where the full read finds a defect."""
    root = tmp_path / "sessions"
    session_dir = shapes()[name].publish(root)
    path = session_dir / "session.v4.jsonl.zstd"
    data = path.read_bytes()

    glanced, folded, alone = lean_of(root)
    assert glanced and folded is not None and alone == folded
    assert (folded.title, folded.turns) == full_read(path)
    assert folded.mtime_ms == os.stat(path).st_mtime_ns // 1_000_000

    damaged = [data[:cut] for cut in range(len(data))]
    for k in range(len(data)):
        flipped = bytearray(data)
        flipped[k] ^= 1 << (k % 8)
        damaged.append(bytes(flipped))
    engaged = 0
    for blob in damaged:
        path.write_bytes(blob)
        expected = full_read(path)
        _, folded, alone = lean_of(root)
        for fast in (folded, alone):
            if fast is not None:
                engaged += 1
                assert (fast.title, fast.turns) == expected, blob
    assert engaged > 0  # some flips leave a log DSH reads (a bit of a title's text, say)


@pytest.mark.parametrize("name", list(shapes()))
def test_the_lean_read_checks_every_line_as_the_full_read_does(tmp_path: Path, name: str) -> None:
    """A bit flip in every byte of the frames' plaintext, each frame compressed again (a flip
    in compressed bytes fails its checksum): seqs, types, JSON and envelopes are checked by
    the lean read exactly as by the full read."""
    root = tmp_path / "sessions"
    spec = shapes()[name]
    path = spec.publish(root) / "session.v4.jsonl.zstd"
    header = zframes.encode(spec.header_line())
    plaintexts = spec.frame_plaintexts()
    engaged = declined = 0
    for index, plaintext in enumerate(plaintexts):
        for k in range(len(plaintext)):
            flipped = bytearray(plaintext)
            flipped[k] ^= 1 << (k % 8)
            frames = [*plaintexts[:index], bytes(flipped), *plaintexts[index + 1 :]]
            path.write_bytes(header + b"".join(zframes.encode(p) for p in frames))
            expected = full_read(path)
            _, folded, alone = lean_of(root)
            assert folded == alone
            if folded is None:
                declined += 1
                continue
            engaged += 1
            assert (folded.title, folded.turns) == expected, (index, k)
    assert engaged and declined


def test_a_filtered_list_reads_only_the_logs_of_the_rows_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "sessions"
    clock = Clock()
    for session_id, cwd in (("lean-a", CWD), ("lean-b", CWD), ("lean-c", "/elsewhere")):
        spec = SessionSpec(id=session_id, created_at=clock(), cwd=cwd)
        spec.turn(clock)
        spec.publish(root)
    read: list[str] = []

    def counted(path: str, header: Any) -> Glance | None:
        read.append(header.id)
        return leanlog.glance(path, header)

    monkeypatch.setattr(listing, "glance", counted)
    listed = Root(root)
    shown = listing.list_sessions(listed, project="/elsewhere")

    assert [(row.id, row.turns) for row in shown.rows] == [("lean-c", 1)]
    assert read == ["lean-c"]
    assert not any(entry.glanced for entry in listed.entries())  # headers only, for the rest
