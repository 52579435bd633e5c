"""``export``: a session and its family into one bundle (see ``bundle`` for the format).

The family is the session, its whole subagent tree and, with ``forks``, its fork children and
their trees, found through header ``parentSession`` as every other command finds them. Each
log is read twice: once to describe it (size and sha256 of its committed part), once to write
it, and the second read must reproduce the first one's bytes, so the archive never holds a
torn or changing read. A live session (its lock held) is exported as of that read, with a
warning: its appends after the read are not in the bundle. The archive is written to a temp
file beside the output and linked into place, so it appears complete or not at all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from . import bundle
from .bundle import BundleSession, Compression, Manifest, Role
from .discovery import Located, Root, locate
from .errors import (
    DshForkError,
    IoError,
    Partial,
    SessionNotFound,
    SessionStale,
    UnsupportedFormat,
    UsageError,
)
from .errors import unsupported_below_v4 as below_v4
from .generations import SUPPORTED_VERSION, list_generations, select
from .ids import ClockMs, now_ms
from .layout import expand_home, project_dir_name
from .locking import running
from .model import derive
from .reader import check_version, open_log, stable_read

TEMP_SUFFIX = ".dsh-fork.tmp"


class ExportResult(Struct):
    """What an export wrote: the archive and the manifest inside it."""

    path: Path
    compression: Compression
    archive_bytes: int
    manifest: Manifest
    warnings: list[str] = field(default_factory=list)

    def partial(self) -> Partial | None:
        """An export is whole or fails: never partial."""
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "archive": {
                "path": str(self.path),
                "compression": self.compression,
                "bytes": self.archive_bytes,
            },
            "manifest": self.manifest.to_json(),
        }


class _Read(Struct):
    """One family member as the first read saw it: what the manifest says, where to re-read."""

    session: BundleSession
    path: Path


def export_session(
    session_arg: str,
    output: str,
    root_option: str | None,
    *,
    forks: bool = False,
    env: Mapping[str, str] | None = None,
    clock: ClockMs = now_ms,
) -> ExportResult:
    """Resolve SESSION and write its family into the archive ``output``."""
    located = locate(session_arg, root_option, env)
    target = expand_home(output).absolute()
    return export(located, target, forks=forks, clock=clock)


def export(located: Located, target: Path, *, forks: bool, clock: ClockMs = now_ms) -> ExportResult:
    compression = bundle.compression_of(target.name)
    _check_target(located.root, target)
    warnings = list(located.warnings)
    reads = [_describe(item, role, warnings) for item, role in _family(located, forks)]
    manifest = bundle.new_manifest(reads[0].session.id, forks, clock(), [r.session for r in reads])
    size = _write(target, compression, manifest, reads)
    return ExportResult(target, compression, size, manifest, warnings)


def _check_target(root: Root, target: Path) -> None:
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target} already exists; remove it or choose another name")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent} is not a directory", path=str(target.parent))
    with contextlib.suppress(ValueError):
        target.resolve().relative_to(root.path.resolve())
        raise UsageError(f"{target} lies inside the sessions root {root.path}; write it elsewhere")


def _family(located: Located, forks: bool) -> list[tuple[Path, Role]]:
    """The session dirs of the family, parents before children (a cycle is followed once)."""
    root = located.root
    top = located.session_dir
    order: list[tuple[Path, Role]] = [(top, "top")]
    header = _header_of(top)
    seen = {header: top}
    queue = [header]
    while queue:
        parent = queue.pop(0)
        kids: list[tuple[Any, Role]] = [(e, "subagent") for e in root.children_of(parent)]
        if forks:
            kids += [(e, "fork") for e in root.forks_of(parent)]
        for entry, role in kids:
            if entry.error is not None:
                raise entry.error
            if entry.id is None:
                continue
            if entry.id in seen:
                if seen[entry.id] != entry.session_dir:  # a root DSH itself refuses
                    raise SessionNotFound(
                        f"ambiguous id {entry.id!r}: {seen[entry.id]} and {entry.session_dir}",
                        session=entry.id,
                    )
                continue  # a lineage cycle: followed once
            seen[entry.id] = entry.session_dir
            order.append((entry.session_dir, role))
            queue.append(entry.id)
    return order


def _header_of(session_dir: Path) -> str:
    generation = select(list_generations(session_dir))
    assert generation is not None
    log = open_log(generation, collect=())
    return log.header.id


def _describe(session_dir: Path, role: Role, warnings: list[str]) -> _Read:
    """First read: a stable read of the highest generation, its committed part described."""
    generation = select(list_generations(session_dir))
    if generation is None:
        raise UsageError(f"{session_dir} holds no session log", path=str(session_dir))
    check_version(generation)
    if generation.version < SUPPORTED_VERSION:
        raise below_v4(f"{session_dir.name}", generation.version, path=str(generation.path))
    if generation.encoding != "zstd":
        raise UnsupportedFormat(
            f"{generation.path}: plain logs are not exported (a bundle holds v4 zstd logs)",
            path=str(generation.path),
        )
    log = open_log(generation, collect=("session/end-seed",))
    header = log.header
    committed = len(log.data) if log.torn is None else log.torn.offset
    data = log.data[:committed]
    lock_held = running(session_dir)
    if lock_held:
        warnings.append(
            f"{header.id} is running (its lock is held): exported as of a stable read of "
            f"{committed} bytes; later appends are not in the bundle"
        )
    if log.torn is not None:
        warnings.append(
            f"{header.id} has a torn tail of {log.torn.size} bytes: only its complete frames "
            "are exported"
        )
    facts = derive(header, log.event_count, log.collected)
    session = BundleSession(
        id=header.id,
        role=role,
        parent_session=header.parent_session,
        origin=header.origin,
        cwd=header.cwd,
        project_dir=project_dir_name(header.cwd),
        generation=generation.version,
        created_at=header.created_at,
        is_seeded=header.is_seeded,
        delegation_depth=header.delegation_depth,
        events=log.event_count,
        cut=facts.cut,
        member=bundle.member_name(project_dir_name(header.cwd), header.id),
        size=committed,
        sha256=bundle.digest_of(data),
        lock_held=lock_held,
    )
    return _Read(session, generation.path)


def _reread(item: _Read) -> bytes:
    """Second read: the committed prefix must be the bytes the first read described (an
    append-only log only grows past it; anything else is a change under the export)."""
    data, _ = stable_read(item.path)
    prefix = data[: item.session.size]
    if len(prefix) != item.session.size or bundle.digest_of(prefix) != item.session.sha256:
        raise SessionStale(
            f"{item.path} changed while it was being exported (not by appending)",
            path=str(item.path),
        )
    return prefix


def _write(target: Path, compression: Compression, manifest: Manifest, reads: list[_Read]) -> int:
    temp = target.with_name(f"{target.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise IoError.of(exc) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            with bundle.archive_writer(handle, compression) as tar:
                mtime = manifest.created_at // 1000
                bundle.add_member(tar, bundle.MANIFEST_NAME, manifest.encoded(), mtime)
                for item in reads:
                    bundle.add_member(tar, item.session.member, _reread(item), mtime)
            handle.flush()
            os.fsync(handle.fileno())
        _link(temp, target)
        size = target.stat().st_size
    except FileExistsError:
        raise UsageError(f"{target} already exists; remove it or choose another name") from None
    except DshForkError:
        raise
    except OSError as exc:
        raise IoError.of(exc) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    return size


def _link(temp: Path, target: Path) -> None:
    """``link`` never replaces an existing file; where it is unsupported, ``rename`` after
    re-checking that nothing appeared under the name (the writer's fallback)."""
    try:
        os.link(temp, target)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        if target.exists() or target.is_symlink():
            raise FileExistsError(errno.EEXIST, "exists", str(target)) from None
        os.rename(temp, target)
