"""The progress display: rich's, on stderr, for the library's ``progress.Progress``.

Drawn only when stderr is a terminal and neither ``-q`` nor ``--json`` is given; it starts
when the command does (so it shows within the first half second) and vanishes when the
command ends, leaving the output as it would be without it. Every other run counts silently,
so a Ctrl-C summary can still say how far the run came.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from .base import Out, colour_wanted, run

T = TypeVar("T")

REDRAW_SECONDS = 0.1
"""How often a count is handed to the display (it redraws ten times a second)."""


class Meter:
    """A ``progress.Progress`` that counts each stage and, when asked, draws it."""

    def __init__(self, draw: bool) -> None:
        self.draw = draw
        self.what = ""
        self.done = 0
        self.total: int | None = None
        self._bar: Any = None
        self._task: Any = None
        self._told = 0.0

    def __enter__(self) -> Meter:
        if self.draw:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            console = Console(stderr=True, no_color=not colour_wanted(True))
            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self._bar.start()
            # shown at once, before the library names its first stage (finding the dirs)
            self._task = self._bar.add_task("starting", total=None)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def stage(self, what: str, total: int | None = None) -> None:
        self.what, self.done, self.total = what, 0, total
        if self._bar is not None:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(what, total=total)
            self._told = time.monotonic()

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self._bar is not None and self._task is not None:
            now = time.monotonic()
            if now - self._told >= REDRAW_SECONDS or self.done == self.total:
                self._told = now
                self._bar.update(self._task, completed=self.done)

    def summary(self) -> str:
        """How far the run came: ``37 agents copied`` (``of 120`` when known)."""
        of = f" of {self.total}" if self.total is not None else ""
        return f"{self.done}{of} {self.what}" if self.what else "nothing done yet"


def meter(out: Out) -> Meter:
    """The meter of a command: drawn on a terminal's stderr unless ``-q`` or ``--json``."""
    draw = not out.quiet and not out.json_mode and _stderr_is_terminal()
    return Meter(draw)


def metered(
    out: Out,
    action: Callable[[Meter], T],
    *,
    where: object | None = None,
    interrupted: Callable[[Meter], str] | None = None,
) -> T:
    """``base.run`` of a library call that reports its progress to the command's meter (and,
    on Ctrl-C, says how far it came with ``interrupted(meter)``): the meter is gone, and the
    output as it would be without it, once the call returns or fails."""
    with meter(out) as bar:
        summary = None if interrupted is None else (lambda: interrupted(bar))
        return run(out, lambda: action(bar), where=where, interrupted=summary)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced
        return False
