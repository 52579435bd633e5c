"""Subagent descriptors and catalog facts: schemas and the fact a descriptor yields (format §10.4,
§10.5)."""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from .records import nonneg_int

CATALOG_KEYS = frozenset(("version", "childId", "childCreatedAt", "mode", "label"))
_DESCRIPTOR_V3_ONE_SHOT = frozenset(("version", "mode", "provider", "label"))
_DESCRIPTOR_V3_CONTINUABLE = frozenset(
    (
        "version",
        "mode",
        "provider",
        "label",
        "agentProvider",
        "agentModel",
        "agentReasoningEffort",
        "persona",
        "toolFilter",
    )
)
_DESCRIPTOR_V2_CONTINUABLE = _DESCRIPTOR_V3_CONTINUABLE - {"agentReasoningEffort"}


def catalog_problem(data: Any) -> str | None:
    """Why an own-range catalog fact is invalid for DSH's strict schema, or None when valid."""
    if not isinstance(data, dict):
        return "catalog data is not an object"
    extra = set(data) - CATALOG_KEYS
    if extra:
        return f"catalog fact has keys not allowed: {', '.join(sorted(extra))}"
    version = data.get("version")
    if version not in (0, 1) or isinstance(version, bool):
        return "catalog version must be 0 or 1"
    if not isinstance(data.get("childId"), str):
        return "catalog childId must be a string"
    if nonneg_int(data.get("childCreatedAt")) is None:
        return "catalog childCreatedAt must be a non-negative safe integer"
    mode = data.get("mode")
    label = data.get("label")
    if "label" in data and not isinstance(label, str):
        return "catalog label must be a string"
    if mode == "continuable":
        if not isinstance(label, str):
            return "continuable catalog fact needs a label"
    elif mode == "unknown":
        if version != 1:
            return "mode unknown needs catalog version 1"
    elif mode != "one-shot":
        return "catalog mode must be one-shot or continuable"
    return None


def descriptor_problem(data: Any) -> str | None:
    """Why a descriptor cannot identify a child (format §10.4), or None."""
    if not isinstance(data, dict):
        return "descriptor data is not an object"
    version = data.get("version")
    if isinstance(version, bool) or version not in (1, 2, 3):
        return f"unsupported descriptor version {version!r}"
    if not isinstance(data.get("provider"), str):
        return "descriptor provider is not a string"
    if version == 1:
        if not isinstance(data.get("label"), str):
            return "continuable descriptor without label"
        return None
    mode = data.get("mode")
    if mode == "one-shot":
        allowed = _DESCRIPTOR_V3_ONE_SHOT
        if "label" in data and not isinstance(data["label"], str):
            return "descriptor label is not a string"
    elif mode == "continuable":
        allowed = _DESCRIPTOR_V3_CONTINUABLE if version == 3 else _DESCRIPTOR_V2_CONTINUABLE
        if not isinstance(data.get("label"), str):
            return "continuable descriptor without label"
        tool_filter = data.get("toolFilter")
        if tool_filter is not None and not _valid_tool_filter(tool_filter):
            return "descriptor toolFilter is invalid"
    else:
        return f"descriptor mode {mode!r} is neither one-shot nor continuable"
    extra = set(data) - allowed
    if extra:
        return f"descriptor has keys not allowed: {', '.join(sorted(extra))}"
    return None


def _valid_tool_filter(value: Any) -> bool:
    if not isinstance(value, dict) or not value or set(value) - {"allow", "deny"}:
        return False
    return all(
        isinstance(items, list) and all(isinstance(i, str) for i in items)
        for items in value.values()
    )


class FactPlan(Struct, frozen=True):
    """A version-0 catalog fact for a child, or the reason none can be made."""

    data: dict[str, Any] | None
    reason: str | None


def fact_from_descriptor(
    descriptor: Any, child_id: str, child_created_at: int, *, own_descriptors: int = 1
) -> FactPlan:
    """The version-0 fact DSH's backfill would write from a child's descriptor (§10.5.5)."""
    if descriptor is None:
        return FactPlan(None, "no descriptor")
    if own_descriptors > 1:
        return FactPlan(None, "several own descriptors")
    problem = descriptor_problem(descriptor)
    if problem is not None:
        return FactPlan(None, problem)
    mode = "continuable" if descriptor["version"] == 1 else descriptor["mode"]
    fact: dict[str, Any] = {
        "version": 0,
        "childId": child_id,
        "childCreatedAt": child_created_at,
        "mode": mode,
    }
    if isinstance(descriptor.get("label"), str):
        fact["label"] = descriptor["label"]
    problem = catalog_problem(fact)
    if problem is not None:
        return FactPlan(None, problem)
    return FactPlan(fact, None)
