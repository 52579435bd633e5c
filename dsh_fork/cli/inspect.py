"""``dsh-fork inspect``: everything about one session, read-only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer

from .base import Out, app, emit, iso, root_of, run, when
from .options import SESSION_HELP, json_option, root_option, session_argument

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..inspect import InspectReport

SHORT = 10
"""Long boundary lists show their first and last ten items (all of them with --json)."""


def _shorten(items: Sequence[str]) -> str:
    if len(items) <= 2 * SHORT:
        return ", ".join(items) or "-"
    hidden = len(items) - 2 * SHORT
    return f"{', '.join(items[:SHORT])}, … ({hidden} more) …, {', '.join(items[-SHORT:])}"


def _value(value: Any) -> str:
    """Header values as JSON would spell them (true, not True), strings bare."""
    import orjson  # imported when rendering, not on every command's start-up

    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _header_value(key: str, value: Any) -> str:
    """A header field; stored times (``createdAt``) also in ISO-8601 UTC."""
    if key.endswith("At") and isinstance(value, int) and not isinstance(value, bool):
        return when(value)
    return _value(value)


def _section(out: Out, title: str, rows: Sequence[tuple[str, Any]]) -> None:
    """A key/value block: a rich panel on a terminal, indented lines otherwise."""
    if out.rich:
        from rich.panel import Panel
        from rich.table import Table

        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        for key, value in rows:
            grid.add_row(key, "-" if value is None else str(value))
        out.console.print(Panel(grid, title=title, title_align="left"))
        return
    out.line(title)
    width = max((len(key) for key, _ in rows), default=0)
    for key, value in rows:
        out.line(f"  {key.ljust(width)}  {'-' if value is None else value}")
    out.line()


def _overview(out: Out, report: InspectReport) -> None:
    generation = report.log.generation
    binding = "ok" if report.binding is None else f"MISMATCH: {report.binding}"
    frames = report.frames
    frame_text = (
        "plain text log (no frames)"
        if frames is None
        else f"{frames.count} (header frame ok; {frames.with_checksum} with checksum, "
        f"{frames.count - frames.with_checksum} without); largest: frame "
        f"{frames.largest_index + 1}, {frames.largest_bytes} bytes"
    )
    torn = report.log.torn
    torn_text = (
        "none"
        if torn is None
        else f"at byte {torn.offset}, {torn.size} bytes, {len(torn.recovered)} complete "
        f"lines ({report.recoverable_lines} recoverable)"
    )
    _section(
        out,
        f"Session {report.session_id}",
        [
            ("path", str(report.session_dir)),
            (
                "generation",
                f"v{generation.version} {generation.name} ({generation.encoding})",
            ),
            ("root encoding", report.root_encoding),
            ("path binding", binding),
            ("lock", report.lock),
            ("frames", frame_text),
            ("torn tail", torn_text),
        ],
    )
    _section(
        out, "Header", [(key, _header_value(key, value)) for key, value in report.header.items()]
    )


def _generations(out: Out, report: InspectReport) -> None:
    chosen = report.log.generation
    rows = [
        [
            ("* " if g.generation == chosen else "  ") + g.generation.name,
            f"v{g.generation.version}",
            g.size,
            iso(g.mtime_ns // 1_000_000),
            g.events,
            g.turn_ends,
            g.error,
        ]
        for g in report.generations
    ]
    columns = ["file", "version", "bytes", "mtime", "events", "turn/end", "error"]
    out.table("Generations (* = chosen)", columns, rows)
    if report.ignored_files:
        out.line(f"Ignored (non-canonical) files: {', '.join(report.ignored_files)}")
    out.line()


def _events(out: Out, report: InspectReport) -> None:
    rows = [[kind, count] for kind, count in report.by_type.items()]
    out.table(f"Events: {report.event_count}", ["type", "count"], rows)
    out.line()


def _open_turn(report: InspectReport) -> str:
    turn = report.facts.open_turn
    if turn is None:
        return "none"
    text = f"turn {turn.turn} (started at seq {turn.start_seq})"
    if report.open_step is not None:
        text += f", open step {report.open_step}"
    if report.unresolved_calls:
        text += f", unresolved tool calls: {', '.join(report.unresolved_calls)}"
    return text


def _descriptor(report: InspectReport) -> str:
    descriptor = report.descriptor()
    if descriptor is None:
        return "none"
    text = f"seq {descriptor.seq}: v{descriptor.version} {descriptor.mode} {descriptor.label!r}"
    if descriptor.inherited_only:
        text += " (descriptor inherited only)"
    return text


def _turns(out: Out, report: InspectReport) -> None:
    facts = report.facts
    header = report.log.header
    ranges = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in report.boundaries()]
    parent = header.parent_session
    if parent is not None:
        parent += " (exists)" if report.parent_exists else " (missing in this root)"
    provider, model = facts.provider_model
    _section(
        out,
        "Turns and inheritance",
        [
            ("completed turns", len(facts.turn_ends)),
            ("open turn", _open_turn(report)),
            ("fork boundaries", _shorten(ranges)),
            ("turn/end seqs", _shorten([str(s) for s in facts.turn_ends])),
            ("cut", facts.cut),
            ("isSeeded", _value(header.is_seeded)),
            ("parentSession", parent),
            ("tagged markers", ", ".join(map(str, facts.tagged_markers)) or "none"),
            ("last inherited time", when(report.last_inherited_time)),
            ("descriptor", _descriptor(report)),
            ("title", facts.title),
            ("preset", facts.preset),
            ("model", f"{provider}/{model}"),
            ("inherited pending inbox", len(report.pending_inbox())),
        ],
    )
    catalog = report.catalog()
    if catalog:
        rows = [[c.seq, c.child_id, c.mode, c.label, when(c.child_created_at)] for c in catalog]
        out.table("Own-range catalog", ["seq", "childId", "mode", "label", "childCreatedAt"], rows)
        out.line()


def _findings(out: Out, report: InspectReport) -> None:
    if not report.findings:
        out.line("Findings: none")
        return
    rows = [[f.severity, f.code, f.seq, f.message] for f in report.findings]
    out.table("Findings", ["severity", "code", "seq", "message"], rows)


def _event_list(out: Out, report: InspectReport) -> None:
    out.line()
    out.line("Event list")
    for line in report.event_lines or ():
        out.line(f"{line.seq:>7}  {iso(line.time)}  {line.type:<28}  {line.summary}")


def _turn_list(out: Out, report: InspectReport) -> None:
    out.line()
    rows = [
        [
            turn.turn,
            f"{turn.start_seq}-{'open' if turn.end_seq is None else turn.end_seq}",
            iso(turn.end_time),
            turn.user,
            ("yes" if turn.valid_boundary else "no (open)")
            + (" inherited" if turn.inherited else ""),
            ", ".join(turn.tools) or None,
            ", ".join(turn.agents) or None,
        ]
        for turn in report.turn_list or ()
    ]
    # The agents (ids and labels: the longest cells) last, so that they push no column.
    columns = ["turn", "seqs", "ended", "user", "fork boundary", "tools", "agents"]
    out.table(f"Turns: {len(rows)}", columns, rows)


def render(out: Out, report: InspectReport) -> None:
    _overview(out, report)
    _generations(out, report)
    _events(out, report)
    _turns(out, report)
    _findings(out, report)
    if report.event_lines is not None:
        _event_list(out, report)
    if report.turn_list is not None:
        _turn_list(out, report)


@app.command(
    "inspect",
    short_help="Show one session: header, generations, frames, turns, boundaries, findings.",
)
def inspect(
    session: str = session_argument(SESSION_HELP),
    events: bool = typer.Option(False, "--events", help="Also print one line per event."),
    turns: bool = typer.Option(
        False, "--turns", help="Also print one line per turn (what fork --turn N counts)."
    ),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Show a session's header, generations, frames, turns, fork boundaries and findings.

    Read-only. Terms: the cut is the number of events a seeded session inherited (the seq
    of its last tagged end-seed marker); the own-range catalog is the subagent/catalog
    events at or after the cut (the panel DSH shows); path binding checks that the session
    lives in the dir its id and cwd name.

    \b
    Examples:
      dsh-fork inspect session-68a2dc34 --events
      dsh-fork inspect ~/.dsh/sessions/--home-me-shop--/session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a
    """
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")
    report = run(
        out, lambda: porcelain.inspect(ctx, session, events=events, turns=turns), where=ctx.root
    )
    emit(out, report, render)
