"""``dsh-fork inspect``: everything about one session, read-only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson
import typer

from .base import JSON_HELP, ROOT_HELP, Out, app, emit, iso, root_of, run

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
    return value if isinstance(value, str) else orjson.dumps(value).decode()


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


def _overview(out: Out, report: InspectReport, data: dict[str, Any]) -> None:
    gen = data["generation"]
    binding = "ok" if report.binding is None else f"MISMATCH: {report.binding}"
    frames = data["frames"]
    frame_text = (
        "plain text log (no frames)"
        if frames is None
        else f"{frames['count']} (header frame ok; {frames['withChecksum']} with checksum, "
        f"{frames['withoutChecksum']} without); largest: frame {frames['largest']['frame']}, "
        f"{frames['largest']['bytes']} bytes"
    )
    torn = data["tornTail"]
    torn_text = (
        "none"
        if torn is None
        else f"at byte {torn['offset']}, {torn['bytes']} bytes, {torn['completeLines']} complete "
        f"lines ({torn['recoverableLines']} recoverable)"
    )
    _section(
        out,
        f"Session {report.session_id}",
        [
            ("path", data["path"]),
            ("generation", f"v{gen['version']} {gen['file']} ({gen['encoding']})"),
            ("root encoding", data["rootEncoding"]),
            ("path binding", binding),
            ("lock", data["lock"]),
            ("frames", frame_text),
            ("torn tail", torn_text),
        ],
    )
    _section(out, "Header", [(key, _value(value)) for key, value in report.header.items()])


def _generations(out: Out, report: InspectReport, data: dict[str, Any]) -> None:
    rows = [
        [
            ("* " if g["chosen"] else "  ") + g["file"],
            f"v{g['version']}",
            g["size"],
            iso(g["mtime"]),
            g["events"],
            g["turnEnds"],
            g.get("error"),
        ]
        for g in data["generations"]
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


def _turns(out: Out, report: InspectReport, data: dict[str, Any]) -> None:
    facts = report.facts
    open_turn = data["turns"]["open"]
    if open_turn is None:
        open_text = "none"
    else:
        open_text = f"turn {open_turn['turn']} (started at seq {open_turn['startSeq']})"
        if open_turn["openStep"] is not None:
            open_text += f", open step {open_turn['openStep']}"
        if open_turn["unresolvedCalls"]:
            open_text += f", unresolved tool calls: {', '.join(open_turn['unresolvedCalls'])}"
    ranges = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in report.boundaries()]
    inheritance = data["inheritance"]
    parent = inheritance["parentSession"]
    if parent is not None:
        parent += " (exists)" if inheritance["parentExists"] else " (missing in this root)"
    markers = inheritance["markers"]
    descriptor = data["descriptor"]
    if descriptor is None:
        descriptor_text = "none"
    else:
        descriptor_text = (
            f"seq {descriptor['seq']}: v{descriptor['version']} {descriptor['mode']} "
            f"{descriptor['label']!r}"
        )
        if descriptor["inheritedOnly"]:
            descriptor_text += " (descriptor inherited only)"
    provider = data["model"]
    _section(
        out,
        "Turns and inheritance",
        [
            ("completed turns", len(facts.turn_ends)),
            ("open turn", open_text),
            ("fork boundaries", _shorten(ranges)),
            ("turn/end seqs", _shorten([str(s) for s in facts.turn_ends])),
            ("cut", inheritance["cut"]),
            ("isSeeded", _value(inheritance["isSeeded"])),
            ("parentSession", parent),
            ("tagged markers", ", ".join(map(str, markers)) or "none"),
            ("last inherited time", iso(inheritance["lastInheritedTime"])),
            ("descriptor", descriptor_text),
            ("title", data["title"]),
            ("preset", data["preset"]),
            ("model", f"{provider['provider']}/{provider['model']}"),
            ("inherited pending inbox", len(data["pendingInbox"])),
        ],
    )
    catalog = data["catalog"]
    if catalog:
        rows = [
            [c["seq"], c["childId"], c["mode"], c["label"], c["childCreatedAt"]] for c in catalog
        ]
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
            turn.number,
            f"{turn.start_seq}-{'open' if turn.end_seq is None else turn.end_seq}",
            iso(turn.end_time),
            turn.user,
            ", ".join(turn.tools) or None,
            ", ".join(turn.agents) or None,
            ("yes" if turn.is_boundary else "no (open)") + (" inherited" if turn.inherited else ""),
        ]
        for turn in report.turn_list or ()
    ]
    columns = ["turn", "seqs", "ended", "user", "tools", "agents", "fork boundary"]
    out.table(f"Turns: {len(rows)}", columns, rows)


def render(out: Out, report: InspectReport) -> None:
    data = report.to_json(with_events=False)
    _overview(out, report, data)
    _generations(out, report, data)
    _events(out, report)
    _turns(out, report, data)
    _findings(out, report)
    if report.event_lines is not None:
        _event_list(out, report)
    if report.turn_list is not None:
        _turn_list(out, report)


@app.command()
def inspect(
    session: str = typer.Argument(..., metavar="SESSION", help="Session id, dir or log file."),
    events: bool = typer.Option(False, "--events", help="Also print one line per event."),
    turns: bool = typer.Option(
        False, "--turns", help="Also print one line per turn (what fork --turn N counts)."
    ),
    json_mode: bool = typer.Option(False, "--json", help=JSON_HELP),
    root: str | None = typer.Option(None, "--root", help=ROOT_HELP, metavar="PATH"),
) -> None:
    """Show a session's header, generations, frames, turns, fork boundaries and findings.

    Example: dsh-fork inspect session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a --events
    """
    from ..inspect import inspect_arg

    out = Out(json_mode)
    report = run(out, lambda: inspect_arg(session, root_of(root), events=events, turns=turns))
    emit(out, report, render, warnings=report.warnings)
