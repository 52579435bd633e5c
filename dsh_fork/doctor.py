"""``doctor``: a read-only check of a whole root (semantics §7).

Root rules first (the ones that make DSH refuse the whole root), then every session (or the named
ones) through the v4 checklist of ``validation``, then lineage: parents, cycles, depths and the
catalog against what is on disk. Nothing is written and no lock is taken; a lock is only probed.
A file that cannot be read is a finding, never a crash.
"""

from __future__ import annotations

import errno
import os
import shlex
from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any, Literal

from msgspec import UNSET, Struct, field

from . import rootdocs as docs
from .discovery import Root
from .errors import IoError, Partial, SessionNotFound, UnsupportedFormat
from .findings import SEVERITIES, Severity
from .generations import SUPPORTED_VERSION, is_temp_name, list_generations, non_canonical_files
from .kinds import (
    EVIDENCE_TYPES,
    Evidence,
    KindRule,
    header_kind,
    read_evidence,
    unsettled,
)
from .layout import oplog_path as default_oplog_path
from .layout import resolve_root
from .locking import probe
from .model import derive
from .progress import SILENT, Progress
from .records import header_version
from .results import SCHEMA_VERSION, Documented
from .sessionarg import locate
from .sessiondocs import Counts
from .sessionentry import SessionEntry
from .validation import DirCheck, binding_problem, check_dir

Scope = Literal["root", "session"]
ROOT_CODES = frozenset(("PATH_MISMATCH", "VERSION_MISMATCH", "EMPTY_DIR"))
"""Codes ``check_dir`` also reports that doctor states once, as root rules."""
FLAT_SUFFIXES = (".jsonl", ".jsonl.zstd")
EVIDENCE = frozenset(EVIDENCE_TYPES)


class DoctorFinding(Documented, Struct, frozen=True):
    severity: Severity
    scope: Scope
    code: str
    message: str
    session: str | None = None
    path: str | None = None
    seq: int | None = None

    def to_document(self) -> docs.Finding:
        return docs.Finding(
            severity=self.severity,
            scope=self.scope,
            session=UNSET if self.session is None else self.session,
            path=UNSET if self.path is None else self.path,
            code=self.code,
            message=self.message,
            seq=UNSET if self.seq is None else self.seq,
        )


class DoctorReport(Documented, Struct):
    root: Path
    encoding: str
    sessions: int
    findings: list[DoctorFinding] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(SEVERITIES, 0)
        for finding in self.findings:
            out[finding.severity] += 1
        return out

    @property
    def errors(self) -> list[DoctorFinding]:
        return [f for f in self.findings if f.severity == "error"]

    def to_document(self) -> docs.DoctorDocument:
        return docs.DoctorDocument(
            schema_version=SCHEMA_VERSION,
            root=str(self.root),
            encoding=self.encoding,
            sessions=self.sessions,
            findings=[f.to_document() for f in self.findings],
            counts=Counts(**self.counts()),
        )

    @property
    def warnings(self) -> list[str]:
        """Command warnings (findings of severity warning are findings, not these)."""
        return []

    def partial(self) -> Partial | None:
        """The PARTIAL error naming every failing root rule and session (exit 10), or None
        when no finding is an error."""
        errors = self.errors
        if not errors:
            return None
        failed = [{"id": f.session or "root", "code": f.code, "message": f.message} for f in errors]
        sessions = {f.session for f in errors if f.scope == "session"}
        root_rules = sum(1 for f in errors if f.scope == "root")
        return Partial(
            f"doctor found {len(errors)} errors ({root_rules} root rule findings, "
            f"{len(sessions)} of {self.sessions} sessions)",
            failed=failed,
            result=self.to_json(),
        )


# -- root rules -------------------------------------------------------------------------------


def _root_rules(root: Root, refused: set[str]) -> list[DoctorFinding]:
    """The root rules' findings; ``refused`` gets the dir texts of the listed sessions whose
    header does not validate (the others' headers and path bindings are checked here, once)."""
    out: list[DoctorFinding] = []

    def add(severity: Severity, code: str, message: str, **where: Any) -> None:
        out.append(DoctorFinding(severity, "root", code, message, **where))

    entries = root.entries()
    encoding = root.encoding()
    if encoding == "mixed":
        plain = [g.path for e in entries for g in e.generations if g.encoding == "plain"]
        zstd = sum(1 for e in entries for g in e.generations if g.encoding == "zstd")
        shown = ", ".join(str(p) for p in plain[:5])
        more = f" and {len(plain) - 5} more" if len(plain) > 5 else ""
        add(
            "error",
            "ENCODING_MIXED",
            f"the root mixes encodings: {zstd} .jsonl.zstd and {len(plain)} .jsonl generation "
            f"files ({shown}{more}); DSH refuses a mixed root and dsh-fork will not write to it",
        )
    cannot_list: list[tuple[Path, OSError]] = []
    for project in root.project_dirs():  # each listed once, for flat files and whether it can be
        try:
            names = _files(project, strict=True)
        except OSError as exc:
            cannot_list.append((project, exc))
            continue
        for name in names:
            if name.endswith(FLAT_SUFFIXES):
                path = project / name
                add(
                    "error",
                    "FLAT_FILE",
                    f"{path} is a retired flat-layout session file; DSH refuses the root",
                    path=str(path),
                )
    by_id: dict[str, list[SessionEntry]] = {}
    for entry in entries:
        if entry.id is not None:
            by_id.setdefault(entry.id, []).append(entry)
    for session_id, same in by_id.items():
        if len(same) > 1:
            projects = ", ".join(e.project for e in same)
            add(
                "error",
                "DUPLICATE_ID",
                f"session {session_id} appears in {len(same)} project directories ({projects}); "
                "DSH refuses to list the root",
                session=session_id,
            )
    for entry in entries:
        # from the listed texts: no Path or Generation is built for a dir that passes
        log_path, version = entry.log_path, entry.version
        if log_path is None or version is None:
            continue
        header = entry.header
        if header is not None:
            problem = binding_problem(entry.dir_text, header)
            if problem is not None:
                add(
                    "error",
                    "PATH_MISMATCH",
                    f"{problem}; DSH refuses the root",
                    session=entry.id_or_dir,
                    path=log_path,
                )
            entry.forget()  # back to its header line until its turn comes
            continue
        refused.add(entry.dir_text)
        raw = header_version(entry.raw_fields)
        if raw is not None and raw != version:
            add(
                "error",
                "VERSION_MISMATCH",
                f"{os.path.basename(log_path)} holds a header of version {raw}; DSH refuses "
                "the root",
                session=entry.id_or_dir,
                path=log_path,
            )
    for project, error in cannot_list:
        add(
            "error",
            "UNREADABLE",
            f"cannot list the project dir {project}: {error.strerror}; its sessions are not "
            "checked",
            path=str(project),
        )
    for linked in root.unlisted():  # a project or session dir that is a symbolic link
        refusal = linked.error
        if isinstance(refusal, IoError) and refusal.errno == errno.ELOOP:
            add(
                "error",
                "UNREADABLE",
                f"{refusal.message}; what it leads to is not checked",
                path=str(linked.session_dir),
            )
    # as text, like the listing's own: no Path is built for a dir with nothing to report
    listed = {entry.dir_text: entry for entry in entries if entry.version is not None}
    for text in root.listed_candidates():
        known = listed.get(text)
        if known is not None:
            # a dir the listing read is not listed again: it holds the entry's generations,
            # and the listing kept the names of its other files
            others = known.others
            for name in _files(text) if others is None else sorted(others):
                if is_temp_name(name):
                    out.append(_leftover(Path(text), name))
            continue
        session_dir = Path(text)
        try:
            has_generations = bool(list_generations(session_dir))
        except OSError as exc:
            add(
                "error",
                "UNREADABLE",
                f"cannot list {session_dir}: {exc.strerror}; if it holds a session, it is not "
                "checked",
                path=str(session_dir),
            )
            continue
        for name in _files(session_dir):
            if is_temp_name(name):
                out.append(_leftover(session_dir, name))
        if not has_generations:
            ignored = non_canonical_files(session_dir)
            note = f" (ignored files: {', '.join(ignored)})" if ignored else ""
            add(
                "info",
                "EMPTY_DIR",
                f"{session_dir.name} holds no canonical generation, so it is not a session{note}",
                path=str(session_dir),
            )
    return out


def _leftover(session_dir: Path, name: str) -> DoctorFinding:
    """LEFTOVER_TEMP: a temp file left in a session dir."""
    return DoctorFinding(
        "info",
        "root",
        "LEFTOVER_TEMP",
        f"leftover temporary file {name} (ignored by DSH; safe to delete when no writer is "
        "running)",
        path=str(session_dir / name),
    )


def _files(directory: str | Path, *, strict: bool = False) -> list[str]:
    """The regular files of a dir, sorted; none when it cannot be listed (``strict``: the
    OSError of a dir that cannot be opened is raised)."""
    try:
        scan = os.scandir(directory)
    except OSError:
        if strict:
            raise
        return []
    try:
        with scan:
            return sorted(e.name for e in scan if e.is_file(follow_symlinks=False))
    except OSError:
        return []


# -- sessions ---------------------------------------------------------------------------------


def _session_findings(entry: SessionEntry, check: DirCheck) -> list[DoctorFinding]:
    label = entry.id_or_dir
    path = entry.log_path
    state = probe(entry.dir_text)
    held = state in ("held", "unknown")  # a lock that cannot be probed counts as held
    out: list[DoctorFinding] = []
    for finding in check.findings:
        if finding.code in ROOT_CODES:
            continue
        severity = finding.severity
        message = finding.message
        if held and finding.code == "TORN_TAIL":
            severity, message = "info", f"{message} (a live writer holds the lock)"
        out.append(
            DoctorFinding(severity, "session", finding.code, message, label, path, finding.seq)
        )
    if held:
        out.append(
            DoctorFinding(
                "info",
                "session",
                "LOCK_HELD",
                "session.lock is held: the session is running in DSH"
                if state == "held"
                else "session.lock cannot be probed; treated as held (running)",
                label,
                path,
            )
        )
    return out


def _lineage(
    root: Root,
    entry: SessionEntry,
    check: DirCheck,
    by_id: dict[str, SessionEntry],
    kinds: KindRule,
    touched: list[SessionEntry],
) -> list[DoctorFinding]:
    """The lineage findings of ``entry``; the other entries whose headers it read are added
    to ``touched`` (the caller returns them to their listed form)."""
    label = entry.id_or_dir
    path = entry.log_path
    out: list[DoctorFinding] = []

    def add(severity: Severity, code: str, message: str, seq: int | None = None) -> None:
        out.append(DoctorFinding(severity, "session", code, message, label, path, seq))

    parent_id = entry.parent
    if parent_id is not None:
        parent = by_id.get(parent_id)
        if parent is None:
            add("warning", "ORPHAN", f"parentSession {parent_id} does not exist in this root")
        else:
            touched.append(parent)
        if parent is not None and entry.is_subagent:
            depth, above = entry.delegation_depth, parent.delegation_depth
            if depth is not None and above is not None and depth != above + 1:
                add(
                    "warning",
                    "DEPTH",
                    f"delegationDepth {depth} is not the parent's {above} + 1",
                )
        cycle = _cycle(entry, by_id)
        if cycle is not None:
            add("error", "CYCLE", f"lineage cycle: {' → '.join(cycle)}")
    if entry.id is None or not check.readable:
        return out
    kids = kinds.subagents_of(entry.id)
    touched.extend(kids)
    on_disk = {child.id: child for child in kids if child.id is not None}
    catalogued: dict[str, tuple[int, Any]] = {}
    for seq, data in check.own_catalog:
        child_id = data.get("childId") if isinstance(data, dict) else None
        if isinstance(child_id, str) and child_id not in catalogued:
            catalogued[child_id] = (seq, data)
    # Below v4 DSH's migration catalogs the children in the parent's own project dir
    # (format §10.5.6): only children elsewhere stay out of its panel.
    migrates = check.generation is not None and check.generation.version < SUPPORTED_VERSION
    fix = ""
    if kinds.is_user_fork(entry):  # a delegation child is no fork: relink refuses it
        fix = f"; `dsh-fork relink {shlex.quote(entry.id)}` catalogues it"
    for child_id, kid in on_disk.items():
        if migrates and kid.session_dir.parent == entry.session_dir.parent:
            continue
        if child_id not in catalogued:
            add(
                "warning",
                "NOT_CATALOGUED",
                f"subagent child {child_id} is on disk but not in the own-range catalog "
                f"(DSH's panel does not show it){fix}",
            )
    for child_id, (seq, data) in catalogued.items():
        child = on_disk.get(child_id)
        if child is not None:
            created = data.get("childCreatedAt")
            # a header that validates (its depth is known) answers createdAt from its facts
            if child.delegation_depth is not None and created != child.created_at:
                add(
                    "warning",
                    "CATALOG_MISMATCH",
                    f"catalog childCreatedAt {created!r} differs from {child_id}'s createdAt "
                    f"{child.created_at}",
                    seq,
                )
            continue
        other = by_id.get(child_id)
        if other is None:
            add(
                "warning",
                "CATALOGUED_MISSING",
                f"catalogued child {child_id} does not exist on disk",
                seq,
            )
        else:
            add(
                "warning",
                "CATALOG_MISMATCH",
                f"catalogued child {child_id} is not a subagent child of this session "
                f"(parentSession {other.parent!r}, origin "
                f"{'subagent' if other.is_subagent else 'none'})",
                seq,
            )
    return out


def _cycle(entry: SessionEntry, by_id: dict[str, SessionEntry]) -> list[str] | None:
    """The parent chain back to ``entry`` when ``entry`` lies on a lineage cycle."""
    start = entry.id
    if start is None:
        return None
    chain = [start]
    seen = {start}
    current = entry
    while current.parent is not None:
        parent_id = current.parent
        chain.append(parent_id)
        if parent_id == start:
            return chain
        if parent_id in seen:
            return None  # a loop further up that does not include this session
        seen.add(parent_id)
        parent = by_id.get(parent_id)
        if parent is None:
            return None
        current = parent
    return None


# -- the command ------------------------------------------------------------------------------


def _named_dirs(root: Root, arg: str) -> list[Path]:
    """Session dirs a SESSION argument names (every one, for a duplicated id)."""
    if arg:
        try:
            dirs = root.dirs_of(arg)
        except ValueError:
            dirs = []
        if dirs:
            return dirs
    try:
        return [locate(arg, str(root.path)).session_dir]
    except UnsupportedFormat as exc:
        path = exc.details.get("path")
        if isinstance(path, str):
            return [Path(path).parent]
        raise


def doctor(
    root: Root,
    sessions: list[str] | None = None,
    *,
    oplog_path: Path | None = None,
    progress: Progress = SILENT,
) -> DoctorReport:
    """Check the root rules and every session (or the named ones); read-only.
    ``oplog_path``: the operation log that names the forks made without their tree;
    ``progress`` is told of each session dir read, then of each session checked."""
    root.progress = progress
    entries = root.entries(others=True)
    if sessions:
        by_dir = {entry.session_dir: entry for entry in entries}
        chosen: list[SessionEntry] = []
        for arg in sessions:
            for session_dir in _named_dirs(root, arg):
                entry = by_dir.get(session_dir) or by_dir.get(session_dir.resolve())
                if entry is None:
                    raise SessionNotFound(
                        f"{session_dir} holds no session log", path=str(session_dir)
                    )
                if entry not in chosen:
                    chosen.append(entry)
    else:
        chosen = list(entries)
    report = DoctorReport(root.path, root.encoding(), len(chosen))
    asked = _asked_by_rule(entries)  # before the root rules let go of the parsed headers
    refused: set[str] = set()
    report.findings.extend(_root_rules(root, refused))
    from . import registry, wscheck

    workspaces = registry.load(registry.home_of(root.path))
    for problem in wscheck.registry_notes(workspaces):
        report.findings.append(
            DoctorFinding(
                problem.severity, "root", problem.code, problem.message, path=str(workspaces.path)
            )
        )
    by_id: dict[str, SessionEntry] = {}
    for entry in entries:
        if entry.id is not None:
            by_id.setdefault(entry.id, entry)
    from .forkcheck import ForkRules  # reaches relink's planner: loaded when doctor runs

    early: dict[str, DirCheck] = {}
    unreadable: set[str] = set()  # validated and found unreadable: the rule reads it alone

    def validate_early(entry: SessionEntry) -> Evidence | None:
        """The kind rule's read of a log not validated yet: validate it now (its check is
        taken up in its turn), so that no log is read once for the rule and again here."""
        if entry.dir_text in unreadable:
            return read_evidence(entry)
        check = early[entry.dir_text] = _check(entry, refused)
        return _evidence(check) if check.readable else read_evidence(entry)

    # Named sessions: a parent outside them is read for the rule only, not validated.
    # Every log is validated whole: its own descriptor is learned there, not read from its end.
    kinds = KindRule(root) if sessions else KindRule(root, read=validate_early, read_own=None)
    forks = ForkRules(root, kinds, oplog_path=oplog_path, named=bool(sessions))
    progress.stage("sessions checked", len(chosen))
    for entry in chosen:
        progress.advance()
        check = early.pop(entry.dir_text, None) or _check(entry, refused)
        if not check.readable:
            unreadable.add(entry.dir_text)
        elif entry.id in asked and root.entry(entry.id) is entry:  # of a duplicated id, the
            kinds.learn(entry.id, _evidence(check))  # one the rule would read
        if check.header is not None and entry.dir_text not in refused:
            entry.header = check.header  # the log's own, just validated: not parsed again
        report.findings.extend(_session_findings(entry, check))
        touched = [entry]
        report.findings.extend(_lineage(root, entry, check, by_id, kinds, touched))
        path = entry.log_path
        for note in forks.notes(entry):
            report.findings.append(
                DoctorFinding(
                    note.severity, "session", note.code, note.message, entry.id_or_dir, path
                )
            )
        if check.header is not None and check.generation is not None:
            ungrouped = wscheck.ungrouped(workspaces, check.header, check.generation)
            if ungrouped is not None:
                report.findings.append(
                    DoctorFinding(
                        "info", "session", ungrouped.code, ungrouped.message, entry.id_or_dir, path
                    )
                )
        # what this step read goes back to its listed form (dir text and header line): a run
        # over 100,000 sessions keeps no Path, Generation or parsed header of those done
        for other in touched:
            other.forget()
    return report


def _asked_by_rule(entries: list[SessionEntry]) -> set[str]:
    """The ids whose evidence the kind rule may ask for: the sessions whose header leaves
    their kind unsettled, and their parents (the rule keeps nothing for any other)."""
    out: set[str] = set()
    for entry in entries:
        header = entry.header
        if header is not None and unsettled(header_kind(header)):
            out.add(header.id)
            if header.parent_session is not None:
                out.add(header.parent_session)
    return out


def _check(entry: SessionEntry, refused: Set[str]) -> DirCheck:
    """``check_dir`` of a listed session, with what the listing read (its generations, and
    its header validated and bound by the root rules unless ``refused`` names it) and the
    events the kind rule needs kept from the same pass."""
    if entry.dir_text in refused:  # the check reads the header itself, for its finding
        return check_dir(entry.session_dir, collect=EVIDENCE)
    return check_dir(entry.session_dir, entry.generations, listed=True, collect=EVIDENCE)


def _evidence(check: DirCheck) -> Evidence:
    """The kind rule's evidence from a validated log (what ``kinds.read_evidence`` reads)."""
    assert check.header is not None
    return Evidence.of(derive(check.header, check.event_count, check.collected))


def doctor_arg(
    root_option: str | None,
    sessions: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    progress: Progress = SILENT,
) -> DoctorReport:
    """Resolve the root (``--root``, else ``$DSH_HOME/sessions``) and check it (the command)."""
    return doctor(
        Root(resolve_root(root_option, env)),
        sessions,
        oplog_path=default_oplog_path(root_option, env),
        progress=progress,
    )
