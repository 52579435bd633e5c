"""How far a long run has come: the library tells, the command line draws.

Work that grows with the root or the log (sessions read, agents copied, sessions written,
bytes archived) tells a ``Progress`` each stage it starts and each unit it finishes. The
library imports nothing to draw it: the CLI passes a meter that draws rich's progress display
on a terminal, and every other caller gets ``SILENT``. A stage names its unit in its words
("sessions read"), so the display counts what the user waits for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Progress(Protocol):
    """Told of each stage of a long run and of each unit of it done."""

    def stage(self, what: str, total: int | None = None) -> None:
        """A new stage: ``what`` counts its unit ("sessions read") from 0 to ``total`` (None:
        not known in advance)."""

    def advance(self, count: int = 1) -> None:
        """``count`` more units of the current stage are done."""


class Silent:
    """The progress of a caller that draws none."""

    def stage(self, what: str, total: int | None = None) -> None:
        return None

    def advance(self, count: int = 1) -> None:
        return None


SILENT: Progress = Silent()


def counter(progress: Progress, what: str, total: int | None = None) -> Callable[[], None]:
    """A callable that counts one unit of ``what``, starting it as a stage at its first call:
    for work whose start the caller cannot see (a hook called inside another module's loop)."""
    started = False

    def count() -> None:
        nonlocal started
        if not started:
            started = True
            progress.stage(what, total)
        progress.advance()

    return count
