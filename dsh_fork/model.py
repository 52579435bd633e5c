"""Facts derived from a log: cut, turns, fork boundaries, catalog, descriptor, preset, title.

Everything here is computed from the few event types in ``MODEL_TYPES``, so it can be derived
from a selective read of a huge log (see ``reader.open_log(collect=...)``).
"""

from __future__ import annotations

import bisect
from typing import Any

from msgspec import Struct, field

from . import inbox
from .logindex import TornTail
from .records import Event, Header, dig, nonneg_int
from .sessionlog import SessionLog

TURN_TYPES = ("turn/start", "turn/end")
"""The events that open and close a turn (what a fork boundary is checked against)."""

MODEL_TYPES = frozenset(
    (
        "turn/start",
        "turn/end",
        "session/end-seed",
        "subagent/catalog",
        "subagent/descriptor",
        "agent-preset/selected",
        "session/title",
        "agent/inbox/spliced",
        "request/header",
    )
)


class OpenTurnInfo(Struct, frozen=True):
    turn: int | None
    start_seq: int


class CatalogEntry(Struct, frozen=True):
    seq: int
    data: Any

    @property
    def child_id(self) -> str | None:
        value = self.data.get("childId") if isinstance(self.data, dict) else None
        return value if isinstance(value, str) else None


class Descriptor(Struct, frozen=True):
    seq: int
    data: Any
    inherited_only: bool


class Facts(Struct):
    """Derived facts of one log (semantics §2.6, format §10)."""

    header: Header
    event_count: int
    turn_marks: list[tuple[int, bool, int | None]] = field(default_factory=list)
    """(seq, is ``turn/end``, turn number) of every turn event: no parsed events are kept, so
    the facts of a 300,000-event log stay small."""
    tagged_markers: list[int] = field(default_factory=list)
    catalog: list[CatalogEntry] = field(default_factory=list)
    descriptors: list[tuple[int, Any]] = field(default_factory=list)
    presets: list[tuple[int, Any]] = field(default_factory=list)
    titles: list[tuple[int, Any]] = field(default_factory=list)
    splices: list[tuple[int, Any]] = field(default_factory=list)
    request_headers: list[tuple[int, Any]] = field(default_factory=list)
    torn: TornTail | None = None

    # -- inheritance ------------------------------------------------------------------------

    @property
    def cut(self) -> int:
        """Inherited event count: seedLength (v0/v1) or the last tagged end-seed (v2+)."""
        if self.header.version < 2:
            return self.header.seed_length or 0
        return self.tagged_markers[-1] if self.tagged_markers else 0

    # -- turns ------------------------------------------------------------------------------

    @property
    def turn_ends(self) -> list[int]:
        return [seq for seq, is_end, _ in self.turn_marks if is_end]

    @property
    def last_turn_end(self) -> int | None:
        ends = self.turn_ends
        return ends[-1] if ends else None

    @property
    def open_turn(self) -> OpenTurnInfo | None:
        if not self.turn_marks or self.turn_marks[-1][1]:
            return None
        seq, _, number = self.turn_marks[-1]
        return OpenTurnInfo(number, seq)

    def enclosing_turn(self, seq: int) -> OpenTurnInfo | None:
        """The turn ``seq`` lies inside (its last turn event at or before is a start)."""
        seqs = [s for s, _, _ in self.turn_marks]
        i = bisect.bisect_right(seqs, seq) - 1
        if i < 0 or self.turn_marks[i][1]:
            return None
        start, _, number = self.turn_marks[i]
        return OpenTurnInfo(number, start)

    def is_valid_boundary(self, seq: int) -> bool:
        return 0 <= seq < self.event_count and self.enclosing_turn(seq) is None

    def boundary_ranges(self) -> list[tuple[int, int]]:
        """Inclusive seq ranges not inside a turn: the valid fork boundaries."""
        ranges: list[tuple[int, int]] = []
        lo: int | None = 0
        for seq, is_end, _ in self.turn_marks:
            if is_end:
                if lo is None:
                    lo = seq
            elif lo is not None:
                if seq - 1 >= lo:
                    ranges.append((lo, seq - 1))
                lo = None
        if lo is not None and self.event_count - 1 >= lo:
            ranges.append((lo, self.event_count - 1))
        return ranges

    def nearest_boundaries(self, seq: int) -> tuple[int | None, int | None]:
        """Highest valid boundary below ``seq`` and lowest above it."""
        below: int | None = None
        above: int | None = None
        for lo, hi in self.boundary_ranges():
            if lo < seq:
                below = min(hi, seq - 1)
            if hi > seq and above is None:
                above = max(lo, seq + 1)
        return below, above

    # -- subagents --------------------------------------------------------------------------

    def own_catalog(self) -> list[CatalogEntry]:
        cut = self.cut
        return [entry for entry in self.catalog if entry.seq >= cut]

    def inherited_catalog(self) -> list[CatalogEntry]:
        cut = self.cut
        return [entry for entry in self.catalog if entry.seq < cut]

    def own_descriptors(self) -> list[tuple[int, Any]]:
        cut = self.cut
        return [(seq, data) for seq, data in self.descriptors if seq >= cut]

    def descriptor(self) -> Descriptor | None:
        """First own descriptor; else the last inherited one, flagged (semantics §2.6)."""
        own = self.own_descriptors()
        if own:
            return Descriptor(own[0][0], own[0][1], False)
        inherited = [(s, d) for s, d in self.descriptors if s < self.cut]
        if inherited:
            return Descriptor(inherited[-1][0], inherited[-1][1], True)
        return None

    # -- folding ----------------------------------------------------------------------------

    def add(self, ev: Event) -> None:
        """Fold one event (events come in seq order; types outside ``MODEL_TYPES`` are
        ignored): what ``derive`` does, for a caller that streams the events."""
        kind = ev.type
        if kind == "turn/start":
            self.turn_marks.append((ev.seq, False, _turn_number(ev)))
        elif kind == "turn/end":
            self.turn_marks.append((ev.seq, True, None))
        elif kind == "session/end-seed":
            if is_cut_marker(ev):
                self.tagged_markers.append(ev.seq)
        elif kind == "subagent/catalog":
            self.catalog.append(CatalogEntry(ev.seq, ev.data))
        elif kind == "subagent/descriptor":
            self.descriptors.append((ev.seq, ev.data))
        elif kind == "agent-preset/selected":
            self.presets.append((ev.seq, ev.data))
        elif kind == "session/title":
            self.titles.append((ev.seq, ev.data))
        elif kind == "agent/inbox/spliced":
            self.splices.append((ev.seq, ev.data))
        elif kind == "request/header":
            self.request_headers.append((ev.seq, ev.data))

    def extend(self, later: Facts) -> None:
        """Continue with the facts folded from the events after these (a split pass)."""
        self.turn_marks += later.turn_marks
        self.tagged_markers += later.tagged_markers
        self.catalog += later.catalog
        self.descriptors += later.descriptors
        self.presets += later.presets
        self.titles += later.titles
        self.splices += later.splices
        self.request_headers += later.request_headers

    # -- other folds ------------------------------------------------------------------------

    def preset_at(self, boundary: int) -> str | None:
        """Last ``agent-preset/selected`` at or before ``boundary``, else the header's."""
        for seq, data in reversed(self.presets):
            if seq <= boundary and isinstance(data, dict):
                preset = data.get("agentPreset")
                if isinstance(preset, str):
                    return preset
        return self.header.agent_preset

    @property
    def preset(self) -> str | None:
        return self.preset_at(self.event_count - 1)

    @property
    def title(self) -> str | None:
        for _, data in reversed(self.titles):
            if isinstance(data, dict) and isinstance(data.get("title"), str):
                return str(data["title"])
        return None

    @property
    def provider_model(self) -> tuple[str | None, str | None]:
        """``config`` of the latest ``request/header``."""
        for _, data in reversed(self.request_headers):
            config = dig(data, "header", "config")
            if isinstance(config, dict):
                provider, model = config.get("provider"), config.get("model")
                return (
                    provider if isinstance(provider, str) else None,
                    model if isinstance(model, str) else None,
                )
        return None, None

    def pending_inbox(self, through: int | None = None) -> list[Any]:
        """Items left queued by the ``agent/inbox/spliced`` edits up to ``through``."""
        return inbox.pending(self.splices, through)

    def inherited_pending_inbox(self) -> list[Any]:
        """Items queued in the inherited prefix and still queued at the end of the log."""
        return inbox.inherited_pending(self.splices, self.cut)


def is_cut_marker(event: Event) -> bool:
    """A tagged ``session/end-seed`` (format §10.3): a fork's cut, the last of which is the
    log's (§7.4); an untagged one is a resume's marker, no cut."""
    data = event.data
    return (
        event.type == "session/end-seed"
        and isinstance(data, dict)
        and data.get("inherited") is True
    )


def _turn_number(event: Event) -> int | None:
    return nonneg_int(dig(event.data, "turn"))


def derive(header: Header, event_count: int, events: list[Event]) -> Facts:
    """Fold the model events of a log (in seq order) into its facts."""
    facts = Facts(header, event_count)
    add = facts.add
    for ev in events:
        add(ev)
    return facts


def facts_of(log: SessionLog) -> Facts:
    """Facts of a log opened with ``collect=MODEL_TYPES`` (or any superset)."""
    facts = derive(log.header, log.event_count, log.collected)
    facts.torn = log.torn
    return facts


def last_inherited_time(log: SessionLog, facts: Facts) -> int | None:
    """T(X): the time of event cut−1; undefined when nothing is inherited (semantics §2.6)."""
    cut = facts.cut
    if cut <= 0 or cut > log.event_count:
        return None
    return log.event(cut - 1).time
