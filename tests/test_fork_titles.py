"""Fork titles (dsh-world §2): the child is titled as DSH's fork buttons title it.

The rule: the source's latest ``session/title`` of its whole log, increased ("X" → "X (1)",
"X (1)" → "X (2)", "X（9）" → "X（10）"), normalised as DSH saves titles, appended to the child as
a user's title after the end-seed marker. ``--title`` names the child, ``--keep-title`` adds
nothing. Each turn of ``SessionSpec.turn`` is six events, so two turns end at seqs 5 and 11.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hypothesis_profiles  # noqa: F401  (registers and loads the Hypothesis profile)
import orjson
import pytest
from conftest import log_events, log_lines, run_cli, tree_digest
from hypothesis import given
from hypothesis import strategies as st
from schemakit import check

from dsh_fork import titles
from dsh_fork.errors import UsageError
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.fork import ForkOptions, ForkResult, fork_session
from dsh_fork.generations import list_generations, select
from dsh_fork.reader import open_log
from dsh_fork.sessionlog import FramedLog
from dsh_fork.validation import validate_dir

SRC = "session-source"
NOW = 1_800_000_000_000


def titled(clock: Clock, *names: str, after: int = 2) -> SessionSpec:
    """Two turns; the titles ``names`` in order after turn ``after`` (1, or 2: the end)."""
    spec = SessionSpec(id=SRC, created_at=clock(), cwd="/home/u/proj")
    for turn in (1, 2):
        spec.turn(clock)
        if turn == after:
            for name in names:
                spec.title(clock, name)
        spec.flush()
    return spec


def fork(root: Path, **options: Any) -> ForkResult:
    choices = ForkOptions(child_id="child", agents=False, **options)
    return fork_session(SRC, str(root), choices, clock=lambda: NOW)


def title_event(seq: int, title: str) -> dict[str, Any]:
    data = {"title": title, "messageSeqs": [], "source": {"kind": "user"}}
    return {"type": "session/title", "seq": seq, "time": NOW, "data": data}


def child_tail(result: ForkResult) -> list[dict[str, Any]]:
    """The child's events from its end-seed marker on."""
    assert result.path is not None and result.child.boundary is not None
    return log_events(result.path)[result.child.boundary + 1 :]


# -- DSH's increase rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "child"),
    [
        ("X", "X (1)"),
        ("X (1)", "X (2)"),
        ("X (3)", "X (4)"),
        ("X(9)", "X(10)"),
        ("X（9）", "X（10）"),
        ("(007)", "(8)"),
        ("Fix (99) parser", "Fix (99) parser (1)"),
        ("a (1)(2)", "a (1)(3)"),
        ("X (1) ", "X (1)  (1)"),  # no full match: a trailing space is part of the title
        ("X (１)", "X (１) (1)"),  # digits are ASCII only, as in JavaScript's [0-9]
        ("X （2)", "X （2) (1)"),  # mixed brackets match neither form
        ("two\nlines (4)", "two\nlines (4) (1)"),  # JavaScript's "." stops at a line end
        ("()", "() (1)"),
        ("(" + "9" * 5000 + ")", "(1" + "0" * 5000 + ")"),  # arbitrary precision
        ("(000)", "(1)"),
    ],
)
def test_the_increase_rule_is_dsh_s(source: str, child: str) -> None:
    assert titles.increased(source) == child


@pytest.mark.parametrize(
    ("raw", "saved"),
    [
        ("  Fix \t the\n\nparser  ", "Fix the parser"),
        ("\x1b[31mred\x1b[0m title", "red title"),
        ("\x1b]0;window name\x07kept", "kept"),
        ("\x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("left\x1b]0;never terminated", "left"),
        ("a\x00b\x07c\x7fd\x85e\x9ff", "abcdef"),  # C0, DEL and C1 controls
        ("a\x9b31mb", "ab"),  # the one-byte CSI
        ("\u202eevil\u202c \u200bhidden\ufeff", "evil hidden"),
        ("no\u00a0break\u3000wide", "no break wide"),
        ("\x1bZx", "x"),
        ("\u2028\u2029", ""),
    ],
)
def test_titles_are_normalised_as_dsh_saves_them(raw: str, saved: str) -> None:
    assert titles.normalized(raw) == saved


def by_the_patterns(text: str) -> str:
    """``normalized`` by DSH's patterns alone, without the shortcut for plain ASCII."""
    for pattern in titles._STRIPPED:
        text = re.sub(pattern, "", text)
    text = re.sub(titles._SPACES, " ", text).strip(" ")
    return titles._cut(text, titles.MAX_TITLE_BYTES).rstrip(" ")


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=120))
def test_a_plain_ascii_title_is_normalised_as_the_patterns_normalise_it(text: str) -> None:
    """Printable ASCII holds no escape, control or invisible character, and no whitespace but
    the space: its words joined by single spaces are what DSH's patterns leave of it."""
    assert titles.normalized(text) == by_the_patterns(text)
    assert titles.normalized(f"  {text}   {text} ") == by_the_patterns(f"  {text}   {text} ")


def test_a_long_title_is_cut_to_80_bytes_on_a_code_point() -> None:
    assert titles.normalized("a" * 100) == "a" * 80
    # 26 three-byte characters are 78 bytes; the 27th would cross 80 and is dropped whole
    assert titles.normalized("日" * 30) == "日" * 26
    # the cut may leave a space at the end, which is trimmed
    assert titles.normalized("a" * 79 + " b") == "a" * 79
    # the increase comes first: a title near the limit loses its " (1)", as in DSH
    assert titles.normalized(titles.increased("x" * 78)) == "x" * 78 + " ("


# -- the child's title event ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "child"),
    [("X", "X (1)"), ("X (1)", "X (2)"), ("X（9）", "X（10）"), ("(007)", "(8)")],
)
def test_the_child_gets_the_increased_title_after_its_marker(
    root: Path, clock: Clock, source: str, child: str
) -> None:
    spec = titled(clock, source)
    spec.publish(root)
    source_lines = spec.lines

    result = fork(root)

    assert result.path is not None
    lines = log_lines(result.path)[1:]
    assert lines[:13] == [line.rstrip(b"\n") for line in source_lines]  # bytes as they were
    marker_time = orjson.loads(source_lines[12])["time"]
    assert child_tail(result) == [
        {"type": "session/end-seed", "seq": 13, "time": marker_time, "data": {"inherited": True}},
        title_event(14, child),
    ]
    assert (result.child.title, result.child.source_title) == (child, source)
    assert [f for f in validate_dir(result.path.parent) if f.severity == "error"] == []


def test_the_latest_title_of_the_whole_log_counts_not_the_prefix_s(
    root: Path, clock: Clock
) -> None:
    spec = titled(clock, "first", "second")
    spec.publish(root)

    result = fork(root, at=5)  # the first turn's end: neither title is in the prefix

    assert child_tail(result)[1:] == [title_event(7, "second (1)")]


def test_the_latest_title_is_found_frames_before_the_end(root: Path, clock: Clock) -> None:
    titled(clock, "old", "newer", after=1).publish(root)  # turn 2 is in a frame of its own

    result = fork(root)

    assert result.child.source_title == "newer"
    assert child_tail(result)[1:] == [title_event(15, "newer (1)")]


def test_no_title_in_the_source_means_no_title_event(root: Path, clock: Clock) -> None:
    titled(clock).publish(root)

    result = fork(root)

    assert [e["type"] for e in child_tail(result)] == ["session/end-seed"]
    assert (result.child.title, result.child.source_title) == (None, None)


def test_an_empty_latest_title_means_no_title_event(root: Path, clock: Clock) -> None:
    titled(clock, "named", "").publish(root)

    result = fork(root)

    assert [e["type"] for e in child_tail(result)] == ["session/end-seed"]
    assert result.child.source_title == ""


def test_over_long_and_control_character_titles_are_normalised(root: Path, clock: Clock) -> None:
    titled(clock, "\x1b[1mBold\x1b[0m\tplan \u202e" + "é" * 60).publish(root)

    result = fork(root)

    # "Bold plan " is 10 bytes, each é two: 35 fit in the 80, the " (1)" is cut off
    assert child_tail(result)[1:] == [title_event(14, "Bold plan " + "é" * 35)]


def test_title_sets_the_child_s_title_normalised(root: Path, clock: Clock) -> None:
    titled(clock, "X").publish(root)

    result = fork(root, title="  my\tbranch\x1b[0m ")

    assert child_tail(result)[1:] == [title_event(14, "my branch")]
    assert (result.child.title, result.child.source_title) == ("my branch", "X")


def test_title_names_a_child_of_a_source_without_one(root: Path, clock: Clock) -> None:
    titled(clock).publish(root)

    result = fork(root, title="named")

    assert child_tail(result)[1:] == [title_event(13, "named")]


def test_keep_title_adds_no_title_event(root: Path, clock: Clock) -> None:
    titled(clock, "X").publish(root)

    result = fork(root, keep_title=True)

    assert [e["type"] for e in child_tail(result)] == ["session/end-seed"]
    assert (result.child.title, result.child.source_title) == (None, "X")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"title": " \x1b[0m\u200b\t"}, "is empty once normalised"),
        ({"title": "x", "keep_title": True}, "not both"),
    ],
)
def test_a_title_that_cannot_be_saved_is_refused_before_anything_is_written(
    root: Path, clock: Clock, options: dict[str, Any], message: str
) -> None:
    titled(clock, "X").publish(root)
    before = tree_digest(root)

    with pytest.raises(UsageError, match=message):
        fork(root, **options)

    assert tree_digest(root) == before


def test_forking_a_titled_child_again_increases_its_title(root: Path, clock: Clock) -> None:
    titled(clock, "X").publish(root)
    fork(root)

    again = fork_session(
        "child",
        str(root),
        ForkOptions(child_id="grandchild", agents=False),
        clock=lambda: NOW,
    )

    assert again.child.boundary == 14  # the child's title is between turns: a valid boundary
    assert child_tail(again)[1:] == [title_event(16, "X (2)")]


def test_two_forks_of_one_source_get_the_same_title_as_in_dsh(root: Path, clock: Clock) -> None:
    titled(clock, "X").publish(root)

    first = fork(root)
    second = fork_session(
        SRC,
        str(root),
        ForkOptions(child_id="other", agents=False),
        clock=lambda: NOW,
    )

    assert first.child.title == second.child.title == "X (1)"


# -- the command -------------------------------------------------------------------------------


def test_dry_run_shows_the_title_and_writes_nothing(root: Path, clock: Clock) -> None:
    titled(clock, "Fix parser").publish(root)
    before = tree_digest(root)

    text = run_cli("fork", SRC, "--root", root, "--dry-run", "--no-agents")
    document = run_cli("fork", SRC, "--root", root, "--dry-run", "--no-agents", "--json")

    assert text.exit_code == 0 and document.exit_code == 0
    assert '  title: "Fix parser (1)" (the source\'s is "Fix parser")' in text.stdout
    check("fork", orjson.loads(document.stdout))
    child = orjson.loads(document.stdout)["child"]
    assert (child["title"], child["sourceTitle"]) == ("Fix parser (1)", "Fix parser")
    assert tree_digest(root) == before


def test_the_command_reports_the_title_it_gave(root: Path, clock: Clock) -> None:
    titled(clock, "X").publish(root)

    kept = run_cli("fork", SRC, "--root", root, "--no-agents", "--keep-title", "--id", "a")
    named = run_cli("fork", SRC, "--root", root, "--no-agents", "--title", "Y", "--id", "b")
    both = run_cli("fork", SRC, "--root", root, "--title", "Y", "--keep-title", "--json")

    assert kept.exit_code == 0
    assert '  title: none added (--keep-title); the source\'s is "X"' in kept.stdout
    assert named.exit_code == 0
    assert '  title: "Y" (the source\'s is "X")' in named.stdout
    assert both.exit_code == 2
    assert orjson.loads(both.stdout)["error"]["code"] == "USAGE"


def test_a_source_title_holding_controls_is_shown_escaped(root: Path, clock: Clock) -> None:
    titled(clock, "evil\x1b]0;pwned\x07").publish(root)

    result = run_cli("fork", SRC, "--root", root, "--no-agents", "--dry-run")

    assert result.exit_code == 0
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert '  title: "evil (1)" (the source\'s is "evil\\x1b]0;pwned\\x07")' in result.stdout


# -- read once ------------------------------------------------------------------------------------


def test_fork_notes_the_latest_title_in_the_pass_that_reads_the_source(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source's log is read once: the pass that checks every line also notes its last
    title, so a title far from the end does not make the fork decompress the log again."""
    titled(clock, "old", "newer", after=1).publish(root)
    real = FramedLog.last_event

    def no_title_read_back(log: FramedLog, types: Any, through: int) -> Any:
        assert titles.TITLE_TYPE not in set(types), "the title was read back from the end"
        return real(log, types, through)

    monkeypatch.setattr(FramedLog, "last_event", no_title_read_back)
    result = fork(root)

    assert result.child.source_title == "newer"
    assert child_tail(result)[1:] == [title_event(15, "newer (1)")]


@pytest.mark.parametrize("stream", [True, False])
def test_the_noted_title_is_the_one_read_back_from_the_end(tmp_path: Path, stream: bool) -> None:
    """On every log of a root with titles, tool turns, open turns and torn tails, the title
    the opening pass notes is the event a read back from the end finds (or None for both)."""
    root = tmp_path / "sessions"
    generate(root, sessions=3, agents=2, depth=2, turns=3, tools=True, torn_tails=True,
             open_turns=True, legacy=True)  # fmt: skip
    checked = 0
    for session_dir in sorted(root.glob("*/*")):
        generation = select(list_generations(session_dir))
        assert generation is not None
        noted = open_log(generation, stream=stream, latest=[titles.TITLE_TYPE])
        assert titles.TITLE_TYPE in noted.latest_of
        back = open_log(generation).last_event([titles.TITLE_TYPE], noted.event_count - 1)
        assert noted.latest_of[titles.TITLE_TYPE] == back
        checked += back is not None
    assert checked == 3 + 3  # each top-level session and its legacy fork child carry a title
