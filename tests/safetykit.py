"""Safety checks shared by the whole suite: the source guard and the fuzz case counter.

The source guard (issue 5, guarantee 6) snapshots every generation file under the roots a
command can touch and checks afterwards that each one is byte-identical, or (for a writing
command) that its committed bytes are an exact prefix of the new bytes and everything after
them is whole, decodable zstd frames. ``conftest.run_cli`` wraps every CLI invocation of the
suite in it; the crash harness calls it after every simulated and real crash.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh_fork import frames as zframes
from dsh_fork.durable import is_own_temp
from dsh_fork.errors import CorruptLog
from dsh_fork.generations import is_temp_name, parse_name
from dsh_fork.layout import resolve_root

CASES: Counter[str] = Counter()
"""Fuzz and crash cases run in this session, by kind; printed in the terminal summary."""

READ_ONLY_COMMANDS = frozenset(
    ("inspect", "list-agents", "doctor", "tree", "diff", "du", "export", "attach")
)
WRITING_COMMANDS = frozenset(("fork", "relink", "fixture", "import", "salvage"))
MOVING_COMMANDS = frozenset(("trash", "restore"))
"""Commands that move whole session dirs between the root and ``<home>/dsh-fork-trash``: a
generation file may leave the root only to appear byte-identical in the trash, and back."""
TRASH_DIR = "dsh-fork-trash"


def moved_files(root: Path) -> dict[Path, bytes]:
    """The generation files of the root and of its home's trash, each keyed by its
    ``<project dir>/<session dir>/<name>`` (a trash entry's own dir left out): a move keeps
    every key and its bytes."""
    out: dict[Path, bytes] = {}
    bases = [root, *_subdirs(root.parent / TRASH_DIR)]
    for base in bases:
        for path, data in generation_files(base).items():
            key = path.relative_to(base)
            if key in out:  # in the root and in the trash: a copy made meanwhile, kept apart
                key = Path("(also in the trash)") / key
            out[key] = data
    return out


def count(kind: str, n: int = 1) -> None:
    CASES[kind] += n


# -- what lies under a root ---------------------------------------------------------------------


def _subdirs(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as scan:
            return [Path(e.path) for e in scan if e.is_dir()]
    except OSError:
        return []


def _files(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as scan:
            return [Path(e.path) for e in scan if e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def generation_files(root: Path) -> dict[Path, bytes]:
    """The bytes of every canonical generation file of every session dir of ``root``."""
    out: dict[Path, bytes] = {}
    for project in _subdirs(root):
        for session_dir in _subdirs(project):
            for path in _files(session_dir):
                if parse_name(path.name) is not None:
                    out[path] = path.read_bytes()
    return out


def foreign_temps(root: Path) -> set[Path]:
    """Temp files under ``root`` that dsh-fork does not own (DSH's, other tools'): never
    deleted by any command."""
    out: set[Path] = set()
    for project in _subdirs(root):
        for session_dir in _subdirs(project):
            for path in _files(session_dir):
                if is_temp_name(path.name) and not is_own_temp(path.name):
                    out.add(path)
    return out


def file_listing(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every entry under ``root``: what a read-only command never changes
    (a lock probe opens ``session.lock`` read-only and changes nothing)."""
    out: dict[str, tuple[int, int]] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            size = 0 if os.path.isdir(path) else st.st_size
            out[os.path.relpath(path, root)] = (size, st.st_mtime_ns)
    return out


# -- the guard ------------------------------------------------------------------------------------


def appended_problem(old: bytes, new: bytes, *, torn_ok: bool = False) -> str | None:
    """Why ``new`` is not ``old`` plus whole frames, or None.

    A torn tail of ``old`` (bytes after its complete frames) may have been cut off and
    replaced: that is DSH's own recovery (format §5.3), which relink performs under the lock.
    ``torn_ok`` admits a torn frame at the very end of ``new`` (a run that crashed mid-write).
    """
    if new == old:
        return None
    try:
        committed = zframes.scan(old).committed_end
    except CorruptLog:
        return "a corrupt generation file was changed"
    if not new.startswith(old[:committed]):
        return f"bytes before offset {committed} changed"
    added = new[committed:]
    try:
        scan = zframes.scan(added)
    except CorruptLog as exc:
        return f"the bytes added after offset {committed} are not zstd frames: {exc}"
    if scan.torn_start is not None and not torn_ok:
        return f"a torn frame was left at offset {committed + scan.torn_start}"
    for index, frame in enumerate(scan.frames):
        try:
            zframes.decode(added, frame, index)
        except CorruptLog as exc:
            return f"an added frame does not decode: {exc}"
    return None


@dataclass
class RootGuard:
    """A snapshot of the generation files under some roots, checked after a command."""

    roots: list[Path]
    read_only: bool
    before: dict[Path, bytes] = field(default_factory=dict)
    temps: set[Path] = field(default_factory=set)
    listings: dict[Path, dict[str, tuple[int, int]]] = field(default_factory=dict)

    moving: bool = False
    moved_before: dict[Path, dict[Path, bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.moving:
            self.moved_before = {root: moved_files(root) for root in self.roots}
            STATS["runs"] += 1
            return
        for root in self.roots:
            self.before.update(generation_files(root))
            self.temps |= foreign_temps(root)
            if self.read_only:
                self.listings[root] = file_listing(root)
        STATS["runs"] += 1
        STATS["files"] += len(self.before)

    def problems(self, *, torn_ok: bool = False) -> list[str]:
        out: list[str] = []
        for root, was in self.moved_before.items():
            moved = moved_files(root)
            for key in was.keys() ^ moved.keys():
                out.append(f"{root}: {key} was {'deleted' if key in was else 'created'}")
            out += [f"{root}: {k} changed" for k in was if k in moved and was[k] != moved[k]]
        after: dict[Path, bytes] = {}
        for root in self.roots:
            after.update(generation_files(root))
        for path, old in self.before.items():
            new = after.get(path)
            if new is None:
                out.append(f"{path}: a generation file was deleted")
                continue
            if new == old:
                continue
            if self.read_only:
                out.append(f"{path}: changed by a read-only command")
                continue
            if parse_name(path.name) != (4, "zstd"):
                out.append(f"{path}: a generation other than v4 zstd was written")
                continue
            problem = appended_problem(old, new, torn_ok=torn_ok)
            if problem is not None:
                out.append(f"{path}: {problem}")
        old_dirs = {path.parent for path in self.before}
        for path in after.keys() - self.before.keys():
            if path.parent in old_dirs:
                out.append(f"{path}: a new generation beside an existing session's")
        for path in self.temps:
            if not path.exists():
                out.append(f"{path}: a temp dsh-fork does not own was deleted")
        for root, listing in self.listings.items():
            now = file_listing(root)
            if now != listing:
                changed = sorted(set(now.items()) ^ set(listing.items()))[:5]
                out.append(f"{root}: a read-only command changed the tree: {changed}")
        return out

    def check(self, *, torn_ok: bool = False, what: str = "") -> None:
        problems = self.problems(torn_ok=torn_ok)
        assert not problems, f"source guard ({what}):\n" + "\n".join(problems)


STATS: Counter[str] = Counter()
"""How many guarded runs and snapshotted generation files the suite checked."""


@contextmanager
def guarded(
    roots: Iterable[Path], *, read_only: bool = False, what: str = "", moving: bool = False
) -> Iterator[None]:
    """Check the guard after the block; a block that raised may leave a torn frame (a crash).
    ``moving``: a command of ``MOVING_COMMANDS``, whose moves are checked as moves."""
    guard = RootGuard(_unique(roots), read_only, moving=moving)
    try:
        yield
    except BaseException:
        guard.check(torn_ok=True, what=what)
        raise
    guard.check(what=what)


def _unique(roots: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for root in roots:
        resolved = root.resolve()
        if resolved not in out:
            out.append(resolved)
    return out


# -- which roots a command line touches -----------------------------------------------------------


def command_of(args: Sequence[str]) -> str | None:
    for arg in args:
        if arg in READ_ONLY_COMMANDS or arg in WRITING_COMMANDS or arg in MOVING_COMMANDS:
            return arg
    return None


def is_moving(args: Sequence[str]) -> bool:
    return command_of(args) in MOVING_COMMANDS


def roots_of(args: Sequence[str], env: Mapping[str, str | None] | None) -> list[Path]:
    """Every root the arguments can name: ``--root``, ``DSH_HOME`` (or its default), and the
    root a session path argument implies (its session dir's grandparent)."""
    merged: dict[str, str] = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    roots: list[Path] = []
    explicit = False
    for index, arg in enumerate(args):
        value = None
        if arg == "--root" and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith("--root="):
            value = arg.removeprefix("--root=")
        if value is not None:
            explicit = True
            roots.append(resolve_root(value, merged))
    if not explicit:
        roots.append(resolve_root(None, merged))
    for arg in args:
        if arg.startswith("-") or "\x00" in arg:
            continue
        try:
            path = Path(arg)
            if not path.exists():
                continue
            path = path.resolve()
        except (OSError, ValueError):
            continue
        session_dir = path.parent if path.is_file() else path
        if any(parse_name(p.name) is not None for p in _files(session_dir)):
            roots.append(session_dir.parent.parent)
    return roots


def is_read_only(args: Sequence[str]) -> bool:
    command = command_of(args)
    return command in READ_ONLY_COMMANDS or (command in WRITING_COMMANDS and "--dry-run" in args)


# -- crash states and finished trees -------------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes]:
    """Generation files by path relative to the root (so a copied root compares)."""
    return {str(path.relative_to(root)): data for path, data in generation_files(root).items()}


def complete_lines(path: Path) -> list[bytes]:
    """Decompressed lines of the complete frames of a generation file, header first."""
    data = path.read_bytes()
    scan = zframes.scan(data)
    return b"".join(zframes.decode(data, f) for f in scan.frames).split(b"\n")[:-1]


def crash_state_problems(
    root: Path,
    pristine: Mapping[str, bytes],
    never_written: Iterable[str],
    existing: Iterable[str],
    *,
    torn_ok: bool,
    own_temps_ok: bool,
) -> list[str]:
    """What is wrong with a root after a run died or failed (issue 5, guarantee 1):

    - every pre-existing generation file is byte-identical (``never_written``, relative
      paths) or kept its committed bytes and gained whole frames (a torn one with ``torn_ok``);
    - every session of the root passes the v4 checklist with no error finding, unlocked;
    - nothing DSH would read is half made: a project dir holds no files, a session dir holds
      canonical generations (validated above), ``session.lock`` and dsh-fork's own temps
      (only with ``own_temps_ok``), and names that were already there (``existing``).
    """
    from dsh_fork.discovery import Root
    from dsh_fork.generations import LOCK_NAME
    from dsh_fork.locking import probe
    from dsh_fork.validation import validate_dir

    out: list[str] = []
    frozen = set(never_written)
    now = snapshot(root)
    for rel, old in pristine.items():
        new = now.get(rel)
        if new is None:
            out.append(f"{rel}: deleted")
        elif rel in frozen and new != old:
            out.append(f"{rel}: a source was written")
        elif (problem := appended_problem(old, new, torn_ok=torn_ok)) is not None:
            out.append(f"{rel}: {problem}")
    for entry in Root(root).entries():
        for finding in validate_dir(entry.session_dir):
            if finding.severity == "error":
                out.append(f"{entry.session_dir.name}: {finding.code}: {finding.message}")
        if probe(entry.session_dir) == "held":
            out.append(f"{entry.session_dir.name}: left locked")
    before = set(existing)
    for project in _subdirs(root):
        for path in _files(project):
            if str(path.relative_to(root)) not in before:
                out.append(f"{path}: a file in a project dir")
        for session_dir in _subdirs(project):
            with os.scandir(session_dir) as scan:
                names = [item.name for item in scan]
            for name in names:
                rel = str((session_dir / name).relative_to(root))
                if parse_name(name) is not None or name == LOCK_NAME or rel in before:
                    continue
                if own_temps_ok and is_own_temp(name):
                    continue
                out.append(f"{rel}: left behind")
    return out


def files_under(root: Path) -> set[str]:
    """Relative paths of every file under a root."""
    out: set[str] = set()
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def _cut(events: list[dict[str, object]]) -> int:
    cut = 0
    for event in events:
        data = event.get("data")
        is_marker = event.get("type") == "session/end-seed" and isinstance(data, dict)
        if is_marker and isinstance(data, dict) and data.get("inherited") is True:
            cut = int(str(event.get("seq")))
    return cut


def canonical_tree(root: Path, originals: Mapping[str, list[bytes]]) -> Counter[bytes]:
    """The root as a multiset of sessions with every new id replaced by what it is.

    ``originals`` maps the ids of the sessions that existed before to their lines. A new
    session is named ``copy[<sources>]@<parent's name>``, its sources being the originals
    whose first ``cut`` events are its inherited prefix, byte for byte; its node holds its
    header (ids and times aside) and the multiset of its own events, catalog facts naming
    children by name and checked against their createdAt. An original's node holds what was
    appended to it. Two trees are the same when nothing is missing, duplicated or different.
    """
    import orjson

    from dsh_fork.discovery import Root

    logs: dict[str, list[bytes]] = {}
    for entry in Root(root).entries():
        generation = entry.generation
        assert generation is not None and entry.id is not None
        logs[entry.id] = complete_lines(generation.path)
    headers = {sid: orjson.loads(lines[0]) for sid, lines in logs.items()}
    events = {sid: [orjson.loads(line) for line in lines[1:]] for sid, lines in logs.items()}
    names: dict[str, str] = {}

    def name(sid: str) -> str:
        if sid not in names:
            if sid in originals or sid not in logs:
                names[sid] = sid if sid in originals else f"missing:{sid}"
            else:
                cut = _cut(events[sid])
                prefix = logs[sid][1 : cut + 1]
                sources = sorted(
                    o for o, lines in originals.items() if cut and lines[1 : cut + 1] == prefix
                )
                parent = headers[sid].get("parentSession")
                names[sid] = f"copy[{'|'.join(sources)}]@{name(parent) if parent else '-'}"
        return names[sid]

    def own(event: dict[str, object]) -> bytes:
        data = event.get("data")
        if event.get("type") == "subagent/catalog" and isinstance(data, dict):
            child = str(data.get("childId"))
            created = headers.get(child, {}).get("createdAt")
            same = "same" if created == data.get("childCreatedAt") else "differs"
            data = {**data, "childId": name(child), "childCreatedAt": same}
        return orjson.dumps({"type": event.get("type"), "data": data}, option=orjson.OPT_SORT_KEYS)

    nodes: Counter[bytes] = Counter()
    for sid, lines in logs.items():
        if sid in originals:
            old = originals[sid]
            kept = lines[: len(old)] == old
            appended = events[sid][len(old) - 1 :] if kept else []
            header: object = "kept" if kept else "CHANGED"
        else:
            cut = _cut(events[sid])
            appended = events[sid][cut:]
            header = {k: v for k, v in headers[sid].items() if k not in ("id", "createdAt")} | {
                "parentSession": name(str(headers[sid].get("parentSession")))
            }
        node = {
            "name": name(sid),
            "header": header,
            "own": sorted(Counter(own(e).decode() for e in appended).items()),
        }
        nodes[orjson.dumps(node, option=orjson.OPT_SORT_KEYS)] += 1
    return nodes


def original_lines(root: Path) -> dict[str, list[bytes]]:
    """Lines of every session of a root, by id: the ``originals`` of ``canonical_tree``."""
    from dsh_fork.discovery import Root

    out: dict[str, list[bytes]] = {}
    for entry in Root(root).entries():
        generation = entry.generation
        if generation is not None and entry.id is not None and generation.version == 4:
            out[entry.id] = complete_lines(generation.path)
    return out


PEAK_LINE = "PEAK_RSS_KB="
"""How a measured child's last line on stderr begins (``peaked_run``)."""

_PEAK = (  # the peak is written when main returns or exits
    "import runpy, sys\n"
    "sys.argv = ['dsh-fork', *sys.argv[1:]]\n"
    "def peak():\n"
    "    with open('/proc/self/status') as status:\n"
    "        kb = next(int(l.split()[1]) for l in status if l.startswith('VmHWM:'))\n"
    "    sys.stderr.write(f'PEAK_RSS_KB={kb}\\n')\n"
    "try:\n"
    "    runpy.run_module('dsh_fork', run_name='__main__')\n"
    "finally:\n"
    "    peak()\n"
)


def peak_rss_run(
    args: Sequence[str | Path],
    *,
    limit: Callable[[], None],
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], float]:
    """The CLI run in a child under ``limit`` (its ``preexec_fn``: an rlimit); (the run, its
    peak RSS in MB). That is the image's own high-water mark (``VmHWM``): Linux starts
    ``ru_maxrss`` at the size of the process the child was forked from, and a long test run
    makes that the test process."""
    command = [sys.executable, "-c", _PEAK, *map(str, args)]
    return peaked_run(command, timeout=timeout, env=env, preexec_fn=limit)


def peaked_run(
    command: Sequence[str], **options: Any
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``command``, a script that writes ``PEAK_RSS_KB=<kB>`` on stderr as it ends, run in a
    child (``subprocess.run`` ``options``: timeout, env, preexec_fn, stdin); (the run, that
    peak in MB). A run that wrote no peak fails the test with its stderr."""
    done = subprocess.run(command, check=False, capture_output=True, text=True, **options)
    peaks = [line for line in done.stderr.splitlines() if line.startswith(PEAK_LINE)]
    assert peaks, done.stderr
    return done, int(peaks[-1].split("=")[1]) / 1024
