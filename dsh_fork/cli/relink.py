"""``dsh-fork relink``: copy a fork's subagent tree under the fork child."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ..display import counted
from ..errors import UsageError
from .base import Out, app, emit, fail, root_of
from .options import dry_run_option, family_argument, json_option, root_option
from .progress import metered

if TYPE_CHECKING:  # the library is imported when the command runs, not when the CLI loads
    from ..relinkresult import RelinkAllResult, RelinkSummary
    from .progress import Meter

SKIP_REASONS = {
    "running": "running: a live DSH process holds it; rerun later",
    "open": "open: no completed turn yet",
}


def _render(out: Out, summary: RelinkSummary) -> None:
    mode = " (dry run: nothing written)" if summary.dry_run else ""
    out.line(f"relink {summary.fork_child} (fork of {summary.source}){mode}")
    copied = summary.copied
    if copied:
        rows = [
            (c["source"], c["copy"] or "(new)", c["parent"] or "(new copy)", c["depth"])
            for c in copied
        ]
        out.table(
            f"{'planned copies' if summary.dry_run else 'copied'}: {len(copied)}",
            ("source", "copy", "parent", "depth"),
            rows,
        )
    else:
        out.line("copied: none")
    if summary.skipped:
        out.line(
            "skipped: "
            + ", ".join(
                f"{s['id']} ({SKIP_REASONS.get(s['reason'], s['reason'])})" for s in summary.skipped
            )
        )
    if summary.unrelated:
        out.line("unrelated (spawned after the fork point): " + ", ".join(summary.unrelated))
    for item in summary.uncatalogable:
        what = item["id"] or f"copy of {item['source']}"
        out.line(f"uncatalogable: {what}: {item['reason']}")
    if summary.catalogued:
        out.line(
            "catalog repaired (existing copies added to the panel): "
            + ", ".join(summary.catalogued)
        )
    if summary.descriptors_repaired:
        out.line("descriptors repaired: " + ", ".join(summary.descriptors_repaired))


ALL_COLUMNS = ("fork child", "copied", "catalog repaired", "skipped", "failed")


def _render_all(out: Out, result: RelinkAllResult) -> None:
    """One row per fork child that had something done or to report; the fork children with
    nothing to do are one count (all rows with ``-v``)."""
    failed_by_fork: dict[str, int] = {}
    for item in result.failed:
        failed_by_fork[item["forkChild"]] = failed_by_fork.get(item["forkChild"], 0) + 1
    rows: list[tuple[object, ...]] = []
    totals = [0, 0, 0, 0]
    unchanged = 0
    seen: set[str] = set()
    for summary in result.results:
        fork_id = summary.fork_child or "-"
        seen.add(fork_id)
        counts = [
            len(summary.copied),
            len(summary.catalogued),
            len(summary.skipped),
            failed_by_fork.get(fork_id, 0),
        ]
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        if any(counts) or out.verbose:
            rows.append((fork_id, *counts))
        else:
            unchanged += 1
    for fork_id, count in failed_by_fork.items():
        if fork_id not in seen:
            rows.append((fork_id or "(outside any fork)", 0, 0, 0, count))
            totals[3] += count
    dry = any(r.dry_run for r in result.results)
    mode = " (dry run: nothing written)" if dry else ""
    if rows:
        out.table(f"relink --all{mode}", ALL_COLUMNS, rows)
    else:
        out.line(f"relink --all{mode}")
    if unchanged:
        forks = counted(unchanged, "fork child", "fork children")
        out.line(f"{forks} had nothing to copy or repair")
    if result.skipped:
        out.line(
            "left alone (forked with --no-agents; name one to relink it): "
            + ", ".join(item["forkChild"] for item in result.skipped)
        )
    copied, repaired, skipped, failed = totals
    verb = "would copy" if dry else "copied"
    out.line(
        f"total: {counted(result.forks, 'fork child', 'fork children')}; {verb} {copied}, "
        f"catalog repaired {repaired}, skipped {skipped}, failed {failed}"
    )
    reasons = {item["reason"] for r in result.results for item in r.skipped}
    if "running" in reasons:
        out.line("skipped items that are running (held by a live DSH process): rerun later")
    if "open" in reasons:
        out.line("skipped items that are open (no completed turn yet): rerun once they have one")


def _interrupted(bar: Meter) -> str:
    """What Ctrl-C says: how many agents were done, and how to finish."""
    return (
        f"interrupted: {bar.summary()}; rerun `dsh-fork relink --all` to finish (a rerun "
        "completes a half-done fork child)"
    )


@app.command(
    "relink",
    short_help="Copy a fork's subagent tree under the fork child (never a move).",
)
def relink(
    fork_child: str | None = family_argument(
        "Fork child id (or a unique prefix), session dir or log file.", "FORK_CHILD"
    ),
    all_forks: bool = typer.Option(False, "--all", help="Relink every fork child of the root."),
    dry_run: bool = dry_run_option("Print the full plan; write nothing under the root."),
    json_mode: bool = json_option(),
    root: str | None = root_option(),
) -> None:
    """Copy the subagent tree of a fork child's parent under the fork child.

    Children of the parent that belong to the fork's branch (spawned before the fork point)
    are copied, never moved, with their own subtrees, and catalogued in the fork child's
    panel (its own-range catalog). A rerun completes a crashed run and otherwise changes
    nothing. "catalog repaired" counts existing copies that lacked their catalog entry;
    "uncatalogable" children have no label or mode to catalogue them with and are not
    copied. A child held by a live DSH process is skipped: rerun later.

    \b
    Examples:
      dsh-fork relink session-6f1c8d2e --dry-run
      dsh-fork relink --all --json
    """
    from .. import porcelain

    out = Out(json_mode)
    if all_forks == (fork_child is not None):
        fail(out, UsageError("give either FORK_CHILD or --all"))
    ctx = porcelain.Context.of(root_of(root))
    out.info(f"root: {ctx.root}; operation log: {ctx.oplog}")
    if all_forks:
        result = metered(
            out,
            lambda bar: porcelain.relink_all(ctx, dry_run=dry_run, progress=bar),
            where=ctx.root,
            interrupted=_interrupted,
        )
        emit(out, result, _render_all)
        return
    assert fork_child is not None
    child = fork_child
    summary = metered(
        out,
        lambda bar: porcelain.relink(ctx, child, dry_run=dry_run, progress=bar),
        where=ctx.root,
    )
    emit(out, summary, _render)
