"""The JSON Schemas: made from the document Structs, shipped current and self-contained,
printed by ``dsh-fork schema``, and in the wheel and the sdist."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, get_args

import pytest
from conftest import run_cli
from jsonschema import Draft202012Validator

from dsh_fork import schemas
from dsh_fork.documents import DOCUMENTS
from dsh_fork.errors import ALL_ERRORS, Partial
from dsh_fork.forkdocs import ErrorCode

REPO = Path(__file__).resolve().parent.parent


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def test_the_shipped_schemas_are_the_generated_ones() -> None:
    """``make schemas`` was run after the last change to a document Struct."""
    assert schemas.names() == sorted(DOCUMENTS)
    stale = [n for n in DOCUMENTS if schemas.shipped(n) != schemas.render(schemas.generate(n))]
    assert stale == [], f"run `make schemas`: {stale} differ from their Structs"


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_each_schema_is_valid_and_self_contained(name: str) -> None:
    schema = json.loads(schemas.shipped(name))
    Draft202012Validator.check_schema(schema)
    assert "$id" not in json.dumps(schema)  # nothing to resolve through a registry
    for ref in _refs(schema):
        assert ref.startswith("#/$defs/"), ref
        assert ref.removeprefix("#/$defs/") in schema["$defs"], ref
    assert schema["title"] and "\n" not in schema["title"]


def test_the_error_codes_are_those_of_the_errors() -> None:
    codes = [error.code for error in ALL_ERRORS if error is not Partial]
    assert list(get_args(ErrorCode)) == codes


def test_a_closed_object_refuses_a_key_it_does_not_name() -> None:
    validator = Draft202012Validator(json.loads(schemas.shipped("error")))
    document = {"schemaVersion": 1, "error": {"code": "USAGE", "message": "m"}}
    assert list(validator.iter_errors(document)) == []
    assert list(validator.iter_errors({**document, "stray": 1}))
    assert list(validator.iter_errors({"schemaVersion": 1, "error": {"code": "NOPE"}}))


def test_schema_prints_the_names_then_each_schema() -> None:
    listed = run_cli("schema")
    assert listed.exit_code == 0
    assert listed.stdout.splitlines() == sorted(DOCUMENTS)
    for name in ("fork", "relink-all", "error"):
        printed = run_cli("schema", name)
        assert printed.exit_code == 0
        assert printed.stdout == schemas.shipped(name)


def test_schema_of_an_unknown_name_is_a_usage_error() -> None:
    result = run_cli("schema", "forks")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: no schema named 'forks'; there are: " + ", ".join(sorted(DOCUMENTS))
    ]


def test_the_package_data_takes_every_schema_into_the_wheel_and_the_sdist() -> None:
    """setuptools ships (in both) the package data pyproject.toml names: every schema file."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["dsh_fork"]
    package = REPO / "dsh_fork"
    shipped = {p for pattern in patterns for p in package.glob(pattern)}
    assert {package / "schemas" / f"{n}.schema.json" for n in DOCUMENTS} <= shipped
