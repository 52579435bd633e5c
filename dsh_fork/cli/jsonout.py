"""The ``--json`` writer: one document, indented by two, its long lists written in chunks.

A document is a document Struct (or, for an error, a dict), encoded by msgspec: UNSET
fields left out, keys in the Struct's order. Its ``Rows`` (``results.rows``: a root's 100,000
nodes or sessions) are converted and encoded ``CHUNK`` items at a time, and written between the
parts of the rest of the document, which is encoded once around a placeholder for each. A chunk
encoded alone and re-indented by the depth of its place is byte for byte what encoding the
whole document gives: a JSON string holds no raw newline, so every newline of an encoding is a
line break of its layout. Memory then holds one chunk of converted rows, not all of them (100 MB
less for a tree of 100,000 sessions).
"""

from __future__ import annotations

import os
from typing import IO, Any

import msgspec

from ..results import Rows, listed

CHUNK = 1000
"""Rows converted and encoded at a time."""


def write_document(value: Any, stream: IO[bytes]) -> Any:
    """Write ``value`` (a Struct or a dict) and a newline to ``stream``; returns what the
    caller may hold (the document without its rows)."""
    streamed = _top_rows(value)
    marks: dict[str, bytes] = {}
    skeleton = value
    if streamed:
        placeholders = {}
        for key in streamed:
            mark = f"rows:{os.urandom(16).hex()}"
            marks[key] = f'"{mark}"'.encode()
            placeholders[key] = mark
        skeleton = _replaced(value, placeholders)
    try:
        head = _dumps(skeleton)
    except (UnicodeEncodeError, RecursionError):  # lone surrogates, nesting: JSON all the same
        head = b""
    if not head or any(head.count(needle) != 1 for needle in marks.values()):
        stream.write(_encoded(value))  # a placeholder found twice: never, but
        stream.write(b"\n")  # it is cheap to know
        return value
    at = 0
    for key, needle in marks.items():
        start = head.index(needle, at)
        line = head.rfind(b"\n", 0, start) + 1
        indent = len(head[line:start]) - len(head[line:start].lstrip(b" "))
        stream.write(head[at:start])
        _write_rows(streamed[key], b"\n" + b" " * indent, stream)
        at = start + len(needle)
    stream.write(head[at:])
    stream.write(b"\n")
    return skeleton


def _top_rows(value: Any) -> dict[str, Rows]:
    """The ``Rows`` at the top of a document, by key (dict) or field name (Struct)."""
    if isinstance(value, msgspec.Struct):
        fields = {name: getattr(value, name) for name in value.__struct_fields__}
    elif type(value) is dict:
        fields = value
    else:
        return {}
    return {key: item for key, item in fields.items() if isinstance(item, Rows)}


def _replaced(value: Any, changes: dict[str, Any]) -> Any:
    if isinstance(value, msgspec.Struct):
        return msgspec.structs.replace(value, **changes)
    return {**value, **changes}


def _write_rows(rows: Rows, newline: bytes, stream: IO[bytes]) -> None:
    """``rows`` as the list at a place whose line breaks are ``newline``."""
    if not rows.items:
        stream.write(b"[]")
        return
    stream.write(b"[")
    separator = b""
    for chunk in rows.chunks(CHUNK):
        data = _encoded(chunk).replace(b"\n", newline)  # "[" newline "  {…}," … newline "]"
        stream.write(separator)
        stream.write(data[1 : -len(newline) - 1])
        separator = b","
    stream.write(newline)
    stream.write(b"]")


def _encoded(value: Any) -> bytes:
    """``value`` indented by two; what msgspec refuses is written by ``json`` (lone surrogates
    as ``\\udXXX`` escapes)."""
    try:
        return _dumps(value)
    except (UnicodeEncodeError, RecursionError):
        import json

        builtins = msgspec.to_builtins(value, enc_hook=listed)
        try:
            return json.dumps(builtins, indent=2, ensure_ascii=True).encode()
        except RecursionError:
            return _deep(builtins)


_ENCODER = msgspec.json.Encoder(enc_hook=listed)


def _dumps(value: Any) -> bytes:
    return msgspec.json.format(_ENCODER.encode(value), indent=2)


_END = object()


def _leaf(value: Any) -> bytes:
    try:
        return msgspec.json.encode(value)
    except UnicodeEncodeError:
        import json

        return json.dumps(value, ensure_ascii=True).encode()


def _deep(value: Any) -> bytes:
    """``value`` as compact JSON, walked with a stack instead of recursion, for a document
    nested deeper than the encoders go (msgspec and ``json`` stop at the interpreter's
    recursion limit). Compact: indented by two, the 10,000th level of a chain
    would start 20,000 spaces in, and every line below it too. Written into one buffer:
    each small encoding is dropped at once (orjson sizes even a short one at a kilobyte or
    more, and 170,000 of them held in a list took 600 MB). ``value`` holds plain JSON values."""
    parts = bytearray()
    stack: list[list[Any]] = []  # [items, is an object, items written]

    def start(item: Any) -> None:
        if type(item) is dict and item:
            parts.extend(b"{")
            stack.append([iter(item.items()), True, 0])
        elif type(item) in (list, tuple) and item:
            parts.extend(b"[")
            stack.append([iter(item), False, 0])
        else:
            parts.extend(_leaf(item))

    start(value)
    while stack:
        frame = stack[-1]
        item: Any = next(frame[0], _END)
        if item is _END:
            stack.pop()
            parts += b"}" if frame[1] else b"]"
            continue
        if frame[2]:
            parts += b","
        frame[2] += 1
        if frame[1]:
            key, item = item
            parts += _leaf(key)
            parts += b":"
        start(item)
    return bytes(parts)
