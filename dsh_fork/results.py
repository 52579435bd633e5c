"""The result protocol every command's result follows, and the JSON documents made of it.

A command returns one typed result. Renderers read its attributes; ``--json`` prints
``document(result)``: the result's ``to_json()`` with ``schemaVersion`` first. A result whose
``partial()`` is an error (some items failed) is still printed in full, then exits 10; under
``--json`` its document carries the error beside the result (``error``), so every field sits
at the same JSON path whether the run was partial or not. The shapes are in ``schemas/``.
"""

from __future__ import annotations

from typing import Any, Protocol

from .errors import DshForkError, Partial

SCHEMA_VERSION = 1
"""Raised when a document changes incompatibly (a field removed, renamed or retyped); a result
whose own document was raised alone says so in a ``schema_version`` attribute."""


class Result(Protocol):
    """What every command returns."""

    @property
    def warnings(self) -> list[str]: ...

    def partial(self) -> Partial | None: ...

    def to_json(self) -> dict[str, Any]: ...


class ReadOnly:
    """A result that is read in one go: it succeeds whole or fails with one error, so it is
    never partial (a session it cannot read is an item of the result, named there)."""

    def partial(self) -> Partial | None:
        return None


def document(result: Result, partial: Partial | None = None) -> dict[str, Any]:
    """The ``--json`` document of a result (with its PARTIAL error, when there is one)."""
    version: int = getattr(result, "schema_version", SCHEMA_VERSION)
    out: dict[str, Any] = {"schemaVersion": version, **result.to_json()}
    if partial is not None:
        out["error"] = partial.to_json()
    return out


def error_document(error: DshForkError) -> dict[str, Any]:
    """The ``--json`` document of a command that ended with an error (no result)."""
    return {"schemaVersion": SCHEMA_VERSION, "error": error.to_json()}
