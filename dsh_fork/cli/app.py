"""Entry point: importing a command module registers its command on the app.

Start-up is paid on every run, and typer builds the options of every registered command
before it runs one, so the console script registers only the command being run (its module
is named for it, ``list-agents`` in ``list_agents``, unless ``_MODULES`` says otherwise).
Anything else (no command, ``--help``, an unknown name, shell completion) and any import of
``app`` from here registers them all. A bare ``--version`` (or ``-V``) is answered before
typer is imported at all: it is the one run whose answer needs nothing else.
"""

from __future__ import annotations

import os
import sys

__all__ = ["app", "main"]

# Not ``typing.TYPE_CHECKING``: importing typing is a fifth of a bare ``--version``'s run.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    import typer

    app: typer.Typer  # provided by __getattr__, with every command registered

_MODULES = {"list": "list_sessions", "import": "import_"}  # modules not named for their command
_COMPLETION_VAR = "_DSH_FORK_COMPLETE"
_COMPLETION_OPTIONS = ("--install-completion", "--show-completion")


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        _register_all()
        from . import base

        return base.app
    raise AttributeError(name)


def main() -> None:
    _standard_streams()
    args = sys.argv[1:]
    if args in (["--version"], ["-V"]) and not os.environ.get(_COMPLETION_VAR):
        from .. import __version__

        try:
            sys.stdout.write(f"dsh-fork {__version__}\n")
            sys.stdout.flush()
        except OSError as exc:  # as ``base.Group.main`` ends a run whose output failed
            _version_unwritten(exc)
        return
    from . import base

    every = bool(os.environ.get(_COMPLETION_VAR)) or not _register_only(args)
    if every:
        _register_all()
    # typer builds its two completion options (a signature read of their own) on every run;
    # only the app's help, shell completion and a run that names them use them.
    named = any(arg.startswith(_COMPLETION_OPTIONS) for arg in args)
    base.app._add_completion = every or named
    base.app(prog_name="dsh-fork")


def _standard_streams() -> None:
    """A run started with a standard stream closed (``2>&-``) gets it on the null device, so
    no file the run opens takes its descriptor (an error line meant for stderr would land in
    a log). Closed stderr swallows what is written to it: the exit code never depends on
    whether it is open (Python leaves the stream None, and the first warning ended the run
    with exit 1). Closed stdout is the null device opened for reading: writing the output
    fails, and the run ends as any run whose output cannot be written (exit 11)."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, mode)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115


def _version_unwritten(exc: OSError) -> None:
    """A bare ``--version`` whose output failed: the exit codes and line of any other run."""
    from ..errors import unwritten_output

    code, line = unwritten_output(exc)
    if line is not None:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    os._exit(code)


def _register_only(args: Sequence[str]) -> bool:
    """Register the one command ``args`` run (none for a bare ``--version``); False when
    ``args`` need every command or name none."""
    from . import base

    name = _command_name(args)
    if name is None:
        return "--version" in args and not {"-h", "--help"} & set(args)
    import importlib

    module = _MODULES.get(name, name.replace("-", "_"))
    if not module.isidentifier() or module in ("app", "base"):
        return False
    try:
        importlib.import_module(f"{__package__}.{module}")
    except ImportError:
        return False
    return any(_name_of(info) == name for info in base.app.registered_commands)


def _command_name(args: Sequence[str]) -> str | None:
    from .argv import command_index

    index = command_index(args)
    return None if index is None else args[index]


def _name_of(info: typer.models.CommandInfo) -> str | None:
    if info.name is not None:
        return info.name
    callback = info.callback
    return None if callback is None else callback.__name__.replace("_", "-")


def _register_all() -> None:
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(sys.modules[__package__].__path__):
        importlib.import_module(f"{__package__}.{module.name}")
