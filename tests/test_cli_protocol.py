"""One result protocol (issue 12): every JSON document against its schema, parser errors as
JSON, a partial result printed in full with the next command, and the exit codes of the
environment (I/O: 11, a closed stdout: 141)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import cli_launcher
import pytest
from conftest import run_cli
from relinkkit import CWD, fork_of, subagent
from schemakit import check, names

from dsh_fork import faults
from dsh_fork.discovery import Root
from dsh_fork.errors import ALL_ERRORS, EXIT_CODES
from dsh_fork.fixtureroot import generate
from dsh_fork.fixtures import Clock, SessionSpec, write_spec_as
from dsh_fork.generations import CURRENT_NAME


@pytest.fixture
def tree(root: Path) -> tuple[Path, str]:
    """A fixture root (one session with a subagent tree two deep) and its top session."""
    summary = generate(root, sessions=1, agents=2, depth=2, turns=2, seed=4)
    return root, summary.top_level[0]


def json_of(*argv: str | Path, code: int = 0) -> dict[str, Any]:
    result = run_cli(*argv, "--json")
    assert result.exit_code == code, result.stdout + result.stderr
    document: dict[str, Any] = result.json()
    return document


def test_every_schema_is_a_valid_json_schema() -> None:
    assert names() == [
        "attach",
        "diff",
        "doctor",
        "du",
        "error",
        "export",
        "fixture",
        "fork",
        "import",
        "inspect",
        "list",
        "list-agents",
        "relink",
        "relink-all",
        "restore",
        "salvage",
        "search",
        "trash",
        "trash-empty",
        "trash-list",
        "tree",
    ]


def test_every_command_prints_a_document_of_its_schema(
    tree: tuple[Path, str], tmp_path: Path
) -> None:
    root, top = tree
    check("fork", json_of("--root", root, "fork", top, "--dry-run"))
    forked = json_of("--root", root, "fork", top, "--id", "kid")
    check("fork", forked)
    assert forked["schemaVersion"] == 1 and forked["child"]["id"] == "kid"
    check("fork", json_of("--root", root, "fork", top, "--id", "bare", "--no-agents"))
    check("relink", json_of("--root", root, "relink", "kid"))
    check("relink-all", json_of("--root", root, "relink", "--all", "--dry-run"))
    check("inspect", json_of("--root", root, "inspect", "kid"))
    check("inspect", json_of("--root", root, "inspect", top, "--events"))
    check("list-agents", json_of("--root", root, "list-agents", "kid", "--recursive"))
    check("doctor", json_of("--root", root, "doctor"))
    check("list", json_of("--root", root, "list"))
    check("attach", json_of("--root", root, "attach", "--all", "--dry-run"))
    check("fixture", json_of("fixture", tmp_path / "new" / "sessions", "--sessions", "1"))


@pytest.fixture
def family(root: Path) -> tuple[Path, str, list[str]]:
    """A fixture root with forks of forks, relinked (copies beside the subagents): its top
    session and its fork children."""
    summary = generate(root, sessions=1, agents=1, turns=2, forks=2, relinked=True, seed=7)
    return root, summary.top_level[0], summary.forks


def test_the_lineage_commands_print_documents_of_their_schemas(
    family: tuple[Path, str, list[str]],
) -> None:
    root, top, forks = family
    prefix = top[: len("session-") + 6]  # SESSION arguments take a unique id prefix

    whole = json_of("--root", root, "tree")
    one = json_of("--root", root, "tree", prefix)
    usage = json_of("--root", root, "du")
    top_one = json_of("--root", root, "du", prefix, "--top", "1")
    compared = json_of("--root", root, "diff", prefix, forks[0])
    turns = json_of("--root", root, "inspect", prefix, "--turns")

    for name, document in [
        ("tree", whole),
        ("tree", one),
        ("du", usage),
        ("du", top_one),
        ("diff", compared),
        ("inspect", turns),
    ]:
        check(name, document)
    kinds = {node["kind"] for node in whole["nodes"]}
    assert kinds == {"root", "fork", "subagent", "copy"}
    assert one["session"] == prefix and one["nodes"][0]["id"] == top
    assert any(edge["kind"] == "copy-of" for edge in whole["edges"])
    assert len(top_one["sessions"]) == 1 and top_one["total"]["sessions"] == len(whole["nodes"])
    assert compared["a"]["id"] == top and compared["relation"] == "B is a fork of A"
    assert compared["firstDifferingSeq"] == compared["b"]["cut"]
    assert [t["turn"] for t in turns["turnList"]] == [1, 2]


def test_the_lineage_documents_refuse_what_their_schema_does_not_allow(
    family: tuple[Path, str, list[str]],
) -> None:
    """The schemas are closed: a renamed field or an unknown kind is caught."""
    root, top, forks = family
    tree_doc = json_of("--root", root, "tree")
    tree_doc["nodes"][0]["kind"] = "branch"
    diff_doc = json_of("--root", root, "diff", top, forks[0])
    diff_doc["b"]["kind"] = "copy"  # a side's kind is read from its header: never a copy
    du_doc = json_of("--root", root, "du")
    du_doc["total"].pop("shareable")
    for name, document in [("tree", tree_doc), ("diff", diff_doc), ("du", du_doc)]:
        with pytest.raises(AssertionError):
            check(name, document)


def test_tree_format_beside_json_is_usage(family: tuple[Path, str, list[str]]) -> None:
    """A picture's source has no JSON document: --format mermaid|dot with --json is refused,
    never dropped in silence; --format text is the document's own format."""
    root, _, _ = family
    for fmt in ("mermaid", "dot"):
        document = json_of("--root", root, "tree", "--format", fmt, code=2)
        check("error", document)
        assert document["error"]["code"] == "USAGE"
        assert document["error"]["message"].startswith(f"--format {fmt} prints a picture's")
        assert run_cli("--root", root, "tree", "--format", fmt).exit_code == 0
    check("tree", json_of("--root", root, "tree", "--format", "text"))
    picture = run_cli("--root", root, "tree", "--format", "dot")
    assert picture.stdout.startswith("digraph lineage {\n") and picture.stderr == ""


def test_every_error_prints_the_error_schema(tree: tuple[Path, str]) -> None:
    root, top = tree
    cases: list[tuple[int, list[str | Path]]] = [
        (3, ["--root", root, "inspect", "session-nobody"]),
        (4, ["--root", root, "fork", top, "--at", "100000"]),
        (5, ["--root", root, "fork", top, "--id", top]),
        (2, ["--root", root, "relink", top]),
        (2, ["--root", root / "nowhere", "doctor"]),
        (2, ["--root", root / "nowhere", "tree"]),
        (2, ["--root", root / "nowhere", "du"]),
        (3, ["--root", root, "tree", "session-nobody"]),
        (3, ["--root", root, "du", "session-nobody"]),
        (3, ["--root", root, "diff", top, "session-nobody"]),
        (3, ["--root", root / "nowhere", "diff", top, top]),
    ]
    for code, argv in cases:
        document = json_of(*argv, code=code)
        check("error", document)
        assert document["error"]["code"] != "INTERNAL"


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect"],
        ["fork", "x", "--at", "abc"],
        ["relink", "--bogus"],
        ["no-such-command"],
        ["tree", "--format", "png"],
        ["du", "--top", "0"],
        ["diff", "only-one"],
        ["inspect", "x", "--turns", "3"],
    ],
    ids=" ".join,
)
def test_a_parser_error_under_json_is_a_usage_document(argv: list[str]) -> None:
    result = run_cli(*argv, "--json")

    assert result.exit_code == 2
    document = result.json()
    check("error", document)
    assert document["error"]["code"] == "USAGE"
    assert result.stderr == ""


def test_a_parser_error_without_json_is_one_line_naming_the_help() -> None:
    result = run_cli("fork", "x", "--at", "abc")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "Error: Invalid value for '--at': 'abc' is not a valid int. (see 'dsh-fork fork --help')\n"
    )


def test_doctor_findings_sit_at_one_path_whether_or_not_it_fails(tree: tuple[Path, str]) -> None:
    root, top = tree
    clean = json_of("--root", root, "doctor")
    assert clean["findings"] == [] and "error" not in clean
    (Root(root).find(top).parent / "flat.jsonl").write_bytes(b"")

    failing = json_of("--root", root, "doctor", code=10)

    check("doctor", failing)
    assert [f["code"] for f in failing["findings"]] == ["FLAT_FILE"]
    assert failing["error"]["code"] == "PARTIAL"
    assert failing["counts"]["error"] == 1


def _fork_with_an_agent_below_v4(root: Path) -> None:
    """P's second subagent is stored as v3: it cannot be copied until DSH migrates it."""
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    good = subagent(clock, "session-good", parent, label="good")
    old = subagent(clock, "session-old", parent, label="old")
    parent.turn(clock)
    for spec in (parent, good):
        spec.publish(root)
    write_spec_as(old, root, 3)


def test_a_partial_fork_prints_the_child_then_the_failure_and_the_next_command(
    root: Path,
) -> None:
    _fork_with_an_agent_below_v4(root)

    human = run_cli("--root", root, "fork", "session-P", "--id", "kid")
    as_json = run_cli("--root", root, "fork", "session-P", "--id", "kid-2", "--json")

    assert human.exit_code == as_json.exit_code == 10
    child = Root(root).find("kid") / CURRENT_NAME
    lines = human.stdout.splitlines()
    assert lines[:2] == ["Forked session-P at seq 11 into kid", f"  path: {child}"]
    assert "  copied session-good as " in human.stdout
    errors = human.stderr.splitlines()
    assert errors[0] == (
        "Error: forked session-P into kid, but the subagent copy is partial: 1 of 2 items failed"
    )
    assert errors[1].startswith("  failed: session-old (UNSUPPORTED_FORMAT): ")
    assert errors[2:] == ["Next: run `dsh-fork relink kid`"]
    document = as_json.json()
    check("fork", document)
    assert document["child"]["id"] == "kid-2"
    assert document["child"]["path"] == str(Root(root).find("kid-2") / CURRENT_NAME)
    assert document["error"]["next"] == "dsh-fork relink kid-2"


def test_a_partial_relink_all_document_carries_the_results_beside_the_error(
    root: Path, hold_lock: Any
) -> None:
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    child = subagent(clock, "session-a", parent, label="a")
    parent.catalog(clock, child, label="a")
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    for spec in (parent, child, fork):
        spec.publish(root)
    hold_lock(Root(root).find("session-C"))

    document = json_of("--root", root, "relink", "--all", code=10)

    check("relink-all", document)
    assert document["error"]["failed"][0]["code"] == "SESSION_LOCKED"
    assert document["error"]["next"] == "dsh-fork relink --all"
    human = run_cli("--root", root, "relink", "--all")
    assert human.stderr.splitlines()[-2].endswith("; rerun later")
    assert human.stderr.splitlines()[-1] == "Next: run `dsh-fork relink --all`"


def test_an_io_error_exits_11_naming_the_path(tree: tuple[Path, str]) -> None:
    root, top = tree
    argv = ["--root", str(root), "fork", top, "--id", "kid", "--no-agents"]

    result = run_cli(*argv, env={faults.ENV_VAR: "enospc:3"})
    as_json = run_cli(*argv, "--json", env={faults.ENV_VAR: "enospc:3"})
    faults.load_from_env()

    assert result.exit_code == as_json.exit_code == 11
    assert result.stderr.startswith(f"Error: cannot write {root}")
    assert result.stderr.endswith(": No space left on device\n")
    check("error", as_json.json())
    assert as_json.json()["error"]["path"].startswith(str(root))


def test_the_exit_code_table_is_in_the_help_and_covers_every_error() -> None:
    result = run_cli("--help")

    assert result.exit_code == 0
    table = {(exit, code) for exit, code, _ in EXIT_CODES}
    for error in ALL_ERRORS:
        assert (error.exit_code, error.code) in table
        assert f"{error.exit_code:>3}  {error.code}" in result.stdout
    assert "130  -" in result.stdout and "141  -" in result.stdout


def test_a_closed_stdout_ends_quietly_with_141(tree: tuple[Path, str]) -> None:
    root, _ = tree
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line, as with `| head -0`
    env = {k: v for k, v in os.environ.items() if k != "DSH_HOME"}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "dsh_fork", "--root", str(root), "list"],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            check=False,
        )
    finally:
        os.close(write)

    assert proc.returncode == 141
    assert proc.stderr == b""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["tree"],
        ["du", "--json"],
        ["fork", "{top}", "--id", "kept"],
        ["fork", "{top}", "--id", "kept-json", "--json"],
    ],
    ids=" ".join,
)
def test_an_output_the_disk_refuses_is_one_line_and_exit_11(
    tree: tuple[Path, str], argv: list[str]
) -> None:
    """stdout on a full disk: no traceback, one line naming why, IO_ERROR; a fork's child
    was made all the same (only its report was lost)."""
    root, top = tree
    args = [a.format(top=top) for a in argv]
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "dsh_fork", "--root", str(root), *args],
            stdout=full,
            stderr=subprocess.PIPE,
            check=False,
        )
    assert proc.stderr == b"Error: cannot write the output: No space left on device\n"
    assert proc.returncode == 11
    if args[0] == "fork":
        assert args[3] in {e.id for e in Root(root).entries()}


def test_quiet_prints_nothing_but_the_exit_code_tells(tree: tuple[Path, str]) -> None:
    root, top = tree

    quiet = run_cli("--root", root, "-q", "fork", top, "--id", "kid")
    verbose = run_cli("--root", root, "-v", "inspect", "kid")

    assert quiet.exit_code == 0 and quiet.stdout == "" and quiet.stderr == ""
    assert Root(root).exists("kid")
    assert verbose.exit_code == 0 and verbose.stderr.startswith(f"root: {root}\n")


def test_version_short_and_long() -> None:
    from dsh_fork import __version__

    assert run_cli("-V").stdout == run_cli("--version").stdout == f"dsh-fork {__version__}\n"


def test_help_shows_each_summary_whole_and_examples_unbroken() -> None:
    from dsh_fork.cli.base import app

    result = run_cli("--help")
    commands = result.stdout.split("Commands:")[1]
    text = " ".join(commands.split())
    assert "..." not in commands
    import typer.main

    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    for name, command in group.commands.items():
        assert command.short_help, name
        assert " ".join(command.short_help.split()) in text, name
        shown = run_cli(name, "--help").stdout
        examples = [line.strip() for line in shown.splitlines() if "dsh-fork " in line]
        assert examples, name
        for line in examples:  # an example is one whole line: nothing wrapped mid-token
            assert not line.endswith("-"), (name, line)


@pytest.mark.parametrize("child_id", ["a\nb", "bad\udcffid", "tab\there"], ids=repr)
def test_a_child_id_that_cannot_print_as_one_line_is_usage(
    tree: tuple[Path, str], child_id: str
) -> None:
    root, top = tree
    result = run_cli("--root", root, "fork", top, "--id", child_id)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: the child id holds ")
    assert not Root(root).exists(child_id)


def test_subprocess_tests_run_the_cli_with_the_seam(tree: tuple[Path, str]) -> None:
    """The launcher is the installed command plus the test seam (DSH_FORK_FAULT)."""
    root, top = tree
    env = {k: v for k, v in os.environ.items() if k != "DSH_HOME"}
    proc = subprocess.run(
        cli_launcher.argv("--root", str(root), "inspect", top),
        env=env,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_ctrl_c_in_relink_all_says_how_far_it_got(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root.mkdir(parents=True)

    def interrupted(ctx: Any, *, dry_run: bool, progress: Any) -> Any:
        progress.stage("agents copied")
        progress.advance(37)  # counted in agents, not in fork children
        raise KeyboardInterrupt

    monkeypatch.setattr("dsh_fork.porcelain.relink_all", interrupted)

    result = run_cli("--root", root, "relink", "--all")

    assert result.exit_code == 130
    assert result.stderr == (
        "Error: interrupted: 37 agents copied; rerun `dsh-fork relink --all` to finish (a "
        "rerun completes a half-done fork child)\n"
    )


def test_doctor_says_relink_catalogues_a_fork_childs_uncatalogued_subagent(root: Path) -> None:
    clock = Clock()
    parent = SessionSpec(id="session-P", created_at=clock(), cwd=CWD)
    parent.turn(clock)
    fork = fork_of(parent, "session-C", clock())
    stray = subagent(clock, "session-S", fork, label="s")
    for spec in (parent, fork, stray):
        spec.publish(root)

    document = json_of("--root", root, "doctor")

    (finding,) = [f for f in document["findings"] if f["code"] == "NOT_CATALOGUED"]
    assert finding["session"] == "session-C"
    assert finding["message"].endswith("; `dsh-fork relink session-C` catalogues it")


def test_a_table_too_wide_for_the_terminal_keeps_each_id_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from rich.console import Console

    from dsh_fork.cli.base import Out

    out = Out(json_mode=False)
    monkeypatch.setattr(out, "tty", True)
    buffer = io.StringIO()
    out._console = Console(file=buffer, width=80, no_color=True, highlight=False)
    long_id = "session-c97f9c05-1b2e-4c3d-9e8f-0a1b2c3d4e5f"
    columns = ["id", "kind", "title", "turns", "last activity", "cwd"]
    row = [long_id, "fork", "a title " * 6, 3, "2026-01-01T00:00:00.000Z", "/home/ana/shop"]

    out.table("sessions", columns, [row, ["short", "root", "t", 1, "-", "/"]])

    lines = buffer.getvalue().splitlines()
    assert lines[0] == "sessions"
    assert lines[1] == long_id
    assert all(len(line) <= 80 for line in lines)
    assert "last activity: 2026-01-01T00:00:00.000Z" in buffer.getvalue()
    assert lines[-2:] == ["short", "  kind: root · title: t · turns: 1 · cwd: /"]
