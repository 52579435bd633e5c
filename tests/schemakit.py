"""The JSON Schemas the package ships (made from the Structs dsh_fork/documents.py names),
loaded once, and the check every JSON test runs."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from dsh_fork import schemas
from dsh_fork.cli.argv import command_index


@cache
def _validator(name: str) -> Draft202012Validator:
    schema = json.loads(schemas.shipped(name))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def names() -> list[str]:
    return schemas.names()


def check(name: str, document: Any) -> None:
    """Fail with every violation when ``document`` does not match the shipped schema ``name``."""
    problems = [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in _validator(name).iter_errors(document)
    ]
    assert problems == [], f"{name}: {problems}"


def name_of(argv: list[str], document: Any) -> str | None:
    """The schema a run's ``--json`` document follows: ``error`` for a run that ended with an
    error, else the command's (or the one a flag names, ``_BY_FLAG``); None when the command
    has no document of its own (``schema`` prints the schemas themselves)."""
    if isinstance(document, dict) and set(document) == {"schemaVersion", "error"}:
        return "error"
    index = command_index(argv)
    command = None if index is None else argv[index]
    for (name, flag), schema in _BY_FLAG.items():
        if command == name and flag in argv:
            return schema
    return command if command in names() else None


_BY_FLAG = {
    ("relink", "--all"): "relink-all",
    ("trash", "--list"): "trash-list",
    ("trash", "--empty"): "trash-empty",
}
"""The commands whose document a flag changes, and the schema it follows then."""


def check_run(argv: list[str], stdout: str) -> None:
    """Check a run's ``--json`` document against its schema, when the run printed one."""
    if "--json" not in argv or not stdout.strip():
        return
    document = json.loads(stdout)
    name = name_of(argv, document)
    if name is not None:
        check(name, document)
