"""The result protocol every command's result follows, and the JSON documents made of it.

A command returns one typed result. Renderers read its attributes; ``--json`` prints
``document_of(result)``: the document Struct the result's ``to_document()`` returns (the
result's own Struct, made where its facts are known, or built from it), which is the one
definition of the document (its schema is generated from the same Struct, and
mypy holds every key and type of ``to_document`` to it). A result whose ``partial()`` is an
error (some items failed) is still printed in full, then exits 10; under ``--json`` its
document carries the error beside the result (``error``, the dict ``Partial.to_json`` makes:
errors are open objects), so every field sits at the same JSON path whether the run was
partial or not. ``to_json()`` is the same document as plain JSON
values (dicts and lists), for the operation log and for callers that read keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Final, Protocol, TypeVar, cast

import msgspec

from .errors import DshForkError, Partial

T = TypeVar("T")
S = TypeVar("S")

SCHEMA_VERSION: Final = 1
"""Raised when a document changes incompatibly (a field removed, renamed or retyped); a
document whose own version was raised alone says so in its Struct (list: 3)."""


class Result(Protocol):
    """What every command returns."""

    @property
    def warnings(self) -> list[str]: ...

    def partial(self) -> Partial | None: ...

    def to_document(self) -> msgspec.Struct: ...

    def to_json(self) -> dict[str, Any]: ...


class Documented:
    """A value whose JSON is a document Struct (documents.py): a subclass builds it in
    ``to_document``; ``to_json`` is that Struct as plain JSON values (camelCase keys, in the
    Struct's order, UNSET fields left out) but for ``schemaVersion``, never a second
    definition of its keys."""

    __slots__ = ()

    def to_document(self) -> msgspec.Struct:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        out = plain(self.to_document())
        out.pop("schemaVersion", None)  # the document's, not the value's
        return out


def plain(value: msgspec.Struct) -> dict[str, Any]:
    """A document Struct (documents.py) as the dict its JSON encoding reads back as."""
    return cast(dict[str, Any], msgspec.to_builtins(value, enc_hook=listed))


class Whole(Documented):
    """A result that succeeds whole or fails with one typed error: there are no failed items
    to report beside it, so it is never partial (a read-only command's result too: a session
    it cannot read is an item of the result, named there)."""

    __slots__ = ()

    def partial(self) -> Partial | None:
        return None


def document_of(
    result: Result, partial: Partial | None = None, *, rows_to_write: bool = False
) -> msgspec.Struct:
    """The ``--json`` document of a result (with its PARTIAL error, when there is one).

    With ``rows_to_write``, a long list the result makes with ``rows`` is left as ``Rows``
    (its items and their conversion) for the writer, which converts and writes them a chunk
    at a time: a root's 100,000 rows are then never all converted at once.
    """
    token = _ROWS_TO_WRITE.set(rows_to_write)
    try:
        out = result.to_document()
    finally:
        _ROWS_TO_WRITE.reset(token)
    if partial is not None:
        out = msgspec.structs.replace(out, error=partial.to_json())
    return out


def document(result: Result, partial: Partial | None = None) -> dict[str, Any]:
    """``document_of`` as plain JSON values."""
    return plain(document_of(result, partial))


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


def rows(items: Sequence[T], convert: Callable[[T], S]) -> list[S]:
    """``[convert(item) for item in items]``: what a ``to_document`` holds for a list that may
    be long. While ``document_of(..., rows_to_write=True)`` runs, a ``Rows`` instead, typed as
    the list it stands for: only the writer of the document ever sees one, and any other
    encoder that meets one lists it (``listed``) or, without that hook, refuses it."""
    if _ROWS_TO_WRITE.get():
        return cast(list[S], Rows(items, convert))
    return [convert(item) for item in items]


def listed(value: Any) -> Any:
    """The encoders' ``enc_hook``: a ``Rows`` is written as the list it stands for."""
    if isinstance(value, Rows):
        return value.listed()
    raise TypeError(f"not JSON: {type(value).__name__}")


def error_document(error: DshForkError) -> dict[str, Any]:
    """The ``--json`` document of a command that ended with an error (no result). An error
    object is open (each error adds the details that apply, forkdocs.Error names the common
    ones), so it stays the dict ``to_json`` makes, here and beside a partial result."""
    return {"schemaVersion": SCHEMA_VERSION, "error": error.to_json()}
