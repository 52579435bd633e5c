"""The typer app, shared options, output and the mapping of typed errors to exit codes.

Commands stay a few lines each: parse, call one porcelain function, render the typed result
by attribute, and let ``run`` turn a typed error into its contract exit code and one clear
line. ``Group.main`` catches what happens outside a command: the argument parser's errors
(JSON under ``--json`` too), a reader that closed stdout early, and Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import StrEnum
from typing import Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup, TyperOption

try:  # typer 0.28 carries its own copy of click; earlier releases use the package
    from typer import _click as click
except ImportError:  # pragma: no cover
    import click  # type: ignore[no-redef,import-not-found,unused-ignore]

from .. import __version__, faults
from ..display import safe_text
from ..errors import (
    BROKEN_PIPE_EXIT,
    EXIT_CODES,
    INTERRUPTED_EXIT,
    DshForkError,
    InternalError,
    IoError,
    Partial,
    UsageError,
    unwritten_output,
)
from ..results import Result, document_of, error_document
from ..times import iso_ms

T = TypeVar("T")


def _exit_table() -> str:
    width = max(len(code) for _, code, _ in EXIT_CODES)
    lines = [f"  {exit:>3}  {code.ljust(width)}  {meaning}" for exit, code, meaning in EXIT_CODES]
    return "\n".join(lines)


HELP = f"""Offline fork, subagent relink and inspection of DSH session logs.

The sessions root is --root, else $DSH_HOME/sessions (DSH_HOME defaults to ~/.dsh). A
SESSION is a session id, a unique prefix of one (its `session-` may be left out), a session
dir, or a log file inside one.
With --json every command prints exactly one JSON document on stdout (`dsh-fork schema
COMMAND` prints its JSON Schema; an error is {{"error": {{"code": ..., "message": ...}}}}).

\b
Exit codes:
{_exit_table()}
`diff --exit-code` alone exits 1 for "the sessions differ", as git's does.

docs/glossary.md explains the terms the commands use (cut, end-seed marker, own-range
catalog, path binding, copy, ...); docs/commands/ has a page per command."""


class Group(TyperGroup):
    """The command group, ending every run itself (see ``main``)."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command; parser errors become the contract's USAGE (one JSON document
        under ``--json``), a closed stdout a quiet exit 141, Ctrl-C exit 130."""
        argv = arranged(self, sys.argv[1:] if args is None else args)
        json_mode = "--json" in argv
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
            _flush()
        except click.exceptions.ClickException as exc:
            code = _usage(exc, json_mode)
        except typer.Abort:
            sys.stderr.write("Error: interrupted\n")
            code = INTERRUPTED_EXIT
        except BrokenPipeError:
            code = _broken_pipe()
        except SystemExit:  # typer's own EPIPE handling ends with sys.exit(1)
            if not isinstance(sys.stdout, click.utils.PacifyFlushWrapper):
                raise
            code = _broken_pipe()
        except OSError as exc:  # the library's own are mapped by ``run``: this is the output
            code = _output_failed(exc)
        code = code if isinstance(code, int) else 0
        if not standalone_mode:
            return code
        sys.exit(code)


def arranged(group: TyperGroup, args: Sequence[str]) -> list[str]:
    """``args`` with the app's options and ``--json`` on the side their parser reads them
    (``argv.arrange``, for the command ``args`` name)."""
    from .argv import arrange, command_index

    index = command_index(args)
    command = None if index is None else group.commands.get(args[index])
    if command is None:
        return list(args)
    names: set[str] = set()
    valued: set[str] = set()
    for param in command.params:
        if isinstance(param, TyperOption):
            opts = {*param.opts, *param.secondary_opts}
            names |= opts
            if not param.is_flag and not param.count:
                valued |= opts
    return arrange(args, names, valued)


def _flush() -> None:
    sys.stdout.flush()


def _usage(exc: click.exceptions.ClickException, json_mode: bool) -> int:
    """A parser error: one line on stderr naming the help to read (not click's usage block),
    or the USAGE JSON document."""
    no_args = getattr(click.exceptions, "NoArgsIsHelpError", ())
    if isinstance(exc, no_args):
        exc.show()
        return int(exc.exit_code)
    if not json_mode:
        sys.stderr.write(printable(usage_line(exc)) + "\n")
        return UsageError.exit_code
    error = UsageError(exc.format_message())
    _write_json(error_document(error))
    return error.exit_code


def usage_line(exc: click.exceptions.ClickException) -> str:
    """``Error: <what is wrong> (see '<command> --help')``: the one line of a parser error."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "dsh-fork"
    return f"Error: {message} (see '{command} --help')"


def _broken_pipe() -> int:
    """The reader of stdout went away (``| head -1``): stop quietly, as Unix tools do."""
    _drop_stdout()
    return BROKEN_PIPE_EXIT


def _output_failed(exc: OSError) -> int:
    """stdout refused the output (``errors.unwritten_output``). What the command did is done
    (a fork's child exists); only its report was lost."""
    code, line = unwritten_output(exc)
    if line is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(printable(line) + "\n")
    _drop_stdout()
    return code


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the output still buffered is dropped at exit
    instead of failing a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # not a real file (an in-process test runner)
        pass


app = typer.Typer(
    name="dsh-fork",
    cls=Group,
    help=HELP,
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

ROOT_HELP = "Sessions root (default: $DSH_HOME/sessions, DSH_HOME defaults to ~/.dsh)."
JSON_HELP = "Print exactly one JSON document on stdout (errors too)."


class Color(StrEnum):
    auto = "auto"
    always = "always"
    never = "never"


class State:
    root: str | None = None
    quiet: bool = False
    verbose: bool = False
    color: Color = Color.auto


state = State()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dsh-fork {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    root: str | None = typer.Option(None, "--root", help=ROOT_HELP, metavar="PATH"),
    quiet: bool = typer.Option(
        False, "-q", "--quiet", help="Print only errors (the exit code tells the outcome)."
    ),
    verbose: bool = typer.Option(
        False, "-v", "--verbose", help="Also print the root, the operation log and error details."
    ),
    color: Color = typer.Option(
        Color.auto,
        "--color",
        help="Colour in terminal output: auto (on a terminal, unless NO_COLOR is set), "
        "always or never.",
    ),
    version: bool = typer.Option(
        False,
        "-V",
        "--version",
        help="Show the version and exit.",
        callback=_version,
        is_eager=True,
    ),
) -> None:
    state.root = root
    state.quiet = quiet
    state.verbose = verbose and not quiet
    state.color = color
    faults.load_from_env()  # a no-op outside the test suite (faults.enable_env)


def root_of(command_root: str | None) -> str | None:
    """``--root`` given after the subcommand wins over the one given before it."""
    return command_root if command_root is not None else state.root


def complete_session(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a SESSION: the ids and short ids of the root starting with the
    text (``lookup.completions``)."""
    from ..layout import resolve_root
    from ..lookup import completions

    root = ctx.params.get("root")
    parent = ctx.parent
    while root is None and parent is not None:
        root = parent.params.get("root")
        parent = parent.parent
    try:
        return completions(resolve_root(root), incomplete)
    except (OSError, ValueError):
        return []


class Out:
    """stdout for results (rich only on a terminal), stderr for warnings and errors."""

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.quiet = state.quiet
        self.verbose = state.verbose
        self.tty = sys.stdout.isatty()
        self.color = colour_wanted(self.tty)
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
        _write_json(value)

    def line(self, text: str = "") -> None:
        text = printable(text)
        if self.rich:
            self.console.print(text, markup=False, overflow="fold")
        else:
            sys.stdout.write(text + "\n")

    def table(
        self,
        title: str | None,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]] | Callable[[], Iterable[Sequence[Any]]],
    ) -> None:
        """A table by display width (``tables``): on a terminal fitted to the window, ids and
        paths whole, the other columns folding; piped one row per line, never wrapped. Rows
        given as a function that makes them are made twice when piped, to measure the columns
        then print each line, so a table of 100,000 rows never holds its cells."""
        from . import tables

        if not self.rich:
            lines = (
                tables.made_lines(columns, lambda: _cells_of(rows()))
                if callable(rows)
                else tables.plain_lines(columns, list(_cells_of(rows)))
            )
            if title:
                sys.stdout.write(title + "\n")
            for line in lines:
                sys.stdout.write(line + "\n")
            return
        cells = list(_cells_of(rows() if callable(rows) else rows))
        if not tables.fits(columns, cells, self.console.width):
            self._records(title, columns, cells)
            return
        self.console.print(tables.rich_table(title, columns, cells))

    def _records(self, title: str | None, columns: Sequence[str], cells: list[list[str]]) -> None:
        """Rows too wide for the terminal: the id or path column whole on its own line (to
        copy), then ``column: value`` pairs, packed into lines that break between pairs."""
        from rich.text import Text

        from .tables import key_column, record_lines

        if title:
            self.console.print(Text(title, style="bold"))
        key = key_column(columns)
        width = max(self.console.width - 2, 20)
        for row in cells:
            self.console.print(Text(row[key], style="bold"), overflow="fold")
            for line in record_lines(columns, row, width):
                self.console.print(Text("  " + line), overflow="fold")

    def warn(self, message: str) -> None:
        if not self.quiet:
            sys.stderr.write(f"Warning: {printable(message)}\n")

    def info(self, message: str) -> None:
        """A ``-v`` line on stderr."""
        if self.verbose:
            sys.stderr.write(f"{printable(message)}\n")


def colour_wanted(terminal: bool) -> bool:
    """``--color``: always, never, or (auto) on a terminal unless ``NO_COLOR`` is set."""
    if state.color is Color.auto:
        return terminal and not os.environ.get("NO_COLOR")
    return state.color is Color.always


def _write_json(value: Any) -> None:
    from .jsonout import write_document  # only a command printing JSON pays for its imports

    write_document(value, sys.stdout.buffer)
    sys.stdout.flush()


def _cells_of(rows: Iterable[Sequence[Any]]) -> Iterator[list[str]]:
    """The printed cells of each row: None as ``-``, the rest as printable text."""
    for row in rows:
        yield ["-" if c is None else printable(str(c)) for c in row]


def printable(text: str) -> str:
    """Text any terminal can take safely (``display.safe_text``): control characters escaped,
    lone surrogates as ``\\udXXX``, length capped."""
    return safe_text(text)


RERUN_LATER = "; rerun later"
"""Appended to a SESSION_LOCKED line: the lock is DSH's, the same command works once freed."""


def failure_line(item: dict[str, Any]) -> str:
    """One failed item: its id once, its code, its message (locked items: rerun later)."""
    item_id = str(item.get("id"))
    code = item.get("code")
    message = str(item.get("message"))
    for prefix in (f"{item_id}: ", f"{item_id} "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
            break
    text = f"failed: {item_id} ({code}): {message}"
    if code == "SESSION_LOCKED":
        text += RERUN_LATER
    return text


def fail(out: Out, error: DshForkError) -> NoReturn:
    """One line on stderr (or the JSON error object on stdout) and the contract exit code."""
    if out.json_mode:
        out.json(error_document(error))
    else:
        _error_lines(out, error)
    raise typer.Exit(error.exit_code)


def _error_lines(out: Out, error: DshForkError) -> None:
    later = RERUN_LATER if error.code == "SESSION_LOCKED" else ""
    sys.stderr.write(f"Error: {printable(error.message)}{later}\n")
    for line in error.listing:
        sys.stderr.write(f"  {printable(line)}\n")
    if isinstance(error, Partial):
        for item in error.failed:
            sys.stderr.write("  " + printable(failure_line(item)) + "\n")
        if error.next_command is not None:
            sys.stderr.write(f"Next: run `{printable(error.next_command)}`\n")
    if out.verbose:
        for key, value in error.details.items():
            sys.stderr.write(f"  {key}: {printable(str(value))}\n")


def run(
    out: Out,
    action: Callable[[], T],
    *,
    where: object | None = None,
    interrupted: Callable[[], str] | None = None,
) -> T:
    """Call the library; typed errors become exit codes, an OSError that escaped the library
    IO_ERROR (exit 11, naming ``where`` when the OSError names no file), anything else
    INTERNAL (exit 1). Ctrl-C exits 130 with ``interrupted()``'s done/remaining summary."""
    try:
        return action()
    except DshForkError as error:
        fail(out, error)
    except KeyboardInterrupt:
        message = "interrupted" if interrupted is None else interrupted()
        sys.stderr.write(f"Error: {message}\n")
        raise typer.Exit(INTERRUPTED_EXIT) from None
    except typer.Exit:
        raise
    except BrokenPipeError:
        raise
    except OSError as exc:  # the environment (permissions, a vanished file), not a bug
        fail(out, IoError.of(exc, "access", where=where))
    except MemoryError:
        fail(out, IoError("out of memory: the input needs more than this process may use"))
    except Exception as exc:  # a bug: one line, no traceback, unless debugging
        if os.environ.get("DSH_FORK_DEBUG"):
            raise
        fail(out, InternalError(f"internal error: {type(exc).__name__}: {exc}"))


R = TypeVar("R", bound=Result)


def emit(out: Out, result: R, render: Callable[[Out, R], None]) -> None:
    """Warnings on stderr, then the result in full (rendered, or one JSON document), then the
    PARTIAL exit when items failed: under ``--json`` the document carries the error beside the
    result, so every field has one JSON path whether or not the run was partial."""
    for warning in result.warnings:
        out.warn(warning)
    partial = result.partial()
    if out.json_mode:
        out.json(document_of(result, partial, rows_to_write=True))
    elif not out.quiet:
        render(out, result)
    if partial is not None:
        if not out.json_mode:
            _error_lines(out, partial)
        raise typer.Exit(partial.exit_code)


def iso(ms: int | None) -> str:
    """Epoch ms as ISO-8601 UTC for human output."""
    return iso_ms(ms) or "-"


def when(ms: object) -> str:
    """Epoch ms and its ISO-8601 UTC form, as human output shows a stored time (a value that
    is no time is shown as it is)."""
    if ms is None:
        return "-"
    if isinstance(ms, int) and not isinstance(ms, bool):
        text = iso_ms(ms)
        if text is not None:
            return f"{text} ({ms})"
    return str(ms)
