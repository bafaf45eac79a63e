"""The declarations of which OTLP spans become which records, and the records built from them.

- a model-call span of any convention (GenAI inference, OpenLLMetry chat, OpenInference LLM)
  → `model_call`, or `provider.error` when it failed; its tool decision → a `turn`; request and
  response model → a `model_selection`; a failed call followed by another model → a
  `reliability` fallback (the rules: records.formats.trace_decisions);
- `execute_tool` (and OpenInference TOOL) spans → the `toolCalls` of one `turn` per response;
- agent spans → the records' run, sub-run and agent (records.formats.otlp_spans.Trace);
- a span event named `decisionboard.<kind>` → one record of that kind (otlp_events).

A span that none of them maps is named in the Mapping's problems. Pure functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from records.formats import (
    ai_sdk_spans,
    genai_messages,
    openinference,
    same_request,
    trace_decisions,
)
from records.formats import attributes as attrs
from records.formats.llm_read import LlmRead
from records.formats.otlp_events import json_or_text, record_event
from records.formats.otlp_records import Mapped, Mapping, PendingCall, envelope, otel_ref
from records.formats.otlp_spans import (
    AGENT_NAME,
    ERROR_TYPE,
    EXECUTE_TOOL,
    FINISH_REASONS,
    INVOKE_AGENT,
    ITERATION,
    PREFIX,
    RESPONSE_ID,
    RETRYABLE,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_NAME,
    AttributeReader,
    Scope,
    SpanView,
    Trace,
    is_agent,
    spans_of,
    timestamp,
)

# Tool executions whose call a model call exported apart lists
# (ai_sdk_spans.listed_by_its_call): that call counts them.
_LISTED_ELSEWHERE = "tool execution of a call exported apart"


def _explicit_iteration(span: SpanView) -> int | None:
    """decisionboard.iteration on the span, else the iteration a decisionboard event on it
    names, else None (the call's order in its run decides: trace_decisions.iterations)."""
    own = attrs.count(span.attributes.get(ITERATION))
    if own is not None:
        return own
    for event in span.events:
        if event.name.startswith(PREFIX):
            value = attrs.count(event.attributes.get("iteration", event.attributes.get("step")))
            if value is not None:
                return value
    return None


def is_model_call(span: SpanView) -> bool:
    """A model-call span of any convention: GenAI inference, OpenLLMetry chat, OpenInference LLM."""
    if span.oi_kind is not None and span.operation is None:
        return span.oi_kind == openinference.LLM
    if span.ai_operation is not None and span.operation is None:
        return ai_sdk_spans.is_model_call(span.ai_operation)
    return genai_messages.is_inference(span.operation, span.attributes)


def read_model_call(span: SpanView, export: openinference.ExportReading | None = None) -> LlmRead:
    """`export`: what the export's other OpenInference spans read (openinference.read_llm)."""
    if span.oi_kind == openinference.LLM and span.operation is None:
        exception = next((e.attributes for e in span.events if e.name == "exception"), {})
        read = openinference.read_llm(span.attributes, exception, export)
        if read.error_message is None and span.failed:
            read.error_message = span.status_message or None
        return read
    events = (
        [(e.name, e.attributes) for e in span.events if e.name.startswith(("gen_ai.", "exc"))]
        if span.events
        else []
    )
    if span.ai_operation is not None and span.operation is None:
        return ai_sdk_spans.read_llm(span.attributes, events, span.status_message)
    return genai_messages.read_llm(span.attributes, events, span.status_message)


def _read_agent_spans(span: SpanView, trace: Trace, read: LlmRead) -> None:
    """What the call's enclosing spans say of it: the model its nearest agent span was
    configured with, and the tool choice an AI SDK 7 step span forced."""
    for node in trace.ancestors(span):
        if read.tool_choice is None:
            read.tool_choice = ai_sdk_spans.step_tool_choice(node.operation, node.attributes)
        if is_agent(node):
            read.configured_model = ai_sdk_spans.configured_model(
                node.ai_operation, node.operation, node.attributes
            )
            return


def collect_call(span: SpanView, trace: Trace, mapping: Mapping) -> None:
    read = read_model_call(span, mapping.openinference)
    _read_agent_spans(span, trace, read)
    failed = span.failed or read.error_type is not None
    verdict = None
    if failed:
        said = span.attributes.get(RETRYABLE)
        verdict = trace_decisions.error_verdict(
            read.error_type,
            read.status,
            read.error_message or span.status_message or None,
            said if isinstance(said, bool) else None,
        )
    call = trace_decisions.Call(
        span_key=(span.trace_id, span.span_id),
        run_id=trace.scope(span).run_id,
        start_ns=span.start_ns,
        request_model=read.request_model,
        response_model=read.response_model,
        provider=read.provider,
        failed=failed,
        # The first line of a message: the clients' messages go on with a stack trace.
        error=read.error_type or (_first_line(span.status_message) if failed else None),
        status=verdict.status if verdict is not None else read.status,
        offered=read.offered,
        called=read.called,
        explicit_iteration=_explicit_iteration(span),
        end_ns=span.end_ns,
        verdict=verdict,
    )
    mapping.calls.append(PendingCall(span, read, call))


def _first_line(message: str) -> str | None:
    return message.strip().split("\n", 1)[0].strip() or None


def model_call_records(trace: Trace, mapping: Mapping) -> None:
    """Every model call of the export → its records, once the calls of each run are known:
    `model_call` (or `provider.error` when it failed), the tool decision (a `turn` with what it
    was offered and called), a `model_selection` when both request and response models are
    known (a swap when trace_decisions.is_swap), and a `reliability` fallback_triggered for each
    failed call followed by another model (trace_decisions.fallbacks)."""
    same_request.count_once(trace, mapping)
    calls = [p.call for p in mapping.calls]
    iterations = trace_decisions.iterations(calls)
    for pending in mapping.calls:
        span, read, call = pending.span, pending.read, pending.call
        iteration = iterations[call.span_key]
        scope = trace.scope(span)
        for problem in read.problems:
            mapping.reject(span, problem)
        if call.failed:
            _provider_error(span, read, call.verdict, iteration, scope, mapping)
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
    # The conventions count cached input within the input tokens and reasoning within the output
    # tokens; a model_call's usage holds them apart (records.contract.cost prices each its own way).
    cached = (read.cache_read or 0) + (read.cache_write or 0)
    usage: dict[str, int] = {
        "input": max((read.input_tokens or 0) - cached, 0),
        "output": max((read.output_tokens or 0) - (read.thinking or 0), 0),
    }
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
    data["otel"] = otel_ref(
        span,
        operation=span.operation,
        convention=read.convention,
        requestModel=read.request_model,
        responseModel=read.response_model,
        responseId=attrs.text(span.attributes.get(RESPONSE_ID)),
        finishReasons=read.finish_reasons or None,
        # Token counts the span did not report are stored as 0 and flagged here.
        usageReported=None if reported else False,
        **read.extra,
        **_missing(read),
    )
    record_id = f"otel:{span.trace_id}:{span.span_id}"
    mapping.records.append(Mapped(span, envelope("model_call", record_id, scope, span.ended, data)))


def _provider_error(span: SpanView, read: LlmRead, verdict, iteration: int, scope: Scope, mapping):
    """A failed model call (status ERROR, error.type or an exception event), with the verdict
    its fallback's reliability record repeats (trace_decisions.error_verdict)."""
    error, status, retryable = verdict.error, verdict.status, verdict.retryable
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
    if read.tool_choice is not None:
        data["toolChoice"] = read.tool_choice
    data["otel"] = otel_ref(
        span, operation=span.operation, convention=read.convention, durationMs=span.duration_ms,
        iteration=iteration, **_missing(read),
    )  # fmt: skip
    record_id = f"otel:{span.trace_id}:{span.span_id}"
    raw = envelope("provider.error", record_id, scope, span.ended, data)
    mapping.records.append(Mapped(span, raw))


def _selection(span: SpanView, read: LlmRead, iteration: int, scope: Scope, mapping) -> None:
    """Request and response model both known: the provider's model selection for this call.
    When the call's agent span names the model it was configured with, that model is the
    default: a step on another model (the AI SDK's prepareStep) is a swap too."""
    requested, answered = read.request_model, read.response_model
    if not requested or not answered:
        return
    swap = trace_decisions.is_swap(requested, answered)
    # A dated snapshot of the requested model is the requested model (no swap).
    selected = answered if swap else requested
    default = requested
    if read.configured_model is not None:
        default = read.configured_model
        swap = trace_decisions.is_swap(default, selected)
        selected = selected if swap else default
    data = {
        "step": iteration,
        "default_model": default,
        "selected_model": selected,
        "action": "select" if swap else "continue",
        "responseModel": answered,
        "otel": otel_ref(span, convention=read.convention),
    }
    if read.tool_choice is not None:
        data["request_patch"] = {"tool_choice": read.tool_choice}
    record_id = f"otel:{span.trace_id}:{span.span_id}:selection"
    raw = envelope("model_selection", record_id, scope, span.ended, data)
    mapping.records.append(Mapped(span, raw, note="(model_selection)"))


def _tool_decision(span, read: LlmRead, call, iteration: int, scope: Scope, mapping) -> None:
    if not trace_decisions.is_tool_decision(call):
        return
    data: dict[str, Any] = {"iteration": iteration, "toolCalls": read.called}
    if read.tool_choice is not None:
        data["toolChoice"] = read.tool_choice
    if call.offered is not None:
        data["offered"] = call.offered
        # The offered names map to themselves: a called name outside them is invented.
        data["toolNameMap"] = dict(zip(call.offered, call.offered, strict=True))
    if read.finish_reasons:
        data["finishReason"] = read.finish_reasons[0]
    data["durationMs"] = span.duration_ms
    data["otel"] = otel_ref(span, convention=read.convention)
    record_id = f"otel:{span.trace_id}:{span.span_id}:turn"
    raw = envelope("turn", record_id, scope, span.ended, data)
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
        "errorKind": fallback.failed.verdict.kind
        if fallback.failed.verdict is not None
        else trace_decisions.error_kind(fallback.failed.status, fallback.failed.error),
    }
    if fallback.failed.provider:
        data["fromProvider"] = fallback.failed.provider
    if fallback.next.provider:
        data["toProvider"] = fallback.next.provider
    data["otel"] = otel_ref(
        failed.span, nextSpanId=following.span.span_id,
        iteration=iterations[fallback.next.span_key],
    )  # fmt: skip
    span = failed.span
    record_id = f"otel:{span.trace_id}:{span.span_id}:fallback"
    at = timestamp(following.span.start_ns)
    raw = envelope("reliability", record_id, trace.scope(span), at, data)
    mapping.records.append(Mapped(span, raw, note="(fallback)"))


def tool_turns(tools: list[SpanView], trace: Trace, mapping: Mapping) -> None:
    """`execute_tool` (and OpenInference TOOL) spans → the toolCalls of the turn of the model
    call that asked for them (trace_decisions.attribute_tools: by the tool call's id, by time
    only without one). A call the response lists is counted once, in that call's own tool
    decision; the execution adds its span and any error. Executions whose call is not in this
    export form a turn named after each of them.
    """
    runs: list[trace_decisions.ToolRun] = []
    read: dict[tuple[str, str], tuple[SpanView, dict[str, Any]]] = {}
    listed = {
        called["id"]
        for pending in mapping.calls
        for called in pending.call.called
        if isinstance(called.get("id"), str)
    }
    for tool in tools:
        call = _tool_span_call(tool, mapping)
        if call is None:
            continue
        if call.get("id") not in listed and ai_sdk_spans.listed_by_its_call(
            tool.ai_operation, tool.operation, tool.attributes
        ):
            # Its model call went in another export (a batching exporter splits a run), and
            # that call's response lists it: counted there, not a second time here.
            mapping.seen[_LISTED_ELSEWHERE] = mapping.seen.get(_LISTED_ELSEWHERE, 0) + 1
            continue
        key = (tool.trace_id, tool.span_id)
        read[key] = (tool, call)
        runs.append(
            trace_decisions.ToolRun(
                key, trace.scope(tool).run_id, tool.start_ns, call["name"], call.get("id")
            )
        )
    attribution = trace_decisions.attribute_tools([p.call for p in mapping.calls], runs)
    responses = {p.call.span_key: p.span for p in mapping.calls}
    turns: dict[tuple[str, str], list[tuple[SpanView, dict[str, Any], int | None]]] = {}
    for run in sorted(runs, key=lambda r: (r.start_ns, r.span_key[1])):
        tool, call = read[run.span_key]
        found = attribution[run.span_key]
        anchor = found.call or run.span_key
        turns.setdefault(anchor, []).append((tool, call, found.index))
    for anchor, executions in turns.items():
        errors = [_execution_error(tool, call) for tool, call, _ in executions if tool.failed]
        added = [call for _, call, index in executions if index is None]
        span_ids = [tool.span_id for tool, _, _ in executions]
        decided = mapping.decision_turns.get(anchor)
        if decided is not None:
            # The model call's own tool decision names the calls: the executions add their
            # errors and spans to it rather than a second turn.
            data = decided.raw["data"]
            if added:
                data["toolCalls"] = [*data["toolCalls"], *added]
            if errors:
                data["executionError"] = errors[0] if len(errors) == 1 else errors
            data["otel"]["toolSpanIds"] = span_ids
            continue
        first = executions[0][0]
        response = responses.get(anchor)
        data = {"toolCalls": [call for _, call, _ in executions]}
        if response is not None:
            reasons = _finish_reasons(response)
            if reasons:
                data["finishReason"] = reasons[0]
            data["durationMs"] = response.duration_ms
        if errors:
            data["executionError"] = errors[0] if len(errors) == 1 else errors
        data["otel"] = otel_ref(response or first, toolSpanIds=span_ids)
        ts_ns = max(tool.end_ns for tool, _, _ in executions)
        record_id = f"otel:{anchor[0]}:{anchor[1]}:turn"
        scope = trace.scope(response or first)
        raw = envelope("turn", record_id, scope, timestamp(ts_ns), data)
        mapping.records.append(Mapped(first, raw, note="(turn)"))


def _tool_span_call(tool: SpanView, mapping: Mapping) -> dict[str, Any] | None:
    """A tool span's execution as a toolCalls item (None: a handoff, or rejected)."""
    if tool.oi_kind == openinference.TOOL and tool.operation is None:
        return openinference.tool_span_call(tool.attributes)
    if tool.ai_operation is not None and tool.operation is None:
        call = ai_sdk_spans.tool_span_call(tool.attributes)
        if call is None:
            mapping.reject(tool, f"an ai.toolCall span without {ai_sdk_spans.TOOL_CALL_NAME}")
        return call
    name = attrs.text(tool.attributes.get(TOOL_NAME)) or _tool_name_from_span(tool.name)
    if name is None:
        mapping.reject(tool, "an execute_tool span without gen_ai.tool.name")
        return None
    call: dict[str, Any] = {"name": name}
    arguments = tool.attributes.get(TOOL_ARGUMENTS)
    if arguments is not None:
        call["arguments"] = json_or_text(arguments)
    call_id = attrs.text(tool.attributes.get(TOOL_CALL_ID))
    if call_id is not None:
        call["id"] = call_id
    return call


def _execution_error(tool: SpanView, call: dict[str, Any]) -> dict[str, Any]:
    error = attrs.text(tool.attributes.get(ERROR_TYPE)) or tool.status_message or "error"
    return {"tool": call["name"], "error": error}


def _finish_reasons(span: SpanView) -> list[str]:
    value = span.attributes.get(FINISH_REASONS)
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _tool_name_from_span(name: str) -> str | None:
    """`execute_tool {gen_ai.tool.name}` is the span name the conventions ask for."""
    prefix = f"{EXECUTE_TOOL} "
    return name[len(prefix) :].strip() or None if name.startswith(prefix) else None


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
    if span.operation is None and span.ai_operation is not None:
        return ai_sdk_spans.is_tool(span.ai_operation)
    return span.operation == EXECUTE_TOOL


def _is_structure(span: SpanView) -> bool:
    """A span that only gives the records under it their run and agent: agent spans of every
    convention, and the AI SDK's spans around its calls (`ai.generateText`, `agent_step`)."""
    return (
        span.operation == INVOKE_AGENT
        or AGENT_NAME in span.attributes
        or span.oi_kind in openinference.STRUCTURE
        or ai_sdk_spans.is_structure(span.ai_operation, span.operation)
    )


SPAN_MAPPINGS: tuple[SpanMapping, ...] = (
    # model_call or provider.error, a tool decision, a swap, a fallback: mapped once the
    # export's calls are all read (model_call_records).
    SpanMapping("model_call / provider.error", is_model_call, collect_call),
    # Grouped into turns after all spans are seen (tool_turns).
    SpanMapping("turn.toolCalls", _is_tool, None),
    SpanMapping("run / sub-run and agent", _is_structure, None),
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
    reader = AttributeReader()
    spans = spans_of(request, reader)
    mapping = Mapping(spans)
    identified = []
    for span in spans:
        if span.identified:
            identified.append(span)
        else:
            mapping.reject(span, "no trace id or span id (OTLP requires both, not all zeros)")
    trace = Trace(identified)
    tools: list[SpanView] = []
    for span in identified:
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
            what = span.oi_kind or span.operation or span.ai_operation or declaration.becomes
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
