"""What a relink reports (semantics §4.6): one fork child's ``RelinkSummary`` and the
``RelinkAllResult`` of ``relink --all``, with the rule that says when a rerun can finish
what failed.

Apart from the planner and the walk so that a command that only shows or passes on a relink's
outcome (fork, the CLI, porcelain) reads its shape without the machinery that makes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from .display import counted
from .errors import Partial
from .results import SCHEMA_VERSION, Documented

if TYPE_CHECKING:
    from . import forkdocs as docs

RERUN_CODES = frozenset(
    ("SESSION_LOCKED", "SESSION_STALE", "SESSION_NOT_FOUND", "IO_ERROR", "UNRESUMABLE")
)
"""Failures a later run may not meet again (a lock released, a session that stopped
changing, a transient I/O error, a copy's catalog fact or descriptor a rerun repairs). A
corrupt log, a generation below v4 (DSH must open it first) or a descriptor that makes no
catalog fact fail the same way on every run: no "Next:" is offered for them alone."""


def rerun_helps(items: list[dict[str, Any]]) -> bool:
    """Whether running the same command again can finish any of these failed items."""
    return any(item.get("code") in RERUN_CODES for item in items)


NO_AGENTS_REASON = "no-agents"
"""Why ``relink --all`` leaves a fork alone: it was made with ``fork --no-agents``."""


class RelinkSummary(Documented, Struct):
    """The outcome of one fork child (semantics §4.6); ``to_summary`` is the contract object
    (``to_json`` its plain values, which the operation log records)."""

    fork_child: str | None
    source: str | None
    dry_run: bool
    copied: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    unrelated: list[str] = field(default_factory=list)
    uncatalogable: list[dict[str, Any]] = field(default_factory=list)
    catalogued: list[str] = field(default_factory=list)
    descriptors_repaired: list[str] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unresumable: list[dict[str, str]] = field(default_factory=list)
    """Written copies that failed the check made by reading them back (``resumable``):
    ``{id, message}``; the contract object lists their ids, as the plugin's record does."""
    unlisted: list[Path] | None = None
    """Not part of the outcome: the dirs the run found unlisted, for ``sweep_abandoned``."""
    temp_left: set[str] = field(default_factory=set)
    """Not part of the outcome: the copies whose publish left its temp (rare), by id."""

    def to_summary(self) -> docs.RelinkSummary:
        """The summary, as a fork's document (``agents``), ``relink --all``'s results and the
        operation log hold it; the rows the walk keeps as dicts are converted to their
        Structs, and so checked against the schema, here."""
        from msgspec import convert

        from . import forkdocs as docs

        return docs.RelinkSummary(
            fork_child=self.fork_child,
            source=self.source,
            copied=convert(self.copied, list[docs.CopiedAgent]),
            skipped=convert(self.skipped, list[docs.SkippedAgent]),
            unrelated=self.unrelated,
            uncatalogable=convert(self.uncatalogable, list[docs.UncatalogableAgent]),
            catalogued=self.catalogued,
            descriptors_repaired=self.descriptors_repaired,
            failed=convert(self.failed, list[docs.FailedItem]),
            unresumable=[item["id"] for item in self.unresumable],
            dry_run=self.dry_run,
            warnings=self.warnings,
        )

    def to_document(self) -> docs.RelinkDocument:
        """``relink FORK_CHILD``'s document: the summary and its schema version."""
        from msgspec.structs import asdict

        from . import forkdocs as docs

        return docs.RelinkDocument(schema_version=SCHEMA_VERSION, **asdict(self.to_summary()))

    def clean_copies(self) -> frozenset[str]:
        """The copies published with their temp removed, by id: ``sweep_abandoned`` does not
        list their dirs again. Derived from the summary's rows, so a run of thousands of
        copies keeps no second record of them while it walks."""
        copies = {row["copy"] for row in self.copied if row["copy"] is not None}
        return frozenset(copies - self.temp_left)

    @property
    def ok(self) -> bool:
        """Exit 0: skips and unrelated children are normal outcomes, failures are not."""
        return not self.failed and not self.uncatalogable and not self.unresumable

    def problems(self) -> list[dict[str, Any]]:
        """Every item that makes the run PARTIAL, named: failures, then uncatalogable copies."""
        items = [dict(item) for item in self.failed]
        for item in self.uncatalogable:
            items.append(
                {
                    "id": item["id"],
                    "code": "UNCATALOGABLE",
                    "message": f"no catalog fact can be made: {item['reason']}",
                }
            )
        for item in self.unresumable:
            items.append({"id": item["id"], "code": "UNRESUMABLE", "message": item["message"]})
        return items

    def partial(self) -> Partial | None:
        """The PARTIAL error (exit 10) this outcome amounts to, or None when it is a success."""
        if self.ok:
            return None
        problems = self.problems()
        total = len(self.copied) + len(self.skipped) + len(self.failed)
        total += len(self.uncatalogable)
        rerun = None
        if rerun_helps(problems) and self.fork_child is not None and not self.dry_run:
            import shlex  # only a rerun is quoted

            rerun = f"dsh-fork relink {shlex.quote(self.fork_child)}"  # finishes what failed
        return Partial(
            f"{len(problems)} of {counted(max(total, len(problems)), 'item')} failed",
            problems,
            self.to_json(),
            next_command=rerun,
        )


class RelinkAllResult(Documented, Struct):
    """``relink --all``: one summary per fork child and every failure, each with its fork."""

    results: list[RelinkSummary]
    failed: list[dict[str, Any]]
    forks: int = 0
    dry_run: bool = False
    skipped: list[dict[str, Any]] = field(default_factory=list)
    """Fork children left alone on purpose: ``{forkChild, reason}`` (``no-agents``)."""
    notes: list[str] = field(default_factory=list)
    """Warnings of the whole run (sessions that cannot be read and no fork's tree names)."""

    def to_document(self) -> docs.RelinkAllDocument:
        from msgspec import convert

        from . import forkdocs as docs

        return docs.RelinkAllDocument(
            schema_version=SCHEMA_VERSION,
            results=[r.to_summary() for r in self.results],
            failed=convert(self.failed, list[docs.ForkFailedItem]),
            skipped=convert(self.skipped, list[docs.SkippedFork]),
        )

    @property
    def warnings(self) -> list[str]:
        """Each fork child's warnings, prefixed with its id."""
        return self.notes + [f"{r.fork_child}: {w}" for r in self.results for w in r.warnings]

    def partial(self) -> Partial | None:
        """PARTIAL (exit 10) naming every failed item, where it failed (in which fork
        children, or outside any: a session of the root that cannot be read), and
        ``relink --all`` as the next step only when a rerun can finish something."""
        if not self.failed:
            return None
        forks = {item["forkChild"] for item in self.failed if item["forkChild"] is not None}
        outside = sum(1 for item in self.failed if item["forkChild"] is None)
        inside = len(self.failed) - outside
        of_forks = f"in {len(forks)} of {counted(self.forks, 'fork child', 'fork children')}"
        failed = counted(len(self.failed), "item")
        if not outside:
            message = f"{failed} failed {of_forks}"
        elif not inside:
            message = f"{failed} failed outside any fork child"
        else:
            message = f"{failed} failed: {inside} {of_forks}, {outside} outside any fork child"
        rerun = rerun_helps(self.failed) and not self.dry_run
        return Partial(
            message,
            self.failed,
            self.to_json(),
            next_command="dsh-fork relink --all" if rerun else None,
        )
