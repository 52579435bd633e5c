"""The cyclic garbage collector paused while a pass builds many objects and no cycles.

A pass over a large log or a large root allocates millions of parsed dicts, rows and nodes.
Left running, the collector walks all of them again each time the heap grows by a quarter
(about a tenth of an inspect pass, about 40 % of ``tree`` on 100,000 sessions) and frees
nothing: what these passes build holds no cycle (reference counting frees whatever they
drop) except an unreadable session's error and its traceback, so what is left for the
collector is bounded by the number of sessions.

A process that ends as soon as its command does (the console script, which leaves without the
interpreter's teardown) need not free what a pass built either: ``keep`` holds it until then.
Freeing the 100,000 nodes of a root's lineage costs about 50 ms and gains nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_HELD: list[object] | None = None
"""What is held until the process leaves; None: a process that frees as it goes (tests, any
caller of the library), which holds nothing."""


def hold_until_exit() -> None:
    """Called by the console script only: from now on ``keep`` holds what it is given."""
    global _HELD
    _HELD = []


def holding() -> bool:
    """True in a process that ends without freeing (``hold_until_exit`` was called)."""
    return _HELD is not None


def keep(*values: object) -> None:
    """Hold ``values`` until the process leaves, if it leaves without freeing; else nothing
    (they are freed when dropped, as usual)."""
    if _HELD is not None:
        _HELD.extend(values)
        gc.freeze()  # what is held is never scanned again: no full collection walks it


@contextmanager
def paused_gc() -> Iterator[None]:
    """The collector off for the block (nested blocks leave it to the outermost)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
