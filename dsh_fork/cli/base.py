"""The typer app, shared options, output and the mapping of typed errors to exit codes.

Commands stay a few lines each: parse, call one library function, render, and let
``run`` turn a typed error into its contract exit code and one clear line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, Protocol, TypeVar

import orjson
import typer

from .. import __version__, faults
from ..display import safe_text
from ..errors import DshForkError, InternalError, IoError, Partial

T = TypeVar("T")

app = typer.Typer(
    name="dsh-fork",
    help=(
        "Offline fork, subagent relink and inspection of DSH session logs.\n\n"
        "The sessions root is --root, else $DSH_HOME/sessions (DSH_HOME defaults to ~/.dsh)."
    ),
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

ROOT_HELP = "Sessions root (default: $DSH_HOME/sessions, DSH_HOME defaults to ~/.dsh)."
JSON_HELP = "Print exactly one JSON document on stdout."


class State:
    root: str | None = None


state = State()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dsh-fork {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    root: str | None = typer.Option(None, "--root", help=ROOT_HELP, metavar="PATH"),
    version: bool = typer.Option(
        False, "--version", help="Show the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    state.root = root
    faults.load_from_env()


def root_of(command_root: str | None) -> str | None:
    """``--root`` given after the subcommand wins over the one given before it."""
    return command_root if command_root is not None else state.root


class Out:
    """stdout for results (rich only on a terminal), stderr for warnings and errors."""

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.tty = sys.stdout.isatty()
        self.color = self.tty and not os.environ.get("NO_COLOR")
        self._console: Any = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from .console import SafeConsole  # escapes control characters (display)

            self._console = SafeConsole(no_color=not self.color, highlight=False, soft_wrap=False)
        return self._console

    @property
    def rich(self) -> bool:
        return self.tty and not self.json_mode

    def json(self, value: Any) -> None:
        try:
            data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
        except TypeError:  # lone surrogates, integers beyond 64 bits: JSON all the same
            data = json.dumps(value, indent=2, ensure_ascii=True).encode()
        sys.stdout.buffer.write(data + b"\n")
        sys.stdout.flush()

    def line(self, text: str = "") -> None:
        text = printable(text)
        if self.rich:
            self.console.print(text, markup=False)
        else:
            sys.stdout.write(text + "\n")

    def table(
        self, title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> None:
        """A rich table on a terminal, aligned plain columns otherwise."""
        cells = [["-" if c is None else printable(str(c)) for c in row] for row in rows]
        if self.rich:
            from rich.table import Table

            table = Table(title=title, title_justify="left")
            for column in columns:
                table.add_column(column)
            for row in cells:
                table.add_row(*row)
            self.console.print(table)
            return
        if title:
            sys.stdout.write(title + "\n")
        widths = [len(c) for c in columns]
        for row in cells:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]
        for row in [list(columns), *cells]:
            line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False))
            sys.stdout.write(line.rstrip() + "\n")

    @staticmethod
    def warn(message: str) -> None:
        sys.stderr.write(f"Warning: {printable(message)}\n")


def printable(text: str) -> str:
    """Text any terminal can take safely (``display.safe_text``): control characters escaped,
    lone surrogates as ``\\udXXX``, length capped."""
    return safe_text(text)


def fail(out: Out, error: DshForkError) -> NoReturn:
    """One line on stderr (or the JSON error object on stdout) and the contract exit code."""
    if out.json_mode:
        out.json({"error": error.to_json()})
    else:
        sys.stderr.write(f"Error: {printable(error.message)}\n")
        if isinstance(error, Partial):
            for item in error.failed:
                line = f"  failed: {item.get('id')}: {item.get('message')}"
                sys.stderr.write(printable(line) + "\n")
    raise typer.Exit(error.exit_code)


def run(out: Out, action: Callable[[], T]) -> T:
    """Call the library; typed errors become exit codes, an OSError that escaped the library
    IO_ERROR, anything else INTERNAL (both exit 1)."""
    try:
        return action()
    except DshForkError as error:
        fail(out, error)
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        raise typer.Exit(130) from None
    except typer.Exit:
        raise
    except OSError as exc:  # the environment (permissions, a vanished file), not a bug
        fail(out, IoError.of(exc, "access"))
    except MemoryError:
        fail(out, IoError("out of memory: the input needs more than this process may use"))
    except Exception as exc:  # a bug: one line, no traceback, unless debugging
        if os.environ.get("DSH_FORK_DEBUG"):
            raise
        fail(out, InternalError(f"internal error: {type(exc).__name__}: {exc}"))


class Reportable(Protocol):
    def to_json(self) -> Any: ...


R = TypeVar("R", bound=Reportable)


def emit(
    out: Out,
    result: R,
    render: Callable[[Out, R], None],
    *,
    warnings: Iterable[str] = (),
    partial: DshForkError | None = None,
) -> None:
    """Warnings on stderr, then the result (rendered, or one JSON document), then the PARTIAL
    exit when items failed: with ``--json`` the error object carries the result instead."""
    for warning in warnings:
        out.warn(warning)
    if not out.json_mode:
        render(out, result)
    elif partial is None:
        out.json(result.to_json())
    if partial is not None:
        fail(out, partial)


def iso(ms: int | None) -> str:
    """Epoch ms as ISO-8601 UTC for human output."""
    if ms is None:
        return "-"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
