"""``search``: every planted phrase found once, in the session that said it, at its turn."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import log_events, run_cli, tree_digest
from schemakit import check

from dsh_fork.discovery import Root
from dsh_fork.fixtureroot import generate, planted_phrase
from dsh_fork.fixtures import Clock, SessionSpec
from dsh_fork.generations import list_generations
from dsh_fork.layout import encode_segment, project_dir_name
from dsh_fork.reader import open_log
from dsh_fork.search import Matcher, search
from dsh_fork.turns import turn_containing, turn_summaries

TOPS = 6
TURNS = 3


def said_at(session_dir: Path, phrase: str) -> list[int]:
    """The seqs of the user messages whose text holds ``phrase`` (from the decoded log)."""
    events = log_events(list_generations(session_dir)[-1].path)
    return [
        ev["seq"]
        for ev in events
        if ev["type"] == "user/message" and phrase in ev["data"]["content"][0]["text"]
    ]


def turn_of(session_dir: Path, seq: int) -> int | None:
    """The turn ``inspect --turns`` puts ``seq`` in."""
    log = open_log(list_generations(session_dir)[-1])
    turn = turn_containing(turn_summaries(log), seq)
    return None if turn is None else turn.turn


def hits_of(root: Path, *args: str) -> dict[str, Any]:
    result = run_cli("search", "--root", root, "--json", *args)
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = result.json()
    check("search", data)
    return data


def said(root: Path, clock: Clock, session_id: str, *messages: str, **header: Any) -> None:
    """A session published in ``root`` whose turns say ``messages``."""
    spec = SessionSpec(id=session_id, created_at=clock(), **header)
    for message in messages:
        spec.turn(clock, message)
    spec.publish(root)


@pytest.fixture
def family_root(root: Path) -> Path:
    """Top-level trees with two subagents each, a fork of each top relinked (so every fork
    and every copy holds the phrases of its source in its inherited prefix)."""
    generate(root, sessions=TOPS, agents=2, turns=TURNS, forks=1, relinked=True, phrases=True)
    return root


def test_each_planted_phrase_is_found_once_in_the_session_that_said_it(
    family_root: Path,
) -> None:
    before = tree_digest(family_root)
    summary_root = Root(family_root)
    tops = sorted(
        (e for e in summary_root.entries() if e.parent is None), key=lambda e: e.created_at
    )
    assert len(tops) == TOPS
    for index, top in enumerate(tops):
        kids = summary_root.children_of(top.id or "")
        for path, entry in [("", top), *((str(k + 1), kid) for k, kid in enumerate(kids))]:
            for turn in range(1, TURNS + 1):
                phrase = planted_phrase(index, path, turn)
                data = hits_of(family_root, phrase, "--in", "user")
                assert data["total"] == 1, (phrase, data["hits"])
                (hit,) = data["hits"]
                assert hit["session"] == entry.id
                assert hit["role"] == "user"
                assert hit["inherited"] is False
                assert [hit["seq"]] == said_at(entry.session_dir, phrase)
                assert hit["turn"] == turn == turn_of(entry.session_dir, hit["seq"])
                assert phrase in hit["snippet"]
    assert tree_digest(family_root) == before  # read-only


def test_inherited_shows_the_prefix_hits_of_forks_and_copies_once_more_each(
    family_root: Path,
) -> None:
    phrase = planted_phrase(0, "1", 1)  # said by the first subagent, copied into the fork
    data = hits_of(family_root, phrase, "--inherited", "--in", "user")
    assert data["total"] == 2
    own, copied = sorted(data["hits"], key=lambda h: h["inherited"])
    assert own["inherited"] is False and copied["inherited"] is True
    assert copied["seq"] == own["seq"] and copied["turn"] == own["turn"] == 1
    root = Root(family_root)
    copy = root.entry(copied["session"])
    assert copy is not None and copy.header is not None
    assert copy.header.origin == "subagent" and copy.header.is_seeded


def test_a_fork_whose_source_is_gone_is_searched_whole(family_root: Path) -> None:
    root = Root(family_root)
    top = min((e for e in root.entries() if e.parent is None), key=lambda e: e.created_at)
    (fork,) = root.forks_of(top.id or "")
    shutil.rmtree(top.session_dir)
    data = hits_of(family_root, planted_phrase(0, "", 2), "--in", "user")
    assert [(h["session"], h["inherited"], h["turn"]) for h in data["hits"]] == [(fork.id, True, 2)]


def test_smart_case_and_scopes(root: Path, clock: Clock) -> None:
    spec = SessionSpec(id="session-case", created_at=clock())
    spec.turn(clock, "Deploy the Parser today")
    spec.title(clock, "parser work")
    spec.publish(root)
    assert hits_of(root, "parser")["total"] == 2  # the user message and the title
    assert hits_of(root, "Parser")["total"] == 1
    assert hits_of(root, "PARSER")["total"] == 0
    titles = hits_of(root, "parser", "--in", "title")
    assert [(h["role"], h["turn"]) for h in titles["hits"]] == [("title", 1)]
    assert titles["ignoreCase"] is True
    assert hits_of(root, "Parser", "--in", "title")["total"] == 0


def test_text_is_matched_as_decoded(root: Path, clock: Clock) -> None:
    """Quotes, backslashes and slashes match as typed; a tool call's arguments are JSON text
    decoded once more; a line spelling letters as \\u escapes still matches."""
    spec = SessionSpec(id="session-decoded", created_at=clock())
    spec.turn(clock, 'say "hi" to C:\\temp and a/b')
    spec.tool_turn(clock, "run it", "bash", ['echo "quoted" > out/file'])
    spec.add_raw(
        b'{"type":"session/title","seq":%d,"time":1,"data":{"title":"\\u0065scaped'
        b' \\u00e9t\\u00e9","messageSeqs":[],"source":{"kind":"user"}}}' % spec.seq
    )
    spec.flush()
    spec.publish(root)
    assert hits_of(root, 'say "hi" to C:\\temp and a/b')["total"] == 1
    tool = hits_of(root, 'echo "quoted" > out/file', "--in", "tool")
    events = log_events(list_generations(root / "--fixture-project--" / spec.id)[-1].path)
    kinds = [events[h["seq"]]["type"] for h in tool["hits"]]
    assert kinds == ["assistant/message", "tool/result"]  # the call's arguments, its result
    assert [(h["role"], h["turn"]) for h in tool["hits"]] == [("tool", 2), ("tool", 2)]
    assert hits_of(root, 'echo "quoted"', "--in", "user", "--in", "assistant")["total"] == 0
    assert hits_of(root, "escaped été", "--in", "title")["total"] == 1
    assert hits_of(root, "ESCAPED ÉTÉ", "--in", "title")["total"] == 0  # capitals: exact case
    assert hits_of(root, "escaped ÉTÉ", "--in", "title")["total"] == 0


def test_ignoring_case_takes_the_letters_that_fold_to_ascii(root: Path, clock: Clock) -> None:
    said(root, clock, "session-kelvin", "cooled to 4 \u212aelvin")  # KELVIN SIGN: k ignoring case
    assert hits_of(root, "kelvin")["total"] == 1
    assert hits_of(root, "Kelvin")["total"] == 0


def test_a_regex_and_a_bad_one(root: Path, clock: Clock) -> None:
    said(root, clock, "session-regex", "timeout after 250 ms", "timeout after many ms")
    data = hits_of(root, r"timeout after \d+ ms", "--regex", "--in", "user")
    assert [h["turn"] for h in data["hits"]] == [1]
    bad = run_cli("search", "--root", root, "(", "--regex")
    assert bad.exit_code == 2
    assert "not a regular expression" in bad.stderr
    assert bad.stderr.count("\n") == 1


def test_a_session_that_cannot_be_read_is_named(root: Path, clock: Clock) -> None:
    good = SessionSpec(id="session-good", created_at=clock())
    good.turn(clock, "needle here")
    good.flush()
    good.publish(root)
    bad = SessionSpec(id="session-bad", created_at=clock())
    bad.turn(clock, "needle there")
    bad.add_raw(b'{"type":"turn/start","seq":99,"time":1,"data":{"turn":2}}')  # a seq gap
    bad.flush()
    bad_dir = bad.publish(root)
    data = hits_of(root, "needle")
    assert [h["session"] for h in data["hits"]] == ["session-good"]
    assert [(u["session"], u["code"]) for u in data["unreadable"]] == [
        ("session-bad", "CORRUPT_LOG")
    ]
    assert data["unreadable"][0]["path"] == str(bad_dir)
    text = run_cli("search", "--root", root, "needle")
    assert "1 sessions could not be read" in text.stderr


def test_the_full_read_finds_what_the_quick_pass_finds(root: Path) -> None:
    """A torn tail (kept lines), a record across frames and an older generation take the
    reader's full read; the hits are the same as on the plain shape."""
    generate(root, sessions=2, agents=1, turns=2, torn_tails=True, old_generation=1)
    spec = SessionSpec(id="session-split", created_at=0, cwd="/fixture/split")
    clock = Clock()
    spec.turn(clock, "alpha split across frames")
    spec.flush()
    spec.publish(root)
    log = list_generations(root / project_dir_name(spec.cwd) / encode_segment(spec.id))[-1]
    body = b"".join(spec.lines)
    from dsh_fork import frames as zframes

    header = zframes.encode(spec.header_line())
    log.path.write_bytes(header + zframes.encode(body[:50]) + zframes.encode(body[50:]))
    data = hits_of(root, "alpha")
    assert data["unreadable"] == []
    sessions = {h["session"] for h in data["hits"]}
    assert spec.id in sessions
    expected = set()
    for entry in Root(root).entries():
        events = open_log(entry.generation).events()  # type: ignore[arg-type]
        for ev in events:
            if ev.type == "user/message" and "alpha" in orjson.dumps(ev.data).decode():
                expected.add(entry.id)
    assert sessions >= expected


def test_the_tokens_a_line_must_hold() -> None:
    assert Matcher('say "hi" / there', regex=False).tokens == [b" there", b"\\u"]
    assert Matcher("naïve skip", regex=False).tokens == [
        b"ve skip",
        b"\\u",
        *(c.encode() for c in "\u0130\u0131\u212a\u017f"),
    ]
    assert Matcher("Naïve", regex=False).tokens == ["Naïve".encode(), b"\\u"]
    assert Matcher('"/"', regex=False).tokens is None
    assert Matcher("a.b", regex=True).tokens is None


def test_usage_errors(root: Path, clock: Clock) -> None:
    said(root, clock, "session-x", "x")
    assert run_cli("search", "--root", root, "x", "--in", "nowhere").exit_code == 2
    assert run_cli("search", "--root", root, "").exit_code == 2
    assert run_cli("search", "--root", root / "missing", "x").exit_code == 2
    assert search(Root(root), "x").document.searched == 1


def test_project_and_since_choose_the_sessions_searched(root: Path, clock: Clock) -> None:
    for name, cwd in (("session-here", "/srv/here"), ("session-there", "/srv/there")):
        said(root, clock, name, "shared words", cwd=cwd)
    old = root / project_dir_name("/srv/there") / "session-there"
    for log in old.iterdir():
        os.utime(log, (1_600_000_000, 1_600_000_000))  # 2020: before any --since below
    data = hits_of(root, "shared words", "--project", "/srv/here")
    assert [h["session"] for h in data["hits"]] == ["session-here"]
    assert data["searched"] == 1 and data["filters"]["project"] == "/srv/here"
    data = hits_of(root, "shared words", "--since", "2021-01-01")
    assert [h["session"] for h in data["hits"]] == ["session-here"]
    assert hits_of(root, "shared words")["total"] == 2


def test_limit_lists_the_first_hits_and_counts_them_all(root: Path, clock: Clock) -> None:
    said(root, clock, "session-many", *["again and again"] * 5)
    result = run_cli("search", "--root", root, "again", "--limit", "2", "--json")
    assert result.exit_code == 0
    data = result.json()
    assert [h["turn"] for h in data["hits"]] == [1, 2]
    assert data["total"] == 5 and data["truncated"] is True
    assert "5 hits, the first 2 shown" in result.stderr
