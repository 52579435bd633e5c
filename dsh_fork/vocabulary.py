"""The v4 event vocabulary (format §8.6) and the groups of types the checklist relates.

Data from the spec, not rules: which types DSH knows, which carry a surface operation, which
must have object data, which belong inside a step or a turn. Apart so that the list can be
compared with the spec's at a glance and read by the rules without the rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


# The generated v4 vocabulary (format §8.6).
KNOWN_V4_TYPES = frozenset(
    (
        "agent-preset/selected",
        "agent/inbox/spliced",
        "approval/asked",
        "approval/decided",
        "approval/policy",
        "assistant/attempt",
        "assistant/message",
        "command/done",
        "command/run",
        "compaction/end",
        "compaction/prune",
        "compaction/start",
        "compaction/summary",
        "deliverables/presented",
        "developer/message",
        "feedback/message-delete",
        "feedback/message-put",
        "feedback/record",
        "goal/change",
        "hook/invoked",
        "hook/result",
        "image/offload",
        "llm/retry",
        "llm/retry-started",
        "model/selection",
        "permission/preset",
        "plan/mode",
        "request/context",
        "request/header",
        "sandbox/mode",
        "schedule/change",
        "session-log-deepseek/delivery-accepted",
        "session/end-seed",
        "session/title",
        "session/title-llm-request",
        "step/end",
        "step/start",
        "subagent/catalog",
        "subagent/descriptor",
        "subagent/model-selection-policy",
        "system/message",
        "team/member",
        "team/message/delivered",
        "team/message/queued",
        "team/task",
        "todo/write",
        "tool-workflow/agent-end",
        "tool-workflow/agent-start",
        "tool-workflow/run-end",
        "tool-workflow/run-start",
        "tool/call",
        "tool/ptc-dispatch",
        "tool/ptc-dispatch-start",
        "tool/result",
        "turn/end",
        "turn/start",
        "user/message",
        "web/deepseek-search-llm-request",
        "workspace/changes",
    )
)


SURFACE_TYPES = frozenset(
    ("system/message", "developer/message", "user/message", "assistant/message", "tool/result")
)


# Types whose ``data`` DSH relates to other events, hence must be an object (format §15).
OBJECT_DATA_TYPES = SURFACE_TYPES | frozenset(
    (
        "session/end-seed",
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "assistant/attempt",
        "tool/call",
        "request/header",
        "request/context",
        "session/title",
        "command/run",
        "command/done",
        "compaction/start",
        "compaction/end",
        "compaction/prune",
        "compaction/summary",
        "llm/retry",
        "llm/retry-started",
        "tool/ptc-dispatch",
        "tool/ptc-dispatch-start",
    )
)


STEP_BOUND_TYPES = frozenset(
    (
        "assistant/message",
        "tool/call",
        "tool/result",
        "system/message",
        "developer/message",
        "assistant/attempt",
    )
)


TURN_BOUND_TYPES = frozenset(("request/header", "request/context"))


DELIVERY_TYPE = "session-log-deepseek/delivery-accepted"
