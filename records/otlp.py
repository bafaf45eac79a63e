"""OpenTelemetry traces in, decision records out: the one mapping of OTLP spans to record kinds.

An OTLP/HTTP export (`ExportTraceServiceRequest`, protobuf or OTLP JSON) is decoded here, each
span is read into a plain `SpanView`, and the declarations below turn spans and span events into
records of DESIGN §3 — raw envelopes, judged by the same `records.normalise.normalise` as native
ingest. Pure functions: no database, no settings, no views (api/otlp.py serves the endpoint).

The mappings (docs/otlp.md is the user's copy of this table):

- a GenAI inference span (`gen_ai.operation.name` chat, text_completion, generate_content)
  → `model_call`; the same span failed (status ERROR or `error.type`) → `provider.error`;
- `execute_tool` spans → the `toolCalls` of one `turn` per model response;
- `invoke_agent` spans (and `gen_ai.agent.name`) → the records' agent, and nested agents → sub-runs;
- a span event named `decisionboard.<kind>` → one record of that kind, its attributes the fields.

A span that none of them maps is counted and named in the response's partial success, never
dropped silently.
"""

from __future__ import annotations

import base64
import bisect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any

import msgspec
import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from records import schema
from records.kinds import KIND_NAMES, KINDS
from records.normalise import Limits, NormalisedRecord, normalise

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ENCODINGS = (PROTOBUF, JSON)

# --- attribute names -------------------------------------------------------------------------
# Decisionboard's own attributes: on a span (inherited by its descendants in the same export),
# on the resource, or on a decisionboard.<kind> event (that record only).
PREFIX = "decisionboard."
RUN_ID = "decisionboard.run_id"
PARENT_RUN_ID = "decisionboard.parent_run_id"
AGENT = "decisionboard.agent"
SESSION_ID = "decisionboard.session_id"
ITERATION = "decisionboard.iteration"
RECORD_ID = "decisionboard.id"  # events only: the record's idempotency key
RETRYABLE = "decisionboard.retryable"  # a failed inference span: overrides the guess below

# OpenTelemetry GenAI semantic conventions (semconv 1.37+, with the older names they replaced).
OPERATION = "gen_ai.operation.name"
PROVIDER = ("gen_ai.provider.name", "gen_ai.system")
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT_TOKENS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_write.input_tokens",
)
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"

INFERENCE = frozenset({"chat", "text_completion", "generate_content"})
EXECUTE_TOOL = "execute_tool"
INVOKE_AGENT = "invoke_agent"
# Statuses and error types after which the same request may succeed (a provider.error's
# `retryable` when the span does not say it with decisionboard.retryable).
_RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_RETRYABLE_WORDS = ("timeout", "ratelimit", "rate_limit", "overload", "unavailable", "connection")
# How far up a parent chain is followed (a loop of parent ids in a hostile export ends too).
_MAX_DEPTH = 100
_MAX_PROBLEMS_SHOWN = 5


class OtlpDecodeError(ValueError):
    """The body is not an ExportTraceServiceRequest in the encoding it claims."""


# --- decoding ----------------------------------------------------------------------------------
def decode_request(body: bytes, encoding: str) -> ExportTraceServiceRequest:
    """The export in `body`, protobuf or OTLP JSON (with hex trace and span ids)."""
    request = ExportTraceServiceRequest()
    if encoding == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError) as exc:
            raise OtlpDecodeError(f"The body is not an OTLP protobuf export: {exc}.") from None
        return request
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OtlpDecodeError(f"The body is not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise OtlpDecodeError(
            "The body must be an OTLP JSON export object ({resourceSpans: [...]})."
        )
    _hex_ids_to_base64(value)
    try:
        json_format.ParseDict(value, request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, TypeError, ValueError) as exc:
        raise OtlpDecodeError(f"The body is not an OTLP JSON export: {exc}.") from None
    return request


def _hex_ids_to_base64(export: dict) -> None:
    """OTLP JSON writes trace and span ids as hex, protobuf's JSON mapping wants base64."""
    for r, resource_spans in enumerate(_items(export, "resourceSpans", "resource_spans")):
        for s, scope_spans in enumerate(_items(resource_spans, "scopeSpans", "scope_spans")):
            for i, span in enumerate(_items(scope_spans, "spans")):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"
                _convert_ids(
                    span,
                    where,
                    ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"),
                )
                for k, link in enumerate(_items(span, "links")):
                    _convert_ids(
                        link, f"{where}.links[{k}]", ("traceId", "trace_id", "spanId", "span_id")
                    )


def _items(parent: Any, *names: str) -> list:
    if not isinstance(parent, dict):
        return []
    for name in names:
        value = parent.get(name)
        if isinstance(value, list):
            return value
    return []


def _convert_ids(obj: Any, where: str, names: tuple[str, ...]) -> None:
    if not isinstance(obj, dict):
        return
    for name in names:
        value = obj.get(name)
        if not isinstance(value, str):
            continue
        try:
            obj[name] = base64.b64encode(bytes.fromhex(value)).decode()
        except ValueError:
            raise OtlpDecodeError(
                f"{where}.{name} must be a hex string (OTLP JSON encodes ids as hex)."
            ) from None


def encode_response(response: Any, encoding: str) -> bytes:
    """An ExportTraceServiceResponse or google.rpc.Status in the request's encoding."""
    if encoding == PROTOBUF:
        return response.SerializeToString()
    return json_format.MessageToJson(response, indent=None).encode()


# --- spans as plain data -----------------------------------------------------------------------
@dataclass(slots=True)
class EventView:
    index: int
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(slots=True)
class SpanView:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    failed: bool
    status_message: str
    events: list[EventView]

    @property
    def operation(self) -> str | None:
        value = self.attributes.get(OPERATION)
        return value if isinstance(value, str) else None

    @property
    def label(self) -> str:
        return f"span {self.span_id} {self.name!r}"

    @property
    def duration_ms(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e6


class _Reader:
    """Reads OTLP values as JSON, noting whether any could need normalise's scrub: a NUL in a
    string (PostgreSQL cannot store it) or a non-finite double, as the native path notes them in
    the body. Scrubbing every record would cost a walk over every value."""

    __slots__ = ("dirty",)

    def __init__(self) -> None:
        self.dirty = False

    def value(self, value: AnyValue) -> Any:
        """An AnyValue as JSON: arrays become lists, kvlists objects, bytes base64."""
        which = value.WhichOneof("value")
        if which == "string_value":
            text = value.string_value
            if "\x00" in text or "\\u0000" in text:  # the latter once parsed as JSON
                self.dirty = True
            return text
        if which == "int_value":
            return value.int_value
        if which == "double_value":
            number = value.double_value
            if not math.isfinite(number):
                self.dirty = True
            return number
        if which == "bool_value":
            return value.bool_value
        if which == "array_value":
            return [self.value(item) for item in value.array_value.values]
        if which == "kvlist_value":
            return {kv.key: self.value(kv.value) for kv in value.kvlist_value.values}
        if which == "bytes_value":
            return base64.b64encode(value.bytes_value).decode()
        return None

    def attributes(self, key_values: Iterable) -> dict[str, Any]:
        return {kv.key: self.value(kv.value) for kv in key_values}


def spans_of(request: ExportTraceServiceRequest, reader: _Reader | None = None) -> list[SpanView]:
    reader = reader or _Reader()
    read = reader.attributes
    spans = []
    for resource_spans in request.resource_spans:
        resource = read(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes = read(span.attributes)
                if "\x00" in span.name or "\x00" in span.status.message:  # both reach `data`
                    reader.dirty = True
                events = [
                    EventView(i, e.name, e.time_unix_nano, read(e.attributes))
                    for i, e in enumerate(span.events)
                ]
                spans.append(
                    SpanView(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=attributes,
                        resource=resource,
                        failed=span.status.code == Status.STATUS_CODE_ERROR
                        or ERROR_TYPE in attributes,
                        status_message=span.status.message,
                        events=events,
                    )
                )
    return spans


# --- where a span belongs: run, parent run, agent, session -------------------------------------
@dataclass(frozen=True, slots=True)
class Scope:
    run_id: str
    parent_run_id: str | None
    agent: str | None
    session_id: str | None


class Trace:
    """The spans of one export, indexed so a span can look up its ancestors in the same export.

    A span's parent may have been exported in another request (a parent ends after its children,
    so batching exporters often send it later): then the chain stops there, and what the span
    inherits comes from the resource (see docs/otlp.md on deterministic runs).
    """

    def __init__(self, spans: list[SpanView]):
        self.by_id = {(s.trace_id, s.span_id): s for s in spans}
        self._scopes: dict[tuple[str, str], Scope] = {}

    def ancestors(self, span: SpanView) -> list[SpanView]:
        """The span's parent, grandparent, ... as far as this export holds them."""
        chain: list[SpanView] = []
        seen = {span.span_id}
        current = span
        while current.parent_span_id and len(chain) < _MAX_DEPTH:
            parent = self.by_id.get((current.trace_id, current.parent_span_id))
            if parent is None or parent.span_id in seen:
                break
            chain.append(parent)
            seen.add(parent.span_id)
            current = parent
        return chain

    def scope(self, span: SpanView) -> Scope:
        key = (span.trace_id, span.span_id)
        if key not in self._scopes:
            self._scopes[key] = self._resolve(span)
        return self._scopes[key]

    def _resolve(self, span: SpanView) -> Scope:
        lineage = [span, *self.ancestors(span)]
        run_id, parent_run_id = self._run(span, lineage)
        return Scope(
            run_id=run_id,
            parent_run_id=parent_run_id,
            agent=_inherited(lineage, (AGENT, AGENT_NAME)),
            session_id=_inherited(lineage, (SESSION_ID, CONVERSATION_ID)),
        )

    def _run(self, span: SpanView, lineage: list[SpanView]) -> tuple[str, str | None]:
        """The run a span belongs to, and that run's parent run.

        The nearest span in the lineage that opens a run decides: one with decisionboard.run_id,
        or an invoke_agent span nested in another agent span (a sub-agent: run id
        `<trace id>-<agent span id>`, parent run the enclosing agent's). Without one, the run is
        the resource's decisionboard.run_id, or else the trace.
        """
        # agent_above[i]: an invoke_agent span encloses lineage[i] (one pass, not one per node).
        agent_above = [False] * len(lineage)
        seen = False
        for i in range(len(lineage) - 1, -1, -1):
            agent_above[i] = seen
            seen = seen or lineage[i].operation == INVOKE_AGENT
        # The runs opened along the lineage, nearest first; resolved here in one pass rather than
        # by asking each ancestor's scope, which would recurse once per nested run.
        openers: list[tuple[int, str]] = []
        for i, node in enumerate(lineage):
            explicit = _string(node.attributes.get(RUN_ID))
            if explicit is not None:
                openers.append((i, explicit))
            elif node.operation == INVOKE_AGENT and agent_above[i]:
                openers.append((i, f"{node.trace_id}-{node.span_id}"))
        default_run = _string(span.resource.get(RUN_ID)) or span.trace_id
        if not openers:
            parent = _inherited(lineage, (PARENT_RUN_ID,))
            return default_run, parent
        i, run_id = openers[0]
        parent = _string(lineage[i].attributes.get(PARENT_RUN_ID))
        if parent is None and i + 1 < len(lineage):
            enclosing = openers[1][1] if len(openers) > 1 else default_run
            parent = enclosing if enclosing != run_id else None
        return run_id, parent


def _inherited(lineage: list[SpanView], names: tuple[str, ...]) -> str | None:
    for node in lineage:
        for name in names:
            value = _string(node.attributes.get(name))
            if value is not None:
                return value
    resource = lineage[0].resource
    for name in names:
        value = _string(resource.get(name))
        if value is not None:
            return value
    return None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- the mapped records ------------------------------------------------------------------------
@dataclass(slots=True)
class Mapped:
    """One raw record (the envelope of DESIGN §2) and the span it came from."""

    span: SpanView
    source: str  # what to name in a rejection: the span, or the span's event
    raw: dict[str, Any]


@dataclass
class Mapping:
    spans: list[SpanView]
    # Some value may hold a NUL or a non-finite number: normalise must scrub (see _Reader).
    scrub: bool = True
    records: list[Mapped] = field(default_factory=list)
    # Problems by span: a span with any is counted once in rejected_spans.
    problems: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def reject(self, span: SpanView, message: str) -> None:
        self.problems.setdefault((span.trace_id, span.span_id), []).append(
            f"{span.label}: {message}"
        )


def _ts(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat().replace("+00:00", "Z")


def _envelope(kind: str, record_id: str, scope: Scope, ts_ns: int, data: dict) -> dict[str, Any]:
    raw: dict[str, Any] = {"id": record_id, "kind": kind, "run_id": scope.run_id, "ts": _ts(ts_ns)}
    for name in ("session_id", "agent", "parent_run_id"):
        value = getattr(scope, name)
        if value is not None:
            raw[name] = value
    raw["data"] = data
    return raw


def _first(attributes: dict[str, Any], names: tuple[str, ...] | str) -> Any:
    for name in (names,) if isinstance(names, str) else names:
        if name in attributes:
            return attributes[name]
    return None


def _count(value: Any) -> int | None:
    """A token count: integers, and whole doubles (JavaScript SDKs may send numbers as doubles)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None


def _otel_ref(span: SpanView, **extra: Any) -> dict[str, Any]:
    """Where a record came from, kept inside `data` (unknown fields are kept as posted)."""
    ref = {"traceId": span.trace_id, "spanId": span.span_id, "span": span.name}
    ref.update({k: v for k, v in extra.items() if v is not None})
    return ref


def _iteration(span: SpanView) -> int:
    """decisionboard.iteration on the span, else the iteration a decisionboard event on it names,
    else 0 (GenAI conventions do not number an agent's model calls)."""
    own = _count(span.attributes.get(ITERATION))
    if own is not None:
        return own
    for event in span.events:
        if event.name.startswith(PREFIX):
            value = _count(event.attributes.get("iteration", event.attributes.get("step")))
            if value is not None:
                return value
    return 0


def _model_and_provider(span: SpanView, mapping: Mapping) -> tuple[str, str] | None:
    provider = _string(_first(span.attributes, PROVIDER))
    model = _string(_first(span.attributes, (RESPONSE_MODEL, REQUEST_MODEL)))
    missing = []
    if provider is None:
        missing.append("gen_ai.provider.name (or gen_ai.system)")
    if model is None:
        missing.append("gen_ai.response.model or gen_ai.request.model")
    if missing:
        mapping.reject(span, f"a {span.operation} span without {' and '.join(missing)}")
        return None
    return provider, model


def _finish_reasons(span: SpanView) -> list[str]:
    value = span.attributes.get(FINISH_REASONS)
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def model_call(span: SpanView, trace: Trace, mapping: Mapping) -> None:
    """A GenAI inference span → `model_call`."""
    names = _model_and_provider(span, mapping)
    if names is None:
        return
    provider, model = names
    a = span.attributes
    input_tokens = _count(_first(a, INPUT_TOKENS))
    output_tokens = _count(_first(a, OUTPUT_TOKENS))
    usage: dict[str, int] = {"input": input_tokens or 0, "output": output_tokens or 0}
    for name, attribute in (
        ("cacheRead", CACHE_READ_TOKENS),
        ("cacheWrite", CACHE_WRITE_TOKENS),
        ("thinking", REASONING_TOKENS),
    ):
        value = _count(_first(a, attribute))
        if value is not None:
            usage[name] = value
    reasons = _finish_reasons(span)
    data = {
        "iteration": _iteration(span),
        "provider": provider,
        "model": model,
        "usage": usage,
        # GenAI spans may leave finish reasons out (streaming instrumentations often do).
        "stopReason": reasons[0] if reasons else "unknown",
        "durationMs": span.duration_ms,
        "otel": _otel_ref(
            span,
            operation=span.operation,
            requestModel=_string(a.get(REQUEST_MODEL)),
            responseId=_string(a.get(RESPONSE_ID)),
            finishReasons=reasons or None,
            # Token counts the span did not report are stored as 0 and flagged here.
            usageReported=None if input_tokens is not None and output_tokens is not None else False,
        ),
    }
    record_id = f"otel:{span.trace_id}:{span.span_id}"
    raw = _envelope("model_call", record_id, trace.scope(span), span.end_ns, data)
    mapping.records.append(Mapped(span, span.label, raw))


def provider_error(span: SpanView, trace: Trace, mapping: Mapping) -> None:
    """A failed GenAI inference span (status ERROR or error.type) → `provider.error`."""
    names = _model_and_provider(span, mapping)
    if names is None:
        return
    provider, model = names
    a = span.attributes
    exception = next((e.attributes for e in span.events if e.name == "exception"), {})
    error = _string(a.get(ERROR_TYPE)) or _string(exception.get("exception.type")) or "error"
    status = _count(a.get(HTTP_STATUS))
    status = status if status is not None and 100 <= status <= 599 else None
    message = span.status_message or _string(exception.get("exception.message"))
    retryable = a.get(RETRYABLE)
    if not isinstance(retryable, bool):
        lowered = error.lower()
        retryable = status in _RETRYABLE_STATUSES or any(w in lowered for w in _RETRYABLE_WORDS)
    data: dict[str, Any] = {
        "error": error,
        "provider": provider,
        "model": model,
        "retryable": retryable,
    }
    if status is not None:
        data["status"] = status
    if message:
        data["message"] = message
    data["otel"] = _otel_ref(span, operation=span.operation, durationMs=span.duration_ms)
    record_id = f"otel:{span.trace_id}:{span.span_id}"
    raw = _envelope("provider.error", record_id, trace.scope(span), span.end_ns, data)
    mapping.records.append(Mapped(span, span.label, raw))


def tool_turns(tools: list[SpanView], trace: Trace, mapping: Mapping) -> None:
    """`execute_tool` spans → the toolCalls of one `turn` per model response.

    A tool span belongs to the response of the latest inference span under the same parent that
    ended before the tool started; the turn takes that span's id, finish reason and duration.
    Tools whose response is not in this export form a turn named after the first of them.
    """
    # Inference spans by parent, in the order they ended, with their end times to bisect.
    responses: dict[tuple[str, str], list[SpanView]] = {}
    for span in mapping.spans:
        if span.operation in INFERENCE:
            responses.setdefault((span.trace_id, span.parent_span_id), []).append(span)
    ends: dict[tuple[str, str], list[int]] = {}
    for key, siblings in responses.items():
        siblings.sort(key=lambda s: (s.end_ns, s.span_id))
        ends[key] = [s.end_ns for s in siblings]
    turns: dict[tuple[str, str], tuple[SpanView | None, list[SpanView]]] = {}
    for tool in sorted(tools, key=lambda s: (s.start_ns, s.span_id)):
        parent = (tool.trace_id, tool.parent_span_id)
        ended = bisect.bisect_right(ends.get(parent, ()), tool.start_ns)
        response = responses[parent][ended - 1] if ended else None
        anchor = response or tool
        key = (anchor.trace_id, anchor.span_id)
        turns.setdefault(key, (response, []))[1].append(tool)
    for (trace_id, anchor_id), (response, calls) in turns.items():
        tool_calls = []
        errors = []
        for tool in calls:
            name = _string(tool.attributes.get(TOOL_NAME)) or _tool_name_from_span(tool.name)
            if name is None:
                mapping.reject(tool, "an execute_tool span without gen_ai.tool.name")
                continue
            call: dict[str, Any] = {"name": name}
            arguments = tool.attributes.get(TOOL_ARGUMENTS)
            if arguments is not None:
                call["arguments"] = _json_or_text(arguments)
            call_id = _string(tool.attributes.get(TOOL_CALL_ID))
            if call_id is not None:
                call["id"] = call_id
            tool_calls.append(call)
            if tool.failed:
                errors.append(
                    {
                        "tool": name,
                        "error": _string(tool.attributes.get(ERROR_TYPE))
                        or tool.status_message
                        or "error",
                    }
                )
        if not tool_calls:
            continue
        first = calls[0]
        data: dict[str, Any] = {"toolCalls": tool_calls}
        if response is not None:
            reasons = _finish_reasons(response)
            if reasons:
                data["finishReason"] = reasons[0]
            data["durationMs"] = response.duration_ms
        if errors:
            data["executionError"] = errors[0] if len(errors) == 1 else errors
        data["otel"] = _otel_ref(response or first, toolSpanIds=[t.span_id for t in calls])
        ts_ns = max(t.end_ns for t in calls)
        record_id = f"otel:{trace_id}:{anchor_id}:turn"
        raw = _envelope("turn", record_id, trace.scope(first), ts_ns, data)
        mapping.records.append(Mapped(first, f"{first.label} (turn)", raw))


def _tool_name_from_span(name: str) -> str | None:
    """`execute_tool {gen_ai.tool.name}` is the span name the conventions ask for."""
    prefix = f"{EXECUTE_TOOL} "
    return name[len(prefix) :].strip() or None if name.startswith(prefix) else None


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


# --- decisionboard.<kind> span events ----------------------------------------------------------
def record_event(span: SpanView, event: EventView, trace: Trace, mapping: Mapping) -> None:
    """A span event `decisionboard.<kind>` → one record of that kind.

    The event's attributes are the kind's `data` fields: scalars as attribute values, lists and
    objects as OTLP arrays / kvlists or as a JSON string, and a dotted key nests
    (`classifier.model` is data.classifier.model). Attributes under `decisionboard.` set the
    envelope of this record (id, run_id, parent_run_id, agent, session_id).
    """
    kind = event.name[len(PREFIX) :]
    source = f"{span.label} event {event.name}[{event.index}]"
    if kind not in KINDS:
        mapping.reject(
            span, f"event {event.name}: unknown kind {kind!r}; one of {', '.join(KIND_NAMES)}"
        )
        return
    envelope: dict[str, Any] = {}
    data: dict[str, Any] = {}
    for key, value in event.attributes.items():
        if key.startswith(PREFIX):
            envelope[key[len(PREFIX) :]] = value
            continue
        _set_path(data, key.split("."), value)
    data = _coerce(data, _type_info(kind))
    scope = trace.scope(span)
    raw = _envelope(
        kind,
        f"otel:{span.trace_id}:{span.span_id}:{event.index}",
        scope,
        event.time_ns or span.end_ns,
        data,
    )
    for name in ("id", "run_id", "parent_run_id", "agent", "session_id"):
        if name in envelope:
            raw[name] = envelope[name]
    unknown = sorted(set(envelope) - {"id", "run_id", "parent_run_id", "agent", "session_id"})
    if unknown:
        mapping.reject(
            span,
            f"event {event.name}[{event.index}]: unknown envelope attribute "
            f"{', '.join(PREFIX + u for u in unknown)}",
        )
        return
    mapping.records.append(Mapped(span, source, raw))


def _set_path(target: dict, parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            child = target[part] = {}
        target = child
    target[parts[-1]] = value


@cache
def _type_info(kind: str) -> Any:
    return msgspec.inspect.type_info(schema.DATA_TYPES[kind])


_CONTAINERS = (msgspec.inspect.ListType, msgspec.inspect.DictType, msgspec.inspect.StructType)


def _declared(node: Any) -> Any:
    """The one non-null member of an optional type (str | None → str)."""
    if isinstance(node, msgspec.inspect.UnionType):
        members = [t for t in node.types if not isinstance(t, msgspec.inspect.NoneType)]
        return members[0] if len(members) == 1 else node
    return node


_FIELDS: dict[int, dict[str, Any]] = {}


def _fields(node: Any) -> dict[str, Any]:
    """A struct type's fields by their JSON name (cached: the types are built once per kind)."""
    fields = _FIELDS.get(id(node))
    if fields is None:
        fields = _FIELDS[id(node)] = {f.encode_name: f.type for f in node.fields}
    return fields


def _coerce(value: Any, node: Any) -> Any:
    """Fit attribute values to the declared type: a JSON string where a list or object is
    declared is parsed, a whole double where an integer is declared becomes an integer.

    Only declared containers are parsed, so a text field whose value happens to be JSON (a
    turn's envelope text) stays text.
    """
    node = _declared(node)
    if isinstance(value, str):
        if isinstance(node, _CONTAINERS):
            parsed = _json_or_text(value)
            # Parsed JSON is typed already (3 is an int): nothing below it to fit.
            return parsed if isinstance(parsed, (list, dict)) else value
        return value
    if isinstance(value, float) and isinstance(node, msgspec.inspect.IntType):
        return int(value) if math.isfinite(value) and value.is_integer() else value
    if isinstance(value, dict):
        if isinstance(node, msgspec.inspect.StructType):
            fields = _fields(node)
            return {k: _coerce(v, fields[k]) if k in fields else v for k, v in value.items()}
        if isinstance(node, msgspec.inspect.DictType):
            return {k: _coerce(v, node.value_type) for k, v in value.items()}
    if isinstance(value, list) and isinstance(node, msgspec.inspect.ListType):
        return [_coerce(item, node.item_type) for item in value]
    return value


# --- the declarations --------------------------------------------------------------------------
@dataclass(frozen=True)
class SpanMapping:
    """One shape of span and what it becomes; the first that applies to a span maps it."""

    becomes: str
    applies: Callable[[SpanView], bool]
    # None: the span is context for others (an agent span names the agent and the run).
    build: Callable[[SpanView, Trace, Mapping], None] | None


SPAN_MAPPINGS: tuple[SpanMapping, ...] = (
    SpanMapping("provider.error", lambda s: s.operation in INFERENCE and s.failed, provider_error),
    SpanMapping("model_call", lambda s: s.operation in INFERENCE, model_call),
    # Grouped into turns after all spans are seen (tool_turns).
    SpanMapping("turn.toolCalls", lambda s: s.operation == EXECUTE_TOOL, None),
    SpanMapping(
        "run / sub-run and agent",
        lambda s: s.operation == INVOKE_AGENT or AGENT_NAME in s.attributes,
        None,
    ),
)


def map_export(request: ExportTraceServiceRequest) -> Mapping:
    """Every record the export's spans and events map to, and every span it could not map."""
    reader = _Reader()
    spans = spans_of(request, reader)
    mapping = Mapping(spans, scrub=reader.dirty)
    trace = Trace(spans)
    tools: list[SpanView] = []
    for span in spans:
        has_events = False
        for event in span.events:
            if event.name.startswith(PREFIX):
                has_events = True
                record_event(span, event, trace, mapping)
        declaration = next((m for m in SPAN_MAPPINGS if m.applies(span)), None)
        if declaration is not None and declaration.build is not None:
            declaration.build(span, trace, mapping)
        elif span.operation == EXECUTE_TOOL:
            tools.append(span)
        elif declaration is None and not has_events:
            mapping.reject(
                span,
                f"nothing to map (gen_ai.operation.name {span.operation!r}; not a GenAI "
                "inference, execute_tool or invoke_agent span, and no decisionboard.<kind> event)"
                if span.operation
                else "nothing to map (no gen_ai.operation.name and no decisionboard.<kind> event)",
            )
    if tools:
        tool_turns(tools, trace, mapping)
    return mapping


# --- judging and answering ---------------------------------------------------------------------
@dataclass
class ExportResult:
    spans: int
    records: list[NormalisedRecord]
    rejected_spans: int
    error_message: str
    # The kind of each record that was rejected (as mapped, so a known kind), for /metrics.
    rejected_kinds: list[str] = field(default_factory=list)


def normalise_export(
    request: ExportTraceServiceRequest, *, now: datetime, limits: Limits | None = None
) -> ExportResult:
    """Map the export and judge each record with `records.normalise`, as native ingest does.

    A span is rejected (counted once) when it maps to nothing or any record from it is rejected;
    its other, valid records are still stored.
    """
    mapping = map_export(request)
    valid: list[NormalisedRecord] = []
    rejected_kinds: list[str] = []
    for mapped in mapping.records:
        result = normalise(mapped.raw, now=now, limits=limits or Limits(), scrub=mapping.scrub)
        if isinstance(result, NormalisedRecord):
            valid.append(result)
        else:
            rejected_kinds.append(mapped.raw["kind"])
            errors = "; ".join(f"{path}: {', '.join(msgs)}" for path, msgs in result.items())
            label = mapped.source.removeprefix(mapped.span.label).strip() or mapped.raw["kind"]
            mapping.reject(mapped.span, f"{label} rejected: {errors}")
    return ExportResult(
        spans=len(mapping.spans),
        records=valid,
        rejected_spans=len(mapping.problems),
        error_message=_summary(mapping),
        rejected_kinds=rejected_kinds,
    )


def _summary(mapping: Mapping) -> str:
    if not mapping.problems:
        return ""
    messages = [m for problems in mapping.problems.values() for m in problems]
    shown = "; ".join(messages[:_MAX_PROBLEMS_SHOWN])
    more = len(messages) - _MAX_PROBLEMS_SHOWN
    rejected = len(mapping.problems)
    head = f"{rejected} of {len(mapping.spans)} spans rejected (see docs/otlp.md): "
    return head + shown + (f"; and {more} more" if more > 0 else "")


def export_response(result: ExportResult) -> ExportTraceServiceResponse:
    """The OTLP answer: partial_success set only when something was rejected."""
    if not result.rejected_spans:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(
            rejected_spans=result.rejected_spans, error_message=result.error_message
        )
    )
