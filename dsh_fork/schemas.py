"""The JSON Schemas of the ``--json`` documents, made from their Structs (documents.py).

A schema is self-contained: every object it names is under its own ``$defs``, referenced as
``#/$defs/<Name>``, with no ``$id`` or external reference, so a validator needs no registry.
The schemas ship in the package (``dsh_fork/schemas/<name>.schema.json``): ``make schemas``
writes them from ``generate``, and a test holds the shipped files equal to it. ``dsh-fork
schema`` prints the shipped files, so the command needs neither the Structs nor msgspec's
schema builder at run time.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

DIALECT = "https://json-schema.org/draft/2020-12/schema"
PACKAGE_DIR = "schemas"


def generate(name: str) -> dict[str, Any]:
    """The schema of the document named ``name`` (a key of documents.DOCUMENTS)."""
    import msgspec

    from .documents import DOCUMENTS

    (top,), defs = msgspec.json.schema_components([DOCUMENTS[name]], ref_template="#/$defs/{name}")
    body = defs.pop(top["$ref"].removeprefix("#/$defs/"))
    title = body.pop("description")  # the Struct's docstring
    body.pop("title", None)
    schema: dict[str, Any] = {"$schema": DIALECT, "title": title, **body}
    if defs:
        schema["$defs"] = dict(sorted(defs.items()))
    return schema


def render(schema: dict[str, Any]) -> str:
    """A schema as the shipped file holds it (the bytes ``make schemas`` writes)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def names() -> list[str]:
    """The names of the shipped schemas, sorted."""
    folder = resources.files(__package__).joinpath(PACKAGE_DIR)
    suffix = ".schema.json"
    return sorted(p.name.removesuffix(suffix) for p in folder.iterdir() if p.name.endswith(suffix))


def shipped(name: str) -> str:
    """The text of the shipped schema ``name``; KeyError when there is none."""
    if name not in names():
        raise KeyError(name)
    folder = resources.files(__package__).joinpath(PACKAGE_DIR)
    return folder.joinpath(f"{name}.schema.json").read_text(encoding="utf-8")


def write_all() -> list[str]:
    """Write every schema into the package's folder (``make schemas``); the names written.
    A shipped file whose document no longer exists is removed."""
    from pathlib import Path

    from .documents import DOCUMENTS

    folder = Path(__file__).resolve().parent / PACKAGE_DIR
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.schema.json"):
        if old.name.removesuffix(".schema.json") not in DOCUMENTS:
            old.unlink()
    for name in DOCUMENTS:
        (folder / f"{name}.schema.json").write_text(render(generate(name)), encoding="utf-8")
    return sorted(DOCUMENTS)


if __name__ == "__main__":
    for written in write_all():
        print(f"{PACKAGE_DIR}/{written}.schema.json")
