"""The record kinds (docs/architecture.md, "Record kinds"), declared once as msgspec Structs.

Field names are the emitting framework's own (camelCase for agentfootprint and MemberJunction,
snake_case for rig). These declarations are the validation (closed enums, finite numbers, bounded
strings and arrays), the OpenAPI/JSON Schema of the docs, and what the tests iterate over; unknown
fields inside `data` are accepted here and kept as posted by the store.

Rules that span fields raise ``ValueError("<field>::<message>")`` from ``__post_init__``; the
normaliser turns that into an error on ``data.<field>``.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Annotated, Any, Literal, Union

import msgspec
from msgspec import Meta, Struct, field

MAX_ITEMS = 1000  # arrays bounded, 1,000 items (and objects, 1,000 entries)
_MAX_FLOAT = sys.float_info.max

# --- constrained scalars -------------------------------------------------------------------
Id = Annotated[str, Meta(min_length=1, max_length=200)]
Name = Annotated[str, Meta(min_length=1, max_length=200)]
Text = Annotated[str, Meta(max_length=65536)]
Count = Annotated[int, Meta(ge=0, le=2**31 - 1)]
HttpStatus = Annotated[int, Meta(ge=100, le=599)]
# The bounds reject inf, -inf and NaN: a finite number is one inside the float range.
Finite = Annotated[float, Meta(ge=-_MAX_FLOAT, le=_MAX_FLOAT)]
NonNegative = Annotated[float, Meta(ge=0, le=_MAX_FLOAT)]
Names = Annotated[list[Name], Meta(max_length=MAX_ITEMS)]
Timestamp = Annotated[datetime, Meta(tz=True)]
DottedCode = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+$", max_length=200)]
# What the agent ran as (a version, a prompt hash, a git sha): compared release against release,
# so it is one printable line. Control characters (C0, DEL, C1) are refused rather than kept:
# one would make two releases look alike on a page or split a CSV row in a reader.
RELEASE_PATTERN = r"\A[^\x00-\x1f\x7f-\x9f]*\Z"
Release = Annotated[str, Meta(min_length=1, max_length=200, pattern=RELEASE_PATTERN)]
JsonObject = Annotated[dict[str, Any], Meta(max_length=MAX_ITEMS)]

SkipReason = Literal["unavailable", "too-few", "after-miss", "wrap-up"]


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field_name}::{message}")


# --- tool_choice.* (agentfootprint ToolChoiceRow) -------------------------------------------
class Classifier(Struct):
    name: Name
    model: Name


class ClassifierRef(Struct):
    name: Name
    model: Name | None = None


class RankedTool(Struct):
    name: Name
    score: Finite


class PickUsage(Struct):
    inputTokens: Count | None = None
    outputTokens: Count | None = None


class Pick(Struct, kw_only=True):
    iteration: Count
    source: Literal["classifier"]
    classifier: Classifier
    offered: Names
    ranked: Annotated[list[RankedTool], Meta(max_length=MAX_ITEMS)]
    chosen: Name | None = None
    confidence: Finite
    usage: PickUsage | None = None
    latencyMs: NonNegative
    served: Names
    narrowed: bool
    narrowedSkipped: SkipReason | None = None
    # A chosen tool not offered, ranked names not offered, repeated or out of order, and
    # narrowedSkipped with narrowed true break the framework's promises but not the record's
    # shape: they are stored and flagged (records.contract.derive.pick_violations), not rejected.


class PickError(Struct, kw_only=True):
    iteration: Count
    classifier: ClassifierRef
    status: HttpStatus | None = None
    message: Text
    latencyMs: NonNegative
    served: Names
    narrowedSkipped: SkipReason | None = None


class Miss(Struct):
    wanted: Names


class Outcome(Struct, kw_only=True):
    iteration: Count
    called: Names
    firstAgrees: bool | None = None
    miss: Miss | None = None


# --- model_selection (rig ModelSelection) ----------------------------------------------------
class RequestPatch(Struct):
    preamble: Text | None = None
    temperature: Finite | None = None
    max_tokens: Count | None = None
    tool_choice: Any = None
    active_tools: Names | None = None
    additional_params: JsonObject | None = None


class Capabilities(Struct):
    composes_native_output_with_tools: bool | None = None
    accepts_forced_tool_choice: bool | None = None


class ModelSelection(Struct, kw_only=True):
    step: Count
    default_model: Name
    selected_model: Name
    previous_model: Name | None = None
    action: Literal["continue", "select", "stop"]
    stop_reason: Text | None = None
    retry: bool | None = None
    request_patch: RequestPatch | None = None
    capabilities: Capabilities | None = None


# --- turn (MemberJunction RawTurn) -------------------------------------------------------------
class ToolCall(Struct):
    name: Name
    arguments: Any = None


class ControlTool(Struct):
    kind: Literal["subAgent", "payloadChange", "chat", "taskComplete"]
    name: Name | None = None

    def __post_init__(self) -> None:
        _require(
            self.kind != "subAgent" or self.name is not None,
            "name",
            "is required for a subAgent control tool",
        )


class Turn(Struct, kw_only=True):
    protocol: Literal["envelope", "hybrid", "implicit"] | None = None
    text: Annotated[str, Meta(max_length=262144)] | None = None
    toolCalls: Annotated[list[ToolCall], Meta(max_length=MAX_ITEMS)] | None = None
    toolNameMap: Annotated[dict[Name, Name], Meta(max_length=MAX_ITEMS)] | None = None
    controlToolMap: Annotated[dict[Name, ControlTool], Meta(max_length=MAX_ITEMS)] | None = None
    finishReason: Name | None = None
    executionError: Any = None
    durationMs: NonNegative | None = None
    totalCost: NonNegative | None = None
    # The tools the call was offered (a model call read from a trace), and the call's place in
    # its run: with them a turn is a tool decision, offered → called.
    offered: Annotated[list[Name], Meta(max_length=MAX_ITEMS)] | None = None
    iteration: Count | None = None


# --- classifier.verdict ------------------------------------------------------------------------
class Verdict(Struct, kw_only=True):
    toolName: Name
    toolCallId: Name
    model: Name
    seatModel: Name | None = None
    rung: Annotated[int, Meta(ge=0, le=1)]
    seat: Literal["off", "low", "think"]
    reask: bool
    outcome: Literal["ruled", "parse_error", "unavailable"]
    verdict: Literal["allow", "block"] | None = None
    form: Literal["missing", "conflict"] | None = None
    cause: Literal["timeout", "error"] | None = None
    disposition: Literal["asked", "denied"] | None = None
    station: Literal["leg", "ancestor"]
    wallMs: NonNegative
    budgetMs: NonNegative | None = None
    # Fields that contradict the outcome are flagged (records.contract.derive.verdict_violations).


# --- notice ------------------------------------------------------------------------------------
class Notice(Struct, kw_only=True):
    code: DottedCode
    level: Literal["debug", "info", "warn", "error"] | None = None
    audience: Literal["operator", "user", "developer"] | None = None
    message: Text
    detail: JsonObject


class FallbackDetail(Struct):
    from_: Name | None = field(name="from", default=None)
    to: Name | None = None
    cause: Name | None = None


class ContractBrokenDetail(Struct):
    model: Name
    streak: Count


class RoleDefaultedDetail(Struct):
    reason: Literal[
        "tier_below_main", "tier_table", "role_fallback", "main_only", "role_unresolvable"
    ]
    model: Name


class UnavailableDetail(Struct):
    toolName: Name
    toolCallId: Name
    cause: Literal["timeout", "error"]
    disposition: Literal["asked", "denied"]


class RouteFallbackDetail(Struct):
    seat: Name
    from_: Name = field(name="from")
    to: Name
    cause: Name


class AnyDetail(Struct):
    """A known code whose detail has no fixed fields."""


# Codes whose `detail` has a known shape; other codes are stored and shown as they come.
NOTICE_DETAILS: dict[str, type[Struct]] = {
    "classifier.fallback": FallbackDetail,
    "classifier.contract_broken": ContractBrokenDetail,
    "classifier.role_defaulted": RoleDefaultedDetail,
    "classifier.unavailable": UnavailableDetail,
    "route.fallback_to_primary": RouteFallbackDetail,
    "route.classifier_unroutable": AnyDetail,
    "config.auto_mode_classifier_fallback_invalid": AnyDetail,
}


# --- provider.error ----------------------------------------------------------------------------
class ToolChoice(Struct):
    type: Name
    name: Name | None = None


class ProviderError(Struct, kw_only=True):
    error: Name
    provider: Name
    model: Name
    retryable: bool
    status: HttpStatus | None = None
    message: Text | None = None
    toolChoice: ToolChoice | None = None


# --- reliability (agentfootprint) ----------------------------------------------------------------
class Reliability(Struct, kw_only=True):
    type: Literal["retried", "recovered", "fail_fast", "fallback_triggered", "circuit_changed"]
    attempt: Count | None = None
    fromProvider: Name | None = None
    toProvider: Name | None = None
    errorKind: (
        Literal["ok", "5xx-transient", "rate-limit", "circuit-open", "schema-fail", "unknown"]
        | None
    ) = None
    recoveredVia: Name | None = None
    primary: Name | None = None
    fallback: Name | None = None
    reason: Text | None = None
    state: Literal["closed", "open", "half-open"] | None = None
    providerName: Name | None = None

    def __post_init__(self) -> None:
        if self.type == "retried":
            _require(self.attempt is not None, "attempt", "is required when type is retried")
        if self.type == "circuit_changed":
            _require(self.state is not None, "state", "is required when type is circuit_changed")


# --- model_call ----------------------------------------------------------------------------------
class CallUsage(Struct):
    input: Count
    output: Count
    cacheRead: Count | None = None
    cacheWrite: Count | None = None
    thinking: Count | None = None


class ModelCall(Struct, kw_only=True):
    iteration: Count
    provider: Name
    model: Name
    usage: CallUsage
    stopReason: Name
    durationMs: NonNegative
    toolsCount: Count | None = None
    messagesCount: Count | None = None


# --- the envelope ----------------------------------------------------------------------------
class Envelope(Struct, kw_only=True, forbid_unknown_fields=True, tag_field="kind"):
    id: Id | None = None
    run_id: Id
    ts: Timestamp
    session_id: Id | None = None
    agent: Id | None = None
    parent_run_id: Id | None = None
    release: Release | None = None


def _envelope(kind: str, data_type: type[Struct]) -> type[Envelope]:
    """One envelope class per kind, tagged by `kind`, whose `data` is that kind's payload."""
    name = "".join(part.title() for part in kind.replace(".", "_").split("_")) + "Record"
    return msgspec.defstruct(
        name,
        [("data", data_type)],
        bases=(Envelope,),
        tag=kind,
        kw_only=True,
        module=__name__,
    )


DATA_TYPES: dict[str, type[Struct]] = {
    "tool_choice.pick": Pick,
    "tool_choice.pick_error": PickError,
    "tool_choice.outcome": Outcome,
    "model_selection": ModelSelection,
    "turn": Turn,
    "classifier.verdict": Verdict,
    "notice": Notice,
    "provider.error": ProviderError,
    "reliability": Reliability,
    "model_call": ModelCall,
}
ENVELOPES: dict[str, type[Envelope]] = {k: _envelope(k, t) for k, t in DATA_TYPES.items()}
# A tagged union: msgspec picks the member by `kind` before it validates the rest.
AnyRecord = Union[tuple(ENVELOPES.values())]  # noqa: UP007 (built from a tuple at run time)


def _build_validation_info() -> None:
    """Have msgspec build what it validates each Struct with now, as this module is imported
    (by one thread: the import lock holds the others until it is done).

    msgspec 0.20 builds a Struct's info the first time a value is converted to it and publishes
    it before it is complete: a second thread converting to the same kind meanwhile read it half
    built and the process died (SIGSEGV in msgspec's _core, a NULL read). Every fresh gunicorn
    worker taking concurrent ingest batches did (its threads all convert their first picks,
    turns and verdicts together): workers crashed and were respawned under load, and the
    clients of the batches they held met closed connections. msgspec 0.23 no longer crashes
    so (tests/records/contract/test_validation.py runs the race in fresh processes).
    """
    for struct in (*ENVELOPES.values(), *NOTICE_DETAILS.values()):
        msgspec.json.Decoder(struct)


_build_validation_info()
