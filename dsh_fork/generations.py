"""Generation files: canonical names, selection of the highest, root encoding (format §3, §4)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Encoding = Literal["zstd", "plain"]

SUPPORTED_VERSION = 4
MAX_SAFE_INTEGER = 2**53 - 1
ZSTD_SUFFIX = ".zstd"
LOCK_NAME = "session.lock"
CURRENT_NAME = "session.v4.jsonl.zstd"

# `[0-9]`, not `\d`: Unicode digits must not match. Case-sensitive on purpose.
_BASE = re.compile(r"session(?:\.v([1-9][0-9]*))?\.jsonl")
_TEMP = re.compile(r".*\.tmp(?:-[0-9]+)?|.*\.repair|.*\.bak.*")


@dataclass(frozen=True, slots=True)
class Generation:
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
    match = _BASE.fullmatch(base)
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
    return _TEMP.fullmatch(name) is not None


def scan_names(session_dir: str | os.PathLike[str]) -> list[tuple[int, Encoding, str]]:
    """(version, encoding, name) of every canonical generation file of a dir, lowest first.

    A missing dir has none; one that cannot be listed (permissions, I/O) raises its OSError,
    so no caller mistakes an unreadable session for an absent one.

    Called once per session dir when a root is listed, so it stays lean: a prefix test before
    the name pattern, and no path objects.
    """
    found: list[tuple[int, Encoding, str]] = []
    try:
        scan = os.scandir(session_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    with scan:
        for entry in scan:
            name = entry.name
            if not name.startswith("session."):  # every canonical name does
                continue
            parsed = parse_name(name)
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
    return found


def dir_bytes(session_dir: str | os.PathLike[str]) -> tuple[int, int]:
    """(sizes of the regular files directly in a session dir, size of its chosen log): links
    and FIFOs are not followed; the chosen log is the highest canonical generation, zstd
    before plain at one version (format §3.3)."""
    total = 0
    best: tuple[int, bool] | None = None
    log = 0
    try:
        with os.scandir(session_dir) as scan:
            for entry in scan:
                if not entry.is_file(follow_symlinks=False):
                    continue
                size = entry.stat(follow_symlinks=False).st_size
                total += size
                name = entry.name
                parsed = parse_name(name) if name.startswith("session.") else None
                if parsed is not None:
                    rank = (parsed[0], parsed[1] == "zstd")
                    if best is None or rank > best:
                        best, log = rank, size
    except OSError:
        return total, log
    return total, log


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
