"""The envelope check of copied lines: the msgspec form and the orjson form give one verdict.

A fork copies only lines DSH accepts (issue "Safe on a hostile or busy root"); the fast form
must never accept a line the orjson form refuses, nor read a different seq or type. Each case
is judged both ways, the second with the msgspec form switched off.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hypothesis_profiles  # noqa: F401  (registers and loads the Hypothesis profile)
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_fork import envelopes
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.reader import current_generation, open_log

WANTED = frozenset(("agent-preset/selected", "a", "user/message"))


@contextmanager
def orjson_form_only() -> Iterator[None]:
    """Every line takes the orjson form, as the lines of a short frame do."""
    saved = envelopes._fast
    envelopes._fast = (None, ())
    try:
        yield
    finally:
        envelopes._fast = saved


@contextmanager
def fast_form_for_any_length() -> Iterator[None]:
    saved = envelopes.FAST_MIN_LINES
    envelopes.FAST_MIN_LINES = 1
    try:
        yield
    finally:
        envelopes.FAST_MIN_LINES = saved


def both(lines: list[bytes]) -> tuple[object, object]:
    with fast_form_for_any_length():
        fast = envelopes.checked_run(lines, WANTED)
    with orjson_form_only():
        slow = envelopes.checked_run(lines, WANTED)
    return fast, slow


def line(rest: bytes = b"", seq: bytes = b"0", kind: bytes = b'"a"') -> bytes:
    return b'{"type":' + kind + b',"seq":' + seq + rest + b"}"


DEEP = b"[" * 1023 + b"]" * 1023
CASES = [
    line(),
    b' {"type":"a","seq":0}\t\r',
    line(b',"seq":5'),
    b'{"seq":5,"type":"a","seq":0}',
    b'{"type":"a","type":"b","seq":0}',
    b'{"type":1,"type":"b","seq":0}',
    b'{"type":"b","type":1,"seq":0}',
    b'{"type":"a","\\u0074ype":1,"seq":0}',
    b'{"\\u0074ype":"b","seq":0}',
    line(b',"\\u0073eq":3'),
    line(seq=b"0.0"),
    line(seq=b"-0"),
    line(seq=b"1e0"),
    line(seq=b"-1"),
    line(seq=b"true"),
    line(seq=b'"0"'),
    line(seq=b"9007199254740992"),
    line(seq=b"18446744073709551616"),
    line(kind=b'"a\xff"'),
    line(kind=b'"\\ud800"'),
    line(kind=b'"a\x01"'),
    line(b',"x":NaN'),
    line(b',"x":Infinity'),
    line(b',"x":"\x01"'),
    line(b',"x":"\x00"'),
    line() + b" x",
    line() + b"{}",
    line() + b"\x00",
    line(b',"x":01'),
    line(b',"x":1.'),
    line(b',"x":.5'),
    line(b',"x":"\\ud800"'),
    line(b',"x":"\\uDD1E\\uD834"'),
    line(b',"x":"\xff"'),
    line(b',"x":"\xed\xa0\x80"'),
    line(b',"x":123456789012345678901234567890'),
    line(b',"x":1e400'),
    line(b',"x":[1,]'),
    line(b","),
    line(b',"x":"\\x"'),
    line(b',"x":"\\u00"'),
    line(b',"x":tru'),
    line(b',"x":[1 2]'),
    line(b',"x":{"a" 1}'),
    line(b',"\x01":1'),
    b"\xef\xbb\xbf" + line(),
    b"\x0c" + line(),
    b"",
    b"   ",
    b"[]",
    b'"text"',
    line(b',"x":' + DEEP),
    line(b',"x":' + DEEP[1:-1]),
    line(b',"x":' + b"[" * 990 + b"]" * 990),
    line(b',"x":' + b"[" * 2000 + b"]" * 2000),
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_each_line_gets_one_verdict_either_way(case: bytes) -> None:
    fast, slow = both([case])
    assert fast == slow


def test_a_dense_run_is_accepted_with_its_types() -> None:
    lines = [line(seq=b"7", kind=b'"x"'), line(seq=b"8", kind=b'"agent-preset\\/selected"')]
    assert both(lines) == ((7, [1]),) * 2


@pytest.mark.parametrize("seqs", [[0, 2], [1, 0], [3, 3], [0, 1, 1]])
def test_seqs_that_are_not_dense_are_refused_either_way(seqs: list[int]) -> None:
    lines = [line(seq=str(s).encode()) for s in seqs]
    assert both(lines) == (None, None)


def test_one_refused_line_refuses_the_frame_either_way() -> None:
    lines = [line(seq=b"0"), line(b',"x":"\\ud800"', seq=b"1"), line(b",", seq=b"2")]
    assert both(lines) == (None, None)


def valid_lines(count: int) -> list[bytes]:
    return [
        orjson.dumps({"type": "user/message", "seq": k, "time": k, "data": {"text": f"é {k}"}})
        for k in range(count)
    ]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 4),
            st.integers(0, 80),
            st.binary(max_size=6).filter(lambda b: b"\n" not in b),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_damaged_lines_get_one_verdict_either_way(edits: list[tuple[int, int, bytes]]) -> None:
    lines = valid_lines(5)
    for which, at, new in edits:
        old = lines[which]
        lines[which] = old[:at] + new + old[at + len(new) :]
    fast, slow = both(lines)
    assert fast == slow


def test_an_index_is_the_same_with_the_orjson_form_alone(tmp_path: Path) -> None:
    clock = Clock()
    spec = SessionSpec(id="s", created_at=clock(), cwd="/p")
    for k in range(30):
        spec.turn(clock, f"turn {k} " + "word " * 40)
        spec.batches.append(spec.seq)
    session_dir = spec.publish(tmp_path, frame_target=4096)
    generation = current_generation(session_dir)
    assert generation is not None
    with fast_form_for_any_length():
        fast = open_log(generation, collect=["turn/start"])
    with orjson_form_only():
        slow = open_log(generation, collect=["turn/start"])
    assert len(fast.chunks) > 3
    assert fast.chunks == slow.chunks
    assert [ev.raw for ev in fast.collected] == [ev.raw for ev in slow.collected]
    assert len(fast.collected) == 30


def test_nesting_near_a_raised_recursion_limit_gets_one_verdict_either_way() -> None:
    """msgspec's nesting bound is the interpreter's recursion limit, orjson's a fixed 1024
    levels: with the limit raised, every depth around it still gets the orjson form's verdict."""
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(1500)
    try:
        for depth in range(1380, 1500):
            deep = line(b',"x":' + b"[" * depth + b"]" * depth)
            fast, slow = both([deep])
            assert fast == slow, depth
    finally:
        sys.setrecursionlimit(saved)


def test_the_record_budget_holds_when_the_size_the_lines_came_from_is_given() -> None:
    """A frame's plaintext under ``CHECK_MIN_BYTES`` cannot hold a line over the budget, so
    its lines' lengths are not looked at; a larger one is still held to the budget."""
    from dsh_fork.budget import CHECK_MIN_BYTES

    values = b"[" + b",".join([b"0"] * (CHECK_MIN_BYTES // 2 + 1)) + b"]"
    big = line(b',"x":' + values, seq=b"1")
    lines = [line(), big]
    size = sum(map(len, lines)) + len(lines)

    with fast_form_for_any_length():
        assert envelopes.checked_run(lines, WANTED) is None
        assert envelopes.checked_run(lines, WANTED, size=size) is None
        assert envelopes.checked_run([line(), line(seq=b"1")], WANTED, size=40) == (0, [0, 1])
