"""``dsh-fork doctor``: a read-only health check of a sessions root."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Out, app, emit, root_of
from .options import json_option, root_option, sessions_argument
from .progress import metered

if TYPE_CHECKING:  # the library is imported by the command itself, only when it runs
    from ..doctor import DoctorReport


def render(out: Out, report: DoctorReport) -> None:
    counts = report.counts()
    out.table(
        "Doctor",
        ["root", "encoding", "sessions", "errors", "warnings", "info"],
        [
            [
                report.root,
                report.encoding,
                report.sessions,
                counts["error"],
                counts["warning"],
                counts["info"],
            ]
        ],
    )
    groups: dict[str, list[list[object]]] = {}
    for finding in report.findings:
        title = "Root" if finding.scope == "root" else f"Session {finding.session}"
        where = finding.path if finding.scope == "root" else finding.seq
        groups.setdefault(title, []).append(
            [finding.severity, finding.code, where, finding.message]
        )
    for title, rows in groups.items():
        out.line()
        out.table(title, ["severity", "code", "where", "message"], rows)
    if not report.findings:
        out.line()
        out.line("No findings.")


@app.command(
    name="doctor",
    short_help="Check a sessions root read-only: root rules, logs, lineage and catalogs.",
)
def doctor_command(
    sessions: list[str] | None = sessions_argument(
        "Check only these sessions (root rules always).", "[SESSION ...]"
    ),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Check a sessions root read-only: root rules, every session's log, lineage and catalog.

    Exits 0 without error findings, 10 when any error finding exists (the findings are
    printed in full either way; with --json they are at .findings both times).

    \b
    Examples:
      dsh-fork --root ~/.dsh/sessions doctor
      dsh-fork doctor session-68a2dc34 --json
    """
    from .. import porcelain

    out = Out(json_mode)
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}")

    report = metered(
        out, lambda bar: porcelain.doctor(ctx, sessions or None, progress=bar), where=ctx.root
    )
    emit(out, report, render)
