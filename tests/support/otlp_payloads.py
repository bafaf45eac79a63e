"""OTLP trace exports built by hand, as an SDK in any language would send them."""

from __future__ import annotations

import base64
import itertools
import json
import time
from datetime import datetime, timedelta
from typing import Any

from decisionboard_client.otel import add_record_event
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status as SpanStatus
from opentelemetry.trace import StatusCode

from tests.support.factories import BASE_TS, DATA, KINDS

TRACE = "5b8efff798038103d269b633813fc60c"
_span_ids = itertools.count(1)


def ns(when: datetime = BASE_TS, plus_ms: float = 0) -> int:
    return int(when.timestamp() * 1e9) + int(plus_ms * 1e6)


def any_value(value: Any) -> AnyValue:
    """A value as OTLP carries it: arrays and kvlists for lists and objects."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, (list, tuple)):
        out = AnyValue()
        out.array_value.values.extend(any_value(v) for v in value)
        return out
    if isinstance(value, dict):
        out = AnyValue()
        out.kvlist_value.values.extend(
            KeyValue(key=k, value=any_value(v)) for k, v in value.items()
        )
        return out
    raise TypeError(value)


def key_values(attributes: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]


def json_string_form(data: dict[str, Any]) -> dict[str, Any]:
    """The documented portable form: scalars as they are, lists and objects as JSON strings."""
    return {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in data.items()}


def span_id() -> str:
    return f"{next(_span_ids):016x}"


def span(
    name: str,
    attributes: dict[str, Any] | None = None,
    *,
    events: list[tuple[str, dict[str, Any]]] = (),
    trace_id: str = TRACE,
    span_id_hex: str | None = None,
    parent: str = "",
    start_ms: float = 0,
    duration_ms: float = 1500,
    error: str | None = None,
) -> Span:
    out = Span(
        trace_id=bytes.fromhex(trace_id),
        span_id=bytes.fromhex(span_id_hex or span_id()),
        parent_span_id=bytes.fromhex(parent),
        name=name,
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=ns(plus_ms=start_ms),
        end_time_unix_nano=ns(plus_ms=start_ms + duration_ms),
        attributes=key_values(attributes or {}),
    )
    for i, (event_name, event_attributes) in enumerate(events):
        out.events.add(
            name=event_name,
            time_unix_nano=ns(plus_ms=start_ms + i),
            attributes=key_values(event_attributes),
        )
    if error is not None:
        out.status.code = Status.STATUS_CODE_ERROR
        out.status.message = error
    return out


def export(*spans: Span, resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(
        key_values({"service.name": "support-bot", **(resource or {})})
    )
    scope = resource_spans.scope_spans.add()
    scope.scope.name = "tests"
    scope.spans.extend(spans)
    return request


def otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP JSON: protobuf's JSON mapping with trace and span ids as hex, as exporters send."""
    value = json_format.MessageToDict(request)
    for resource_spans in value.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for item in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in item:
                        item[key] = base64.b64decode(item[key]).hex()
    return json.dumps(value).encode()


def chat(model: str = "gpt-4o", provider: str = "openai", **attributes: Any) -> dict[str, Any]:
    """The attributes of a GenAI chat span (semantic conventions 1.37+)."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.response.model": f"{model}-2026-08-06",
        "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 80,
        "gen_ai.response.finish_reasons": ["tool_calls"],
        **attributes,
    }


def finished_spans():
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    agent_run(provider.get_tracer("tests"))
    spans = memory.get_finished_spans()
    provider.shutdown()
    return spans


SPANS_NOW = BASE_TS + timedelta(hours=1)


def agent_run(tracer) -> None:
    """What an instrumented agent emits: an agent span, model calls, tools, a sub-agent, and
    the decisions GenAI conventions do not cover as decisionboard.<kind> events."""
    with tracer.start_as_current_span(
        "invoke_agent support",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support",
            "gen_ai.conversation.id": "conv-7",
        },
    ) as agent:
        for kind in KINDS:
            add_record_event(agent, kind, DATA[kind])
        with tracer.start_as_current_span(
            "chat claude-sonnet-4-5",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "anthropic",
                "gen_ai.request.model": "claude-sonnet-4-5",
                "gen_ai.usage.input_tokens": 5000,
                "gen_ai.usage.output_tokens": 300,
                "gen_ai.response.finish_reasons": ("tool_use",),
                "decisionboard.iteration": 1,
            },
        ):
            time.sleep(0.01)
        with tracer.start_as_current_span(
            "execute_tool search_docs",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs"},
        ):
            pass
        with tracer.start_as_current_span(
            "invoke_agent researcher",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
        ):
            with tracer.start_as_current_span(
                "chat gpt-4o",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    "error.type": "RateLimitError",
                    "http.response.status_code": 429,
                },
            ) as failed:
                failed.set_status(SpanStatus(StatusCode.ERROR, "rate limited"))
        with tracer.start_as_current_span("GET /internal/health"):
            pass  # not GenAI: counted as rejected, never dropped silently
