"""``dsh-fork relink``: copy a fork's subagent tree under the fork child."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from ..errors import UsageError
from .base import JSON_HELP, ROOT_HELP, Out, app, emit, fail, root_of, run

if TYPE_CHECKING:  # the library is imported when the command runs, not when the CLI loads
    from ..relink import RelinkAllResult, RelinkSummary

Progress = Callable[[int, int, str], None]


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Progress | None]:
    """A rich progress bar on stderr, only when stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("relinking"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, fork_id: str) -> None:
            bar.update(task, completed=done, total=total, description=fork_id)

        yield update


def _render(out: Out, summary: RelinkSummary) -> None:
    data = summary.to_json()
    mode = " (dry run: nothing written)" if summary.dry_run else ""
    out.line(f"relink {data['forkChild']} (fork of {data['source']}){mode}")
    copied = data["copied"]
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
    if data["skipped"]:
        out.line("skipped: " + ", ".join(f"{s['id']} ({s['reason']})" for s in data["skipped"]))
    if data["unrelated"]:
        out.line("unrelated (spawned after the fork point): " + ", ".join(data["unrelated"]))
    for item in data["uncatalogable"]:
        what = item["id"] or f"copy of {item['source']}"
        out.line(f"uncatalogable: {what}: {item['reason']}")
    if data["catalogued"]:
        out.line("catalogued existing copies: " + ", ".join(data["catalogued"]))
    if data["descriptorsRepaired"]:
        out.line("descriptors repaired: " + ", ".join(data["descriptorsRepaired"]))
    for item in data["failed"]:
        out.line(f"failed: {item['id']}: {item['code']}: {item['message']}")


def _render_all(out: Out, result: RelinkAllResult) -> None:
    rows = []
    totals = [0, 0, 0, 0]
    failed_by_fork: dict[str, int] = {}
    for item in result.failed:
        failed_by_fork[item["forkChild"]] = failed_by_fork.get(item["forkChild"], 0) + 1
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
        rows.append((fork_id, *counts))
    for fork_id, count in failed_by_fork.items():
        if fork_id not in seen:
            rows.append((fork_id, 0, 0, 0, count))
            totals[3] += count
    rows.append((f"total ({result.forks} fork children)", *totals))
    mode = " (dry run: nothing written)" if any(r.dry_run for r in result.results) else ""
    out.table(
        f"relink --all{mode}", ("fork child", "copied", "catalogued", "skipped", "failed"), rows
    )


@app.command()
def relink(
    fork_child: str | None = typer.Argument(
        None, metavar="FORK_CHILD", help="Fork child id, session dir or log file."
    ),
    all_forks: bool = typer.Option(False, "--all", help="Relink every fork child of the root."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the full plan; write nothing under the root."
    ),
    json_mode: bool = typer.Option(False, "--json", help=JSON_HELP),
    root: str | None = typer.Option(None, "--root", help=ROOT_HELP, metavar="PATH"),
) -> None:
    """Copy the subagent tree of a fork child's parent under the fork child.

    Children of the parent that belong to the fork's branch are copied (never moved) with
    their own subtrees and catalogued in the fork child's panel; a rerun completes a crashed
    run and otherwise changes nothing.

    Example: dsh-fork relink session-6f1c8d2e-3b4a-4c5d-9e8f-0a1b2c3d4e5f --dry-run
    """
    from ..relink import relink_all_arg, relink_arg

    out = Out(json_mode)
    if all_forks == (fork_child is not None):
        fail(out, UsageError("give either FORK_CHILD or --all"))
    if all_forks:
        with _progress_bar(True) as progress:
            result = run(
                out, lambda: relink_all_arg(root_of(root), dry_run=dry_run, progress=progress)
            )
        warnings = [f"{r.fork_child}: {w}" for r in result.results for w in r.warnings]
        emit(out, result, _render_all, warnings=warnings, partial=result.partial())
        return
    assert fork_child is not None
    summary = run(out, lambda: relink_arg(fork_child, root_of(root), dry_run=dry_run))
    emit(out, summary, _render, warnings=summary.warnings, partial=summary.partial())
