"""What every check reports: a ``Finding`` (severity, code, message, the event it is about) and
the counts by severity.

``inspect`` and ``doctor`` report what DSH would refuse (``error``), what only DSH's runtime
folds or dsh-fork's own conventions care about (``warning``), and legal states worth knowing
(``info``). Apart from the rules so that every rule family (the event checklist, the session
dir checks, doctor's fork and workspace rules) shares one shape of finding without importing
another family.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from msgspec import UNSET, Struct

from .results import Documented

if TYPE_CHECKING:
    from . import sessiondocs


Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


FINDINGS_PER_CODE = 50
"""Findings kept per code and session; the rest are counted in one summary finding."""


class Finding(Documented, Struct, frozen=True):
    """One checklist result; ``seq`` names the event it is about, when there is one."""

    severity: Severity
    code: str
    message: str
    seq: int | None = None

    def to_document(self) -> sessiondocs.LogFinding:
        from . import sessiondocs

        seq = UNSET if self.seq is None else self.seq
        return sessiondocs.LogFinding(self.severity, self.code, self.message, seq)


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """``{"error": n, "warning": n, "info": n}``."""
    out: dict[str, int] = dict.fromkeys(SEVERITIES, 0)
    for finding in findings:
        out[finding.severity] += 1
    return out


class _State(Struct, eq=False):
    """State of one concern of the checks."""
