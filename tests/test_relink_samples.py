"""relink on a DSH home written by an independent implementation (``shared/samples``)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
from conftest import SAMPLES, log_lines, require_samples, run_cli, tree_digest
from relinkkit import assert_clean, own_catalog

from dsh_fork.discovery import Root
from dsh_fork.generations import CURRENT_NAME

require_samples()
FACTS: dict[str, Any] = orjson.loads((SAMPLES / "facts.json").read_bytes())
EXPECTED = FACTS["relinkOfFork"]
FORK = EXPECTED["forkChild"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_relink_of_the_sample_fork_copies_exactly_the_branch(samples_root: Path) -> None:
    originals = {
        key: sha(samples_root.parent / info["dir"] / CURRENT_NAME)
        for key, info in FACTS["sessions"].items()
        if info["id"] != FORK
    }

    result = run_cli("relink", FORK, "--root", samples_root, "--json")

    assert result.exit_code == 0, result.stderr
    summary = result.json()
    top = [c for c in summary["copied"] if c["parent"] == FORK]
    assert sorted(c["source"] for c in top) == sorted(EXPECTED["belongs"])
    assert summary["unrelated"] == EXPECTED["unrelated"]
    nested = [c for c in summary["copied"] if c["parent"] != FORK]
    for parent_source, grandchildren in EXPECTED["grandchildren"].items():
        parent_copy = next(c["copy"] for c in top if c["source"] == parent_source)
        assert [(c["source"], c["parent"], c["depth"]) for c in nested] == [
            (g, parent_copy, 2) for g in grandchildren
        ]
    assert summary["skipped"] == summary["failed"] == summary["uncatalogable"] == []

    facts = own_catalog(Root(samples_root).find(FORK) / CURRENT_NAME)
    assert sorted(f["childId"] for f in facts) == sorted(c["copy"] for c in top)
    for key, digest in originals.items():
        info = FACTS["sessions"][key]
        assert sha(samples_root.parent / info["dir"] / CURRENT_NAME) == digest, key
    assert_clean(samples_root)

    # Each copy's inherited prefix is its source's log through its last turn/end, verbatim.
    for item in summary["copied"]:
        source = next(i for i in FACTS["sessions"].values() if i["id"] == item["source"])
        last = source["turnEnds"][-1]
        source_lines = log_lines(samples_root.parent / source["dir"] / CURRENT_NAME)[1:]
        copy_lines = log_lines(Root(samples_root).find(item["copy"]) / CURRENT_NAME)[1:]
        assert copy_lines[: last + 1] == source_lines[: last + 1]

    before = tree_digest(samples_root)
    again = run_cli("relink", FORK, "--root", samples_root, "--json")
    assert again.exit_code == 0 and again.json()["copied"] == []
    assert tree_digest(samples_root) == before


def test_list_agents_of_the_relinked_sample_fork(samples_root: Path) -> None:
    relinked = run_cli("relink", FORK, "--root", samples_root, "--json").json()

    result = run_cli("list-agents", FORK, "--root", samples_root, "--recursive", "--json")

    assert result.exit_code == 0, result.stderr
    tree = result.json()
    copy_of = {c["copy"]: c["source"] for c in relinked["copied"]}
    rows = tree["children"]
    assert sorted(r["id"] for r in rows) == sorted(
        c["copy"] for c in relinked["copied"] if c["parent"] == FORK
    )
    for row in rows:
        assert row["onDisk"] and row["inPanel"] and row["flags"] == []
        assert row["copyOf"] == copy_of[row["id"]]
        assert row["status"] == "idle"
    nested = [child for row in rows for child in row["children"]]
    assert [copy_of[n["id"]] for n in nested] == EXPECTED["grandchildren"][
        next(iter(EXPECTED["grandchildren"]))
    ]
    assert all(n["copyOf"] == copy_of[n["id"]] for n in nested)
