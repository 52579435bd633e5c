"""The result protocol every command's result follows, and the JSON documents made of it.

A command returns one typed result. Renderers read its attributes; ``--json`` prints
``document(result)``: the result's ``to_json()`` with ``schemaVersion`` first. A result whose
``partial()`` is an error (some items failed) is still printed in full, then exits 10; under
``--json`` its document carries the error beside the result (``error``), so every field sits
at the same JSON path whether the run was partial or not. The shapes are in documents.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from .errors import DshForkError, Partial

T = TypeVar("T")

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


def document(
    result: Result, partial: Partial | None = None, *, rows_to_write: bool = False
) -> dict[str, Any]:
    """The ``--json`` document of a result (with its PARTIAL error, when there is one).

    With ``rows_to_write``, a long list the result makes with ``rows`` is left as ``Rows``
    (its items and their conversion) for the writer, which converts and writes them a chunk
    at a time: a root's 100,000 rows are then never all converted at once.
    """
    version: int = getattr(result, "schema_version", SCHEMA_VERSION)
    token = _ROWS_TO_WRITE.set(rows_to_write)
    try:
        out: dict[str, Any] = {"schemaVersion": version, **result.to_json()}
    finally:
        _ROWS_TO_WRITE.reset(token)
    if partial is not None:
        out["error"] = partial.to_json()
    return out


class Rows:
    """A list of a document not converted yet: its items and the conversion of one item."""

    __slots__ = ("convert", "items")

    def __init__(self, items: Sequence[Any], convert: Callable[[Any], Any]) -> None:
        self.items = items
        self.convert = convert

    def chunks(self, size: int) -> Iterator[list[Any]]:
        """The converted items, ``size`` at a time."""
        items, convert = self.items, self.convert
        for start in range(0, len(items), size):
            yield [convert(item) for item in items[start : start + size]]

    def listed(self) -> list[Any]:
        return [self.convert(item) for item in self.items]


_ROWS_TO_WRITE: ContextVar[bool] = ContextVar("rows_to_write", default=False)


def rows(items: Sequence[T], convert: Callable[[T], Any]) -> list[Any] | Rows:
    """``[convert(item) for item in items]``: what a ``to_json`` returns for a list that may be
    long. While ``document(..., rows_to_write=True)`` runs, a ``Rows`` instead (only the
    writer of the document ever sees one)."""
    if _ROWS_TO_WRITE.get():
        return Rows(items, convert)
    return [convert(item) for item in items]


def error_document(error: DshForkError) -> dict[str, Any]:
    """The ``--json`` document of a command that ended with an error (no result)."""
    return {"schemaVersion": SCHEMA_VERSION, "error": error.to_json()}
