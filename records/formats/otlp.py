"""OpenTelemetry traces in, decision records out: the one mapping of OTLP spans to record kinds.

An OTLP/HTTP export (`ExportTraceServiceRequest`, protobuf or OTLP JSON) is decoded here, each
span is read into a plain `SpanView`, and the declarations below turn spans and span events into
records — raw envelopes, judged by the same `records.contract.normalise.normalise` as native
ingest. Pure functions: no database, no settings, no views (api/otlp.py serves the endpoint).

The mappings (docs/api.md, "OTLP", is the user's copy of this table):

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
from typing import Any, NamedTuple

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

from records.contract import schema
from records.contract.kinds import KIND_NAMES, KINDS
from records.contract.normalise import Limits, NormalisedRecord, normalise
from records.formats import genai_messages, openinference, trace_decisions
from records.formats.llm_read import LlmRead

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ENCODINGS = (PROTOBUF, JSON)

# --- attribute names -------------------------------------------------------------------------
# Decisionboard's own attributes: on a span (inherited by its descendants in the same export),
# on the resource, or on a decisionboard.<kind> event (that record only).
PREFIX = "decisionboard."
_PREFIX_LENGTH = len(PREFIX)
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
# Where a span's agent and session are named, in the order they are looked for.
AGENT_NAMES = (AGENT, AGENT_NAME, openinference.AGENT_NAME)
SESSION_NAMES = (SESSION_ID, CONVERSATION_ID, openinference.SESSION_ID)

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
    """A span event. Its attributes are read from the decoded export when first asked for; a
    decisionboard.<kind> event's are read straight into its record instead (record_event)."""

    index: int
    name: str
    time_ns: int
    key_values: Any  # the event's KeyValues, in the decoded export
    reader: _Reader
    _attributes: dict[str, Any] | None = None

    @property
    def attributes(self) -> dict[str, Any]:
        if self._attributes is None:
            self._attributes = self.reader.attributes(self.key_values)
        return self._attributes


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
    # gen_ai.operation.name when it is a string: read once, every declaration asks for it.
    operation: str | None = None
    # openinference.span.kind (upper case) when it is a string.
    oi_kind: str | None = None

    def __post_init__(self) -> None:
        value = self.attributes.get(OPERATION)
        self.operation = value if isinstance(value, str) else None
        if openinference.SPAN_KIND in self.attributes:
            self.oi_kind = openinference.kind_of(self.attributes)

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
        if which == "int_value" or which == "bool_value":
            return getattr(value, which)
        if which == "double_value":
            number = value.double_value
            if not math.isfinite(number):
                self.dirty = True
            return number
        if which == "array_value":
            return [self.value(item) for item in value.array_value.values]
        if which == "kvlist_value":
            return self.attributes(value.kvlist_value.values)
        if which == "bytes_value":
            return base64.b64encode(value.bytes_value).decode()
        return None

    def record_fields(
        self, key_values: Iterable, fields: dict[str, _Fit]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A decisionboard event's attributes as (envelope, data), read in one pass as
        attributes() reads them: `decisionboard.x` is the envelope's x, any other key a field
        of data, a dotted key nested (`classifier.model` is data.classifier.model), in order;
        data fitted to the kind's declared `fields` (see _fit)."""
        envelope: dict[str, Any] = {}
        data: dict[str, Any] = {}
        # Top-level fields fitted once all attributes are in: objects built from dotted keys,
        # and JSON text where a list or object is declared (a later dotted key replaces it).
        later: dict[str, None] = {}  # ordered and each once: _fit runs once on each value
        for kv in key_values:
            key = kv.key
            value = kv.value
            text = value.string_value
            if text:
                if "\x00" in text:
                    self.dirty = True
                value = text
            else:
                value = self.value(value)
            fit = fields.get(key)
            if fit is not None and not fit.container:
                # A declared scalar, the usual attribute: only a double can change (to an int).
                data[key] = _fit(value, fit) if isinstance(value, float) else value
                continue
            if fit is not None:  # a declared list or object
                data[key] = value
                later[key] = None
            elif (name := _ENVELOPE_KEYS.get(key)) is not None:
                envelope[name] = value
                continue
            elif key.startswith(PREFIX):
                envelope[key[_PREFIX_LENGTH:]] = value
                continue
            elif "." in key:
                parts = key.split(".")
                _set_path(data, parts, value)
                later[parts[0]] = None
            else:
                data[key] = value  # undeclared: kept as it is
                continue
            # A declared list or object, whole or in parts: JSON text in it is parsed, and an
            # escaped NUL in that text becomes a NUL.
            if text and "\\u0000" in text:
                self.dirty = True
        for key in later:
            fit = fields.get(key)
            if fit is not None and key in data:
                data[key] = _fit(data[key], fit)
        return envelope, data

    def attributes(self, key_values: Iterable) -> dict[str, Any]:
        """Key-values as an object (the last of a repeated key wins).

        Strings, the most common value by far, are read here rather than through value(), and
        without asking which member is set: only a string value has a non-empty string_value
        (an empty one goes through value()). This loop runs for every attribute of every span
        and event, and each call into the protobuf message costs.
        """
        out: dict[str, Any] = {}
        for kv in key_values:
            value = kv.value
            text = value.string_value
            if text:
                if "\x00" in text or "\\u0000" in text:
                    self.dirty = True
                out[kv.key] = text
            else:
                out[kv.key] = self.value(value)
        return out


def spans_of(request: ExportTraceServiceRequest, reader: _Reader | None = None) -> list[SpanView]:
    reader = reader or _Reader()
    read = reader.attributes
    error = Status.STATUS_CODE_ERROR
    spans = []
    for resource_spans in request.resource_spans:
        resource = read(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes = read(span.attributes) if span.attributes else {}
                name = span.name
                status = span.status
                message = status.message
                if "\x00" in name or "\x00" in message:  # both reach `data`
                    reader.dirty = True
                events = [
                    EventView(i, e.name, e.time_unix_nano, e.attributes, reader)
                    for i, e in enumerate(span.events)
                ]
                spans.append(
                    SpanView(
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        name,
                        span.start_time_unix_nano,
                        span.end_time_unix_nano,
                        attributes,
                        resource,
                        status.code == error or ERROR_TYPE in attributes,
                        message,
                        events,
                    )
                )
    return spans


# --- where a span belongs: run, parent run, agent, session -------------------------------------
class Scope(NamedTuple):
    """Where a span's records belong (a tuple: one is made for every span that has records)."""

    run_id: str
    parent_run_id: str | None
    agent: str | None
    session_id: str | None


class Trace:
    """The spans of one export, indexed so a span can look up its ancestors in the same export.

    A span's parent may have been exported in another request (a parent ends after its children,
    so batching exporters often send it later): then the chain stops there, and what the span
    inherits comes from the resource (see docs/api.md, "OTLP", on deterministic runs).
    """

    def __init__(self, spans: list[SpanView]):
        self.by_id = {(s.trace_id, s.span_id): s for s in spans}
        self._scopes: dict[tuple[str, str], Scope] = {}
        # What a resource's attributes give a span that has no attributes and no ancestor in
        # the export: (run_id or None for the trace, parent_run_id, agent, session_id).
        self._resource_scopes: dict[int, tuple[str | None, str | None, str | None, str | None]]
        self._resource_scopes = {}

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
        if not span.attributes and (span.trace_id, span.parent_span_id) not in self.by_id:
            return self._resource_scope(span)
        key = (span.trace_id, span.span_id)
        scope = self._scopes.get(key)
        if scope is None:
            scope = self._scopes[key] = self._resolve(span)
        return scope

    def _resolve(self, span: SpanView) -> Scope:
        lineage = [span, *self.ancestors(span)]
        run_id, parent_run_id = self._run(span, lineage)
        return Scope(
            run_id=run_id,
            parent_run_id=parent_run_id,
            agent=_inherited(lineage, AGENT_NAMES),
            session_id=_inherited(lineage, SESSION_NAMES),
        )

    def _resource_scope(self, span: SpanView) -> Scope:
        """The scope of a span that says nothing itself and has no ancestor in the export (a
        span that only carries decisionboard events, say): its resource's, or else its trace's
        run. What _resolve finds for it, worked out once per resource rather than per span."""
        found = self._resource_scopes.get(id(span.resource))
        if found is None:
            lineage = [span]
            found = self._resource_scopes[id(span.resource)] = (
                _string(span.resource.get(RUN_ID)),
                _inherited(lineage, (PARENT_RUN_ID,)),
                _inherited(lineage, AGENT_NAMES),
                _inherited(lineage, SESSION_NAMES),
            )
        run_id, parent_run_id, agent, session_id = found
        return Scope(run_id or span.trace_id, parent_run_id, agent, session_id)

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
            elif (node.operation == INVOKE_AGENT and agent_above[i]) or _is_handoff(node):
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


def _is_handoff(span: SpanView) -> bool:
    """An OpenInference AGENT span that another agent handed the run to (the OpenAI Agents SDK
    names the agent it came from in graph.node.parent_id): a sub-run."""
    return span.oi_kind == openinference.AGENT and bool(
        _string(span.attributes.get(openinference.HANDOFF_FROM))
    )


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
    """One raw record (the record envelope) and the span (or span event) it came from."""

    span: SpanView
    raw: dict[str, Any]
    note: str = ""  # what else to name in a rejection besides the span: "(turn)"
    event: EventView | None = None

    @property
    def detail(self) -> str:
        """The record's source within its span, for a rejection ("" for the span itself)."""
        if self.event is not None:
            return f"event {self.event.name}[{self.event.index}]"
        return self.note


@dataclass
class Mapping:
    spans: list[SpanView]
    # Some value may hold a NUL or a non-finite number: normalise must scrub (see _Reader).
    scrub: bool = True
    records: list[Mapped] = field(default_factory=list)
    # Model-call spans, mapped once the export's calls of each run are all known.
    calls: list[PendingCall] = field(default_factory=list)
    # The turn of each model call's tool decision, by (trace id, span id).
    decision_turns: dict[tuple[str, str], Mapped] = field(default_factory=dict)
    # Spans read as context only (agent, chain, retriever, ... spans), by what they are.
    seen: dict[str, int] = field(default_factory=dict)
    # Problems by span: a span with any is counted once in rejected_spans.
    problems: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def reject(self, span: SpanView, message: str) -> None:
        self.problems.setdefault((span.trace_id, span.span_id), []).append(
            f"{span.label}: {message}"
        )


def _ts(ns: int) -> datetime:
    """A record's `ts`: normalise takes a datetime as it takes RFC 3339 text (and judges it
    the same), without a round trip through text."""
    return datetime.fromtimestamp(ns / 1e9, UTC)


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


def _explicit_iteration(span: SpanView) -> int | None:
    """decisionboard.iteration on the span, else the iteration a decisionboard event on it
    names, else None (the call's order in its run decides: trace_decisions.iterations)."""
    own = _count(span.attributes.get(ITERATION))
    if own is not None:
        return own
    for event in span.events:
        if event.name.startswith(PREFIX):
            value = _count(event.attributes.get("iteration", event.attributes.get("step")))
            if value is not None:
                return value
    return None


def is_model_call(span: SpanView) -> bool:
    """A model-call span of any convention: GenAI inference, OpenLLMetry chat, OpenInference LLM."""
    if span.oi_kind is not None and span.operation is None:
        return span.oi_kind == openinference.LLM
    return genai_messages.is_inference(span.operation, span.attributes)


def read_model_call(span: SpanView) -> LlmRead:
    if span.oi_kind == openinference.LLM and span.operation is None:
        exception = next((e.attributes for e in span.events if e.name == "exception"), {})
        read = openinference.read_llm(span.attributes, exception)
        if read.error_message is None and span.failed:
            read.error_message = span.status_message or None
        return read
    events = [(e.name, e.attributes) for e in span.events if e.name.startswith(("gen_ai.", "exc"))]
    return genai_messages.read_llm(span.attributes, events, span.status_message)


@dataclass(slots=True)
class PendingCall:
    """A model-call span read, waiting for its run's other calls (its iteration, a fallback)."""

    span: SpanView
    read: LlmRead
    call: trace_decisions.Call


def collect_call(span: SpanView, trace: Trace, mapping: Mapping) -> None:
    read = read_model_call(span)
    failed = span.failed or read.error_type is not None
    call = trace_decisions.Call(
        span_key=(span.trace_id, span.span_id),
        run_id=trace.scope(span).run_id,
        start_ns=span.start_ns,
        request_model=read.request_model,
        response_model=read.response_model,
        provider=read.provider,
        failed=failed,
        error=read.error_type or (span.status_message if failed else None),
        status=read.status,
        offered=read.offered,
        called=read.called,
        explicit_iteration=_explicit_iteration(span),
    )
    mapping.calls.append(PendingCall(span, read, call))


def model_call_records(trace: Trace, mapping: Mapping) -> None:
    """Every model call of the export → its records, once the calls of each run are known:
    `model_call` (or `provider.error` when it failed), the tool decision (a `turn` with what it
    was offered and called), a `model_selection` when both request and response models are
    known (a swap when trace_decisions.is_swap), and a `reliability` fallback_triggered for each
    failed call followed by another model (trace_decisions.fallbacks)."""
    calls = [p.call for p in mapping.calls]
    iterations = trace_decisions.iterations(calls)
    for pending in mapping.calls:
        span, read, call = pending.span, pending.read, pending.call
        iteration = iterations[call.span_key]
        scope = trace.scope(span)
        for problem in read.problems:
            mapping.reject(span, problem)
        if call.failed:
            _provider_error(span, read, iteration, scope, mapping)
        else:
            _model_call(span, read, iteration, scope, mapping)
            _selection(span, read, iteration, scope, mapping)
        _tool_decision(span, read, call, iteration, scope, mapping)
    by_key = {p.call.span_key: p for p in mapping.calls}
    for run_calls in trace_decisions.ordered_runs(calls):
        for fallback in trace_decisions.fallbacks(run_calls):
            _fallback(fallback, by_key, trace, iterations, mapping)


def _missing(read: LlmRead) -> dict[str, Any]:
    return {"missing": read.missing} if read.missing else {}


def _model_call(span: SpanView, read: LlmRead, iteration: int, scope: Scope, mapping) -> None:
    usage: dict[str, int] = {"input": read.input_tokens or 0, "output": read.output_tokens or 0}
    for name, value in (("cacheRead", read.cache_read), ("cacheWrite", read.cache_write),
                        ("thinking", read.thinking)):  # fmt: skip
        if value is not None:
            usage[name] = value
    data: dict[str, Any] = {
        "iteration": iteration,
        # Stored with what the span has: a missing provider or model is named in otel.missing.
        "provider": read.provider or "unknown",
        "model": read.response_model or read.request_model or "unknown",
        "usage": usage,
        # GenAI spans may leave finish reasons out (streaming instrumentations often do).
        "stopReason": read.finish_reasons[0] if read.finish_reasons else "unknown",
        "durationMs": span.duration_ms,
    }
    if read.offered is not None:
        data["toolsCount"] = len(read.offered)
    if read.messages_count is not None:
        data["messagesCount"] = read.messages_count
    reported = read.input_tokens is not None and read.output_tokens is not None
    data["otel"] = _otel_ref(
        span,
        operation=span.operation,
        convention=read.convention,
        requestModel=read.request_model,
        responseModel=read.response_model,
        responseId=_string(span.attributes.get(RESPONSE_ID)),
        finishReasons=read.finish_reasons or None,
        # Token counts the span did not report are stored as 0 and flagged here.
        usageReported=None if reported else False,
        **read.extra,
        **_missing(read),
    )
    record_id = f"otel:{span.trace_id}:{span.span_id}"
    mapping.records.append(Mapped(span, _envelope("model_call", record_id, scope, span.end_ns, data)))


def _provider_error(span: SpanView, read: LlmRead, iteration: int, scope: Scope, mapping) -> None:
    """A failed model call (status ERROR, error.type or an exception event)."""
    error = read.error_type or "error"
    status = read.status
    retryable = span.attributes.get(RETRYABLE)
    if not isinstance(retryable, bool):
        lowered = error.lower()
        retryable = status in _RETRYABLE_STATUSES or any(w in lowered for w in _RETRYABLE_WORDS)
    data: dict[str, Any] = {
        "error": error,
        "provider": read.provider or "unknown",
        "model": read.request_model or read.response_model or "unknown",
        "retryable": retryable,
    }
    if status is not None:
        data["status"] = status
    if read.error_message:
        data["message"] = read.error_message
    data["otel"] = _otel_ref(
        span, operation=span.operation, convention=read.convention, durationMs=span.duration_ms,
        iteration=iteration, **_missing(read),
    )  # fmt: skip
    record_id = f"otel:{span.trace_id}:{span.span_id}"
    raw = _envelope("provider.error", record_id, scope, span.end_ns, data)
    mapping.records.append(Mapped(span, raw))


def _selection(span: SpanView, read: LlmRead, iteration: int, scope: Scope, mapping) -> None:
    """Request and response model both known: the provider's model selection for this call."""
    requested, answered = read.request_model, read.response_model
    if not requested or not answered:
        return
    swap = trace_decisions.is_swap(requested, answered)
    data = {
        "step": iteration,
        "default_model": requested,
        # A dated snapshot of the requested model is the requested model (no swap).
        "selected_model": answered if swap else requested,
        "action": "select" if swap else "continue",
        "responseModel": answered,
        "otel": _otel_ref(span, convention=read.convention),
    }
    record_id = f"otel:{span.trace_id}:{span.span_id}:selection"
    raw = _envelope("model_selection", record_id, scope, span.end_ns, data)
    mapping.records.append(Mapped(span, raw, note="(model_selection)"))


def _tool_decision(span, read: LlmRead, call, iteration: int, scope: Scope, mapping) -> None:
    decision = trace_decisions.tool_decision(call)
    if decision is None:
        return
    data: dict[str, Any] = {"iteration": iteration, "toolCalls": read.called}
    if decision.offered is not None:
        data["offered"] = decision.offered
        # The offered names map to themselves: a called name outside them is invented.
        data["toolNameMap"] = {name: name for name in decision.offered}
    if read.finish_reasons:
        data["finishReason"] = read.finish_reasons[0]
    data["durationMs"] = span.duration_ms
    data["otel"] = _otel_ref(span, convention=read.convention)
    record_id = f"otel:{span.trace_id}:{span.span_id}:turn"
    raw = _envelope("turn", record_id, scope, span.end_ns, data)
    mapped = Mapped(span, raw, note="(turn)")
    mapping.records.append(mapped)
    mapping.decision_turns[(span.trace_id, span.span_id)] = mapped


def _fallback(fallback, by_key: dict, trace: Trace, iterations: dict, mapping: Mapping) -> None:
    failed = by_key[fallback.failed.span_key]
    following = by_key[fallback.next.span_key]
    data: dict[str, Any] = {
        "type": "fallback_triggered",
        "primary": fallback.failed.request_model or fallback.failed.model,
        "fallback": fallback.next.request_model or fallback.next.model,
        "reason": fallback.cause,
        "errorKind": trace_decisions.error_kind(fallback.failed.status, fallback.failed.error),
    }
    if fallback.failed.provider:
        data["fromProvider"] = fallback.failed.provider
    if fallback.next.provider:
        data["toProvider"] = fallback.next.provider
    data["otel"] = _otel_ref(
        failed.span, nextSpanId=following.span.span_id,
        iteration=iterations[fallback.next.span_key],
    )  # fmt: skip
    span = failed.span
    record_id = f"otel:{span.trace_id}:{span.span_id}:fallback"
    raw = _envelope("reliability", record_id, trace.scope(span), following.span.start_ns, data)
    mapping.records.append(Mapped(span, raw, note="(fallback)"))


def tool_turns(tools: list[SpanView], trace: Trace, mapping: Mapping) -> None:
    """`execute_tool` spans → the toolCalls of one `turn` per model response.

    A tool span belongs to the response of the latest inference span under the same parent that
    ended before the tool started; the turn takes that span's id, finish reason and duration.
    Tools whose response is not in this export form a turn named after the first of them.
    """
    # Inference spans by parent, in the order they ended, with their end times to bisect.
    responses: dict[tuple[str, str], list[SpanView]] = {}
    for span in mapping.spans:
        if is_model_call(span):
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
            if tool.oi_kind == openinference.TOOL and tool.operation is None:
                call = openinference.tool_span_call(tool.attributes)
                if call is None:  # a handoff (the Agents SDK's), not a tool
                    continue
                name = call["name"]
            else:
                name = _string(tool.attributes.get(TOOL_NAME)) or _tool_name_from_span(tool.name)
                if name is None:
                    mapping.reject(tool, "an execute_tool span without gen_ai.tool.name")
                    continue
                call = {"name": name}
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
        decided = mapping.decision_turns.get((trace_id, anchor_id))
        if decided is not None:
            # The model call's own tool decision names the calls: the executions add their
            # errors and spans to it rather than a second turn.
            if errors:
                decided.raw["data"]["executionError"] = errors[0] if len(errors) == 1 else errors
            decided.raw["data"]["otel"]["toolSpanIds"] = [t.span_id for t in calls]
            continue
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
        mapping.records.append(Mapped(first, raw, note="(turn)"))


def _finish_reasons(span: SpanView) -> list[str]:
    value = span.attributes.get(FINISH_REASONS)
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


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
ENVELOPE_NAMES = frozenset({"id", "run_id", "parent_run_id", "agent", "session_id"})
_ENVELOPE_KEYS = {PREFIX + name: name for name in ENVELOPE_NAMES}
# What the span's scope gives a record when the event does not set it.
_SCOPE_NAMES = frozenset({"run_id", "parent_run_id", "agent", "session_id"})


def record_event(span: SpanView, event: EventView, trace: Trace, mapping: Mapping) -> None:
    """A span event `decisionboard.<kind>` → one record of that kind.

    The event's attributes are the kind's `data` fields: scalars as attribute values, lists and
    objects as OTLP arrays / kvlists or as a JSON string, and a dotted key nests
    (`classifier.model` is data.classifier.model). Attributes under `decisionboard.` set the
    envelope of this record (id, run_id, parent_run_id, agent, session_id).
    """
    kind = event.name[len(PREFIX) :]
    if kind not in KINDS:
        mapping.reject(
            span, f"event {event.name}: unknown kind {kind!r}; one of {', '.join(KIND_NAMES)}"
        )
        return
    envelope, data = event.reader.record_fields(event.key_values, _kind_fields(kind))
    if not envelope.keys() <= ENVELOPE_NAMES:
        unknown = envelope.keys() - ENVELOPE_NAMES
        mapping.reject(
            span,
            f"event {event.name}[{event.index}]: unknown envelope attribute "
            f"{', '.join(PREFIX + u for u in sorted(unknown))}",
        )
        return
    raw: dict[str, Any] = {
        "id": f"otel:{span.trace_id}:{span.span_id}:{event.index}",
        "kind": kind,
        "ts": _ts(event.time_ns or span.end_ns),
    }
    # The event's own envelope attributes win over the span's scope: when they name all of
    # it, the span's lineage is not walked for this record.
    if not _SCOPE_NAMES <= envelope.keys():
        run_id, parent_run_id, agent, session_id = trace.scope(span)
        raw["run_id"] = run_id
        if session_id is not None:
            raw["session_id"] = session_id
        if agent is not None:
            raw["agent"] = agent
        if parent_run_id is not None:
            raw["parent_run_id"] = parent_run_id
    raw.update(envelope)
    raw["data"] = data
    mapping.records.append(Mapped(span, raw, "", event))


def _set_path(target: dict, parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            child = target[part] = {}
        target = child
    target[parts[-1]] = value


# Fitting attribute values to the declared types: a JSON string where a list or object is
# declared is parsed, a whole double where an integer is declared becomes an integer. Only
# declared containers are parsed, so a text field whose value happens to be JSON (a turn's
# envelope text) stays text. What to do at each declared type is worked out once per type
# (a _Fit), not once per value: this runs for every attribute of every decisionboard event.
_CONTAINERS = (msgspec.inspect.ListType, msgspec.inspect.DictType, msgspec.inspect.StructType)


class _Fit:
    """How values declared as one type are fitted (see _fit)."""

    __slots__ = ("container", "integer", "fields", "values", "items")

    container: bool  # a list, object or struct is declared: a JSON string is parsed
    integer: bool  # an integer is declared: a whole double becomes an int
    fields: dict[str, _Fit] | None  # a struct: its fields by JSON name
    values: _Fit | None  # an object: its values
    items: _Fit | None  # a list: its items


# By id of the msgspec.inspect node; the nodes live as long as _type_info's cache.
_FITS: dict[int, _Fit] = {}


def _fit_for(node: Any) -> _Fit:
    fit = _FITS.get(id(node))
    if fit is not None:
        return fit
    fit = _FITS[id(node)] = _Fit()  # registered first, so a recursive type ends
    declared = _declared(node)
    fit.container = isinstance(declared, _CONTAINERS)
    fit.integer = isinstance(declared, msgspec.inspect.IntType)
    fit.fields = fit.values = fit.items = None
    if isinstance(declared, msgspec.inspect.StructType):
        fit.fields = {f.encode_name: _fit_for(f.type) for f in declared.fields}
    elif isinstance(declared, msgspec.inspect.DictType):
        fit.values = _fit_for(declared.value_type)
    elif isinstance(declared, msgspec.inspect.ListType):
        fit.items = _fit_for(declared.item_type)
    return fit


@cache
def _kind_fields(kind: str) -> dict[str, _Fit]:
    """The fields of the kind's data, by JSON name."""
    fields = _fit_for(_type_info(kind)).fields
    assert fields is not None  # every kind's data is a struct
    return fields


@cache
def _type_info(kind: str) -> Any:
    return msgspec.inspect.type_info(schema.DATA_TYPES[kind])


def _declared(node: Any) -> Any:
    """The one non-null member of an optional type (str | None → str)."""
    if isinstance(node, msgspec.inspect.UnionType):
        members = [t for t in node.types if not isinstance(t, msgspec.inspect.NoneType)]
        return members[0] if len(members) == 1 else node
    return node


def _fit(value: Any, fit: _Fit) -> Any:
    """`value` fitted to the declared type whose _Fit is `fit`."""
    if isinstance(value, str):
        if fit.container:
            parsed = _json_or_text(value)
            # Parsed JSON is typed already (3 is an int): nothing below it to fit.
            return parsed if isinstance(parsed, (list, dict)) else value
        return value
    if isinstance(value, float):
        if fit.integer and math.isfinite(value) and value.is_integer():
            return int(value)
        return value
    if isinstance(value, dict):
        if fit.fields is not None:
            return _fit_object(value, fit.fields)
        if fit.values is not None:
            return {k: _fit(v, fit.values) for k, v in value.items()}
        return value
    if isinstance(value, list) and fit.items is not None:
        return [_fit(item, fit.items) for item in value]
    return value


def _fit_object(value: dict[str, Any], fields: dict[str, _Fit] | None) -> dict[str, Any]:
    """An object fitted to a struct's fields; undeclared keys are kept as they are."""
    if fields is None:
        return value
    out = {}
    for key, item in value.items():
        fit = fields.get(key)
        # What _fit would return unchanged needs no call: an undeclared field, a string where
        # no container is declared, an integer or a boolean (the usual attributes).
        if fit is None:
            out[key] = item
        elif isinstance(item, str):
            out[key] = _fit(item, fit) if fit.container else item
        elif isinstance(item, int):  # bool included
            out[key] = item
        else:
            out[key] = _fit(item, fit)
    return out


# --- the declarations --------------------------------------------------------------------------
@dataclass(frozen=True)
class SpanMapping:
    """One shape of span and what it becomes; the first that applies to a span maps it."""

    becomes: str
    applies: Callable[[SpanView], bool]
    # None: the span is context for others (an agent span names the agent and the run).
    build: Callable[[SpanView, Trace, Mapping], None] | None


def _is_tool(span: SpanView) -> bool:
    if span.operation is None and span.oi_kind is not None:
        return span.oi_kind == openinference.TOOL
    return span.operation == EXECUTE_TOOL


SPAN_MAPPINGS: tuple[SpanMapping, ...] = (
    # model_call or provider.error, a tool decision, a swap, a fallback: mapped once the
    # export's calls are all read (model_call_records).
    SpanMapping("model_call / provider.error", is_model_call, collect_call),
    # Grouped into turns after all spans are seen (tool_turns).
    SpanMapping("turn.toolCalls", _is_tool, None),
    SpanMapping(
        "run / sub-run and agent",
        lambda s: s.operation == INVOKE_AGENT
        or AGENT_NAME in s.attributes
        or s.oi_kind in openinference.STRUCTURE,
        None,
    ),
    # OpenInference kinds that carry no decision (retrievers, embeddings, ...): seen, kept
    # out of the rejected count.
    SpanMapping("seen", lambda s: s.oi_kind in openinference.SEEN_ONLY, None),
)


def _declaration(span: SpanView) -> SpanMapping | None:
    """The first declaration that applies to the span."""
    for mapping in SPAN_MAPPINGS:
        if mapping.applies(span):
            return mapping
    return None


def map_export(request: ExportTraceServiceRequest) -> Mapping:
    """Every record the export's spans and events map to, and every span it could not map."""
    reader = _Reader()
    spans = spans_of(request, reader)
    mapping = Mapping(spans)
    trace = Trace(spans)
    tools: list[SpanView] = []
    for span in spans:
        has_events = False
        for event in span.events:
            if event.name.startswith(PREFIX):
                has_events = True
                record_event(span, event, trace, mapping)
        declaration = _declaration(span)
        if declaration is not None and declaration.build is not None:
            declaration.build(span, trace, mapping)
        elif declaration is not None and declaration.becomes == "turn.toolCalls":
            tools.append(span)
        elif declaration is not None:
            what = span.oi_kind or span.operation or declaration.becomes
            mapping.seen[what] = mapping.seen.get(what, 0) + 1
        elif declaration is None and not has_events:
            mapping.reject(
                span,
                f"nothing to map (gen_ai.operation.name {span.operation!r}; not a GenAI "
                "inference, execute_tool or invoke_agent span, and no decisionboard.<kind> event)"
                if span.operation
                else f"nothing to map (openinference.span.kind {span.oi_kind!r})"
                if span.oi_kind
                else "nothing to map (no gen_ai.operation.name, no openinference.span.kind and "
                "no decisionboard.<kind> event)",
            )
    if mapping.calls:
        model_call_records(trace, mapping)
    if tools:
        tool_turns(tools, trace, mapping)
    # Events' attributes are read as the mappings ask for them: all are read by now.
    mapping.scrub = reader.dirty
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
    """Map the export and judge each record with `records.contract.normalise`, as native ingest does.

    A span is rejected (counted once) when it maps to nothing or any record from it is rejected;
    its other, valid records are still stored.
    """
    mapping = map_export(request)
    limits = limits or Limits()
    valid: list[NormalisedRecord] = []
    rejected_kinds: list[str] = []
    for mapped in mapping.records:
        result = normalise(mapped.raw, now=now, limits=limits, scrub=mapping.scrub)
        if isinstance(result, NormalisedRecord):
            valid.append(result)
        else:
            rejected_kinds.append(mapped.raw["kind"])
            errors = "; ".join(f"{path}: {', '.join(msgs)}" for path, msgs in result.items())
            label = mapped.detail or mapped.raw["kind"]
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
    head = f"{rejected} of {len(mapping.spans)} spans rejected (see docs/api.md, OTLP): "
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
