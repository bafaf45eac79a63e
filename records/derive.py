"""Derived fields and facet columns, computed once on ingest from a validated payload.

Pure functions over the Structs of `records.schema`: no database, no settings. Each returns the
facet columns the store indexes (the model a metric of DESIGN §4 groups by, iteration, latency,
skip reason, outcome, the `has` flags) and the `derived` object stored beside the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from records import schema as s


@dataclass(slots=True)
class Derived:
    model: str | None = None
    iteration: int | None = None
    latency_ms: float | None = None
    skip_reason: str | None = None
    outcome: str | None = None
    is_swap: bool = False
    is_fallback: bool = False
    is_error: bool = False
    is_contract_break: bool = False
    # What the workers' rollups group this record by within its kind (skip reason, selected
    # model, verdict class and ladder rung, ...), so that aggregation reads columns, not JSON.
    rollup_key: str = ""
    tokens_in: int | None = None
    tokens_out: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)


def derive_pick(d: s.Pick) -> Derived:
    offered = set(d.offered)
    doors = [name for name in d.served if name not in offered]
    usage = d.usage or s.PickUsage()
    return Derived(
        model=d.classifier.model,
        iteration=d.iteration,
        latency_ms=d.latencyMs,
        skip_reason=d.narrowedSkipped,
        rollup_key=d.narrowedSkipped or "",
        tokens_in=usage.inputTokens,
        tokens_out=usage.outputTokens,
        fields={"doors": doors},
    )


def derive_pick_error(d: s.PickError) -> Derived:
    return Derived(
        model=d.classifier.model,
        iteration=d.iteration,
        latency_ms=d.latencyMs,
        skip_reason=d.narrowedSkipped,
        is_error=True,
        rollup_key=d.narrowedSkipped or "",
    )


def derive_outcome(d: s.Outcome) -> Derived:
    agreement = {True: "agree", False: "disagree", None: ""}[d.firstAgrees]
    return Derived(
        iteration=d.iteration, rollup_key=agreement, fields={"missed": d.miss is not None}
    )


def derive_model_selection(d: s.ModelSelection) -> Derived:
    swap = d.selected_model != d.default_model
    switch = d.previous_model is not None and d.previous_model != d.selected_model
    return Derived(
        model=d.default_model,
        iteration=d.step,
        is_swap=swap,
        # selected | previous model: the swap matrix (default → selected) and the step-to-step
        # model paths (previous → selected), for about one row more per default model.
        rollup_key=f"{d.selected_model}|{d.previous_model or ''}",
        fields={"swap": swap, "switch": switch, "selected_model": d.selected_model},
    )


# MemberJunction's loop-agent envelope names its next step with these types.
_ENVELOPE_STEPS = {"actions": "action", "sub-agent": "subAgent", "chat": "chat"}


def _envelope_decision(text: str) -> str:
    """Decision kind of an envelope-protocol turn whose decision is JSON in the text."""
    try:
        envelope = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "unparseable"
    if not isinstance(envelope, dict):
        return "unparseable"
    if envelope.get("taskComplete") is True:
        return "taskComplete"
    step = envelope.get("nextStep")
    if isinstance(step, dict) and isinstance(step.get("type"), str):
        return _ENVELOPE_STEPS.get(step["type"].lower(), "other")
    if envelope.get("payloadChangeRequest"):
        return "payloadChange"
    return "other"


def derive_turn(d: s.Turn) -> Derived:
    """Each call's action name, the invented ones, and the turn's decision kind.

    A wire name in controlToolMap is a control call; one in toolNameMap maps to its action name;
    any other passes through unchanged and, when the harness sent a toolNameMap, is *invented*
    (the model called a tool it was never given). The first control call decides the turn;
    otherwise calls make it an `action`. Without calls: no text is `empty`; under `implicit` text
    is `taskComplete`, under `hybrid` it is `chat`, under `envelope` the text is the JSON envelope.
    """
    protocol = d.protocol or "envelope"
    name_map = d.toolNameMap or {}
    control_map = d.controlToolMap or {}
    calls = []
    invented = []
    decision = None
    for call in d.toolCalls or ():
        control = control_map.get(call.name)
        if control is not None:
            calls.append({"wire": call.name, "control": control.kind})
            decision = decision or control.kind
            continue
        action = name_map.get(call.name, call.name)
        is_invented = d.toolNameMap is not None and call.name not in name_map
        if is_invented:
            invented.append(call.name)
        calls.append({"wire": call.name, "action": action, "invented": is_invented})
    if decision is None:
        if calls:
            decision = "action"
        elif not (d.text or "").strip():
            decision = "empty"
        elif protocol == "implicit":
            decision = "taskComplete"
        elif protocol == "hybrid":
            decision = "chat"
        else:
            decision = _envelope_decision(d.text or "")
    return Derived(
        latency_ms=d.durationMs,
        outcome=decision,
        is_error=d.executionError is not None,
        rollup_key=f"{decision}|{protocol}|{int(bool(invented))}",
        fields={"protocol": protocol, "decision": decision, "calls": calls, "invented": invented},
    )


def derive_verdict(d: s.Verdict) -> Derived:
    # A first attempt (not a re-ask) on rung 1 means the seat gave no ruling: a ladder fallback.
    ladder_fallback = d.rung == 1 and not d.reask
    verdict_class = d.verdict if d.outcome == "ruled" else d.outcome
    attempt = "reask" if d.reask else f"rung{d.rung}"
    return Derived(
        model=d.model,
        latency_ms=d.wallMs,
        outcome=verdict_class,
        rollup_key=f"{verdict_class}|{attempt}|{d.seatModel or d.model}",
        is_fallback=ladder_fallback,
        is_contract_break=d.outcome == "parse_error",
        fields={"ladder_fallback": ladder_fallback, "seat_model": d.seatModel or d.model},
    )


_FALLBACK_NOTICES = {"classifier.fallback", "route.fallback_to_primary"}
# Notices whose rollups split by a detail field (the classifiers page charts them by it).
_NOTICE_SPLITS = {
    "classifier.role_defaulted": ("reason",),
    "classifier.unavailable": ("cause", "disposition"),
}


def _notice_key(d: s.Notice) -> str:
    fields = _NOTICE_SPLITS.get(d.code, ())
    return "|".join((d.code, *(str(d.detail.get(f, "")) for f in fields)))


def derive_notice(d: s.Notice) -> Derived:
    # Fallback notices name the model that fell back as `from`.
    model = d.detail.get("model", d.detail.get("from"))
    return Derived(
        model=model if isinstance(model, str) else None,
        outcome=d.level,
        is_fallback=d.code in _FALLBACK_NOTICES,
        is_contract_break=d.code == "classifier.contract_broken",
        is_error=d.level == "error",
        rollup_key=_notice_key(d),
        fields={"known_code": d.code in s.NOTICE_DETAILS},
    )


def derive_provider_error(d: s.ProviderError) -> Derived:
    refused = d.toolChoice is not None or d.error == "UnsupportedToolChoiceError"
    return Derived(
        model=d.model,
        outcome=d.error,
        is_error=True,
        rollup_key=f"{d.provider}|{d.error}|{int(refused)}",
        fields={"tool_choice_refused": refused},
    )


def derive_reliability(d: s.Reliability) -> Derived:
    return Derived(
        outcome=d.type,
        rollup_key=d.type,
        is_fallback=d.type == "fallback_triggered",
        is_error=d.type == "fail_fast",
    )


def derive_model_call(d: s.ModelCall) -> Derived:
    u = d.usage
    total = u.input + u.output + (u.cacheRead or 0) + (u.cacheWrite or 0) + (u.thinking or 0)
    return Derived(
        model=d.model,
        iteration=d.iteration,
        latency_ms=d.durationMs,
        outcome=d.stopReason,
        rollup_key=d.provider,
        tokens_in=u.input,
        tokens_out=u.output,
        fields={"total_tokens": total},
    )
