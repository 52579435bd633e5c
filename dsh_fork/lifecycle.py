"""The lifecycle rules of the v4 checklist (format §15): turns, steps, tool calls, compaction
brackets and commands, in one streaming pass.

Each rule keeps only the small state of the open turn (``_Lifecycle``): its number, the open
step, the calls advertised and not yet resolved. The happy path of each (``_quick_*``) says
only when the full rule would find nothing and what it then records, so a rule is still
stated once. Apart from the rest of the checklist (``eventcheck``) because these rules relate
events to each other across a turn, where the others judge an event alone or the log whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from .findings import Severity, _State
from .generations import MAX_SAFE_INTEGER
from .records import Event, nonneg_int

if TYPE_CHECKING:
    pass


def _same_value(a: Any, b: Any) -> bool:
    """JavaScript ``===`` on parsed JSON: objects and arrays are never identical."""
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def _repair_number(message_id: str, prefix: str) -> int | None:
    """The trailing number of a ``<prefix><n>`` repair id, or None."""
    if not message_id.startswith(prefix):
        return None
    rest = message_id[len(prefix) :]
    if not rest or not rest.isascii() or not rest.isdigit():
        return None
    return int(rest)


class _Call(Struct):
    name: Any
    arguments: Any
    started: bool = False
    resolved: bool = False


class _Lifecycle(_State):
    """Turns, steps, tool calls, compaction brackets and commands."""

    next_turn: int = 1
    open_turn: int | None = None
    open_turn_seq: int | None = None
    open_step: int | None = None
    next_step: int = 1
    calls: dict[str, _Call] = field(default_factory=dict)
    pending: int = 0
    """How many advertised calls of the open turn have no result yet."""
    compaction_open: int | None = None
    commands_run: set[str] = field(default_factory=set)
    commands_done: set[str] = field(default_factory=set)
    turn_ends: int = 0


def _fork_closer_problem(
    ev: Event, message: dict[str, Any], call_id: str, number: int
) -> str | None:
    if number != ev.seq:
        return f"the number in its id is {number}, not its own seq {ev.seq}"
    if "sourceEventSeqs" in ev.obj:
        return "an appended closer has no sourceEventSeqs"
    if message.get("role") != "tool" or message.get("isError") is not True:
        return "it must have role tool and isError true"
    if message.get("toolCallId") != call_id:
        return "toolCallId differs from the call"
    content = message.get("content")
    if (
        not isinstance(content, list)
        or len(content) != 1
        or not isinstance(content[0], dict)
        or content[0].get("type") != "text"
    ):
        return "it must hold exactly one text block"
    return None


class LifecycleRules:
    """The lifecycle rules, a part of ``eventcheck.Validator``: its ``lifecycle`` state, and
    the finding each rule reports through the validator's ``add``."""

    lifecycle: _Lifecycle

    if TYPE_CHECKING:

        def add(
            self, severity: Severity, code: str, message: str, seq: int | None = None
        ) -> None: ...

    def _lifecycle(self, message: str, seq: int) -> None:
        self.add("error", "LIFECYCLE", message, seq)

    def _quick_turn_start(self, data: dict[str, Any], seq: int) -> bool:
        life = self.lifecycle
        number = data.get("turn")
        if (
            type(number) is not int
            or number != life.next_turn
            or number > MAX_SAFE_INTEGER
            or life.open_turn is not None
            or life.compaction_open is not None
        ):
            return False
        life.open_turn = number
        life.open_turn_seq = seq
        life.next_turn = number + 1
        life.open_step = None
        life.next_step = 1
        life.calls = {}
        life.pending = 0
        return True

    def _quick_turn_end(self, data: dict[str, Any], seq: int) -> bool:
        life = self.lifecycle
        number = data.get("turn")
        if (
            life.open_turn is None
            or type(number) is not int
            or number != life.open_turn
            or number > MAX_SAFE_INTEGER
            or life.open_step is not None
            or life.pending
            or life.compaction_open is not None
        ):
            return False
        life.turn_ends += 1
        life.open_turn = None
        life.open_turn_seq = None
        life.calls = {}
        return True

    def _quick_step(self, data: dict[str, Any]) -> int | None:
        """The step a step/start or step/end names, when it names the open turn and both
        numbers are plain integers; None sends the event to the full rule."""
        turn, step = data.get("turn"), data.get("step")
        open_turn = self.lifecycle.open_turn
        if open_turn is None or type(turn) is not int or turn != open_turn:
            return None
        return step if type(step) is int else None

    def _quick_step_start(self, data: dict[str, Any], seq: int) -> bool:
        life = self.lifecycle
        step = self._quick_step(data)
        if step is None or life.open_step is not None or step != life.next_step:
            return False
        life.open_step = step
        life.next_step = step + 1
        return True

    def _quick_step_end(self, data: dict[str, Any], seq: int) -> bool:
        life = self.lifecycle
        step = self._quick_step(data)
        if step is None or step != life.open_step or life.pending:
            return False
        life.open_step = None
        return True

    def _quick_bound(self, data: dict[str, Any], *, step: bool) -> bool:
        """``_bound`` when it finds nothing."""
        life = self.lifecycle
        if life.open_turn is None:
            return False
        turn = data.get("turn", life.open_turn)
        if type(turn) is not int or turn != life.open_turn:
            return False
        if not step:
            return True
        if life.open_step is None:
            return False
        number = data.get("step", life.open_step)
        return type(number) is int and number == life.open_step

    def _quick_turn_bound(self, data: dict[str, Any], seq: int) -> bool:
        return self._quick_bound(data, step=False)

    def _quick_step_bound(self, data: dict[str, Any], seq: int) -> bool:
        return self._quick_bound(data, step=True)

    def _quick_assistant_message(self, data: dict[str, Any], seq: int) -> bool:
        if not self._quick_bound(data, step=True):
            return False
        message = data.get("message")
        content = message.get("content") if type(message) is dict else None
        if type(content) is not list:
            return True
        blocks = [b for b in content if type(b) is dict and b.get("type") == "tool-call"]
        if not blocks:
            return True
        calls = self.lifecycle.calls
        ids: list[Any] = [block.get("id") for block in blocks]
        if not all(
            type(call_id) is str and call_id and call_id not in calls for call_id in ids
        ) or len(set(ids)) != len(ids):
            return False
        for block, call_id in zip(blocks, ids, strict=True):
            calls[call_id] = _Call(block.get("name"), block.get("arguments"))
        self.lifecycle.pending += len(blocks)
        return True

    def _quick_tool_call(self, data: dict[str, Any], seq: int) -> bool:
        if not self._quick_bound(data, step=True):
            return False
        call_id = data.get("callId")
        call = self.lifecycle.calls.get(call_id) if type(call_id) is str else None
        name, arguments = data.get("name"), data.get("arguments")
        if (
            call is None
            or call.started
            or type(name) is not str
            or type(arguments) is not str
            or name != call.name
            or arguments != call.arguments
        ):
            return False
        call.started = True
        return True

    def _quick_tool_result(self, data: dict[str, Any], seq: int) -> bool:
        if not self._quick_bound(data, step=True):
            return False
        message = data.get("message")
        call_id = message.get("toolCallId") if type(message) is dict else None
        call = self.lifecycle.calls.get(call_id) if type(call_id) is str else None
        if call is None or call.resolved or not call.started:
            return False  # a call never started needs the repair rules
        call.resolved = True
        self.lifecycle.pending -= 1
        return True

    def _turn_start(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        number = nonneg_int(data.get("turn"))
        if life.open_turn is not None:
            self._lifecycle(
                f"turn/start while turn {life.open_turn} (seq {life.open_turn_seq}) is open",
                ev.seq,
            )
        if number != life.next_turn:
            self._lifecycle(
                f"turn/start numbered {data.get('turn')!r}, expected {life.next_turn}",
                ev.seq,
            )
        self._compaction_boundary(ev)
        life.open_turn = number if number is not None else life.next_turn
        life.open_turn_seq = ev.seq
        life.next_turn = life.open_turn + 1
        life.open_step = None
        life.next_step = 1
        life.calls = {}
        life.pending = 0

    def _turn_end(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        life.turn_ends += 1
        number = nonneg_int(data.get("turn"))
        if life.open_turn is None:
            self._lifecycle("turn/end without an open turn", ev.seq)
        else:
            if number != life.open_turn:
                self._lifecycle(
                    f"turn/end for turn {data.get('turn')!r} while turn {life.open_turn} is open",
                    ev.seq,
                )
            if life.open_step is not None:
                self._lifecycle(f"turn/end while step {life.open_step} is open", ev.seq)
            self._unresolved_check("turn/end", ev.seq)
        self._compaction_boundary(ev)
        life.open_turn = None
        life.open_turn_seq = None
        life.open_step = None
        life.calls = {}
        life.pending = 0

    def _step_start(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        if life.open_turn is None:
            self._lifecycle("step/start without an open turn", ev.seq)
            return
        turn = data.get("turn")
        step = data.get("step")
        if type(step) is not int:
            step = nonneg_int(step)
        if turn != life.open_turn or type(turn) is not int:
            self._lifecycle(
                f"step/start names turn {data.get('turn')!r} inside turn {life.open_turn}",
                ev.seq,
            )
        if life.open_step is not None:
            self._lifecycle(f"step/start while step {life.open_step} is open", ev.seq)
        if step != life.next_step:
            self._lifecycle(
                f"step/start numbered {data.get('step')!r}, expected {life.next_step}",
                ev.seq,
            )
        life.open_step = step if step is not None else life.next_step
        life.next_step = life.open_step + 1

    def _step_end(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        if life.open_step is None:
            self._lifecycle("step/end without an open step", ev.seq)
            return
        turn = data.get("turn")
        step = data.get("step")
        if (
            turn != life.open_turn
            or step != life.open_step
            or type(turn) is not int
            or type(step) is not int
        ) and (nonneg_int(turn), nonneg_int(step)) != (
            life.open_turn,
            life.open_step,
        ):
            self._lifecycle(
                f"step/end for turn {data.get('turn')!r} step {data.get('step')!r} while "
                f"turn {life.open_turn} step {life.open_step} is open",
                ev.seq,
            )
        self._unresolved_check("step/end", ev.seq)
        life.open_step = None

    def _unresolved_check(self, what: str, seq: int) -> None:
        if self.lifecycle.pending:
            pending = ", ".join(self.unresolved())
            self._lifecycle(f"{what} with unresolved tool calls: {pending}", seq)

    def unresolved(self) -> list[str]:
        """Advertised calls of the open turn without a result."""
        return [call_id for call_id, call in self.lifecycle.calls.items() if not call.resolved]

    def _bound(self, ev: Event, data: dict[str, Any], *, step: bool) -> bool:
        """Whether ``ev`` sits in the open turn (and step); a finding when it does not."""
        life = self.lifecycle
        if life.open_turn is None:
            self._lifecycle(f"{ev.type} outside a turn", ev.seq)
            return False
        turn = data.get("turn", life.open_turn)
        if (type(turn) is not int or turn != life.open_turn) and nonneg_int(turn) != life.open_turn:
            self._lifecycle(f"{ev.type} names turn {turn!r} inside turn {life.open_turn}", ev.seq)
        if not step:
            return True
        if life.open_step is None:
            self._lifecycle(f"{ev.type} outside a step (turn {life.open_turn})", ev.seq)
            return False
        number = data.get("step", life.open_step)
        if (type(number) is not int or number != life.open_step) and nonneg_int(
            number
        ) != life.open_step:
            self._lifecycle(f"{ev.type} names step {number!r} inside step {life.open_step}", ev.seq)
        return True

    def _step_bound(self, ev: Event, data: dict[str, Any]) -> None:
        self._bound(ev, data, step=True)

    def _turn_bound(self, ev: Event, data: dict[str, Any]) -> None:
        self._bound(ev, data, step=False)

    def _assistant_message(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        if not self._bound(ev, data, step=True):
            return
        if ev.obj.get("surfaceOp") != "append":
            return
        message = data.get("message")
        content = message.get("content") if type(message) is dict else None
        if type(content) is not list:
            return
        for block in content:
            if type(block) is not dict or block.get("type") != "tool-call":
                continue
            call_id = block.get("id")
            if not isinstance(call_id, str) or not call_id:
                self._lifecycle("tool-call block without a non-empty id", ev.seq)
                continue
            if call_id in life.calls:
                self._lifecycle(f"tool call {call_id} advertised twice in one turn", ev.seq)
                continue
            life.calls[call_id] = _Call(block.get("name"), block.get("arguments"))
            life.pending += 1

    def _tool_call(self, ev: Event, data: dict[str, Any]) -> None:
        if not self._bound(ev, data, step=True):
            return
        call_id = data.get("callId")
        call = self.lifecycle.calls.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            self._lifecycle(f"tool/call {call_id!r} was not advertised in this turn", ev.seq)
            return
        name, arguments = data.get("name"), data.get("arguments")
        if call.started:
            self._lifecycle(f"tool/call {call_id} started twice", ev.seq)
        elif not (  # plain strings, the usual case, compare without a call
            type(name) is str
            and type(arguments) is str
            and name == call.name
            and arguments == call.arguments
        ) and not (_same_value(call.name, name) and _same_value(call.arguments, arguments)):
            self._lifecycle(
                f"tool/call {call_id} name or arguments differ from its advertisement", ev.seq
            )
        call.started = True

    def _tool_result(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        if type(ev.obj.get("surfaceOp")) is dict:  # a replacement only rewrites content
            self._bound(ev, data, step=False)
            return
        if not self._bound(ev, data, step=True):
            return
        message = data.get("message")
        call_id = message.get("toolCallId") if isinstance(message, dict) else None
        if not isinstance(call_id, str) or not isinstance(message, dict):
            self._lifecycle("tool/result without message.toolCallId", ev.seq)
            return
        call = life.calls.get(call_id)
        if call is None:
            self._lifecycle(f"tool/result for call {call_id} that was not advertised", ev.seq)
            return
        if call.resolved:
            self._lifecycle(f"tool/result for call {call_id}, which is already resolved", ev.seq)
            return
        call.resolved = True
        life.pending -= 1
        if call.started:
            return
        message_id = message.get("id")
        message_id = message_id if isinstance(message_id, str) else ""
        forked = _repair_number(message_id, f"forked-tool-result-{call_id}-")
        interrupted = _repair_number(message_id, f"interrupted-tool-result-{call_id}-")
        if forked is None and interrupted is None:
            self._lifecycle(
                f"tool/result for call {call_id}, which was never started, is not a "
                "TOOL_NOT_STARTED repair",
                ev.seq,
            )
            return
        if forked is not None:
            problem = _fork_closer_problem(ev, message, call_id, forked)
            if problem is not None:
                self._lifecycle(f"fork closer for call {call_id}: {problem}", ev.seq)

    def _compaction_start(self, ev: Event, data: dict[str, Any]) -> None:
        self.lifecycle.compaction_open = ev.seq

    def _compaction_end(self, ev: Event, data: dict[str, Any]) -> None:
        self.lifecycle.compaction_open = None

    def _compaction_boundary(self, ev: Event) -> None:
        life = self.lifecycle
        if life.compaction_open is not None:
            self._lifecycle(
                f"compaction bracket opened at seq {life.compaction_open} crosses a turn boundary",
                ev.seq,
            )
            life.compaction_open = None

    def _command_run(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        command_id = data.get("commandId")
        if not isinstance(command_id, str):
            self._lifecycle("command/run without a commandId", ev.seq)
            return
        if command_id in life.commands_run:
            self._lifecycle(f"commandId {command_id} is used twice", ev.seq)
        life.commands_run.add(command_id)

    def _command_done(self, ev: Event, data: dict[str, Any]) -> None:
        life = self.lifecycle
        command_id = data.get("commandId")
        if not isinstance(command_id, str) or command_id not in life.commands_run:
            self._lifecycle(f"command/done {command_id!r} follows no command/run", ev.seq)
        elif command_id in life.commands_done:
            self._lifecycle(f"command/done {command_id} is recorded twice", ev.seq)
        else:
            life.commands_done.add(command_id)
