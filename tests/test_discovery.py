"""Finding sessions (semantics §2.2, §10.1): the generation-scan scenario at library level,
lookup by id and by path, root encodings and subagent children."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from conftest import NON_CANONICAL_NAMES

from dsh_fork import discovery, generations
from dsh_fork.discovery import Root
from dsh_fork.errors import (
    CorruptLog,
    DshForkError,
    SessionNotFound,
    UnsupportedFormat,
    UsageError,
)
from dsh_fork.fixtures import Clock, SessionSpec, write_log_file, write_spec_as
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import encode_segment
from dsh_fork.reader import open_log, read_header
from dsh_fork.sessionarg import locate

FX = "/fx"


def child(clock: Clock, name: str, *, parent: str = "parent", cwd: str = FX) -> SessionSpec:
    spec = SessionSpec(
        id=name, created_at=clock(), cwd=cwd, parent=parent, origin="subagent", depth=1
    )
    spec.descriptor(clock, name)
    spec.turn(clock)
    return spec


@dataclass
class Scenario:
    root: Path
    parent: SessionSpec
    dirs: dict[str, Path]


def generation_scan_root(root: Path, clock: Clock) -> Scenario:
    """The root of semantics §10.1: one parent in ``--fx--`` and children a…h and x."""
    dirs: dict[str, Path] = {}
    parent = SessionSpec(id="parent", created_at=clock(), cwd=FX)
    parent.turn(clock)
    dirs["parent"] = parent.publish(root)
    dirs["child-a"] = child(clock, "child-a").publish(root)
    dirs["child-b"] = write_spec_as(child(clock, "child-b"), root, 3).parent
    g = child(clock, "child-g")
    g.lines = [line for line in g.lines if b"subagent/descriptor" not in line]
    g.lines = [
        orjson.dumps({**orjson.loads(line), "seq": i}) + b"\n" for i, line in enumerate(g.lines)
    ]
    dirs["child-g"] = write_spec_as(g, root, 0).parent
    dirs["child-f"] = write_spec_as(child(clock, "child-f"), root, 9).parent
    d = child(clock, "child-d")
    dirs["child-d"] = write_spec_as(d, root, 3).parent
    d.turn(clock)
    write_spec_as(d, root, 4)  # beside the v3 file, as DSH's migration leaves it
    dirs["child-c"] = child(clock, "child-c", parent="other").publish(root)
    e = child(clock, "child-e")
    e_dir = write_spec_as(e, root, 4).parent
    (e_dir / "session.v4.jsonl.zstd").rename(e_dir / "session.v4.jsonl.txt")
    dirs["child-e"] = e_dir
    h = child(clock, "child-h")
    h_dir = h.publish(root)
    real = (h_dir / "session.v4.jsonl.zstd").read_bytes()
    (h_dir / "session.v4.jsonl.zstd").unlink()
    for name in NON_CANONICAL_NAMES:
        (h_dir / name).write_bytes(real)
    dirs["child-h"] = h_dir
    dirs["child-x"] = child(clock, "child-x", cwd="/other").publish(root)
    (root / "--fx--" / "loose-file").write_text("not a session")
    (root / "stray-file").write_text("not a project")
    return Scenario(root, parent, dirs)


@pytest.fixture
def scenario(root: Path, clock: Clock) -> Scenario:
    return generation_scan_root(root, clock)


# -- the generation-scan scenario -------------------------------------------------------------


def test_children_on_disk_of_the_generation_scan_root(scenario: Scenario) -> None:
    kids = Root(scenario.root).children_of("parent")
    assert [k.id for k in kids] == [
        "child-a",
        "child-b",
        "child-g",
        "child-f",
        "child-d",
        "child-x",
    ]
    by_id = {k.id: k for k in kids}
    for name in ("child-a", "child-b", "child-g", "child-d", "child-x"):
        assert by_id[name].error is None, name
        assert by_id[name].session_dir == scenario.dirs[name]
    versions = {k.id: k.generation.version for k in kids if k.generation}
    assert versions == {
        "child-a": 4,
        "child-b": 3,
        "child-g": 0,
        "child-f": 9,
        "child-d": 4,
        "child-x": 4,
    }
    future = by_id["child-f"]
    assert isinstance(future.error, UnsupportedFormat)
    assert future.header is None and future.is_subagent and future.parent == "parent"
    assert by_id["child-x"].project == "--other--"


def test_child_d_is_read_from_its_v4_generation(scenario: Scenario) -> None:
    located = locate("child-d", str(scenario.root))
    assert located.generation.name == "session.v4.jsonl.zstd"
    assert located.warnings == ()
    v4 = open_log(located.generation)
    entry = next(e for e in Root(scenario.root).entries() if e.id == "child-d")
    v3 = open_log(entry.generations[0], check_dir=False)
    assert v4.event_count > v3.event_count


def test_locating_the_scenario_sessions(scenario: Scenario) -> None:
    root = str(scenario.root)
    assert locate("child-b", root).generation.version == 3
    assert locate("child-g", root).generation.name == "session.jsonl.zstd"
    assert read_header(locate("child-g", root).generation).delegation_depth == 1
    with pytest.raises(UnsupportedFormat, match="generation v9 is newer than v4") as caught:
        locate("child-f", root)
    assert caught.value.exit_code == 8
    with pytest.raises(SessionNotFound, match="no session 'child-h'") as missing:
        locate("child-h", root)
    assert missing.value.exit_code == 3
    with pytest.raises(SessionNotFound):
        locate("child-e", root)
    with pytest.raises(SessionNotFound, match=r"child-h holds no session log"):
        locate(str(scenario.dirs["child-h"]), root)


def test_listing_ignores_loose_files_and_non_sessions(scenario: Scenario) -> None:
    listed = {e.id for e in Root(scenario.root).entries()}
    assert listed == {
        "parent",
        "child-a",
        "child-b",
        "child-g",
        "child-f",
        "child-d",
        "child-c",
        "child-x",
    }
    assert [p.name for p in Root(scenario.root).project_dirs()] == ["--fx--", "--other--"]


def test_a_header_version_that_disagrees_with_the_file_name_is_corrupt(
    scenario: Scenario, clock: Clock
) -> None:
    liar = child(clock, "liar")
    fields = orjson.loads(liar.header_line())
    fields["version"] = 3
    session_dir = scenario.root / "--fx--" / "liar"
    write_log_file(session_dir / "session.v4.jsonl.zstd", orjson.dumps(fields), liar.lines)
    entries = {e.id: e for e in Root(scenario.root).entries()}
    assert isinstance(entries["liar"].error, CorruptLog)
    assert "does not match the file name (v4)" in entries["liar"].error.message
    assert entries["child-a"].error is None  # the rest of the root is still read
    with pytest.raises(CorruptLog):
        open_log(locate("liar", str(scenario.root)).generation)


def test_a_child_with_an_unreadable_header_is_still_listed(root: Path, clock: Clock) -> None:
    broken = child(clock, "broken")
    fields = {**orjson.loads(broken.header_line()), "sandboxMode": "retired"}
    write_log_file(
        root / "--fx--" / "broken" / "session.v4.jsonl.zstd", orjson.dumps(fields), broken.lines
    )
    kids = Root(root).children_of("parent")
    assert [k.id for k in kids] == ["broken"]
    assert isinstance(kids[0].error, CorruptLog)
    assert kids[0].created_at == broken.created_at


def test_a_body_that_is_corrupt_does_not_break_the_header_listing(root: Path, clock: Clock) -> None:
    spec = child(clock, "damaged")
    session_dir = spec.publish(root)
    with (session_dir / "session.v4.jsonl.zstd").open("ab") as handle:
        handle.write(b"garbage")
    [entry] = Root(root).entries()
    assert entry.error is None and entry.header is not None
    assert entry.header.id == "damaged"


def test_a_log_linked_between_the_two_listings_of_its_dir_is_no_error(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process publishes a session while the root is listed: the first listing of its
    dir finds no log, the second finds a regular file. The dir is taken as first seen (not yet
    a session); it is never named as an unreadable device or socket."""
    published = child(clock, "late").publish(root)
    other = child(clock, "other").publish(root)
    real_scan = generations.scan_names

    def before_the_link(dir_text: str) -> generations.Names:
        return () if dir_text == str(published) else real_scan(dir_text)

    monkeypatch.setattr(discovery, "scan_names", before_the_link)
    listing = Root(root)
    assert [(e.id, e.error) for e in listing.entries()] == [("other", None)]
    assert listing.unlisted() == []
    monkeypatch.setattr(discovery, "scan_names", real_scan)
    assert [e.id for e in Root(root).entries()] == ["late", "other"]
    assert other.is_dir()


def test_children_are_sorted_by_created_at_then_id(root: Path, clock: Clock) -> None:
    for name, created in (("b", 5), ("a", 5), ("c", 1)):
        spec = SessionSpec(id=name, created_at=created, parent="p", origin="subagent", depth=1)
        spec.publish(root)
    SessionSpec(id="fork", created_at=3, parent="p", is_seeded=True).publish(root)
    SessionSpec(id="plain-child", created_at=2, parent="p").publish(root)
    listed = Root(root)
    assert [e.id for e in listed.children_of("p")] == ["c", "a", "b"]
    assert [e.id for e in listed.forks_of("p")] == ["fork"]
    assert [e.id for e in listed.fork_children()] == ["fork"]
    assert listed.children_of("nobody") == []


def test_the_listing_is_cached_until_invalidated(root: Path, clock: Clock) -> None:
    listed = Root(root)
    assert listed.entries() == []
    child(clock, "late").publish(root)
    assert listed.entries() == []
    listed.invalidate()
    assert [e.id for e in listed.entries()] == ["late"]
    assert [e.id for e in listed.children_of("parent")] == ["late"]


# -- lookup by id -------------------------------------------------------------------------


@pytest.mark.parametrize("session_id", [".", "..", "a/b", "~x", "😀", "my id", "ab\ud800c"])
def test_odd_ids_are_found_by_id(
    root: Path, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session_id: str
) -> None:
    """Even where the id also names an existing path (``.`` and ``..`` always do)."""
    work = tmp_path / "work"
    (work / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(work)
    session_dir = SessionSpec(id=session_id, created_at=clock()).publish(root)
    assert session_dir.name == encode_segment(session_id)
    located = locate(session_id, str(root))
    assert located.session_dir == session_dir
    assert read_header(located.generation).id == session_id
    assert Root(root).exists(session_id)


def test_an_existing_path_that_is_no_session_and_no_id(
    root: Path, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child(clock, "someone").publish(root)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="lies outside the root"):
        locate(".", str(root))
    with pytest.raises(SessionNotFound, match="holds no session log"):
        locate(".", None)


def test_the_same_id_in_two_project_dirs_is_ambiguous(root: Path, clock: Clock) -> None:
    SessionSpec(id="dup", created_at=clock(), cwd="/one").publish(root)
    SessionSpec(id="dup", created_at=clock(), cwd="/two").publish(root)
    with pytest.raises(SessionNotFound) as caught:
        locate("dup", str(root))
    assert caught.value.message == "ambiguous id 'dup' in 2 project directories; pass a path"
    assert caught.value.exit_code == 3
    located = locate(str(root / "--two--" / "dup"), str(root))
    assert located.session_dir == root / "--two--" / "dup"


def test_an_empty_leftover_dir_does_not_make_an_id_exist(root: Path, clock: Clock) -> None:
    SessionSpec(id="real", created_at=clock(), cwd="/one").publish(root)
    (root / "--two--" / "real").mkdir(parents=True)
    (root / "--two--" / "real" / "session.lock").touch()
    (root / "--two--" / "real" / "session.v4.jsonl.zstd.0123456789ab.tmp").touch()
    assert Root(root).dirs_of("real") == [root / "--one--" / "real"]
    assert locate("real", str(root)).session_dir == root / "--one--" / "real"


def test_two_cwds_sharing_one_project_dir_both_resolve(root: Path, clock: Clock) -> None:
    SessionSpec(id="slash", created_at=clock(), cwd="/a/b").publish(root)
    SessionSpec(id="colon", created_at=clock(), cwd="/a:b").publish(root)
    assert [p.name for p in Root(root).project_dirs()] == ["--a-b--"]
    assert read_header(locate("slash", str(root)).generation).cwd == "/a/b"
    assert read_header(locate("colon", str(root)).generation).cwd == "/a:b"


def test_ids_in_an_absent_root_are_not_found(tmp_path: Path) -> None:
    with pytest.raises(SessionNotFound, match="no session 'x'"):
        locate("x", str(tmp_path / "nowhere"))
    with pytest.raises(SessionNotFound, match="empty session id"):
        locate("", str(tmp_path))


def test_the_default_root_comes_from_dsh_home(tmp_path: Path, clock: Clock) -> None:
    home = tmp_path / "dsh-home"
    SessionSpec(id="homed", created_at=clock()).publish(home / "sessions")
    located = locate("homed", None, {"DSH_HOME": str(home)})
    assert located.root.path == home.resolve() / "sessions"


def test_a_session_lock_is_never_a_log(root: Path, clock: Clock) -> None:
    session_dir = SessionSpec(id="locked", created_at=clock()).publish(root)
    assert (session_dir / "session.lock").exists()
    (root / "--fixture-project--" / "lock-only").mkdir()
    (root / "--fixture-project--" / "lock-only" / "session.lock").write_bytes(b"")
    assert [e.id for e in Root(root).entries()] == ["locked"]
    with pytest.raises(SessionNotFound, match="holds no session log"):
        locate(str(root / "--fixture-project--" / "lock-only"), str(root))
    located = locate(str(session_dir / "session.lock"), str(root))
    assert located.generation.name == "session.v4.jsonl.zstd"
    assert located.warnings == (
        "session.lock is not a canonical generation name",
        f"reading session.v4.jsonl.zstd, the highest generation of {session_dir}",
    )


# -- lookup by path -----------------------------------------------------------------------


def test_path_arguments_inside_an_explicit_root(scenario: Scenario) -> None:
    root = str(scenario.root)
    d_dir = scenario.dirs["child-d"]
    assert locate(str(d_dir), root).generation.version == 4
    exact = locate(str(d_dir / "session.v4.jsonl.zstd"), root)
    assert (exact.generation.version, exact.warnings) == (4, ())
    lower = locate(str(d_dir / "session.v3.jsonl.zstd"), root)
    assert lower.generation.name == "session.v4.jsonl.zstd"
    assert lower.warnings == (f"reading session.v4.jsonl.zstd, the highest generation of {d_dir}",)
    assert lower.root.path == scenario.root


def test_a_relative_path_argument(scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(scenario.root / "--fx--")
    located = locate("child-a", str(scenario.root))
    assert located.session_dir == scenario.dirs["child-a"]
    located = locate("./child-b/session.v3.jsonl.zstd", str(scenario.root))
    assert located.session_dir == scenario.dirs["child-b"]


def test_a_path_outside_an_explicit_root_is_a_usage_error(
    scenario: Scenario, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(scenario.root, elsewhere)
    with pytest.raises(UsageError, match="lies outside the root") as caught:
        locate(str(elsewhere / "--fx--" / "child-a"), str(scenario.root))
    assert caught.value.exit_code == 2


def test_without_root_a_path_brings_its_own_root(scenario: Scenario, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(scenario.root, elsewhere)
    located = locate(str(elsewhere / "--fx--" / "child-a" / "session.v4.jsonl.zstd"), None, {})
    assert located.root.path == elsewhere.resolve()
    assert located.session_dir == elsewhere.resolve() / "--fx--" / "child-a"
    assert located.root.children_of("parent")[0].id == "child-a"


def test_a_symlinked_session_dir_outside_the_root(scenario: Scenario, tmp_path: Path) -> None:
    target = tmp_path / "outside-session"
    shutil.copytree(scenario.dirs["child-a"], target)
    link = scenario.root / "--fx--" / "linked"
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(UsageError, match="lies outside the root"):
        locate(str(link), str(scenario.root))


def test_a_future_generation_by_path_is_unsupported(scenario: Scenario) -> None:
    with pytest.raises(UnsupportedFormat):
        locate(str(scenario.dirs["child-f"] / "session.v9.jsonl.zstd"), str(scenario.root))


# -- root encoding --------------------------------------------------------------------------


def test_root_encodings(root: Path, clock: Clock, tmp_path: Path) -> None:
    assert Root(tmp_path / "absent").encoding() == "empty"
    root.mkdir(parents=True)
    (root / "--p--" / "leftover").mkdir(parents=True)
    assert Root(root).encoding() == "empty"
    Root(root).require_writable()
    SessionSpec(id="z", created_at=clock()).publish(root)
    assert Root(root).encoding() == "zstd"
    Root(root).require_writable()
    plain_root = tmp_path / "plain"
    write_spec_as(SessionSpec(id="p", created_at=clock()), plain_root, 4, encoding="plain")
    assert Root(plain_root).encoding() == "plain"
    with pytest.raises(UnsupportedFormat, match="is plain; dsh-fork writes only into a zstd root"):
        Root(plain_root).require_writable()
    write_spec_as(SessionSpec(id="q", created_at=clock()), root, 4, encoding="plain")
    assert Root(root).encoding() == "mixed"
    with pytest.raises(UnsupportedFormat, match="is mixed") as caught:
        Root(root).require_writable()
    assert caught.value.exit_code == 8


def test_a_plain_session_is_found_and_read(tmp_path: Path, clock: Clock) -> None:
    spec = SessionSpec(id="p", created_at=clock())
    spec.turn(clock)
    plain_root = tmp_path / "plain"
    write_spec_as(spec, plain_root, 4, encoding="plain")
    located = locate("p", str(plain_root))
    assert located.generation.encoding == "plain"
    assert open_log(located.generation).event_count == len(spec.lines)


def test_flat_files_in_a_project_dir_are_not_sessions(root: Path, clock: Clock) -> None:
    SessionSpec(id="ok", created_at=clock()).publish(root)
    (root / "--fixture-project--" / "abc.jsonl.zstd").write_bytes(b"")
    assert [e.id for e in Root(root).entries()] == ["ok"]
    with pytest.raises(SessionNotFound):
        locate("abc", str(root))
    assert os.path.exists(root / "--fixture-project--" / "abc.jsonl.zstd")


def test_only_a_leading_tilde_is_expanded(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format §2.1: ``~`` and ``~/`` mean the home directory; ``~user`` is a plain name."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    SessionSpec(id="at-home", created_at=clock()).publish(tmp_path / "home" / "r")
    SessionSpec(id="literal", created_at=clock()).publish(tmp_path / "~nobody" / "sessions")
    assert locate("at-home", "~/r").root.path == (tmp_path / "home" / "r").resolve()
    located = locate("literal", "~nobody/sessions")
    assert located.root.path == (tmp_path / "~nobody" / "sessions").resolve()
    assert locate("literal", None, {"DSH_HOME": "~nobody"}).root.path == located.root.path


# -- dirs and logs that cannot be read are named, never dropped (issue 11) -----------------------


@pytest.fixture
def denied(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Paths whose listing or opening fails with EACCES (the sandbox runs as root, so a
    permission error is simulated at the calls listing makes)."""
    paths: set[str] = set()
    real_scandir, real_listdir, real_open = os.scandir, os.listdir, os.open

    def check(path: object) -> None:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path) in paths:
            raise PermissionError(13, "Permission denied", os.fspath(path))

    def scandir(path: object = ".") -> object:
        check(path)
        return real_scandir(path)  # type: ignore[call-overload]

    def listdir(path: object = ".") -> list[str]:
        check(path)
        return real_listdir(path)  # type: ignore[call-overload, no-any-return]

    def open_(path: object, *args: object, **kwargs: object) -> int:
        check(path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "open", open_)
    return paths


def two_sessions(root: Path, clock: Clock) -> tuple[Path, Path]:
    readable = child(clock, "readable")
    hidden = child(clock, "hidden")
    for spec in (readable, hidden):
        spec.publish(root)
    return Root(root).find("readable"), Root(root).find("hidden")


def test_an_unlistable_session_dir_is_named_with_its_error(
    root: Path, clock: Clock, denied: set[str]
) -> None:
    readable, hidden = two_sessions(root, clock)
    denied.add(str(hidden))

    listed = Root(root)
    unreadable = listed.unreadable()

    assert [e.session_dir for e in unreadable] == [hidden]
    assert unreadable[0].dir_id == "hidden"
    assert unreadable[0].error is not None
    assert unreadable[0].error.message == (
        f"cannot read the session directory {hidden}: Permission denied"
    )
    assert [e.session_dir for e in listed.entries()] == [readable]
    assert listed.encoding() == "zstd"
    assert Root(root).encoding() == "zstd"  # also without a listing first
    assert Root(root).find("readable") == readable


def test_a_log_that_cannot_be_opened_is_named_with_its_error(
    root: Path, clock: Clock, denied: set[str]
) -> None:
    _, hidden = two_sessions(root, clock)
    log = hidden / "session.v4.jsonl.zstd"
    denied.add(str(log))

    unreadable = Root(root).unreadable()

    assert [(e.session_dir, e.dir_id) for e in unreadable] == [(hidden, "hidden")]
    assert unreadable[0].error is not None
    assert unreadable[0].error.message == (
        f"cannot read the session log in {hidden}: Permission denied"
    )


def test_an_unlistable_project_dir_is_named_with_its_error(
    root: Path, clock: Clock, denied: set[str]
) -> None:
    two_sessions(root, clock)
    other = SessionSpec(id="elsewhere", created_at=clock(), cwd="/other")
    other.turn(clock)
    other.publish(root)
    project = Root(root).find("hidden").parent
    denied.add(str(project))

    listed = Root(root)

    assert [e.id for e in listed.entries()] == ["elsewhere"]
    assert [e.session_dir for e in listed.unreadable()] == [project]
    assert "cannot read the project directory" in str(listed.unreadable()[0].error)


def test_a_fifo_where_the_log_belongs_is_named_not_taken_for_an_empty_dir(
    root: Path, clock: Clock
) -> None:
    _, hidden = two_sessions(root, clock)
    log = hidden / "session.v4.jsonl.zstd"
    log.unlink()
    os.mkfifo(log)

    unreadable = Root(root).unreadable()

    assert [e.session_dir for e in unreadable] == [hidden]
    assert str(unreadable[0].error) == (f"refusing to open {log}: it is a FIFO, not a regular file")
    with pytest.raises(DshForkError, match="it is a FIFO"):
        locate(str(hidden), str(root))


def test_a_registered_session_reads_as_a_fresh_listing_would(tmp_path: Path) -> None:
    """A session a run wrote and registered (held in the listed form, with no Path kept) has
    the id, parent, header, project, path and generation a new listing of the root gives."""
    root = tmp_path / "sessions"
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd="/work/p")
    parent.turn(clock)
    parent.publish(root)
    listed = Root(root)
    listed.entries()
    child = SessionSpec(
        id="session-K",
        created_at=clock(),
        cwd="/work/p",
        parent=parent.id,
        origin="subagent",
        depth=1,
    )
    child.turn(clock)
    child.publish(root)
    fresh = Root(root)
    expected = fresh.entry(child.id)
    assert expected is not None
    generation = expected.generation
    assert generation is not None and expected.header is not None
    entry = listed.register(expected.session_dir, generation, line=expected.header.raw)
    assert entry is not None
    assert entry._dir is None and entry._generations is None  # no Path until one is asked for
    assert entry._header is None  # and no parsed header: validated on first use
    seen = (
        entry.id,
        entry.parent,
        entry.header,
        entry.project,
        entry.session_dir,
        entry.dir_text,
        entry.generation,
        entry.log_path,
    )
    assert seen == (
        expected.id,
        expected.parent,
        expected.header,
        expected.project,
        expected.session_dir,
        expected.dir_text,
        expected.generation,
        expected.log_path,
    )
    assert listed.entry(child.id) is entry
    assert [e.id for e in listed.children_of(parent.id)] == [child.id]


def test_a_listed_entry_that_forgets_what_it_built_answers_as_before(tmp_path: Path) -> None:
    """A plan over thousands of sources drops the Paths and the parsed header opening each
    one built (``forget``); the entry builds equal ones again when next asked."""
    root = tmp_path / "sessions"
    clock = Clock()
    spec = SessionSpec(id="session-P", created_at=clock(), cwd="/work/p")
    spec.turn(clock)
    spec.publish(root)
    entry = Root(root).entry(spec.id)
    assert entry is not None
    before = (entry.session_dir, entry.generation, entry.header)
    assert entry._dir is not None and entry._generations is not None
    entry.forget()
    assert entry._dir is None and entry._generations is None and entry._header is None
    assert (entry.session_dir, entry.generation, entry.header) == before
    assert entry.header is not before[2]  # parsed again from the kept line


def test_a_listed_entry_whose_header_is_refused_keeps_its_error_when_it_forgets(
    tmp_path: Path,
) -> None:
    """``forget`` keeps a refusal as it is: the entry is not turned back into a line that
    would be judged again."""
    root = tmp_path / "sessions"
    spec = SessionSpec(id="session-Q", created_at=Clock()(), cwd="/work/q")
    session_dir = spec.publish(root)
    fields = orjson.loads(spec.header_line())
    fields["createdAt"] = "soon"  # a header DSH refuses
    log = session_dir / CURRENT_NAME
    write_log_file(log, orjson.dumps(fields), [])
    (entry,) = Root(root).entries()
    error = entry.error
    assert error is not None and entry.header is None
    entry.forget()
    assert entry.error is error and entry.header is None


# -- the dirs a listing does not know, asked again (relink, once per fork child) -------------


def _settled_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Root]:
    """A root with one session and one empty dir in a project dir, listed. Its last change
    counts as settled (``SETTLED_NS`` 0: a test cannot put a ctime back in the past)."""
    monkeypatch.setattr(discovery, "SETTLED_NS", 0)
    root = tmp_path / "sessions"
    spec = SessionSpec(id="session-A", created_at=Clock()(), cwd="/work/a")
    project = spec.publish(root).parent
    (project / "not-yet").mkdir()
    time.sleep(0.01)  # the listing comes after the last change, on a coarse clock too
    listed = Root(root)
    listed.entries()
    return root, project, listed


def _counting_listings(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    listed: list[Path] = []
    plain = discovery._subdir_names

    def counting(project: Path) -> list[str]:
        listed.append(project)
        return plain(project)

    monkeypatch.setattr(discovery, "_subdir_names", counting)
    return listed


def test_an_unchanged_project_dir_is_not_listed_again_but_its_unknown_dirs_are_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second ask lists no project dir whose inode, mtime and ctime are unchanged since
    the first, and still gives the dir that held no session (it may hold one by now)."""
    _, project, listed = _settled_root(tmp_path, monkeypatch)
    listings = _counting_listings(monkeypatch)
    empty = str(project / "not-yet")
    assert listed.unknown_texts() == [empty]
    assert listed.unknown_texts() == [empty]
    assert listings == [project]


def test_a_dir_made_in_a_listed_project_dir_is_found_even_with_its_mtime_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session another run made after the listing changes its project dir's mtime and
    ctime; putting the mtime back (``touch -d``) cannot hide it, since ctime still moved."""
    root, project, listed = _settled_root(tmp_path, monkeypatch)
    assert listed.unknown_texts() == [str(project / "not-yet")]
    old = project.stat()
    other = SessionSpec(id="session-B", created_at=Clock()(), cwd="/work/a")
    made = other.publish(root)
    os.utime(project, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert project.stat().st_mtime_ns == old.st_mtime_ns
    assert listed.unknown_texts() == [str(project / "not-yet"), str(made)]
    assert listed.register(made) is not None
    assert listed.unknown_texts() == [str(project / "not-yet")]


def test_a_project_dir_changed_just_before_its_listing_is_listed_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change within ``SETTLED_NS`` of a listing may share its time stamp with a later
    change, so such a dir's unchanged mtime proves nothing: it is listed on each ask."""
    root = tmp_path / "sessions"
    project = SessionSpec(id="session-A", created_at=Clock()(), cwd="/work/a").publish(root).parent
    listed = Root(root)
    listed.entries()  # the project dir was changed a moment ago, within SETTLED_NS
    listings = _counting_listings(monkeypatch)
    listed.unknown_texts()
    listed.unknown_texts()
    assert listings == [project, project]


def test_a_listing_parses_no_header_line_and_each_use_parses_it_once_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing keeps each header line's bytes; the first use parses it: validation (what
    ``tree``, ``du`` and ``list`` ask of every session) once, after which lineage asks for
    nothing more, or lineage alone (what finding children asks) once, without validating.
    Both give the same answers."""
    root = tmp_path / "sessions"
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=FX)
    parent.turn(clock)
    parent.publish(root)
    child(clock, "session-K", parent=parent.id).publish(root)
    parses: list[bytes] = []

    def counted(line: bytes) -> tuple[object, bool]:
        parses.append(line)
        return orjson.loads(line), False

    from dsh_fork import records, sessionentry

    fast = records._fast_header

    def counted_fast(line: bytes, file_version: int) -> records.Header | None:
        parses.append(line)  # the fast form of the header check parses it too
        return fast(line, file_version)

    monkeypatch.setattr(records, "parse_line", counted)
    monkeypatch.setattr(sessionentry, "parse_line", counted)
    monkeypatch.setattr(records, "_fast_header", counted_fast)
    listed = Root(root)
    first, second = listed.entries()
    assert parses == []
    header = first.header
    assert header is not None and len(parses) == 1
    assert (first.id, first.parent, first.is_subagent, first.created_at) == (
        header.id,
        header.parent_session,
        header.is_subagent,
        header.created_at,
    )
    assert len(parses) == 1
    lineage = (second.id, second.parent, second.is_subagent, second.created_at)
    assert len(parses) == 2 and second._header is None  # read off the line, not validated
    assert {lineage[0], first.id} == {"session-P", "session-K"}
    validated = second.header
    assert validated is not None
    assert lineage == (
        validated.id,
        validated.parent_session,
        validated.is_subagent,
        validated.created_at,
    )


def test_a_listing_shares_one_names_value_for_every_dir_with_only_the_current_log(
    tmp_path: Path,
) -> None:
    """Nearly every session dir holds just ``session.v4.jsonl.zstd``: its entries all keep the
    one shared value for that (``generations.CURRENT_ONLY``); a dir with another generation
    keeps its own."""
    root = tmp_path / "sessions"
    clock = Clock()
    for k in range(6):
        SessionSpec(id=f"session-{k}", created_at=clock(), cwd="/work/x").publish(root)
    odd = SessionSpec(id="session-odd", created_at=clock(), cwd="/work/x").publish(root)
    (odd / "session.v3.jsonl.zstd").write_bytes((odd / CURRENT_NAME).read_bytes())
    entries = {e.id: e for e in Root(root).entries()}
    assert all(entries[f"session-{k}"]._names is generations.CURRENT_ONLY for k in range(6))
    assert [name for _, _, name in entries["session-odd"]._names] == [
        "session.v3.jsonl.zstd",
        CURRENT_NAME,
    ]
