"""Generation files: canonical names, selection of the highest, root encoding (format §3, §4)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from pathlib import Path
from typing import Literal

from msgspec import Struct

Encoding = Literal["zstd", "plain"]

SUPPORTED_VERSION = 4
MAX_SAFE_INTEGER = 2**53 - 1
ZSTD_SUFFIX = ".zstd"
LOCK_NAME = "session.lock"
CURRENT_NAME = "session.v4.jsonl.zstd"


# The patterns are compiled on first use: a run that meets only current names needs neither.
@functools.cache
def _base() -> re.Pattern[str]:
    # `[0-9]`, not `\d`: Unicode digits must not match. Case-sensitive on purpose.
    return re.compile(r"session(?:\.v([1-9][0-9]*))?\.jsonl")


@functools.cache
def _temp() -> re.Pattern[str]:
    return re.compile(r".*\.tmp(?:-[0-9]+)?|.*\.repair|.*\.bak.*")


class Generation(Struct, frozen=True):
    path: Path
    version: int
    encoding: Encoding

    @property
    def name(self) -> str:
        return self.path.name


def parse_name(name: str) -> tuple[int, Encoding] | None:
    """(version, encoding) of a canonical generation file name, else None."""
    if name == CURRENT_NAME:  # nearly every name a listing sees: no pattern needed
        return SUPPORTED_VERSION, "zstd"
    if name.endswith(ZSTD_SUFFIX):
        base, encoding = name[: -len(ZSTD_SUFFIX)], "zstd"
    else:
        base, encoding = name, "plain"
    match = _base().fullmatch(base)
    if match is None:
        return None
    digits = match.group(1)
    if digits is None:
        return 0, encoding  # type: ignore[return-value]
    if len(digits) > 16 or int(digits) > MAX_SAFE_INTEGER:
        return None
    return int(digits), encoding  # type: ignore[return-value]


def canonical_name(version: int, encoding: Encoding = "zstd") -> str:
    base = "session.jsonl" if version == 0 else f"session.v{version}.jsonl"
    return base + (ZSTD_SUFFIX if encoding == "zstd" else "")


def is_temp_name(name: str) -> bool:
    """Names of publish/migration temps and backups: never generations, reported by doctor."""
    return _temp().fullmatch(name) is not None


Names = tuple[tuple[int, Encoding, str], ...]
"""(version, encoding, name) of the canonical generation files of a dir, lowest first."""

CURRENT_ONLY: Names = ((SUPPORTED_VERSION, "zstd", CURRENT_NAME),)
"""The names of nearly every session dir, shared: a listing of 100,000 dirs keeps one such
value, not one list, tuple and name string per dir."""

SETTLED_NS = 3_000_000_000
"""How long before its listing a dir must have last changed for unchanged time stamps to mean
unchanged names (``Root.unknown_texts``): longer than the coarsest time
stamps (FAT's 2 s). Creating, removing or renaming a name in a dir stamps its mtime and ctime
with the time of the change."""


Sizes = tuple[int, int]
"""(sizes of the regular files directly in a session dir, size of its chosen log)."""


def scan_names(session_dir: str | os.PathLike[str], others: list[str] | None = None) -> Names:
    """The canonical generation files of a dir, lowest first; with ``others``, the names of
    the other regular files in it but the lock (temps, backups) are added to that list.

    A missing dir has none; one that cannot be listed (permissions, I/O) raises its OSError,
    so no caller mistakes an unreadable session for an absent one.

    Called once per session dir when a root is listed, so it stays lean: a prefix test before
    the name pattern, and no path objects.
    """
    return _scan_dir(session_dir, None, others)


def scan_sized(session_dir: str | os.PathLike[str]) -> tuple[Names, Sizes]:
    """``scan_names`` and ``dir_bytes`` of a dir from one listing of it (``du`` of a root)."""
    sizes = [0, 0]
    names = _scan_dir(session_dir, sizes)
    return names, (sizes[0], sizes[1])


def dir_bytes(session_dir: str | os.PathLike[str]) -> Sizes:
    """(sizes of the regular files directly in a session dir, size of its chosen log): links
    and FIFOs are not followed; the chosen log is the highest canonical generation, zstd
    before plain at one version (format §3.3). A dir that cannot be listed, or a file that
    cannot be measured, ends the sum there."""
    sizes = [0, 0]
    with contextlib.suppress(OSError):
        _scan_dir(session_dir, sizes)
    return sizes[0], sizes[1]


def _scan_dir(
    session_dir: str | os.PathLike[str],
    sizes: list[int] | None,
    others: list[str] | None = None,
) -> Names:
    """The generation names of a dir and, when ``sizes`` is given, its sizes summed into it
    (``[total, chosen log]``), and when ``others`` is given the names of its other regular
    files but the lock added to it: one ``scandir`` answers all three."""
    found: list[tuple[int, Encoding, str]] = []
    best: tuple[int, bool] | None = None
    try:
        scan = os.scandir(session_dir)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    with scan:
        for entry in scan:
            name = entry.name
            # every canonical name starts so: a prefix test before the name pattern
            if name == LOCK_NAME:
                parsed = None
            else:
                parsed = parse_name(name) if name.startswith("session.") else None
                if parsed is None and others is not None and _regular(entry):
                    others.append(name)
            if sizes is not None:
                try:
                    regular = entry.is_file(follow_symlinks=False)
                    size = entry.stat(follow_symlinks=False).st_size if regular else 0
                except OSError:
                    sizes = None  # the sum ends at a file that cannot be measured
                else:
                    sizes[0] += size
                    if regular and parsed is not None:
                        rank = (parsed[0], parsed[1] == "zstd")
                        if best is None or rank > best:
                            best, sizes[1] = rank, size
            if parsed is None:
                continue
            try:
                if not entry.is_file():
                    continue
            except OSError:
                continue
            found.append((parsed[0], parsed[1], name))
    if len(found) > 1:
        found.sort(key=lambda g: (g[0], g[1] == "zstd"))
    return shared(tuple(found))


def _regular(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def shared(names: Names) -> Names:
    """``names``, or ``CURRENT_ONLY`` when they are equal to it (one value for most dirs)."""
    return CURRENT_ONLY if names == CURRENT_ONLY else names


def list_generations(session_dir: Path) -> list[Generation]:
    """Every canonical generation file of a dir, lowest version first."""
    return [Generation(session_dir / name, v, e) for v, e, name in scan_names(session_dir)]


def select(generations: list[Generation]) -> Generation | None:
    """The numerically highest; at equal version the zstd file (format §3.3, §4)."""
    return generations[-1] if generations else None


def non_canonical_files(session_dir: Path) -> list[str]:
    """Files that are neither generations nor the lock: shown as ignored by inspect."""
    try:
        names = sorted(os.listdir(session_dir))
    except OSError:
        return []
    return [n for n in names if n != LOCK_NAME and parse_name(n) is None]
