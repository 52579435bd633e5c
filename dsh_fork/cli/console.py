"""A rich console that cannot be made to emit a control sequence it did not style itself.

Rich passes ESC and other control characters of the text it renders through to the terminal, so
an id holding ``ESC ] 0 ;`` could retitle the window or clear the screen. Strings are escaped
before rich parses them (``render_str``), and every rendered segment of text (also those of
``Text`` objects built elsewhere) is escaped again, except the line breaks rich itself emits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from ..display import escape_controls


def _escaped(text: str) -> str:
    return "\n".join(escape_controls(part) for part in text.split("\n"))


class SafeConsole(Console):
    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(escape_controls(text), **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or segment.text == "\n":
                yield segment
            else:
                yield Segment(_escaped(segment.text), segment.style)
