"""The Vercel AI SDK's spans, as the real packages export them (ai_sdk_captures: the agent
of tests/agents_js run against the loopback OpenAI stub, on AI SDK 6's own telemetry and on AI
SDK 7's @ai-sdk/otel, both its OpenTelemetry and its LegacyOpenTelemetry integration), mapped to
records; the same records whatever the span order, parentage and millisecond clocks; hostile AI
SDK spans never cost a 5xx or the rest of their export."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.protobuf.json_format import ParseDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from records.contract.derive import is_forced_tool_choice_refusal
from records.contract.schema import ProviderError, ToolChoice
from records.formats.otlp import map_export, normalise_export
from records.models import Record
from tests.support.otlp_payloads import export, span

CAPTURES = Path(__file__).parent / "ai_sdk_captures"
NOW = datetime(2030, 1, 1, tzinfo=UTC)
MS = 1_000_000


# The captures: AI SDK 6; AI SDK 7 with OpenTelemetry (GenAI spans); AI SDK 7 with
# LegacyOpenTelemetry (the ai.* spans of 4 to 6, its tool spans under the model call's).
CAPTURED = ["6", "7", "7_legacy"]


def captured_spans(version: str) -> list[dict]:
    """The spans of a captured export, in OTLP JSON (ids base64), flattened."""
    exports = json.loads((CAPTURES / f"ai_sdk{version}.json").read_text())
    return [
        item
        for body in exports
        for resource_spans in body["resourceSpans"]
        for scope_spans in resource_spans["scopeSpans"]
        for item in scope_spans["spans"]
    ]


def request_of(spans: list[dict]) -> ExportTraceServiceRequest:
    body = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    return ParseDict(body, ExportTraceServiceRequest())


def records_of(spans: list[dict]):
    result = normalise_export(request_of(spans), now=NOW)
    assert result.rejected_spans == 0, result.error_message
    return result.records


def data(record) -> dict:
    return json.loads(record.data_json)


def by_kind(records, kind: str) -> list:
    return sorted((r for r in records if r.kind == kind), key=lambda r: r.iteration)


@pytest.mark.parametrize("version", CAPTURED)
def test_it_maps_an_ai_sdk_agent_run_with_no_span_rejected(version):
    records = records_of(captured_spans(version))
    assert {(r.agent, r.session_id) for r in records} == {("support", "sess-42")}
    assert len({r.run_id for r in records}) == 1
    calls = by_kind(records, "model_call")
    assert [(c.iteration, c.model, c.tokens_in, c.tokens_out) for c in calls] == [
        (0, "gpt-4o-mini", 101, 11),
        (1, "gpt-4o", 102, 12),
        (2, "gpt-4o-mini", 103, 13),
    ]
    assert {data(c)["provider"] for c in calls} == {"openai"}
    turns = by_kind(records, "turn")
    # One turn a model call; each tool call once, under the call that asked for it.
    assert [[c["name"] for c in data(t)["toolCalls"]] for t in turns] == [
        ["get_weather", "get_weather", "book_flight"],
        ["search_docs"],
        [],
    ]
    assert all(data(t)["offered"] == ["get_weather", "search_docs"] for t in turns)
    assert json.loads(turns[0].derived_json)["invented"] == ["book_flight"]
    assert data(turns[1])["toolChoice"] == {"type": "tool", "name": "search_docs"}
    # prepareStep moved the second step to gpt-4o: a swap from the agent's configured model.
    selections = by_kind(records, "model_selection")
    assert [(s.iteration, s.is_swap) for s in selections] == [(0, False), (1, True), (2, False)]
    swap = data(selections[1])
    assert (swap["default_model"], swap["selected_model"]) == ("gpt-4o-mini", "gpt-4o")
    assert swap["request_patch"] == {"tool_choice": {"type": "tool", "name": "search_docs"}}


def test_ai_sdk_6_keeps_the_callers_metadata():
    (first, *_) = by_kind(records_of(captured_spans("6")), "model_call")
    otel = data(first)["otel"]
    assert otel["userId"] == "user-7"
    assert otel["metadata"] == {"sessionId": "sess-42", "userId": "user-7"}


def projection(records) -> list[tuple]:
    """What a record says, without its clock-derived fields (durations, span ids of tools)."""
    out = []
    for record in records:
        content = data(record)
        content.pop("durationMs", None)
        content.pop("otel", None)
        out.append(
            (record.record_key, record.kind, record.run_id, record.agent, record.session_id,
             record.iteration, json.dumps(content, sort_keys=True))
        )  # fmt: skip
    return sorted(out)


def tool_call_id(item: dict) -> str | None:
    for attribute in item.get("attributes", ()):
        if attribute["key"] in ("ai.toolCall.id", "gen_ai.tool.call.id"):
            return attribute["value"]["stringValue"]
    return None


def caller_of(spans: list[dict], call_id: str) -> dict:
    """The model-call span whose response names `call_id`."""
    for item in spans:
        for attribute in item.get("attributes", ()):
            if attribute["key"] in ("ai.response.toolCalls", "gen_ai.output.messages"):
                if f'"{call_id}"' in attribute["value"].get("stringValue", ""):
                    return item
    raise AssertionError(call_id)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(CAPTURED), data_=st.data())
def test_span_order_parentage_and_millisecond_clocks_change_no_record(version, data_):
    spans = captured_spans(version)
    expected = projection(records_of(spans))
    shuffled = copy.deepcopy(spans)
    roots = [s for s in shuffled if not s.get("parentSpanId")]
    for item in shuffled:
        # Clocks in whole milliseconds, as the AI SDK stamps them.
        for key in ("startTimeUnixNano", "endTimeUnixNano"):
            item[key] = str(int(item[key]) // MS * MS)
    for item in shuffled:
        call_id = tool_call_id(item)
        if call_id is None:
            continue
        caller = caller_of(shuffled, call_id)
        # Hung under the step, the call itself or the run's root; started up to 20 ms before
        # the call that asked for it ended.
        parents = [item.get("parentSpanId"), caller["spanId"], roots[0]["spanId"]]
        item["parentSpanId"] = data_.draw(st.sampled_from(parents))
        early = data_.draw(st.integers(0, 20)) * MS
        start = max(int(caller["endTimeUnixNano"]) - early, int(caller["startTimeUnixNano"]))
        item["startTimeUnixNano"] = str(start)
        item["endTimeUnixNano"] = str(max(int(item["endTimeUnixNano"]), start))
    shuffled = data_.draw(st.permutations(shuffled))
    assert projection(records_of(list(shuffled))) == expected


@pytest.mark.parametrize("version", CAPTURED)
def test_a_run_exported_in_two_batches_counts_each_tool_call_once(version):
    # The exporter sends spans as they end, in batches: a model call may go in one export and
    # the tools it asked for in the next. The captures hold the spans in the order they ended.
    spans = captured_spans(version)
    for cut in range(1, len(spans)):
        records = [r for part in (spans[:cut], spans[cut:]) for r in records_of(part)]
        called = sorted(
            c["name"] for t in records if t.kind == "turn" for c in data(t)["toolCalls"]
        )
        assert called == ["book_flight", "get_weather", "get_weather", "search_docs"], cut
        assert sum(r.kind == "model_call" for r in records) == 3


def test_ai_sdk_structure_is_seen_never_rejected():
    request = export(
        span("ai.embed", {"ai.operationId": "ai.embed", "ai.model.id": "text-embedding-3-small"}),
        span("ai.embed.doEmbed", {"ai.operationId": "ai.embed.doEmbed"}),
        span("step 1", {"gen_ai.operation.name": "agent_step"}),
        span("ai.generateSpeech", {"gen_ai.operation.name": "ai.generateSpeech"}),
        span("GET /search", {"http.request.method": "GET"}),
    )
    mapping = map_export(request)
    assert mapping.seen == {"ai.embed": 1, "ai.embed.doEmbed": 1, "agent_step": 1,
                            "ai.generateSpeech": 1}  # fmt: skip
    # Only the span of no known convention is named.
    (problems,) = mapping.problems.values()
    assert "'GET /search': nothing to map" in problems[0]


def test_an_ai_sdk_agent_called_from_a_tool_is_a_sub_run():
    outer, tool, inner = "0a" * 8, "0b" * 8, "0c" * 8
    request = export(
        span("ai.generateText", {"ai.operationId": "ai.generateText",
                                 "ai.telemetry.functionId": "triage"}, span_id_hex=outer),
        span("ai.toolCall", {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "ask_booker",
                             "ai.toolCall.id": "c1", "ai.toolCall.result": '"ok"'},
             span_id_hex=tool, parent=outer, start_ms=200),
        span("ai.generateText", {"ai.operationId": "ai.generateText",
                                 "ai.telemetry.functionId": "booker"},
             span_id_hex=inner, parent=tool, start_ms=210),
        span("ai.generateText.doGenerate", do_generate(**{"ai.telemetry.functionId": "booker"}),
             parent=inner, start_ms=220),
        span("ai.generateText.doGenerate", do_generate(**{"ai.response.toolCalls": json.dumps(
            [{"toolCallId": "c1", "toolName": "ask_booker", "input": "{}"}])}),
             parent=outer, start_ms=0, duration_ms=100),
    )  # fmt: skip
    result = normalise_export(request, now=NOW)
    assert result.rejected_spans == 0, result.error_message
    runs = {(r.run_id, r.parent_run_id, r.agent) for r in by_kind(result.records, "model_call")}
    trace = request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    assert runs == {(trace, None, "support"), (f"{trace}-{inner}", trace, "booker")}


# --- hostile AI SDK spans ----------------------------------------------------------------------
TRACE_A = "a1" * 16
TRACE_B = "b2" * 16


def do_generate(**attributes) -> dict:
    return {
        "ai.operationId": "ai.generateText.doGenerate",
        "ai.model.provider": "openai.chat",
        "ai.model.id": "gpt-4o-mini",
        "gen_ai.system": "openai.chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 10,
        "ai.telemetry.functionId": "support",
        **attributes,
    }


def one_call_run(trace_id: str, call_id: str) -> list:
    """A run of AI SDK 6 spans: the outer span, a call asking for one tool, the tool."""
    root = f"{trace_id[:14]}01"
    calls = json.dumps([{"toolCallId": call_id, "toolName": "get_weather", "input": "{}"}])
    return [
        span("ai.generateText", {"ai.operationId": "ai.generateText", "ai.model.id": "gpt-4o-mini",
                                 "ai.telemetry.functionId": "support"},
             trace_id=trace_id, span_id_hex=root, duration_ms=500),
        span("ai.generateText.doGenerate", do_generate(**{"ai.response.toolCalls": calls}),
             trace_id=trace_id, parent=root, start_ms=10, duration_ms=100),
        span("ai.toolCall", {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "get_weather",
                             "ai.toolCall.id": call_id, "ai.toolCall.args": "{}"},
             trace_id=trace_id, parent=root, start_ms=109, duration_ms=5),
    ]  # fmt: skip


def post(client, request: ExportTraceServiceRequest):
    response = client.generic(
        "POST", "/v1/traces", request.SerializeToString(), content_type="application/x-protobuf"
    )
    assert response.status_code == 200, response.content[:2000]
    return ExportTraceServiceResponse.FromString(response.content)


def test_hostile_ai_sdk_spans_never_cost_a_5xx_or_the_rest_of_their_export(alice):
    tools = [json.dumps({"type": "function", "name": f"tool_{i}"}) for i in range(10_000)]
    request = export(
        span("ai.generateText", {"ai.operationId": "ai.generateText",
                                 "ai.prompt": "x" * 1_000_000}),
        span("ten thousand tools", do_generate(**{"ai.prompt.tools": tools})),
        span("calls not json", do_generate(**{"ai.response.toolCalls": "[{not json"})),
        span("plain", do_generate()),
        # Two runs whose tool calls share an id: each tool counts under its own run's call.
        *one_call_run(TRACE_A, "call_1"),
        *one_call_run(TRACE_B, "call_1"),
    )  # fmt: skip
    answer = post(alice.client(), request)
    assert answer.partial_success.rejected_spans == 2, answer.partial_success.error_message
    message = answer.partial_success.error_message
    assert "ten thousand tools" in message and "data.offered: must have at most 1000" in message
    assert "ai.response.toolCalls is not a JSON array" in message
    stored = Record.objects.filter(project=alice.project)
    assert stored.filter(kind="model_call").count() == 5
    for trace_id in (TRACE_A, TRACE_B):
        (turn,) = stored.filter(kind="turn", run_id=trace_id)
        assert [c["name"] for c in turn.data["toolCalls"]] == ["get_weather"]


def test_ai_sdk_4_counts_and_a_refused_forced_tool_choice():
    call = json.dumps([{"toolCallType": "function", "toolCallId": "c1", "toolName": "lookup",
                        "args": '{"q": 1}'}])  # fmt: skip
    v4 = {k: v for k, v in do_generate().items() if not k.startswith("gen_ai.usage")}
    v4 |= {"ai.usage.promptTokens": 300, "ai.usage.completionTokens": 20,
           "ai.response.toolCalls": call}  # fmt: skip
    refused = do_generate(**{"ai.prompt.toolChoice": '{"type":"tool","toolName":"lookup"}',
                             "http.response.status_code": 400})  # fmt: skip
    request = export(
        span("ai.generateText.doGenerate", v4, start_ms=0, duration_ms=100),
        span("ai.generateText.doGenerate", refused, start_ms=200, duration_ms=50,
             error="tool_choice is not supported by this model"),
    )  # fmt: skip
    result = normalise_export(request, now=NOW)
    assert result.rejected_spans == 0, result.error_message
    (model_call,) = by_kind(result.records, "model_call")
    assert (model_call.tokens_in, model_call.tokens_out) == (300, 20)
    (turn,) = [t for t in by_kind(result.records, "turn") if data(t)["toolCalls"]]
    assert data(turn)["toolCalls"] == [{"name": "lookup", "arguments": {"q": 1}, "id": "c1"}]
    (error,) = by_kind(result.records, "provider.error")
    content = data(error)
    assert content["toolChoice"] == {"type": "tool", "name": "lookup"}
    refusal = ProviderError(
        error=content["error"], provider=content["provider"], model=content["model"],
        retryable=content["retryable"], status=content["status"],
        toolChoice=ToolChoice(**content["toolChoice"]),
    )  # fmt: skip
    assert is_forced_tool_choice_refusal(refusal)


def with_attribute(spans: list[dict], key: str, value: str, names: tuple[str, ...]) -> list[dict]:
    """The captured spans, `key` set on those named `names` as the SDK sets its metadata."""
    spans = copy.deepcopy(spans)
    for item in spans:
        if item["name"].split(" ")[0] in names:
            item.setdefault("attributes", []).append({"key": key, "value": {"stringValue": value}})
    return spans


def test_the_ai_sdk_metadata_release_overrides_the_service_version():
    spans = captured_spans("6")
    # AI SDK 4 to 6 copy experimental_telemetry.metadata onto each of the call's spans.
    names = ("ai.generateText", "ai.generateText.doGenerate", "ai.toolCall")
    released = with_attribute(spans, "ai.telemetry.metadata.release", "2026.12.1", names)
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.version", "value": {"stringValue": "2.4.0"}}]
                },
                "scopeSpans": [{"spans": released}],
            }
        ]
    }
    result = normalise_export(ParseDict(body, ExportTraceServiceRequest()), now=NOW)
    assert result.rejected_spans == 0, result.error_message
    assert {r.release for r in result.records} == {"2026.12.1"}
    body["resourceSpans"][0]["scopeSpans"] = [{"spans": spans}]
    plain = normalise_export(ParseDict(body, ExportTraceServiceRequest()), now=NOW)
    assert {r.release for r in plain.records} == {"2.4.0"}


def test_ai_sdk_7_runtime_context_names_the_release():
    spans = captured_spans("7")
    released = with_attribute(
        spans, "ai.settings.context.release", "2026.12.1", ("invoke_agent", "step")
    )
    assert {r.release for r in records_of(released)} == {"2026.12.1"}


def test_ai_sdk_spans_that_also_carry_genai_tools_and_messages_are_read_for_them():
    """The GenAI forms of tools and messages are read on an AI SDK model call only when its
    keys or events hold them: the same key set with and without them, read twice each."""
    definitions = json.dumps([{"type": "function", "function": {"name": "lookup"}}])
    output = json.dumps([{"role": "assistant", "parts": [
        {"type": "tool_call", "name": "lookup", "id": "c9", "arguments": {"q": 2}}]}])  # fmt: skip
    genai = do_generate(**{"gen_ai.tool.definitions": definitions,
                           "gen_ai.output.messages": output})  # fmt: skip
    choice = {"finish_reason": "tool_calls",
              "tool_calls": json.dumps([{"id": "c8", "function": {"name": "lookup"}}])}  # fmt: skip
    for _ in range(2):
        request = export(
            span("ai.generateText.doGenerate", genai, start_ms=0, duration_ms=100),
            span("ai.generateText.doGenerate", do_generate(), start_ms=200, duration_ms=100,
                 events=[("gen_ai.choice", choice)]),
            span("ai.generateText.doGenerate", do_generate(), start_ms=400, duration_ms=100),
        )  # fmt: skip
        result = normalise_export(request, now=NOW)
        assert result.rejected_spans == 0, result.error_message
        turns = {t.iteration: data(t) for t in by_kind(result.records, "turn")}
        assert turns[0]["offered"] == ["lookup"]
        assert turns[0]["toolCalls"] == [{"name": "lookup", "arguments": {"q": 2}, "id": "c9"}]
        assert turns[1]["toolCalls"] == [{"name": "lookup", "id": "c8"}]
        assert 2 not in turns  # offered nothing, called nothing: no tool decision
