"""A fork's memory stays flat whatever the size of its source (issue: speed and memory).

The source log is read from its descriptor in bounded windows and its verbatim frames are
copied file to file, so a fork of a log of a few hundred MB runs under an address-space limit
far below the log's size; a fork that held the log in memory fails there.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson

from dsh_fork import frames as zframes
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import CURRENT_NAME

SRC = "session-large"
CWD = "/home/u/proj"
PROJECT = "--home-u-proj--"
NOW = 1_800_000_000_000
LOG_MIB = 1024 if os.environ.get("DSH_FORK_FUZZ") == "deep" else 256
"""The source's size: 1 GiB under the deep profile."""
HEADROOM_MIB = 96
"""What the fork may map beyond the interpreter and the modules it imports: well under the
source's size, so that holding the log (or its verbatim run) once fails."""

FORK_UNDER_LIMIT = textwrap.dedent(
    """
    import resource, sys
    from dsh_fork import cli, envelopes, fork, relink, seeded, writer  # everything, first
    from dsh_fork.fork import ForkOptions, fork_session
    root, source, headroom = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open("/proc/self/status") as status:
        size = next(int(l.split()[1]) for l in status if l.startswith("VmSize:")) * 1024
    limit = size + (headroom << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        result = fork_session(
            source, root, ForkOptions(child_id="child"), clock=lambda: 1_800_000_000_000
        )
    except MemoryError:
        print("MemoryError", flush=True)
        sys.exit(3)
    print(result.frames_copied, result.child.inherited_events, flush=True)
    """
)


def large_source(root: Path, clock: Clock, mib: int) -> tuple[Path, int, int]:
    """A v4 session of about ``mib`` MiB: a fixture session, then closed turns whose user
    message is 48 KiB of random text (incompressible, so the file is as large as its text),
    one flushed batch per turn as DSH writes them. Returns its path and its counts of events
    and of body frames."""
    spec = SessionSpec(id=SRC, created_at=clock(), cwd=CWD)
    spec.turn(clock)
    spec.flush()
    path = spec.publish(root) / CURRENT_NAME
    frames = 1
    text = base64.b64encode(random.Random(7).randbytes(36 * 1024)).decode()
    seq, turn = spec.seq, spec.turns
    with builtins.open(path, "ab") as out:
        while out.tell() < mib << 20:
            turn += 1
            message: dict[str, Any] = {
                "id": f"m{seq}",
                "role": "user",
                "source": {"kind": "user"},
                "content": [{"type": "text", "text": text}],
            }
            events = [
                ("turn/start", {"turn": turn}, {}),
                ("user/message", message, {"surfaceOp": "append"}),
                ("step/start", {"turn": turn, "step": 1}, {}),
                ("step/end", {"turn": turn, "step": 1}, {}),
                ("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, {}),
            ]
            lines = []
            for kind, data, extra in events:
                record = {"type": kind, "seq": seq, "time": NOW, "data": data, **extra}
                lines.append(orjson.dumps(record) + b"\n")
                seq += 1
            out.write(zframes.encode(b"".join(lines)))
            frames += 1
    return path, seq, frames


def digest(path: Path, start: int, end: int) -> str:
    """SHA-256 of bytes ``start..end-1`` of a file, read a window at a time."""
    sha = hashlib.sha256()
    with builtins.open(path, "rb") as handle:
        handle.seek(start)
        left = end - start
        while left:
            piece = handle.read(min(left, 4 << 20))
            assert piece, "file shorter than expected"
            sha.update(piece)
            left -= len(piece)
    return sha.hexdigest()


def test_a_fork_of_a_log_far_larger_than_its_memory_limit_copies_it_verbatim(
    root: Path, clock: Clock
) -> None:
    source, events, frames = large_source(root, clock, LOG_MIB)
    size = source.stat().st_size
    assert size > 2 * (HEADROOM_MIB << 20)  # the log cannot be held once within the limit

    proc = subprocess.run(
        [sys.executable, "-c", FORK_UNDER_LIMIT, str(root), SRC, str(HEADROOM_MIB)],
        capture_output=True,
        check=False,
        timeout=120,
    )

    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    frames_copied, inherited = map(int, proc.stdout.split())
    assert inherited == events
    child = root / PROJECT / "child" / CURRENT_NAME
    source_scan = zframes.scan(source.read_bytes()[: 1 << 16], limit=1)
    child_data_head = child.read_bytes()[: 1 << 16]
    child_header = zframes.scan(child_data_head, limit=1).frames[0]
    body = size - source_scan.frames[0].end
    # Every body frame of the source, byte for byte, right after the child's own header ...
    assert digest(child, child_header.end, child_header.end + body) == digest(
        source, source_scan.frames[0].end, size
    )
    # ... then one frame of its own: the end-seed marker.
    tail = child.read_bytes()[child_header.end + body :]
    marker = zframes.decode(tail, zframes.scan(tail).frames[0])
    assert orjson.loads(marker)["seq"] == events
    assert frames_copied == frames
