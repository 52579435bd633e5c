"""Where things live: home and root resolution, projectKey, encodeSegment (format §2)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path

SAFE_ASCII = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_SEPARATORS = frozenset((ord("/"), ord("\\"), ord(":")))
NO_CWD_DIR = "_no-cwd"
PROJECT_KEY_MAX = 251
OPLOG_NAME = "dsh-fork-relink.log"
_ALL_SAFE = re.compile(f"[{re.escape(bytes(sorted(SAFE_ASCII)).decode())}]+")
"""A text of ``SAFE_ASCII`` characters only: its encoding is itself (every id DSH makes)."""


def _code_units(text: str) -> list[int]:
    """UTF-16 code units: DSH walks strings as JavaScript does, lone surrogates included. An
    ASCII text's units are its bytes (and the UTF-16 codec is not loaded for it)."""
    if text.isascii():
        return list(text.encode("ascii"))
    raw = text.encode("utf-16-le", "surrogatepass")
    return [raw[i] | (raw[i + 1] << 8) for i in range(0, len(raw), 2)]


@functools.lru_cache(maxsize=256)
def project_key(cwd: str) -> str:
    """The project dir name of an absolute cwd (format §2.3); kept for the few cwds a run
    meets, since relink asks it once per copy."""
    if cwd == "":
        raise ValueError("projectKey of an empty cwd")
    out: list[str] = []
    in_separator_run = False
    for unit in _code_units(cwd):
        if unit in _SEPARATORS:
            if not in_separator_run:
                out.append("-")
            in_separator_run = True
            continue
        in_separator_run = False
        out.append(chr(unit) if unit in SAFE_ASCII else f"~{unit:04X}")
    slug = "".join(out).lstrip("-") or "root"
    return f"--{slug[:PROJECT_KEY_MAX]}--"


def project_dir_name(cwd: str | None) -> str:
    return NO_CWD_DIR if cwd is None else project_key(cwd)


def encode_segment(session_id: str) -> str:
    """The session dir name of an id; injective, so it can be decoded back (format §2.4)."""
    if session_id == "":
        raise ValueError("encodeSegment of an empty id")
    if session_id == ".":
        return "~002E"
    if session_id == "..":
        return "~002E~002E"
    if _ALL_SAFE.fullmatch(session_id):
        return session_id
    return "".join(
        chr(unit) if unit in SAFE_ASCII else f"~{unit:04X}" for unit in _code_units(session_id)
    )


def decode_segment(name: str) -> str | None:
    """The id a session dir name encodes, or None when the name is not an encoding."""
    units: list[int] = []
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "~":
            digits = name[i + 1 : i + 5]
            if len(digits) != 4 or any(c not in "0123456789ABCDEF" for c in digits):
                return None
            units.append(int(digits, 16))
            i += 5
        elif ord(ch) < 128 and ord(ch) in SAFE_ASCII:
            units.append(ord(ch))
            i += 1
        else:
            return None
    if all(unit < 0x80 for unit in units):  # ASCII: no surrogate, no UTF-16 codec to load
        decoded = bytes(units).decode("ascii")
    else:
        raw = b"".join(u.to_bytes(2, "little") for u in units)
        decoded = raw.decode("utf-16-le", "surrogatepass")
    return decoded if decoded and encode_segment(decoded) == name else None


def is_absolute_cwd(cwd: str) -> bool:
    """POSIX absolute only: DSH on POSIX refuses a header whose cwd is a Windows path such as
    ``C:/ws`` ("first line is not a session header"), so dsh-fork refuses it too."""
    return cwd.startswith("/")


def expand_home(value: str | os.PathLike[str]) -> Path:
    """Expand a leading ``~`` or ``~/`` only, as DSH does (format §2.1).

    ``~user`` forms are left alone: DSH does not expand them, and Python's ``expanduser``
    would raise for an unknown user (an id such as ``~x`` must stay an id).
    """
    text = os.fspath(value)
    if text == "~" or text.startswith("~/"):
        return Path.home() / text[2:]
    return Path(text)


def resolve_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    value = env.get("DSH_HOME", "")
    if not value.strip():
        value = "~/.dsh"
    return expand_home(value).resolve()


def resolve_root(root: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> Path:
    """``--root`` when given, else ``$DSH_HOME/sessions`` (contract §1.1)."""
    if root is not None:
        return expand_home(root).resolve()
    return resolve_home(env) / "sessions"


def oplog_path(root: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> Path:
    """``$DSH_HOME/dsh-fork-relink.log``, or beside the root when only ``--root`` is given."""
    env = os.environ if env is None else env
    if root is not None and not env.get("DSH_HOME", "").strip():
        return resolve_root(root, env).parent / OPLOG_NAME
    return resolve_home(env) / OPLOG_NAME


def session_dir(root: Path, session_id: str, cwd: str | None) -> Path:
    """The one path a session may live at (path binding, format §2.6)."""
    return root / project_dir_name(cwd) / encode_segment(session_id)
