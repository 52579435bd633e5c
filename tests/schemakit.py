"""The JSON Schema files of ``schemas/``, loaded once, and the check every JSON test runs."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


@cache
def _registry() -> tuple[Registry, dict[str, dict[str, Any]]]:
    by_name: dict[str, dict[str, Any]] = {}
    registry: Registry = Registry()
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        schema = json.loads(path.read_text())
        Draft202012Validator.check_schema(schema)
        by_name[path.name.removesuffix(".schema.json")] = schema
        registry = registry.with_resource(schema["$id"], Resource.from_contents(schema))
    return registry, by_name


def names() -> list[str]:
    return sorted(_registry()[1])


def check(name: str, document: Any) -> None:
    """Fail with every violation when ``document`` does not match ``schemas/<name>``."""
    registry, by_name = _registry()
    validator = Draft202012Validator(by_name[name], registry=registry)
    problems = [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in validator.iter_errors(document)
    ]
    assert problems == [], f"{name}: {problems}"
