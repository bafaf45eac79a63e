"""Derived fields and facet columns, computed once on ingest from a validated payload.

What each field means: docs/architecture.md, "Derived fields".

Pure functions over the Structs of `records.contract.schema`: no database, no settings. Each returns
the facet columns the store indexes (the model a metric groups by, iteration, latency, skip reason,
outcome, the `has` flags) and the `derived` object stored beside the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from records.contract import fallback_causes, rollup_keys
from records.contract import schema as s
from records.contract.cost import Usage
from records.contract.rollup_keys import NOTICE_SPLITS, encode


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
    # Every model the record names besides `model` (selected and previous model, seat model,
    # a notice's from / to): what the `model` filter matches too.
    other_models: tuple[str, ...] = ()
    # The tokens (or the cost) the record reports, which ingest prices (records.contract.cost);
    # None for a record without usage.
    usage: Usage | None = None
    # Promises of the sending framework that the record breaks: kept, flagged.
    violations: list[str] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)


# --- contract violations --------------------------------------------------------------------------
# A record that breaks a promise of its framework is stored and flagged with these codes, never
# rejected: the evidence of a broken contract is what an operator needs to see.
PICK_VIOLATIONS = (
    "chosen_not_offered",  # the pick's chosen tool is not one of offered
    "ranked_not_offered",  # a ranked name is not one of offered
    "ranked_repeated",  # a name ranked twice
    "ranked_scores_rising",  # ranked is not highest score first
    "ranked_tie_out_of_order",  # equal scores not in offered order
    "unnarrowed_tool_not_served",  # narrowed false, yet an offered tool was not served
    "skipped_while_narrowed",  # narrowedSkipped given with narrowed true
)
VERDICT_VIOLATIONS = (
    "ruled_without_verdict",  # outcome ruled, no verdict
    "verdict_without_ruling",  # a verdict with another outcome
    "form_without_parse_error",  # form given with an outcome other than parse_error
    "cause_without_unavailable",  # cause given with an outcome other than unavailable
    "disposition_without_unavailable",  # disposition given likewise
)
# Found by the catch-up pass, which sees the run's other records (records.catchup.passes).
NOTICE_REPEATED = "notice_repeated_in_run"
VIOLATION_CODES = (*PICK_VIOLATIONS, *VERDICT_VIOLATIONS, NOTICE_REPEATED)
# Notices an engine files at most once per run (they report how the run was configured).
ONCE_PER_RUN_NOTICES = frozenset(
    {"classifier.role_defaulted", "config.auto_mode_classifier_fallback_invalid"}
)


def pick_violations(d: s.Pick) -> list[str]:
    return _pick_violations(d, {name: i for i, name in enumerate(d.offered)})


def _pick_violations(d: s.Pick, offered: dict[str, int]) -> list[str]:
    """`offered`: each offered name's (last) position. One pass over `ranked` instead of a
    generator per rule: this runs for every pick ingested."""
    found = []
    if d.chosen is not None and d.chosen not in offered:
        found.append("chosen_not_offered")
    ranked = d.ranked
    names = [tool.name for tool in ranked]
    if not offered.keys() >= set(names):
        found.append("ranked_not_offered")
    if len(set(names)) != len(names):
        found.append("ranked_repeated")
    rising = tie_out_of_order = False
    unknown = len(offered)
    for a, b in zip(ranked, ranked[1:], strict=False):
        if a.score < b.score:
            rising = True
        elif a.score == b.score and offered.get(a.name, -1) > offered.get(b.name, unknown):
            tie_out_of_order = True
    if rising:
        found.append("ranked_scores_rising")
    if tie_out_of_order:
        found.append("ranked_tie_out_of_order")
    if not d.narrowed and not offered.keys() <= set(d.served):
        found.append("unnarrowed_tool_not_served")
    if d.narrowed and d.narrowedSkipped is not None:
        found.append("skipped_while_narrowed")
    return found


def verdict_violations(d: s.Verdict) -> list[str]:
    ruled = d.outcome == "ruled"
    found = []
    if ruled and d.verdict is None:
        found.append("ruled_without_verdict")
    if not ruled and d.verdict is not None:
        found.append("verdict_without_ruling")
    if d.form is not None and d.outcome != "parse_error":
        found.append("form_without_parse_error")
    if d.cause is not None and d.outcome != "unavailable":
        found.append("cause_without_unavailable")
    if d.disposition is not None and d.outcome != "unavailable":
        found.append("disposition_without_unavailable")
    return found


def derive_pick(d: s.Pick) -> Derived:
    offered = {name: i for i, name in enumerate(d.offered)}
    doors = [name for name in d.served if name not in offered]
    usage = d.usage or s.PickUsage()
    return Derived(
        model=d.classifier.model,
        iteration=d.iteration,
        latency_ms=d.latencyMs,
        skip_reason=d.narrowedSkipped,
        rollup_key=encode(rollup_keys.PICK, {"skip_reason": d.narrowedSkipped}),
        tokens_in=usage.inputTokens,
        tokens_out=usage.outputTokens,
        # The classifier's own call, priced by its model (a pick names no provider).
        usage=None
        if usage.inputTokens is None and usage.outputTokens is None
        else Usage(d.classifier.model, None, usage.inputTokens or 0, usage.outputTokens or 0),
        violations=_pick_violations(d, offered),
        fields={"doors": doors},
    )


def derive_pick_error(d: s.PickError) -> Derived:
    return Derived(
        model=d.classifier.model,
        iteration=d.iteration,
        latency_ms=d.latencyMs,
        skip_reason=d.narrowedSkipped,
        is_error=True,
        rollup_key=encode(rollup_keys.PICK_ERROR, {"skip_reason": d.narrowedSkipped}),
    )


def derive_outcome(d: s.Outcome) -> Derived:
    agreement = {True: "agree", False: "disagree", None: ""}[d.firstAgrees]
    return Derived(
        iteration=d.iteration,
        rollup_key=encode(rollup_keys.OUTCOME, {"agreement": agreement}),
        fields={"missed": d.miss is not None},
    )


def derive_model_selection(d: s.ModelSelection) -> Derived:
    swap = fallback_causes.is_swap(d.default_model, d.selected_model)
    switch = d.previous_model is not None and d.previous_model != d.selected_model
    return Derived(
        model=d.default_model,
        iteration=d.step,
        is_swap=swap,
        # The swap matrix (default → selected) and the step-to-step model paths (previous →
        # selected), for about one row more per default model.
        rollup_key=encode(
            rollup_keys.SELECTION, {"selected": d.selected_model, "previous": d.previous_model}
        ),
        other_models=_others(d.default_model, d.selected_model, d.previous_model),
        fields={"swap": swap, "switch": switch, "selected_model": d.selected_model},
    )


# MemberJunction's loop-agent envelope names its next step with these types.
_ENVELOPE_STEPS = {"actions": "action", "sub-agent": "subAgent", "chat": "chat"}


def _envelope_decision(text: str) -> str:
    """Decision kind of a turn whose decision is the JSON envelope in its text."""
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
    is `taskComplete`; under `envelope` and `hybrid` alike the text is the JSON envelope, so
    plain text is `unparseable` under both: only `implicit` reads plain text its own way.
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
        else:
            decision = _envelope_decision(d.text or "")
    fields = {"protocol": protocol, "decision": decision, "calls": calls, "invented": invented}
    if d.offered is not None:
        fields["offered"] = list(dict.fromkeys(d.offered))
    return Derived(
        iteration=d.iteration,
        latency_ms=d.durationMs,
        outcome=decision,
        is_error=d.executionError is not None,
        usage=None if d.totalCost is None else Usage(None, reported_usd=d.totalCost),
        rollup_key=encode(
            rollup_keys.TURN,
            {"decision": decision, "protocol": protocol, "invented": int(bool(invented))},
        ),
        fields=fields,
    )


def derive_verdict(d: s.Verdict) -> Derived:
    ladder_fallback = fallback_causes.is_ladder_fallback(d.rung, d.reask)
    # A ruling without its verdict (a broken contract, flagged) still counts, as "ruled".
    verdict_class = (d.verdict or "ruled") if d.outcome == "ruled" else d.outcome
    attempt = f"{'reask' if d.reask else 'rung'}{d.rung}"
    return Derived(
        model=d.model,
        latency_ms=d.wallMs,
        outcome=verdict_class,
        rollup_key=encode(
            rollup_keys.VERDICT,
            {"verdict": verdict_class, "attempt": attempt, "seat": d.seatModel or d.model},
        ),
        is_fallback=ladder_fallback,
        is_contract_break=d.outcome == "parse_error",
        other_models=_others(d.model, d.seatModel),
        violations=verdict_violations(d),
        fields={"ladder_fallback": ladder_fallback, "seat_model": d.seatModel or d.model},
    )


def _notice_key(d: s.Notice) -> str:
    values = {name: d.detail.get(name, "") for name in NOTICE_SPLITS.get(d.code, ())}
    return encode(rollup_keys.NOTICE, {"code": d.code, **values})


def derive_notice(d: s.Notice) -> Derived:
    # Fallback notices name the model that fell back as `from`.
    model = d.detail.get("model", d.detail.get("from"))
    model = model if _is_model_name(model) else None
    named = [d.detail.get(name) for name in ("model", "from", "to")]
    return Derived(
        model=model,
        other_models=_others(model, *(m for m in named if _is_model_name(m))),
        outcome=d.level,
        is_fallback=fallback_causes.is_fallback_notice(d.code),
        is_contract_break=d.code == "classifier.contract_broken",
        is_error=d.level == "error",
        rollup_key=_notice_key(d),
        fields={"known_code": d.code in s.NOTICE_DETAILS},
    )


def derive_provider_error(d: s.ProviderError) -> Derived:
    refused = is_forced_tool_choice_refusal(d)
    return Derived(
        model=d.model,
        outcome=d.error,
        is_error=True,
        rollup_key=encode(
            rollup_keys.PROVIDER_ERROR,
            {"provider": d.provider, "error": d.error, "refused": int(refused)},
        ),
        fields={"tool_choice_refused": refused},
    )


def is_forced_tool_choice_refusal(d: s.ProviderError) -> bool:
    """The provider named the refusal, or refused a request carrying a tool choice
    outright (400, not retryable). An overload that happened to carry a tool choice is not one."""
    if d.error == "UnsupportedToolChoiceError":
        return True
    return d.toolChoice is not None and d.status == 400 and d.retryable is False


def derive_reliability(d: s.Reliability) -> Derived:
    return Derived(
        outcome=d.type,
        rollup_key=encode(rollup_keys.RELIABILITY, {"type": d.type}),
        is_fallback=d.type == fallback_causes.RELIABILITY_FALLBACK,
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
        rollup_key=encode(rollup_keys.MODEL_CALL, {"provider": d.provider}),
        tokens_in=u.input,
        tokens_out=u.output,
        usage=Usage(
            d.model,
            d.provider,
            u.input,
            u.output,
            u.cacheRead or 0,
            u.cacheWrite or 0,
            u.thinking or 0,
        ),
        fields={"total_tokens": total},
    )


def _others(model: str | None, *names: str | None) -> tuple[str, ...]:
    """The distinct names besides `model`, in order."""
    out: list[str] = []
    for name in names:
        if name and name != model and name not in out:
            out.append(name)
    return tuple(out)


def _is_model_name(value: object) -> bool:
    # A notice's detail is free-form: only a name that fits the model columns is a model.
    return isinstance(value, str) and 0 < len(value) <= 200
