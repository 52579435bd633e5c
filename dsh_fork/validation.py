"""The checks of a session's files and dir (format §15, §3): which generation is read, whether
the others are stale, whether the dir is where its header says, and the checklist of the
chosen log (``eventcheck``) — as findings, never exceptions.

``inspect`` validates one session with ``validate_dir``; ``doctor`` runs ``check_dir`` over
every session dir of the root.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import UNSET, Struct, field
from msgspec.structs import replace

from .errors import CorruptLog, DshForkError, SessionStale, UnsupportedFormat
from .eventcheck import Validator
from .findings import Finding
from .generations import SUPPORTED_VERSION, Generation, list_generations, select
from .layout import encode_segment, project_dir_name
from .reader import check_current, open_log, parse_recovered, peek_fields, read_header
from .records import Event, Header, header_version
from .sessionlog import SessionLog

if TYPE_CHECKING:
    from . import sessiondocs


# -- file-level rules -------------------------------------------------------------------------


def binding_problem(session_dir: str | Path, header: Header) -> str | None:
    """Path binding (format §2.6): the dir names the header's cwd and id map to, or None.
    ``session_dir`` may be text (a listed entry's ``dir_text``: no Path built for a check
    that nearly always passes)."""
    expected_project = project_dir_name(header.cwd)
    expected_dir = encode_segment(header.id)
    project, _, name = os.fspath(session_dir).rpartition(os.sep)
    actual = f"{os.path.basename(project)}/{name}"
    if actual == f"{expected_project}/{expected_dir}":
        return None
    return f"the log lives in {actual} but its header binds it to {expected_project}/{expected_dir}"


def file_findings(log: SessionLog, *, binding: bool = True) -> list[Finding]:
    """Path binding (unless ``binding`` is false: a caller that checked it from the listed
    header) and the torn tail of an opened log."""
    out: list[Finding] = []
    problem = binding_problem(log.session_dir, log.header) if binding else None
    if problem is not None:
        out.append(Finding("error", "PATH_MISMATCH", problem))
    if log.torn is not None:
        recoverable = len(parse_recovered(log))
        out.append(
            Finding(
                "warning",
                "TORN_TAIL",
                f"torn tail at byte {log.torn.offset} ({log.torn.size} bytes; {recoverable} "
                "complete lines DSH would recover); DSH truncates it on its next write",
            )
        )
    return out


def validate_log(log: SessionLog) -> list[Finding]:
    """Every checklist finding of one opened log (one streaming pass over its events)."""
    validator = Validator(log.header, log.version)
    for ev in log.events():
        validator.feed(ev)
    return file_findings(log) + validator.finish()


# -- generations ------------------------------------------------------------------------------


class GenerationInfo(Struct, frozen=True):
    """One canonical generation file of a session dir, for the stale-generation rule."""

    generation: Generation
    size: int
    mtime_ns: int
    events: int | None
    turn_ends: int | None
    error: str | None = None

    def to_document(self, chosen: bool) -> sessiondocs.GenerationFile:
        from . import sessiondocs

        return sessiondocs.GenerationFile(
            version=self.generation.version,
            file=self.generation.name,
            encoding=self.generation.encoding,
            size=self.size,
            mtime=self.mtime_ns // 1_000_000,
            events=self.events,
            turn_ends=self.turn_ends,
            chosen=chosen,
            error=UNSET if self.error is None else self.error,
        )


def survey_generation(
    generation: Generation, *, events: int | None = None, turn_ends: int | None = None
) -> GenerationInfo:
    """Size, mtime and counts of a generation; counts are read unless given."""
    try:
        st = os.stat(generation.path)
    except OSError as exc:
        return GenerationInfo(generation, 0, 0, None, None, f"unreadable ({exc.strerror})")
    if events is None or turn_ends is None:
        try:
            log = open_log(generation, collect=("turn/end",), check_dir=False)
        except DshForkError as exc:
            return GenerationInfo(generation, st.st_size, st.st_mtime_ns, None, None, exc.message)
        except OSError as exc:
            return GenerationInfo(
                generation, st.st_size, st.st_mtime_ns, None, None, f"unreadable ({exc.strerror})"
            )
        events, turn_ends = log.event_count, len(log.collected)
    return GenerationInfo(generation, st.st_size, st.st_mtime_ns, events, turn_ends)


def stale_findings(chosen: GenerationInfo, others: list[GenerationInfo]) -> list[Finding]:
    """A lower generation newer by mtime or with more turn/end events (format §3.6)."""
    out: list[Finding] = []
    for other in others:
        reasons: list[str] = []
        if other.mtime_ns > chosen.mtime_ns:
            reasons.append("has a newer mtime")
        if (
            other.turn_ends is not None
            and chosen.turn_ends is not None
            and other.turn_ends > chosen.turn_ends
        ):
            reasons.append(f"has more turn/end events ({other.turn_ends} > {chosen.turn_ends})")
        if reasons:
            out.append(
                Finding(
                    "warning",
                    "STALE_GENERATION",
                    f"{other.generation.name} {' and '.join(reasons)} than the chosen "
                    f"{chosen.generation.name}; DSH reads only the highest generation",
                )
            )
    return out


# -- whole session dirs -----------------------------------------------------------------------


class DirCheck(Struct, eq=False):
    """Findings of one session dir plus what lineage checks need from its log."""

    session_dir: Path
    generation: Generation | None
    header: Header | None = None
    findings: list[Finding] = field(default_factory=list)
    own_catalog: list[tuple[int, Any]] = field(default_factory=list)
    readable: bool = False
    event_count: int = 0
    collected: list[Event] = field(default_factory=list)
    """The events of the types asked for (``check_dir``'s ``collect``), once readable."""


def check_dir(
    session_dir: Path,
    generations: list[Generation] | None = None,
    *,
    listed: bool = False,
    collect: frozenset[str] = frozenset(),
) -> DirCheck:
    """Open the highest generation and validate it; a read error becomes a finding.
    ``generations``: the dir's, when its caller has listed it already (doctor's listing of the
    root), so that the dir is not listed again. ``listed``: that listing validated the header
    of the highest of them and checked its path binding (doctor's root rules), so neither is
    done again before the log is opened (which reads and checks the header once more, as part
    of the log). ``collect``: event types kept from the same pass (``DirCheck.collected``),
    for a caller that would otherwise read the log again for them (doctor's kind rule)."""
    if generations is None:
        generations = list_generations(session_dir)
    generation = select(generations)
    result = DirCheck(session_dir, generation)
    if generation is None:
        result.findings.append(
            Finding("info", "EMPTY_DIR", "no canonical generation file: not a session")
        )
        return result
    if generation.version > SUPPORTED_VERSION:
        result.findings.append(
            Finding(
                "warning",
                "FUTURE_GENERATION",
                f"{generation.name} is generation v{generation.version}, newer than "
                f"v{SUPPORTED_VERSION}: written by a newer harness; not read",
            )
        )
        return result
    header_finding = None if listed else _header_finding(generation)
    if header_finding is not None:
        result.findings.append(header_finding)
        return result
    try:
        # the pass below indexes it: one decode
        log = open_log(generation, index=False, check_dir=False)
        check_current(generation)  # the re-list of the read recipe, after the read
        validator = Validator(log.header, log.version)
        if collect:
            collected = result.collected
            for ev in log.events():
                validator.feed(ev)
                if ev.type in collect:  # without the line bytes: a fact needs its data
                    collected.append(replace(ev, raw=None))
        else:
            for ev in log.events():
                validator.feed(ev)
    except CorruptLog as exc:
        message = exc.message
        if str(generation.path) not in message:
            message = f"{generation.path}: {message}"
        result.findings.append(Finding("error", "CORRUPT_LOG", message))
        return result
    except SessionStale as exc:
        result.findings.append(Finding("warning", "SESSION_STALE", exc.message))
        return result
    except UnsupportedFormat as exc:
        result.findings.append(Finding("warning", "FUTURE_GENERATION", exc.message))
        return result
    except OSError as exc:
        result.findings.append(
            Finding("error", "CORRUPT_LOG", f"{generation.path}: unreadable ({exc.strerror})")
        )
        return result
    result.header = log.header
    result.readable = True
    result.event_count = log.event_count
    result.findings.extend(file_findings(log, binding=not listed))
    result.findings.extend(validator.finish())
    result.own_catalog = validator.own_catalog()
    if len(generations) > 1:  # nearly every dir holds one: nothing to compare, nothing to stat
        turn_ends = validator.turn_ends
        chosen = survey_generation(generation, events=log.event_count, turn_ends=turn_ends)
        others = [survey_generation(g) for g in generations if g != generation]
        result.findings.extend(stale_findings(chosen, others))
    return result


def _header_finding(generation: Generation) -> Finding | None:
    """VERSION_MISMATCH, HEADER_INVALID or CORRUPT_LOG when the header cannot be read."""
    try:
        read_header(generation)
    except UnsupportedFormat as exc:
        raw = header_version(peek_fields(generation))
        if raw is not None and raw != generation.version:
            return _version_mismatch(generation, raw)
        return Finding("warning", "FUTURE_GENERATION", exc.message)
    except CorruptLog as exc:
        fields = peek_fields(generation)
        raw = header_version(fields)
        if raw is not None and raw != generation.version:
            return _version_mismatch(generation, raw)
        # The container (no header frame, a frame that does not decode or holds more than the
        # header line) is corrupt; a header frame holding a bad record is HEADER_INVALID.
        in_container = fields is None or exc.details.get("frame") is not None
        code = "CORRUPT_LOG" if in_container else "HEADER_INVALID"
        message = exc.message
        if str(generation.path) not in message:
            message = f"{generation.path}: {message}"
        return Finding("error", code, message)
    except OSError as exc:
        return Finding("error", "CORRUPT_LOG", f"{generation.path}: unreadable ({exc.strerror})")
    return None


def _version_mismatch(generation: Generation, raw: int) -> Finding:
    return Finding(
        "error",
        "VERSION_MISMATCH",
        f"{generation.path}: header version {raw} does not match the file name "
        f"(v{generation.version})",
    )


def validate_dir(session_dir: Path) -> list[Finding]:
    """Every finding of one session dir: header, log, checklist, stale generations."""
    return check_dir(session_dir).findings
