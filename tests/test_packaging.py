"""Installable anywhere (issue 35): the man page says what --help says, the sdist carries what
its tests need, the metadata classifies the project."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dsh_fork.cli.manpage import render

TOP = Path(__file__).resolve().parent.parent


MAN_STALE = "docs/dsh-fork.1 is not the help as it is now: run `make man` and commit the page"


def test_the_man_page_is_the_help_as_it_is_now() -> None:
    """Fails on any help change until the page is remade; says so in one line (the page's
    diff would bury the command under hundreds of lines)."""
    page = TOP / "docs" / "dsh-fork.1"
    if page.read_text(encoding="utf-8") != render():
        pytest.fail(MAN_STALE, pytrace=False)


def test_the_man_page_has_every_command_and_the_exit_codes() -> None:
    from dsh_fork.cli.app import _name_of, app

    text = render()
    assert text.startswith(".TH DSH-FORK 1 ")
    names = {_name_of(info) for info in app.registered_commands}
    for name in names:
        assert f'.SS "dsh-fork {name}"' in text
    assert "SESSION_NOT_FOUND" in text and "diff --exit-code" in text
    # no help line is read as a roff request
    body = [line for line in text.splitlines() if not line.startswith((".TH", ".SH", ".SS"))]
    assert all(line in (".nf", ".fi", ".B dsh-fork") or not line.startswith(".") for line in body)


def test_the_sdist_carries_the_tests_their_data_and_the_docs() -> None:
    grafted = {
        line.split()[1]
        for line in (TOP / "MANIFEST.in").read_text().splitlines()
        if line.startswith("graft ")
    }
    assert {"tests", "docs", "schemas", "fixtures"} <= grafted
    assert (TOP / "tests" / "conftest.py").is_file()
    assert (TOP / "tests" / "golden").is_dir()


def test_the_metadata_classifies_the_project_and_installs_the_man_page() -> None:
    meta = tomllib.loads((TOP / "pyproject.toml").read_text())
    classifiers = meta["project"]["classifiers"]
    assert "Environment :: Console" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "urls" not in meta["project"]  # none rather than one that may not exist
    data = meta["tool"]["setuptools"]["data-files"]
    assert data == {"share/man/man1": ["docs/dsh-fork.1"]}
