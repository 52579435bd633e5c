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
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from msgspec import Struct, field

from . import frames as zframes
from .discovery import Root, SessionEntry
from .envelopes import typed_run
from .errors import DshForkError, IoError, UsageError
from .fsdir import open_regular
from .listing import _matches_project
from .model import Facts, derive
from .reader import _matching_lines, open_log
from .records import Event, dig, parse_event
from .results import ReadOnly, rows
from .source import FileBytes, identity_of
from .times import iso_ms

SCOPES = ("title", "user", "assistant", "tool")
SCOPE_TYPES: dict[str, frozenset[str]] = {
    "title": frozenset(("session/title",)),
    "user": frozenset(("user/message",)),
    "assistant": frozenset(("assistant/message",)),
    "tool": frozenset(("assistant/message", "tool/result")),
}
FACT_TYPES = frozenset(("session/end-seed", "session/title"))
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


class Hit(Struct):
    """One event whose text matched."""

    session: str
    path: str
    turn: int | None
    seq: int
    role: str
    snippet: str
    inherited: bool = False
    title: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "path": self.path,
            "title": self.title,
            "turn": self.turn,
            "seq": self.seq,
            "role": self.role,
            "snippet": self.snippet,
            "inherited": self.inherited,
        }


class Unreadable(Struct):
    """A session the search could not read: named, never skipped in silence."""

    session: str | None
    path: str
    code: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session, "path": self.path, "code": self.code,
                "message": self.message}  # fmt: skip


class SearchResult(ReadOnly, Struct):
    root: str
    text: str
    regex: bool
    ignore_case: bool
    scopes: list[str]
    inherited: bool
    filters: dict[str, Any]
    searched: int
    sessions_with_hits: int
    total: int
    """Hits found, including those beyond ``limit`` (not listed)."""
    limit: int
    hits: list[Hit] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "text": self.text,
            "regex": self.regex,
            "ignoreCase": self.ignore_case,
            "in": self.scopes,
            "inherited": self.inherited,
            "filters": self.filters,
            "searched": self.searched,
            "sessionsWithHits": self.sessions_with_hits,
            "total": self.total,
            "limit": self.limit,
            "truncated": self.total > len(self.hits),
            "hits": rows(self.hits, Hit.to_json),
            "unreadable": [u.to_json() for u in self.unreadable],
        }


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
        entry: SessionEntry,
        matcher: Matcher,
        scopes: frozenset[str],
        cap: int,
        keep_prefix: Callable[[], bool],
    ) -> None:
        header = entry.header
        assert header is not None
        self.facts = Facts(header, 0)
        self.matcher = matcher
        self.scopes = scopes
        self.wanted = frozenset().union(*(SCOPE_TYPES[s] for s in scopes))
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
        facts and the candidates are parsed."""
        for kind in FACT_TYPES:
            k = -1
            while kind in types[k + 1 :]:
                k = types.index(kind, k + 1)
                self.fact(parse_event(lines[k], first + k))
        tokens = self.matcher.tokens
        wanted = self.wanted
        if tokens is None:
            candidates: Iterator[int] = (k for k, kind in enumerate(types) if kind in wanted)
        elif wanted.isdisjoint(types):
            candidates = iter(())
        else:
            hay = plaintext.lower() if self.matcher.ignore_case else plaintext
            candidates = (k for k, _ in _matching_lines(hay, tokens) if types[k] in wanted)
        base = self.turns
        for k in candidates:
            turn = base + types[:k].count("turn/start")
            self.search(parse_event(lines[k], first + k), turn)
        self.turns = base + types.count("turn/start")


def _quick(path: str, fold: _Fold) -> bool:
    """The pass over a log of the plain shape; False (nothing kept) when it is not."""
    fd = open_regular(path)
    source = FileBytes(fd, Path(path), identity_of(os.fstat(fd)))
    try:
        scan = zframes.scan_file(source)
        if scan.torn_start is not None or not scan.frames:
            return False
        seq = 0
        for plaintext in zframes.decode_many(source, scan.frames[1:], 1):
            if not plaintext or plaintext[-1] != 0x0A:
                return False
            lines = plaintext[:-1].split(b"\n")
            typed = typed_run(lines)
            if typed is None or typed[0] != seq:
                return False
            fold.frame(plaintext, lines, seq, typed[1])
            seq += len(lines)
        return True
    finally:
        source.close()


def _full(entry: SessionEntry, fold: _Fold) -> None:
    """The reader's pass: any generation and shape; a defect raises and names the log."""
    generation = entry.generation
    assert generation is not None
    streamed = generation.encoding == "zstd" and generation.version >= 2
    log = open_log(generation, stream=streamed, index=streamed)
    for event in log.events():
        fold.event(event)


# -- the root ---------------------------------------------------------------------------------


class _Writers:
    """Whether the session that wrote a seeded log's prefix is in the root and readable."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.originals: dict[str, SessionEntry | None] = {}

    def _readable(self, session_id: str) -> SessionEntry | None:
        entry = self.root.entry(session_id)
        return entry if entry is not None and entry.header is not None else None

    def present(self, entry: SessionEntry) -> bool:
        header = entry.header
        if header is None or header.parent_session is None:
            return False
        if header.origin != "subagent":  # a fork: its parent wrote the prefix
            return self._readable(header.parent_session) is not None
        return self.original(entry) is not None

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
    for entry in root.entries():
        if project is not None and not _matches_project(entry, project):
            continue
        path = entry.log_path
        if since is not None:
            try:
                if path is None or os.stat(path).st_mtime_ns // 1_000_000 < since:
                    continue
            except OSError:
                pass  # named below, when it is read
        where = entry.dir_text
        error = entry.error
        if error is None and (entry.header is None or path is None):
            error = DshForkError(f"{where}: no session log")
        fold = None
        if error is None:
            assert path is not None
            keep_prefix = _memo(partial(_keeps_prefix, writers, entry, inherited))
            fold = _Fold(entry, matcher, wanted, limit, keep_prefix)
            try:
                if not _quick(path, fold):
                    fold = _Fold(entry, matcher, wanted, limit, keep_prefix)
                    _full(entry, fold)
            except DshForkError as exc:
                error = exc
            except OSError as exc:
                error = IoError.of(exc, "read", where=path)
        if error is not None or fold is None:
            assert error is not None
            unreadable.append(Unreadable(entry.id, where, error.code, error.message))
            continue
        searched += 1
        found = _keep(fold, entry)
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
    filters = {"project": project, "since": since, "sinceIso": iso_ms(since)}
    return SearchResult(
        str(root.path),
        text,
        regex,
        matcher.ignore_case,
        chosen,
        inherited,
        filters,
        searched,
        with_hits,
        total,
        limit,
        hits,
        unreadable,
        warnings,
    )


def _keeps_prefix(writers: _Writers, entry: SessionEntry, inherited: bool) -> bool:
    """Whether hits in the inherited prefix are reported with this log."""
    return inherited or not writers.present(entry)


def _memo(decide: Callable[[], bool]) -> Callable[[], bool]:
    """``decide()``, asked once."""
    answer: list[bool] = []

    def once() -> bool:
        if not answer:
            answer.append(decide())
        return answer[0]

    return once


def _keep(fold: _Fold, entry: SessionEntry) -> list[Hit]:
    """The log's hits, those of its inherited prefix left to the session that wrote it."""
    cut = fold.facts.cut
    session = entry.id or os.path.basename(entry.dir_text)
    kept: list[Hit] = []
    for seq, turn, role, text in fold.hits:
        is_inherited = seq < cut
        if is_inherited and not fold.keep_prefix():
            continue
        kept.append(Hit(session, entry.dir_text, turn, seq, role, text, is_inherited))
    return kept
