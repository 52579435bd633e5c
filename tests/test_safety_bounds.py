"""The memory budget (issue 33): every command on every hostile log of the table stays under
100 MB, answers with a contract code and one line, and names what it refused as "too large".

Each command runs in a process of its own whose data segment is limited by ``setrlimit``
(``RLIMIT_DATA``, the heap and every private mapping): a regression fails here as "out of
memory", it never swaps. The peak is the process image's high-water mark (``VmHWM``).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from conftest import run_cli
from relinkkit import CWD, plugin_scenario
from safetykit import count, peak_rss_run

from dsh_fork import budget
from dsh_fork import frames as zframes
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import CURRENT_NAME
from dsh_fork.layout import project_key

PROJECT = project_key(CWD)
BUDGET_MB = 100
TIMEOUT = 120
MIB = 1 << 20


def _limit_data() -> None:
    limit = BUDGET_MB * MIB
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def budgeted(*args: str | Path, home: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """The command line under the memory budget; (the run, its peak RSS in MB)."""
    env = {k: v for k, v in os.environ.items() if k != "DSH_HOME"}
    env["HOME"] = str(home)
    return peak_rss_run(args, limit=_limit_data, timeout=TIMEOUT, env=env)


def frame_of(pieces: int, piece: bytes) -> bytes:
    """One checksummed frame of ``piece`` repeated ``pieces`` times, compressed as it is fed
    (the test never holds the plaintext)."""
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True).compressobj()
    out = [compressor.compress(piece) for _ in range(pieces)]
    out.append(compressor.flush())
    return b"".join(out)


def session(root: Path, sid: str, clock: Clock) -> tuple[Path, int]:
    """A small valid session ``sid``: its log and the seq its next event takes."""
    spec = SessionSpec(id=sid, created_at=clock(), cwd=CWD)
    spec.turn(clock)
    spec.publish(root)
    return root / PROJECT / sid / CURRENT_NAME, spec.seq


def append(log: Path, *frames: bytes) -> None:
    with log.open("ab") as out:
        for frame in frames:
            out.write(frame)


# -- the hostile inputs of the table ------------------------------------------------------------


def big_record(root: Path, clock: Clock) -> str:
    """Row 4: one 224 MiB record spread over 7 frames of 32 MiB (22 KB on disk)."""
    log, seq = session(root, "hostile", clock)
    head = b'{"type":"message","seq":%d,"time":1,"data":"' % seq
    frames = [frame_of(32, b"a" * MIB) for _ in range(7)]
    append(log, zframes.encode(head), *frames, zframes.encode(b'"}\n'))
    return "hostile"


def spread_record(root: Path, clock: Clock) -> str:
    """A 20 MiB record over 5 frames of 4 MiB: each frame within its cap, the record not."""
    log, seq = session(root, "hostile", clock)
    head = b'{"type":"message","seq":%d,"time":1,"data":"' % seq
    append(log, zframes.encode(head), *[frame_of(4, b"a" * MIB) for _ in range(5)])
    append(log, zframes.encode(b'"}\n'))
    return "hostile"


def sparse_subagent(root: Path, clock: Clock) -> str:
    """Row 5: a subagent's log with a sparse hole to 20 GB (no disk used)."""
    log = root / PROJECT / "a-child-02" / CURRENT_NAME
    os.truncate(log, 20 << 30)
    return "a-child-02"


def sparse_torn(root: Path, clock: Clock) -> str:
    """A torn frame header, then a sparse hole of 20 GB: zero bytes read as empty blocks."""
    log = root / PROJECT / "a-child-02" / CURRENT_NAME
    append(log, zframes._MAGIC_BYTES + b"\x00" + bytes([(20 - 10) << 3]))
    os.truncate(log, 20 << 30)
    return "a-child-02"


def braces(root: Path, clock: Clock) -> str:
    """Row 6: one event holding 21 million ``{}`` (63 MB of plaintext from 6 KB)."""
    log, seq = session(root, "hostile", clock)
    head = b'{"type":"message","seq":%d,"time":1,"data":[' % seq
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True).compressobj()
    parts = [compressor.compress(head)]
    parts += [compressor.compress(b"{}," * 1_000_000) for _ in range(21)]
    parts += [compressor.compress(b"{}]}\n"), compressor.flush()]
    append(log, b"".join(parts))
    return "hostile"


def values(root: Path, clock: Clock) -> str:
    """Row 6 within the frame's cap: 5 million ``{}`` in one line of 15 MB."""
    log, seq = session(root, "hostile", clock)
    line = b'{"type":"message","seq":%d,"time":1,"data":[' % seq + b"{}," * 5_000_000 + b"{}]}\n"
    append(log, zframes.encode(line))
    return "hostile"


def empty_lines(root: Path, clock: Clock) -> str:
    """A frame of 15 MiB of empty lines: 15 million list entries if split at once."""
    log = root / PROJECT / "a-child-01" / CURRENT_NAME
    append(log, frame_of(15, b"\n" * MIB))
    return "a-child-01"


def rle_bomb(root: Path, clock: Clock) -> str:
    """Row 18: a 33 KB frame of RLE blocks claiming 1 GiB, in a subagent."""
    blocks = 8192
    window = bytes([(20 - 10) << 3])
    block = ((128 * 1024) << 3) | (1 << 1)
    body = b"".join((block | (k == blocks - 1)).to_bytes(3, "little") + b"a" for k in range(blocks))
    append(
        root / PROJECT / "a-child-03" / CURRENT_NAME, zframes._MAGIC_BYTES + b"\0" + window + body
    )
    return "a-child-03"


INPUTS: dict[str, tuple[Callable[[Path, Clock], str], str]] = {
    "224 MiB record over 7 frames": (big_record, "16 MiB a frame"),
    "20 MiB record over 5 frames": (spread_record, "16 MiB a record"),
    "sparse 20 GB subagent log": (sparse_subagent, "bad frame magic"),
    "torn frame then a 20 GB hole": (sparse_torn, "frame longer than"),
    "21 million {} in one event": (braces, "16 MiB a frame"),
    "5 million {} in one line": (values, "250,000 JSON values a record"),
    "15 MiB of empty lines": (empty_lines, "empty line"),
    "1 GiB RLE bomb": (rle_bomb, "16 MiB a frame"),
}


def commands(out: Path) -> dict[str, list[str]]:
    return {
        "list": ["list"],
        "doctor": ["doctor"],
        "tree": ["tree"],
        "du": ["du"],
        "list-agents": ["list-agents", "session-P_A", "--recursive"],
        "export": ["export", "session-P_A", "-o", str(out / "family.tar.zst")],
        "fork": ["fork", "session-P_A", "--id", "session-forked"],
        "relink --all": ["relink", "--all"],
        "inspect": ["inspect", "session-P_A"],
    }


@pytest.mark.parametrize("name", list(INPUTS))
def test_every_command_stays_within_the_memory_budget_on_every_hostile_log(
    root: Path, tmp_path: Path, name: str
) -> None:
    build, refusal = INPUTS[name]
    plugin_scenario(root, Clock(), children=3)
    hostile = build(root, Clock(50_000))
    home = root.parent
    peaks: dict[str, float] = {}
    for command, args in {
        **commands(tmp_path),
        "inspect the hostile log": ["inspect", hostile],
        "fork the hostile log": ["fork", hostile, "--id", "session-own", "--no-agents"],
    }.items():
        done, peaks[command] = budgeted("--root", root, *args, home=home)
        said = done.stdout + done.stderr
        assert done.returncode in (0, 9, 10), (command, done.returncode, said)
        assert "out of memory" not in said and "Traceback" not in said, (command, said)
        if command in ("inspect the hostile log", "fork the hostile log"):
            assert done.returncode == 9, (command, said)
            errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
            assert len(errors) == 1 and refusal in errors[0], (command, said)
            if "cap" in refusal:
                assert "too large" in errors[0]
    assert max(peaks.values()) < BUDGET_MB, peaks
    print(f"peak RSS on {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()) + " MB")
    count(f"hostile logs under the {BUDGET_MB} MB budget (commands run)", len(peaks))


def test_a_list_names_the_sessions_it_refused_as_too_large(root: Path, tmp_path: Path) -> None:
    plugin_scenario(root, Clock(), children=3)
    spread_record(root, Clock(50_000))
    home = root.parent

    done, peak = budgeted("--root", root, "list", "--json", home=home)

    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row for row in json.loads(done.stdout)["sessions"]}
    error: dict[str, Any] = rows["hostile"]["error"]
    assert error["code"] == "CORRUPT_LOG" and "too large" in error["message"], error
    assert peak < BUDGET_MB


def test_the_budget_counts_values_outside_strings_only() -> None:
    assert budget.json_values(b"[1,2,3]") == 4
    commas = b'{"text":"' + b"a, b: [c] {d}" * 100_000 + b'"}'
    assert budget.line_problem(commas) is None  # 1.3 MB of prose: two values
    many = b"[" + b"{}," * 300_000 + b"{}]"
    problem = budget.line_problem(many)
    assert problem is not None and "too large" in problem and "250,000 JSON values" in problem
    keys = b"{" + b",".join(b'"k%d":0' % k for k in range(130_000)) + b"}"
    assert budget.json_values(keys) > budget.MAX_JSON_VALUES  # a key and a value each
    assert budget.line_problem(b"x" * (budget.MAX_RECORD_BYTES + 1)) is not None


def test_a_log_above_the_whole_read_is_read_in_windows_with_the_same_answers(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every log above ``MAX_WHOLE_READ`` is read from its descriptor in windows: with the
    bound lowered to one byte every command gives the answer of the whole read, and an append
    (relink) goes after the bytes read, not at offset 0."""
    plugin_scenario(root, Clock(), children=3)
    reads = [
        ("list", "--json"),
        ("du", "--json"),
        ("tree", "--json"),
        ("inspect", "session-P_A", "--json"),
        ("inspect", "a-child-02", "--json"),
        ("list-agents", "session-P_A", "--recursive", "--json"),
        ("doctor", "--json"),
    ]
    whole = [run_cli("--root", root, *args) for args in reads]
    exported = run_cli("--root", root, "export", "session-P_A", "-o", tmp_path / "a.tar", "--json")
    monkeypatch.setattr(budget, "MAX_WHOLE_READ", 1)

    windowed = [run_cli("--root", root, *args) for args in reads]
    exported_again = run_cli(
        "--root", root, "export", "session-P_A", "-o", tmp_path / "b.tar", "--json"
    )
    relinked = run_cli("--root", root, "relink", "session-C_A", "--json")

    for args, a, b in zip(reads, whole, windowed, strict=True):
        assert (a.exit_code, a.stdout) == (b.exit_code, b.stdout), args
    assert exported.exit_code == exported_again.exit_code == 0, exported_again.stderr
    assert exported.json()["manifest"]["sessions"] == exported_again.json()["manifest"]["sessions"]
    assert relinked.exit_code == 0, relinked.stderr
    monkeypatch.undo()
    assert run_cli("--root", root, "doctor").exit_code == 0
