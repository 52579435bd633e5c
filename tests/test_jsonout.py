"""The ``--json`` writer writes a document's long lists a chunk at a time, and the bytes are
those of the whole document encoded at once (``cli/jsonout``)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from lineagekit import generate_oddities

from dsh_fork.cli import jsonout
from dsh_fork.discovery import Root
from dsh_fork.du import disk_usage_of
from dsh_fork.fixtureroot import generate
from dsh_fork.inspect import inspect_arg
from dsh_fork.lineage import lineage_of
from dsh_fork.listing import list_sessions
from dsh_fork.results import Result, Rows, document


def whole(value: Any) -> bytes:
    """The document encoded at once, every ``Rows`` as its list."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2, default=Rows.listed) + b"\n"


def written(value: Any) -> bytes:
    out = io.BytesIO()
    jsonout.write_document(value, out)
    return out.getvalue()


def item(n: int) -> dict[str, Any]:
    return {"n": n, "name": f"s-{n}", "empty": [], "none": {}, "nested": {"list": [n, [n]]}}


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonout, "CHUNK", 3)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 6, 7, 10])
def test_rows_anywhere_in_a_document_are_written_as_the_whole_encoding(count: int) -> None:
    rows = Rows(list(range(count)), item)
    doc = {
        "first": Rows(list(range(count)), item),
        "scalar": 1,
        "middle": rows,
        "plain": [item(1)],
        "strings": Rows(["a", "é", "\u2028"] * count, str.upper),
        "nested": {"below": Rows([1, 2, 3, 4], item)},  # below the top: written whole
        "last": Rows(list(range(count)), item),
    }
    data = written(doc)
    assert data == whole(doc)
    assert orjson.loads(data)["middle"] == [item(n) for n in range(count)]


@pytest.mark.usefixtures("small_chunks")
def test_a_chunk_orjson_refuses_is_written_by_json_and_reads_the_same() -> None:
    names = [f"s-{n}" for n in range(8)]
    names[4] = "lone \ud800"  # orjson refuses a lone surrogate
    doc = {"a": 1, "rows": Rows(names, lambda name: {"name": name}), "z": [2]}
    data = written(doc)
    assert json.loads(data) == {"a": 1, "rows": [{"name": n} for n in names], "z": [2]}
    assert b'"lone \\ud800"' in data
    assert data.count(b"\\ud800") == 1  # only the chunk that needed it is escaped


@pytest.mark.usefixtures("small_chunks")
def test_a_document_orjson_refuses_outside_its_rows_is_written_whole_by_json() -> None:
    doc = {"root": "lone \udfff", "rows": Rows([1, 2, 3, 4], item)}
    data = written(doc)
    assert json.loads(data) == {"root": "lone \udfff", "rows": [item(n) for n in (1, 2, 3, 4)]}
    assert data == json.dumps(json.loads(data), indent=2, ensure_ascii=True).encode() + b"\n"


def test_a_placeholder_the_document_already_holds_falls_back_to_the_whole_encoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "urandom", bytes)  # every placeholder is "rows:00…00"
    doc = {"name": "rows:" + "00" * 16, "rows": Rows([1, 2], item)}
    assert written(doc) == whole(doc)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(json_values, max_size=9),
    before=st.dictionaries(st.text(max_size=4), json_values, max_size=3),
    chunk=st.integers(1, 4),
)
def test_any_rows_are_written_as_the_whole_encoding(
    items: list[Any], before: dict[str, Any], chunk: int
) -> None:
    doc = {**before, "\u0000rows": Rows(items, lambda value: value), "after": True}
    old = jsonout.CHUNK
    jsonout.CHUNK = chunk
    try:
        try:
            expected = whole(doc)
        except TypeError:  # a lone surrogate: the values, not the bytes, are the contract
            assert json.loads(written(doc)) == {**before, "\u0000rows": items, "after": True}
            return
        assert written(doc) == expected
    finally:
        jsonout.CHUNK = old


@pytest.fixture(scope="module")
def odd_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jsonout") / "sessions"
    generate_oddities(root)
    return root


@pytest.mark.usefixtures("small_chunks")
def test_inspects_event_and_turn_lists_are_the_whole_encoding(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    summary = generate(root, sessions=1, agents=0, depth=0, turns=4)
    top = summary.top_level[0]
    result = run_cli("--root", root, "inspect", top, "--events", "--turns", "--json")
    doc = document(inspect_arg(top, str(root), events=True, turns=True))
    assert len(doc["eventList"]) > 2 * jsonout.CHUNK and len(doc["turnList"]) == 4
    assert result.stdout.encode() == whole(doc)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("command", ["tree", "du", "list"])
def test_the_commands_documents_are_the_whole_encoding_of_their_results(
    odd_root: Path, command: str
) -> None:
    """tree, du and list print in chunks exactly what encoding their result at once gives."""
    result = run_cli("--root", odd_root, command, "--json")
    scope = Root(odd_root)
    made: Result
    if command == "tree":
        made = lineage_of(scope, session=None)
    elif command == "du":
        made = disk_usage_of(scope)
    else:
        made = list_sessions(scope)
    doc = document(made)
    assert len(doc["sessions" if command != "tree" else "nodes"]) > 2 * jsonout.CHUNK
    assert result.stdout.encode() == whole(doc)
