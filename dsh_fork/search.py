"""``search``: the sessions where something was said, each hit once, in one pass per log.

A hit is an event whose text matches: a title (``session/title``), a user message, an
assistant message's text (and reasoning) blocks, or a tool's side of a turn (the calls an
assistant message advertises, with their arguments, and ``tool/result`` messages). A
``tool/call`` repeats its advertisement's name and arguments (format §10.2), so it is not
searched again. Text is matched as decoded: JSON escapes are undone first, and a tool call's
arguments (JSON text) are decoded once more, so ``echo "hi"`` matches what the log stores as
``\\"echo \\\\\\"hi\\\\\\"\\"``.

Each log is read once, frame by frame, with the check every read makes (decompress, split,
envelope of each line: ``envelopes.typed_run``); only lines that can match are parsed. A line
can match only if its raw bytes hold the longest run of the needle that JSON never escapes
(no quote, backslash, slash or control character; ASCII under smart case) or a ``\\u``
escape, which may spell any character (``Matcher.tokens``). Logs that are not of the plain
shape (a torn tail, a record across frames, a lenient line, v0/v1) take the reader's full
read, which also names what makes a log unreadable.

A fork's or copy's inherited prefix was said in the session that wrote it: its hits are
left to that session, unless ``inherited`` asks for them or the writer is gone from the root
(a fork whose parent is missing or unreadable, a copy whose original is not found), in which
case the whole log is searched.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, cast

import orjson
from msgspec import Struct, field

from . import frames as zframes
from . import searchdocs as docs
from .discovery import Root
from .envelopes import typed_run
from .errors import DshForkError, IoError, UsageError
from .fsdir import open_regular_stat
from .generations import SUPPORTED_VERSION, Encoding, Generation, scan_names
from .layout import decode_segment
from .listing import project_matches
from .logindex import _matching_lines
from .model import Facts, derive
from .reader import check_version, framed_lines, header_line, open_log
from .records import Event, Header, dig, parse_event, parse_header
from .results import SCHEMA_VERSION, Whole
from .sessionentry import SessionEntry, odd_generation
from .source import FileBytes, identity_of
from .times import iso_ms

SCOPES = ("title", "user", "assistant", "tool")
SCOPE_TYPES: dict[str, frozenset[str]] = {
    "title": frozenset(("session/title",)),
    "user": frozenset(("user/message",)),
    "assistant": frozenset(("assistant/message",)),
    "tool": frozenset(("assistant/message", "tool/result")),
}
_END_SEED, _TITLE = "session/end-seed", "session/title"
FACT_TYPES = frozenset((_END_SEED, _TITLE))
"""Parsed wherever they are: the cut (tagged end-seed markers) and the session's title."""
DEFAULT_LIMIT = 200
SNIPPET_WIDTH = 100
SNIPPET_BEFORE = 30

_UNSAFE = re.compile(r'["\\/\x00-\x1f]+')
"""What a JSON writer may spell as an escape of two characters (or must): never in a token."""
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_FOLDS_TO_ASCII = {b"i": ("\u0130", "\u0131"), b"k": ("\u212a",), b"s": ("\u017f",)}
"""The characters outside ASCII that Python's case-insensitive match takes for an ASCII
letter: a line holding one is a candidate too."""
_ESCAPE = b"\\u"
_SKIPPED_KEYS = frozenset(("type", "id", "toolCallId", "callId", "providerOptions"))


class Matcher:
    """The compiled needle and the raw tokens a line must hold to be worth parsing."""

    def __init__(self, text: str, *, regex: bool) -> None:
        if not text:
            raise UsageError("give a non-empty TEXT to search for")
        literal = re.sub(r"\\.", "", text) if regex else text
        self.ignore_case = literal == literal.lower()  # smart case, as ripgrep
        flags = re.IGNORECASE if self.ignore_case else 0
        try:
            self.pattern = re.compile(text if regex else re.escape(text), flags)
        except re.error as exc:
            raise UsageError(f"--regex {text!r} is not a regular expression: {exc}") from None
        self.tokens: list[bytes] | None = None if regex else self._tokens(text)
        self._types: dict[frozenset[str], frozenset[str]] = {}

    def types_of(self, scopes: frozenset[str]) -> frozenset[str]:
        """The event types that hold the texts of ``scopes`` (made once per run)."""
        if scopes not in self._types:
            self._types[scopes] = frozenset().union(*(SCOPE_TYPES[s] for s in scopes))
        return self._types[scopes]

    def _tokens(self, text: str) -> list[bytes] | None:
        runs = _UNSAFE.split(text)
        if self.ignore_case:  # bytes are lowered as ASCII only: keep to ASCII runs
            runs = [part for run in runs for part in _NON_ASCII.split(run)]
        best = max(runs, key=len)
        if not best:
            return None  # nothing JSON never escapes: every line of the types is a candidate
        token = best.encode()
        tokens = [token.lower() if self.ignore_case else token, _ESCAPE]
        if self.ignore_case:
            for letter, chars in _FOLDS_TO_ASCII.items():
                if letter in tokens[0]:
                    tokens += [c.encode() for c in chars]
        return tokens


Hit = docs.SearchHit
"""One event whose text matched: the document's hit itself (``_keep``); its session's title
is set once the log is read to its end."""

Unreadable = docs.SearchUnreadable
"""A session the search could not read: named, never skipped in silence."""


class SearchResult(Whole, Struct):
    """The search document, built once the root is searched, and the warnings beside it."""

    document: docs.SearchDocument
    warnings: list[str] = field(default_factory=list)

    def to_document(self) -> docs.SearchDocument:
        return self.document


# -- text of an event --------------------------------------------------------------------------


def _strings(value: Any) -> Iterator[str]:
    """The string leaves of a content value, ids and type tags left out."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in _SKIPPED_KEYS:
                yield from _strings(item)


def _arguments(value: Any) -> Iterator[str]:
    """A tool call's arguments: JSON text, decoded once more when it parses."""
    if not isinstance(value, str):
        yield from _strings(value)
        return
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError:
        yield value
        return
    yield from _strings(decoded)


def texts(event: Event, scopes: frozenset[str]) -> Iterator[tuple[str, str]]:
    """(role, text) of every searchable text of ``event`` within ``scopes``, in order."""
    kind, data = event.type, event.data
    if kind == "session/title":
        title = dig(data, "title")
        if isinstance(title, str):
            yield "title", title
    elif kind == "user/message":
        for text in _strings(dig(data, "content")):
            yield "user", text
    elif kind == "tool/result":
        for text in _strings(dig(data, "message", "content")):
            yield "tool", text
    elif kind == "assistant/message":
        content = dig(data, "message", "content")
        for block in content if isinstance(content, list) else (content,):
            if isinstance(block, dict) and block.get("type") == "tool-call":
                if "tool" in scopes:
                    name = block.get("name")
                    if isinstance(name, str):
                        yield "tool", name
                    for text in _arguments(block.get("arguments")):
                        yield "tool", text
            elif "assistant" in scopes:
                for text in _strings(block):
                    yield "assistant", text


def snippet(text: str, match: re.Match[str]) -> str:
    """One line around the match: whitespace runs as one space, cut with an ellipsis."""
    start = max(0, match.start() - SNIPPET_BEFORE)
    end = min(len(text), start + SNIPPET_WIDTH)
    if end - start < SNIPPET_WIDTH:
        start = max(0, end - SNIPPET_WIDTH)
    line = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + line + ("…" if end < len(text) else "")


# -- one log ----------------------------------------------------------------------------------


class _Fold:
    """What one log's pass gathers: the facts for its cut and title, turns, hits."""

    def __init__(
        self,
        header: Header,
        matcher: Matcher,
        scopes: frozenset[str],
        cap: int,
        keep_prefix: Callable[[], bool],
    ) -> None:
        self.header = header
        self.facts = Facts(header, 0)
        self.matcher = matcher
        self.tokens = matcher.tokens
        self.lower = matcher.ignore_case
        self.scopes = scopes
        self.wanted = matcher.types_of(scopes)
        self.turns = 0
        self.cap = cap
        self.keep_prefix = keep_prefix
        self.hits: list[tuple[int, int | None, str, str]] = []
        """At most ``cap`` hits are held; ``more`` counts the others."""
        self.more = 0

    def fact(self, event: Event) -> None:
        """A fact; a tagged end-seed makes the hits before it inherited: dropped at once
        (memory stays bounded) when they are not this log's to report."""
        cut = self.facts.cut
        self.facts.add(event)
        now = self.facts.cut
        if now != cut and self.hits and self.hits[0][0] < now and not self.keep_prefix():
            self.hits = [hit for hit in self.hits if hit[0] >= self.facts.cut]

    def search(self, event: Event, turn: int) -> None:
        search = self.matcher.pattern.search
        for role, text in texts(event, self.scopes):
            if role not in self.scopes:
                continue
            found = search(text)
            if found is not None:
                if len(self.hits) < self.cap:
                    self.hits.append((event.seq, turn or None, role, snippet(text, found)))
                else:
                    self.more += 1
                return

    def event(self, event: Event) -> None:
        """The full read's form of the pass: every event, in order."""
        kind = event.type
        if kind == "turn/start":
            self.turns += 1
        if kind in FACT_TYPES:
            self.fact(event)
        if kind in self.wanted:
            self.search(event, self.turns)

    def frame(self, plaintext: bytes, lines: list[bytes], first: int, types: list[str]) -> None:
        """The quick form: a frame's checked lines and their types; only the lines of the
        facts and the candidates are parsed. Called once per frame of every log: the common
        frame (no fact, no candidate) costs a few scans in C."""
        base = self.turns
        self.turns = base + types.count("turn/start")
        if _END_SEED in types or _TITLE in types:
            for k, kind in enumerate(types):
                if kind in FACT_TYPES:
                    self.fact(parse_event(lines[k], first + k))
        tokens = self.tokens
        if tokens is None:
            candidates = [k for k, kind in enumerate(types) if kind in self.wanted]
        else:
            hay = plaintext.lower() if self.lower else plaintext
            for token in tokens:
                if token in hay:
                    break
            else:
                return
            candidates = [k for k, _ in _matching_lines(hay, tokens) if types[k] in self.wanted]
        for k in candidates:
            turn = base + types[:k].count("turn/start")
            self.search(parse_event(lines[k], first + k), turn)


WHOLE_READ_BYTES = 4 << 20
"""Logs up to this size are read with one ``read`` and decoded from memory; larger ones in
windows (``FileBytes``), so memory stays bounded whatever the log's size."""


MakeFold = Callable[[Header], _Fold]


class _Log(NamedTuple):
    """A session's chosen generation as text: a root of 10,000 sessions builds no ``Path``
    for the logs of the plain shape."""

    path: str
    version: int
    encoding: Encoding

    def generation(self) -> Generation:
        return Generation(Path(self.path), self.version, self.encoding)


def _quick(log: _Log, make: MakeFold) -> _Fold | None:
    """The pass over a log of the plain shape, its header read from the same bytes; None
    when it is not of that shape (the full read then decides)."""
    if log.encoding != "zstd" or log.version < 2:
        return None
    path = log.path
    fd, st = open_regular_stat(path)  # never through a link, never blocking, regular only
    source = None
    try:
        data: zframes.Data
        if st.st_size <= WHOLE_READ_BYTES:
            data = os.read(fd, st.st_size + 1)
            if len(data) != st.st_size:
                return None  # changing under the read: the full read decides
            scan = zframes.scan(data)
        else:
            data = source = FileBytes(fd, Path(path), identity_of(st))  # closes the descriptor
            scan = zframes.scan_file(source)
        if scan.torn_start is not None or not scan.frames:
            return None
        # one libzstd call for the usual header frame, as a listing reads it
        line = (zframes.first_line(data) if isinstance(data, bytes) else None) or header_line(
            data, scan.frames[0], path
        )
        fold = make(parse_header(line, log.version, where=path))
        body = scan.frames[1:]
        if source is None:
            assert isinstance(data, bytes)
            plaintexts: Iterable[bytes] = zframes.decode_all(data, body, 1)
            if len(data) <= WHOLE_CHECK_BYTES:
                return fold if _fold_small(list(plaintexts), fold) else None
        else:
            plaintexts = zframes.decode_many(source, body, 1)
        return fold if _fold_frames(plaintexts, fold) else None
    finally:
        if source is None:
            os.close(fd)
        else:
            source.close()


WHOLE_CHECK_BYTES = 256 << 10
"""A log up to this size (compressed) is checked frame by frame and then searched for the
tokens once, as one text: most logs of a root hold no token, and for them no frame is looked
at again (no facts, no turns: a log without a hit needs neither)."""


def _fold_small(plaintexts: list[bytes], fold: _Fold) -> bool:
    """``_fold_frames`` of a small log's plaintexts, which are held anyway."""
    seq = 0
    checked: list[tuple[bytes, list[bytes], int, list[str]]] = []
    for plaintext in plaintexts:
        typed = _typed_frame(plaintext, seq)
        if typed is None:
            return False
        checked.append((plaintext, *typed))
        seq += len(typed[0])
    tokens = fold.tokens
    if tokens is not None:
        text = b"".join(plaintexts)
        hay = text.lower() if fold.lower else text
        if not any(token in hay for token in tokens):
            return True  # no line can match: nothing to fold
    for plaintext, lines, first, types in checked:
        fold.frame(plaintext, lines, first, types)
    return True


def _fold_frames(plaintexts: Iterable[bytes], fold: _Fold) -> bool:
    seq = 0
    for plaintext in plaintexts:
        typed = _typed_frame(plaintext, seq)
        if typed is None:
            return False
        fold.frame(plaintext, *typed)
        seq += len(typed[0])
    return True


def _typed_frame(plaintext: bytes, seq: int) -> tuple[list[bytes], int, list[str]] | None:
    """A frame's lines, its first seq and each line's type, when it holds whole envelope
    lines numbered from ``seq`` on; None when not (the reader's pass then reads the log)."""
    if not plaintext or plaintext[-1] != 0x0A:
        return None
    lines = plaintext[:-1].split(b"\n")
    typed = typed_run(lines)
    if typed is None or typed[0] != seq:
        return None
    return lines, seq, typed[1]


def _full(log_: _Log, make: MakeFold) -> _Fold:
    """The reader's pass: any generation and shape; a defect raises and names the log."""
    generation = log_.generation()
    streamed = framed_lines(generation)
    log = open_log(generation, stream=streamed, index=streamed)
    fold = make(log.header)
    for event in log.events():
        fold.event(event)
    return fold


# -- the root ---------------------------------------------------------------------------------


class _Writers:
    """Whether the session that wrote a seeded log's prefix is in the root. A fork's parent
    is looked up by its id; a copy's original by provenance, over the root's listing (made
    only when a copy has hits in its prefix)."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.originals: dict[str, SessionEntry | None] = {}
        self._by_dir: dict[str, SessionEntry] | None = None

    def _readable(self, session_id: str) -> SessionEntry | None:
        entry = self.root.entry(session_id)
        return entry if entry is not None and entry.header is not None else None

    def present(self, header: Header, dir_text: str) -> bool:
        parent = header.parent_session
        if parent is None:
            return False
        if header.origin != "subagent":  # a fork: its parent wrote the prefix
            return bool(self.root.dirs_of(parent))
        if self._by_dir is None:
            self._by_dir = {e.dir_text: e for e in self.root.entries()}
        entry = self._by_dir.get(dir_text)
        return entry is not None and self.original(entry) is not None

    def _source(self, entry: SessionEntry) -> SessionEntry | None:
        """Whose subagents ``entry``'s copies are copies of: a fork's parent, a copy's
        original."""
        header = entry.header
        if header is None or header.parent_session is None or not header.is_seeded:
            return None
        if header.origin != "subagent":
            return self._readable(header.parent_session)
        return self.original(entry)

    def original(self, copy: SessionEntry) -> SessionEntry | None:
        """The subagent a copy was copied from (provenance: its prefix), if still here."""
        from .provenance import Logged, is_copy_of

        key = copy.dir_text
        if key in self.originals:
            return self.originals[key]
        self.originals[key] = None  # a cycle of parents ends here
        header = copy.header
        parent = None if header is None else self._readable(header.parent_session or "")
        source = None if parent is None else self._source(parent)
        found = None
        if source is not None and source.id is not None:
            mine = _logged(copy)
            for candidate in self.root.children_of(source.id):
                if mine is None or candidate.dir_text == key:
                    break
                theirs = _logged(candidate)
                if theirs is not None and is_copy_of(Logged(copy.id or "", *mine), theirs[0]):
                    found = candidate
                    break
        self.originals[key] = found
        return found


def _logged(entry: SessionEntry) -> tuple[Any, Facts] | None:
    generation = entry.generation
    if generation is None:
        return None
    try:
        log = open_log(generation, collect=("turn/start", "turn/end", "session/end-seed"))
    except (DshForkError, OSError):
        return None
    return log, derive(log.header, log.event_count, log.collected)


def search(
    root: Root,
    text: str,
    *,
    regex: bool = False,
    scopes: list[str] | None = None,
    inherited: bool = False,
    since: int | None = None,
    project: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> SearchResult:
    """Every session of ``root`` (filtered by project and last activity) searched once."""
    chosen = list(dict.fromkeys(scopes or SCOPES))
    for scope in chosen:
        if scope not in SCOPES:
            raise UsageError(f"unknown --in {scope!r}; choose from {', '.join(SCOPES)}")
    if limit < 1:
        raise UsageError("--limit must be at least 1")
    matcher = Matcher(text, regex=regex)
    wanted = frozenset(chosen)
    writers = _Writers(root)
    hits: list[Hit] = []
    unreadable: list[Unreadable] = []
    searched = total = with_hits = 0
    for where, log, listed in _sessions(root, project):
        error = listed
        if log is not None and since is not None:
            try:
                if os.stat(log.path).st_mtime_ns // 1_000_000 < since:
                    continue
            except OSError:
                pass  # named below, when it is read
        fold = None
        if log is not None:

            def make(header: Header, where: str = where) -> _Fold:
                keep = _memo(partial(_keeps_prefix, writers, header, where, inherited))
                return _Fold(header, matcher, wanted, limit, keep)

            try:
                if log.version > SUPPORTED_VERSION:
                    check_version(log.generation())
                fold = _quick(log, make) or _full(log, make)
            except DshForkError as exc:
                error = exc
            except OSError as exc:
                error = IoError.of(exc, "read", where=log.path)
        if fold is None:
            assert error is not None
            named = decode_segment(os.path.basename(where))
            unreadable.append(Unreadable(named, where, error.code, error.message))
            continue
        searched += 1
        found = _keep(fold, where)
        if found:
            with_hits += 1
            total += len(found) + fold.more
            room = limit - len(hits)
            title = fold.facts.title
            for hit in found[: max(room, 0)]:
                hit.title = title
                hits.append(hit)
    warnings = []
    if unreadable:
        warnings.append(
            f"{len(unreadable)} sessions could not be read and were not searched (named in "
            "the result; `dsh-fork doctor` says more)"
        )
    if total > len(hits):
        warnings.append(f"{total} hits, the first {len(hits)} shown (raise --limit for more)")
    document = docs.SearchDocument(
        schema_version=SCHEMA_VERSION,
        root=str(root.path),
        text=text,
        regex=regex,
        ignore_case=matcher.ignore_case,
        in_=cast(list[docs.Role], chosen),
        inherited=inherited,
        filters=docs.SearchFilters(project, since, iso_ms(since)),
        searched=searched,
        sessions_with_hits=with_hits,
        total=total,
        limit=limit,
        truncated=total > len(hits),
        hits=hits,
        unreadable=unreadable,
    )
    return SearchResult(document, warnings)


def _keeps_prefix(writers: _Writers, header: Header, where: str, inherited: bool) -> bool:
    """Whether hits in the inherited prefix are reported with this log."""
    return inherited or not writers.present(header, where)


def _sessions(
    root: Root, project: str | None
) -> Iterator[tuple[str, _Log | None, DshForkError | None]]:
    """(session dir, its chosen generation or why it has none) of every session dir of the
    root, in order: no header is read here (the pass reads it from the log's own bytes)."""
    for job in root.walk():
        if not isinstance(job, str):  # a project dir that cannot be listed
            if project is None or project_matches(job.project, project):
                yield job.dir_text, None, job.error
            continue
        if project is not None and not project_matches(
            os.path.basename(os.path.dirname(job)), project
        ):
            continue
        try:
            names = scan_names(job)
        except OSError as exc:
            yield job, None, IoError.of(exc, "list", where=job)
            continue
        if not names:
            odd = odd_generation(job)
            if odd is not None and odd.error is not None:
                yield job, None, odd.error
            continue
        version, encoding, name = names[-1]
        yield job, _Log(job + os.sep + name, version, encoding), None


def _memo(decide: Callable[[], bool]) -> Callable[[], bool]:
    """``decide()``, asked once."""
    answer: list[bool] = []

    def once() -> bool:
        if not answer:
            answer.append(decide())
        return answer[0]

    return once


def _keep(fold: _Fold, where: str) -> list[Hit]:
    """The log's hits, those of its inherited prefix left to the session that wrote it."""
    cut = fold.facts.cut
    session = fold.header.id
    kept: list[Hit] = []
    for seq, turn, role, text in fold.hits:
        is_inherited = seq < cut
        if is_inherited and not fold.keep_prefix():
            continue
        kept.append(
            Hit(
                session=session,
                path=where,
                title=None,  # the session's, once its log is read (``search``)
                turn=turn,
                seq=seq,
                role=cast(docs.Role, role),
                snippet=text,
                inherited=is_inherited,
            )
        )
    return kept
