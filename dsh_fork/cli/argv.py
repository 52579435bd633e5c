"""Where options may stand: the one rule by which a command line is read.

People put ``-q`` after the command (``dsh-fork list -q``) as often as before it, and ``--json``
before it as often as after. The app's own options (``-q``, ``-v``, ``--color``, ``--root``)
are therefore taken from either side of the command, and ``--json`` from either side of a
command that has it: ``arrange`` moves each to the side its parser reads it on, before
parsing. A token is moved only where it is an option: never a value of another option
(``fork X --title -q`` keeps its title), never after ``--``. Only the standard library is
imported: the console script reads the command name with it before anything else is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

APP_VALUE_OPTIONS = frozenset({"--root", "--color"})
"""The app's options that take a value (``--color auto``)."""
APP_FLAGS = frozenset({"-q", "--quiet", "-v", "--verbose"})
"""The app's flags a command line may also give after the command."""
_SHORT_FLAGS = re.compile(r"-[qv]+")  # ``-qv``: the app's short flags combined
COMMAND_SIDE = frozenset({"--json"})
"""Options of the commands that may also be given before the command (where it has them)."""


def command_index(args: Sequence[str]) -> int | None:
    """The index of the command name in ``args``: the first word that is neither an option
    nor an app option's value; None when there is none."""
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "--":
            return None
        elif arg in APP_VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-") or arg == "-":
            return index
    return None


def arrange(
    args: Sequence[str], command_options: Collection[str], value_options: Collection[str]
) -> list[str]:
    """``args`` with the app's options moved before the command and the command-side options
    (``COMMAND_SIDE`` ones the command has, from ``command_options``) after it.

    ``value_options`` are the command's options that take a value: the word after one is its
    value and stays where it is. A command's own option of the same name as an app flag is
    the command's (nothing is moved for it)."""
    index = command_index(args)
    if index is None:
        return list(args)
    head, name, rest = list(args[:index]), args[index], args[index + 1 :]
    before: list[str] = []
    after: list[str] = []
    for arg in head:
        (after if arg in COMMAND_SIDE and arg in command_options else before).append(arg)
    kept: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--":
            kept += rest[i:]
            break
        if arg in command_options or arg.split("=", 1)[0] in command_options:
            kept.append(arg)
            if arg in value_options and i + 1 < len(rest):
                kept.append(rest[i + 1])
                i += 1
        elif arg in APP_FLAGS or _SHORT_FLAGS.fullmatch(arg):
            before.append(arg)
        elif arg in APP_VALUE_OPTIONS:
            before += rest[i : i + 2]
            i += 1
        elif arg.split("=", 1)[0] in APP_VALUE_OPTIONS:
            before.append(arg)
        else:
            kept.append(arg)
        i += 1
    return [*before, name, *after, *kept]
