"""Logs DSH refuses, for the tests of salvage and of every reader: ``damage`` appends a defect,
then a whole turn after it, to a log the fixtures wrote.
"""

from __future__ import annotations

from pathlib import Path

from . import frames as zframes
from .errors import UsageError
from .fixtures import Clock, SessionSpec

DAMAGES = ("gap", "repeat", "restart", "tear", "bad-line", "bad-frame", "open-turn")
"""What ``damage`` appends: a seq gap, a seq repeated, a second writer's seqs from 0, a record
torn mid-log, a line that is not JSON, a frame that does not decode, and (``open-turn``) a
turn left open before a seq gap."""


def damage(log: Path, kind: str, clock: Clock) -> int:
    """Append to the v4 zstd log ``log`` a defect DSH refuses, then a whole turn after it (so
    readable-looking events lie beyond the defect); returns how many events DSH would read
    before the defect. The log's own bytes are kept: frames are only appended."""
    if kind not in DAMAGES:
        raise UsageError(f"unknown damage {kind!r}; choose from {', '.join(DAMAGES)}")
    data = log.read_bytes()
    scan = zframes.scan(data)
    plaintexts = zframes.decode_all(data, scan.frames[1:], 1)
    lines = b"".join(plaintexts).splitlines()
    count = len(lines)
    turn = 1 + sum(1 for line in lines if b'"type":"turn/start"' in line)

    def whole_turn(first_seq: int, number: int) -> bytes:
        spec = SessionSpec(id="damage", created_at=0)
        spec.lines = [b""] * first_seq
        spec.turns = number - 1
        spec.turn(clock, f"after the {kind}")
        return b"".join(spec.lines[first_seq:])

    frames: list[bytes] = []
    good = count
    if kind == "gap":
        frames.append(whole_turn(count + 3, turn))
    elif kind == "repeat":
        frames.append(whole_turn(count - 1, turn))
    elif kind == "restart":
        frames.append(whole_turn(0, 1))
    elif kind == "tear":
        torn = whole_turn(count, turn)[: len(whole_turn(count, turn)) // 3]
        frames += [torn, whole_turn(count, turn)]
        good = count + torn.count(b"\n")  # its whole lines read, the torn one joins the next
    elif kind == "bad-line":
        start = whole_turn(count, turn)
        first = start.split(b"\n", 1)[0] + b"\n"
        frames.append(first + b"{not json\n" + start[len(first) :])
        good = count + 1
    elif kind == "open-turn":
        opened = SessionSpec(id="damage", created_at=0)
        opened.lines = [b""] * count
        opened.turns = turn - 1
        opened.open_turn(clock, "left open")
        frames.append(b"".join(opened.lines[count:]))
        good = opened.seq
        frames.append(whole_turn(good + 2, turn + 1))
    encoded = [zframes.encode(frame) for frame in frames]
    if kind == "bad-frame":
        frame = bytearray(zframes.encode(whole_turn(count, turn)))
        frame[-1] ^= 0xFF  # its content checksum no longer matches
        encoded = [bytes(frame), zframes.encode(whole_turn(count, turn))]
    with open(log, "ab") as handle:
        handle.write(b"".join(encoded))
    return good
