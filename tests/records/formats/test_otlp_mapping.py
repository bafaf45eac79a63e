"""records.formats.otlp: OTLP spans and span events → decision records (pure: no database)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from records.formats import otlp
from tests.support.factories import BASE_TS, DATA, KINDS
from tests.support.otlp_payloads import (
    SPANS_NOW,
    TRACE,
    chat,
    export,
    json_string_form,
    otlp_json,
    span,
    span_id,
)

AGENTS_JS_CAPTURES = Path(__file__).parent / "agents_js_captures"


def mapped(request):
    result = otlp.normalise_export(request, now=SPANS_NOW)
    return result, {r.kind: r for r in result.records}


def data(record) -> dict:
    return json.loads(record.data_json)


# --- decisionboard.<kind> events -----------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("form", ["json strings", "otlp arrays and kvlists"])
def test_it_maps_a_decisionboard_event_of_every_kind(kind, form):
    attributes = json_string_form(DATA[kind]) if form == "json strings" else DATA[kind]
    request = export(span("agent step", events=[(f"decisionboard.{kind}", attributes)]))
    result, records = mapped(request)
    assert result.rejected_spans == 0, result.error_message
    assert data(records[kind]) == DATA[kind]
    assert records[kind].run_id == TRACE


def test_a_dotted_attribute_nests_into_the_data():
    pick = dict(DATA["tool_choice.pick"])
    classifier = pick.pop("classifier")
    attributes = {
        **json_string_form(pick),
        "classifier.name": classifier["name"],
        "classifier.model": classifier["model"],
    }
    result, records = mapped(
        export(span("s", events=[("decisionboard.tool_choice.pick", attributes)]))
    )
    assert data(records["tool_choice.pick"]) == DATA["tool_choice.pick"]
    assert records["tool_choice.pick"].model == "claude-haiku-4-5"


def test_a_text_field_holding_json_stays_text():
    turn = {"protocol": "envelope", "text": '{"taskComplete": true}'}
    result, records = mapped(export(span("s", events=[("decisionboard.turn", turn)])))
    assert data(records["turn"])["text"] == '{"taskComplete": true}'
    assert json.loads(records["turn"].derived_json)["decision"] == "taskComplete"


def test_a_whole_double_counts_as_an_integer():
    # JavaScript SDKs may send every number as a double.
    outcome = {"iteration": 3.0, "called": json.dumps(["grep"]), "firstAgrees": False}
    result, records = mapped(
        export(span("s", events=[("decisionboard.tool_choice.outcome", outcome)]))
    )
    assert result.rejected_spans == 0, result.error_message
    assert records["tool_choice.outcome"].iteration == 3


def test_event_attributes_under_decisionboard_set_the_envelope():
    attributes = {
        **json_string_form(DATA["notice"]),
        "decisionboard.id": "notice-7",
        "decisionboard.run_id": "run-42",
        "decisionboard.agent": "router",
        "decisionboard.session_id": "sess-9",
        "decisionboard.parent_run_id": "run-1",
    }
    result, records = mapped(export(span("s", events=[("decisionboard.notice", attributes)])))
    notice = records["notice"]
    assert (notice.record_key, notice.run_id, notice.agent, notice.session_id) == (
        "notice-7",
        "run-42",
        "router",
        "sess-9",
    )
    assert notice.parent_run_id == "run-1"


def test_an_event_takes_its_own_time_and_an_id_from_span_and_position():
    sid = span_id()
    request = export(
        span(
            "s",
            span_id_hex=sid,
            start_ms=5000,
            events=[("log", {}), ("decisionboard.reliability", DATA["reliability"])],
        )
    )
    result, records = mapped(request)
    record = records["reliability"]
    assert record.record_key == f"otel:{TRACE}:{sid}:1"
    assert record.ts == BASE_TS + timedelta(milliseconds=5001)


def test_it_rejects_an_event_of_an_unknown_kind_and_names_it():
    request = export(span("step", events=[("decisionboard.tool_choice.guess", {"x": 1})]))
    result, records = mapped(request)
    assert records == {}
    assert result.rejected_spans == 1
    assert "unknown kind 'tool_choice.guess'" in result.error_message


def test_an_invalid_event_is_rejected_with_its_field_path_and_its_neighbours_kept():
    bad = {**json_string_form(DATA["tool_choice.pick"]), "latencyMs": -1.0}
    request = export(
        span("s", events=[("decisionboard.tool_choice.pick", bad)]),
        span("t", events=[("decisionboard.notice", json_string_form(DATA["notice"]))]),
    )
    result, records = mapped(request)
    assert set(records) == {"notice"}
    assert result.rejected_spans == 1
    assert "decisionboard.tool_choice.pick[0] rejected: data.latencyMs" in result.error_message


# --- GenAI semantic-convention spans --------------------------------------------------------
@pytest.mark.parametrize("operation", ["chat", "text_completion", "generate_content"])
def test_an_inference_span_becomes_a_model_call(operation):
    attributes = chat(
        "gpt-4o",
        **{
            "gen_ai.operation.name": operation,
            "gen_ai.usage.cache_read.input_tokens": 900,
            "gen_ai.usage.reasoning.output_tokens": 30,
        },
    )
    sid = span_id()
    result, records = mapped(export(span(f"{operation} gpt-4o", attributes, span_id_hex=sid)))
    call = records["model_call"]
    assert result.rejected_spans == 0, result.error_message
    body = data(call)
    assert body["provider"] == "openai"
    assert body["model"] == "gpt-4o-2026-08-06"  # the response model, when reported
    # The conventions' 1,200 input tokens hold the 900 cached, the 80 output the 30 reasoning.
    assert body["usage"] == {"input": 300, "output": 50, "cacheRead": 900, "thinking": 30}
    assert body["stopReason"] == "tool_calls"
    assert body["durationMs"] == 1500.0
    assert (call.tokens_in, call.tokens_out, call.latency_ms) == (300, 50, 1500.0)
    assert call.record_key == f"otel:{TRACE}:{sid}"
    assert call.ts == BASE_TS + timedelta(milliseconds=1500)  # the span's end


def test_the_older_gen_ai_system_names_the_provider():
    attributes = chat()
    del attributes["gen_ai.provider.name"]
    attributes["gen_ai.system"] = "anthropic"
    _, records = mapped(export(span("chat", attributes)))
    assert data(records["model_call"])["provider"] == "anthropic"


def test_a_model_call_without_token_counts_is_kept_and_flagged():
    attributes = chat()
    del attributes["gen_ai.usage.input_tokens"]
    result, records = mapped(export(span("chat", attributes)))
    body = data(records["model_call"])
    assert body["usage"] == {"input": 0, "output": 80}
    assert body["otel"]["usageReported"] is False


def test_a_chat_span_without_a_provider_is_stored_with_what_it_has_and_flagged():
    attributes = chat()
    del attributes["gen_ai.provider.name"]
    result, records = mapped(export(span("chat", attributes)))
    assert result.rejected_spans == 0, result.error_message
    body = data(records["model_call"])
    assert (body["provider"], body["model"]) == ("unknown", "gpt-4o-2026-08-06")
    assert body["usage"] == {"input": 1200, "output": 80}
    assert body["otel"]["missing"] == ["gen_ai.provider.name"]


def test_an_inference_span_naming_nothing_is_stored_and_names_each_missing_attribute():
    attributes = {"gen_ai.operation.name": "chat"}
    result, records = mapped(export(span("chat", attributes)))
    assert result.rejected_spans == 0, result.error_message
    body = data(records["model_call"])
    assert (body["provider"], body["model"]) == ("unknown", "unknown")
    assert body["otel"]["missing"] == ["gen_ai.provider.name", "gen_ai.request.model"]


def test_a_failed_inference_span_becomes_a_provider_error():
    attributes = chat(
        "claude-sonnet-4-5",
        "anthropic",
        **{"error.type": "RateLimitError", "http.response.status_code": 429},
    )
    request = export(span("chat", attributes, error="rate limited, retry in 20s"))
    result, records = mapped(request)
    assert set(records) == {"provider.error"}
    body = data(records["provider.error"])
    assert {k: body[k] for k in ("error", "provider", "status", "retryable", "message")} == {
        "error": "RateLimitError",
        "provider": "anthropic",
        "status": 429,
        "retryable": True,
        "message": "rate limited, retry in 20s",
    }


def test_an_error_type_alone_marks_the_span_failed_and_retryable_can_be_said():
    attributes = chat(**{"error.type": "BadRequestError", "decisionboard.retryable": False})
    _, records = mapped(export(span("chat", attributes)))
    assert data(records["provider.error"])["retryable"] is False


def test_execute_tool_spans_become_the_tool_calls_of_the_turn_after_their_model_call():
    agent = span_id()
    first, second = span_id(), span_id()
    request = export(
        span("invoke_agent support", {"gen_ai.operation.name": "invoke_agent"}, span_id_hex=agent,
             duration_ms=9000),
        span("chat gpt-4o", chat(), parent=agent, span_id_hex=first, duration_ms=1000),
        span("execute_tool search_docs",
             {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
              "gen_ai.tool.call.arguments": '{"query": "refunds"}', "gen_ai.tool.call.id": "c1"},
             parent=agent, start_ms=1100, duration_ms=200),
        span("execute_tool grep", {"gen_ai.operation.name": "execute_tool"}, parent=agent,
             start_ms=1150, duration_ms=100, error="no such file"),
        span("chat gpt-4o", chat(**{"gen_ai.response.finish_reasons": ["stop"]}), parent=agent,
             span_id_hex=second, start_ms=1400, duration_ms=800),
    )  # fmt: skip
    result, _ = mapped(request)
    turns = [r for r in result.records if r.kind == "turn"]
    assert len(turns) == 1 and result.rejected_spans == 0, result.error_message
    body = data(turns[0])
    assert body["toolCalls"] == [
        {"name": "search_docs", "arguments": {"query": "refunds"}, "id": "c1"},
        {"name": "grep"},  # the name from the span name, as the conventions spell it
    ]
    assert body["finishReason"] == "tool_calls"
    assert body["executionError"] == {"tool": "grep", "error": "no such file"}
    assert turns[0].record_key == f"otel:{TRACE}:{first}:turn"
    derived = json.loads(turns[0].derived_json)
    assert derived["decision"] == "action" and derived["invented"] == []
    assert turns[0].is_error


def test_agent_spans_name_the_agent_and_nested_agents_open_sub_runs():
    root, sub = span_id(), span_id()
    request = export(
        span("invoke_agent planner",
             {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner",
              "gen_ai.conversation.id": "conv-1"}, span_id_hex=root, duration_ms=9000),
        span("chat", chat(), parent=root),
        span("invoke_agent researcher",
             {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
             parent=root, span_id_hex=sub, start_ms=2000, duration_ms=3000),
        span("chat", chat("claude-haiku-4-5", "anthropic"), parent=sub, start_ms=2100),
    )  # fmt: skip
    result, _ = mapped(request)
    assert result.rejected_spans == 0, result.error_message
    calls = {
        json.loads(r.data_json)["provider"]: r for r in result.records if r.kind == "model_call"
    }
    planner, researcher = calls["openai"], calls["anthropic"]
    assert (planner.run_id, planner.parent_run_id, planner.agent) == (TRACE, None, "planner")
    assert researcher.run_id == f"{TRACE}-{sub}"
    assert (researcher.parent_run_id, researcher.agent) == (TRACE, "researcher")
    assert planner.session_id == researcher.session_id == "conv-1"


def test_decisionboard_run_id_on_a_span_or_the_resource_overrides_the_trace():
    parent = span_id()
    request = export(
        span("step", {"decisionboard.run_id": "run-7", "decisionboard.iteration": 4},
             span_id_hex=parent, duration_ms=5000),
        span("chat", chat(), parent=parent),
        span("other", events=[("decisionboard.notice", json_string_form(DATA["notice"]))],
             trace_id="0" * 31 + "1"),
        resource={"decisionboard.run_id": "run-from-resource", "decisionboard.agent": "bot"},
    )  # fmt: skip
    result, records = mapped(request)
    assert records["model_call"].run_id == "run-7"
    assert records["notice"].run_id == "run-from-resource"
    assert records["notice"].agent == "bot"


def test_spans_that_say_nothing_take_their_resource_s_run_agent_session_and_parent():
    # Spans with no attributes and no parent in the export (a batch of decisionboard events,
    # one span each): what they inherit is the resource's, else each one's own trace.
    notice = json_string_form(DATA["notice"])
    other_trace = "0" * 31 + "2"
    request = export(
        span("a", events=[("decisionboard.notice", notice)]),
        span("b", events=[("decisionboard.notice", notice)], trace_id=other_trace),
    )
    with_resource = export(
        span("c", events=[("decisionboard.notice", notice)]),
        span("d", events=[("decisionboard.notice", notice)], trace_id=other_trace),
        resource={
            "decisionboard.run_id": "run-r",
            "decisionboard.parent_run_id": "run-p",
            "gen_ai.agent.name": "router",
            "gen_ai.conversation.id": "conv-1",
        },
    )
    bare = otlp.normalise_export(request, now=SPANS_NOW).records
    assert [(r.run_id, r.parent_run_id, r.agent, r.session_id) for r in bare] == [
        (TRACE, None, None, None),
        (other_trace, None, None, None),
    ]
    named = otlp.normalise_export(with_resource, now=SPANS_NOW).records
    assert {(r.run_id, r.parent_run_id, r.agent, r.session_id) for r in named} == {
        ("run-r", "run-p", "router", "conv-1")
    }


def test_an_event_that_names_its_whole_envelope_ignores_the_span_s_lineage():
    agent = span_id()
    envelope = {
        "decisionboard.run_id": "run-e",
        "decisionboard.parent_run_id": "run-pe",
        "decisionboard.agent": "planner",
        "decisionboard.session_id": "sess-e",
    }
    request = export(
        span("invoke_agent", {"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "outer"}, span_id_hex=agent),
        span("step", {"decisionboard.run_id": "run-s"}, parent=agent,
             events=[("decisionboard.notice", {**json_string_form(DATA["notice"]), **envelope}),
                     ("decisionboard.notice", json_string_form(DATA["notice"]))]),
    )  # fmt: skip
    first, second = otlp.normalise_export(request, now=SPANS_NOW).records
    assert (first.run_id, first.parent_run_id, first.agent, first.session_id) == (
        "run-e", "run-pe", "planner", "sess-e"
    )  # fmt: skip
    assert (second.run_id, second.agent) == ("run-s", "outer")


def test_an_escaped_nul_in_json_text_is_scrubbed_once_parsed_and_kept_as_text_elsewhere():
    pick = {
        **json_string_form(DATA["tool_choice.pick"]),
        "offered": json.dumps(["search_docs", "read\u0000file"]),  # JSON escapes the NUL
    }
    notice = {**json_string_form(DATA["notice"]), "message": "see \\u0000 in the log"}
    request = export(
        span("s", events=[("decisionboard.tool_choice.pick", pick)]),
        span("t", events=[("decisionboard.notice", notice)]),
    )
    result, records = mapped(request)
    assert data(records["tool_choice.pick"])["offered"] == ["search_docs", "read\ufffdfile"]
    assert json.loads(records["tool_choice.pick"].derived_json)["nul_replaced"] == [
        "data.offered[1]"
    ]
    assert data(records["notice"])["message"] == "see \\u0000 in the log"


def test_a_nul_in_an_exception_event_of_a_failed_span_is_scrubbed():
    # The exception event's attributes are read only when the provider error asks for them.
    failed = span("chat", chat(**{"error.type": "RateLimitError"}),
                  events=[("exception", {"exception.message": "over\x00quota"})])  # fmt: skip
    result, records = mapped(export(failed))
    assert data(records["provider.error"])["message"] == "over\ufffdquota"


def test_dotted_and_kvlist_parts_of_a_declared_object_are_fitted_like_whole_ones():
    pick = {
        **json_string_form(DATA["tool_choice.pick"]),
        "usage.inputTokens": 120.0,
        "usage.outputTokens": 8.0,
        "classifier": {"name": "tool-ranker", "model": "claude-haiku-4-5"},
    }
    result, records = mapped(export(span("s", events=[("decisionboard.tool_choice.pick", pick)])))
    assert result.rejected_spans == 0, result.error_message
    assert data(records["tool_choice.pick"])["usage"] == {"inputTokens": 120, "outputTokens": 8}
    assert records["tool_choice.pick"].model == "claude-haiku-4-5"


def test_the_iteration_of_a_model_call_comes_from_a_decisionboard_event_on_its_span():
    pick = json_string_form({**DATA["tool_choice.pick"], "iteration": 6})
    _, records = mapped(
        export(span("chat", chat(), events=[("decisionboard.tool_choice.pick", pick)]))
    )
    assert records["model_call"].iteration == 6
    assert records["tool_choice.pick"].iteration == 6


def test_a_span_with_nothing_to_map_is_counted_and_named():
    request = export(
        span("GET /search", {"http.request.method": "GET"}),
        span("embeddings", {"gen_ai.operation.name": "embeddings"}),
        span("chat", chat()),
    )
    result, records = mapped(request)
    assert set(records) == {"model_call", "model_selection"}
    assert result.rejected_spans == 2
    assert result.error_message.startswith("2 of 3 spans rejected")
    assert "'GET /search': nothing to map" in result.error_message
    assert "'embeddings'" in result.error_message


def test_the_partial_success_answer_is_set_only_when_something_was_rejected():
    good = otlp.normalise_export(export(span("chat", chat())), now=SPANS_NOW)
    assert not otlp.export_response(good).HasField("partial_success")
    bad = otlp.normalise_export(export(span("GET /")), now=SPANS_NOW)
    answer = otlp.export_response(bad).partial_success
    assert answer.rejected_spans == 1 and "GET /" in answer.error_message


# --- decoding --------------------------------------------------------------------------------
def test_otlp_json_with_hex_ids_decodes_to_the_same_export_as_protobuf():
    notice = ("decisionboard.notice", json_string_form(DATA["notice"]))
    request = export(span("chat", chat(), parent=span_id(), events=[notice]))
    from_json = otlp.decode_request(otlp_json(request), otlp.JSON)
    from_protobuf = otlp.decode_request(request.SerializeToString(), otlp.PROTOBUF)
    assert from_json == from_protobuf == request


def test_otlp_json_accepts_snake_case_names_and_ignores_unknown_fields():
    body = {
        "resource_spans": [{"scope_spans": [{"spans": [{
            "trace_id": TRACE, "span_id": "00000000000000aa", "name": "chat",
            "start_time_unix_nano": "1795683600000000000",
            "end_time_unix_nano": 1795683601000000000,
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}],
            "futureField": {"x": 1},
        }]}]}]
    }  # fmt: skip
    request = otlp.decode_request(json.dumps(body).encode(), otlp.JSON)
    (decoded,) = otlp.spans_of(request)
    assert (decoded.trace_id, decoded.span_id, decoded.operation) == (
        TRACE,
        "00000000000000aa",
        "chat",
    )


@pytest.mark.parametrize(
    ("body", "encoding", "words"),
    [
        (b"\x0a\xff\xff\xff", otlp.PROTOBUF, "not an OTLP protobuf export"),
        (b"{not json", otlp.JSON, "not valid JSON"),
        (b"[1, 2]", otlp.JSON, "must be an OTLP JSON export object"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', otlp.JSON,
         "traceId must be a hex string"),
        (b'{"resourceSpans": "nope"}', otlp.JSON, "not an OTLP JSON export"),
    ],
)  # fmt: skip
def test_it_names_what_is_wrong_with_an_undecodable_body(body, encoding, words):
    with pytest.raises(otlp.OtlpDecodeError, match=words):
        otlp.decode_request(body, encoding)


def test_thousands_of_nested_agents_listed_children_first_map_without_error():
    # Children end (and are exported) before their parents; a hostile export nests deeply.
    spans, parent = [], ""
    for _ in range(2000):
        agent = span_id()
        spans += [
            span("invoke_agent", {"gen_ai.operation.name": "invoke_agent"}, span_id_hex=agent,
                 parent=parent),
            span("chat", chat(), parent=agent),
        ]  # fmt: skip
        parent = agent
    result, _ = mapped(export(*reversed(spans)))
    calls = [r for r in result.records if r.kind == "model_call"]
    assert result.rejected_spans == 0 and len(calls) == 2000
    innermost = calls[0]
    assert innermost.run_id == f"{TRACE}-{parent}" and innermost.parent_run_id.startswith(TRACE)


def test_a_call_deep_under_plain_spans_takes_the_agent_and_session_of_the_nearest_that_names_them():
    agent = span_id()
    spans = [span("invoke_agent", {"gen_ai.operation.name": "invoke_agent",
                                   "gen_ai.agent.name": "outer"}, span_id_hex=agent)]  # fmt: skip
    parent = agent
    for depth in range(3000):
        step = span_id()
        said = {"gen_ai.conversation.id": "s-1"} if depth == 2950 else {}
        said |= {"gen_ai.agent.name": "inner"} if depth == 2990 else {}
        spans.append(span("step", {"step": depth, **said}, span_id_hex=step, parent=parent))
        parent = step
    spans.append(span("chat", chat(), parent=parent))
    result, records = mapped(export(*reversed(spans)))
    assert result.rejected_spans == 2999  # the plain spans, each named (one names an agent)
    call = records["model_call"]
    assert (call.run_id, call.agent, call.session_id) == (TRACE, "inner", "s-1")


def test_a_call_whose_parent_points_back_at_it_takes_that_parent_s_session_once():
    first, second = span_id(), span_id()
    request = export(
        span("chat", chat(), span_id_hex=first, parent=second),
        span("step", {"gen_ai.conversation.id": "s-2"}, span_id_hex=second, parent=first),
    )
    result, records = mapped(request)
    assert [r.kind for r in result.records].count("model_call") == 1
    call = records["model_call"]
    assert (call.run_id, call.session_id) == (TRACE, "s-2")


# --- release ---------------------------------------------------------------------------------
def test_the_resource_s_service_version_is_the_release_of_every_record():
    request = export(
        span("chat", chat()),
        span("other", events=[("decisionboard.notice", json_string_form(DATA["notice"]))]),
        resource={"service.version": "2.4.0"},
    )
    result, records = mapped(request)
    assert result.rejected_spans == 0, result.error_message
    assert {r.kind: r.release for r in result.records} == {
        "model_call": "2.4.0",
        "model_selection": "2.4.0",
        "notice": "2.4.0",
    }


def test_the_agent_s_version_overrides_the_service_version_and_an_event_its_own():
    agent = span_id()
    event = {**json_string_form(DATA["notice"]), "decisionboard.release": "notice-1"}
    request = export(
        span("invoke_agent planner",
             {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner",
              "gen_ai.agent.version": "planner-7"}, span_id_hex=agent, duration_ms=9000),
        span("chat", chat(), parent=agent, events=[("decisionboard.notice", event)]),
        span("lone", events=[("decisionboard.notice", json_string_form(DATA["notice"]))],
             trace_id="0" * 31 + "3"),
        resource={"service.version": "2.4.0"},
    )  # fmt: skip
    result, records = mapped(request)
    assert result.rejected_spans == 0, result.error_message
    assert records["model_call"].release == "planner-7"
    notices = sorted(r.release for r in result.records if r.kind == "notice")
    assert notices == ["2.4.0", "notice-1"]


def test_an_invalid_release_is_an_error_of_its_records_named_in_the_answer():
    request = export(
        span("chat", chat(**{"gen_ai.agent.version": "v1\nv2"})),
        span("chat", chat(), trace_id="0" * 31 + "4"),
    )
    result, _ = mapped(request)
    assert result.rejected_spans == 1
    assert "release" in result.error_message
    # The span with a good (absent) release keeps its records.
    assert {r.run_id for r in result.records} == {"0" * 31 + "4"}


def test_a_span_without_any_version_has_no_release():
    result, records = mapped(export(span("chat", chat())))
    assert records["model_call"].release is None


def test_an_openai_agents_js_handoff_opens_a_sub_run_that_keeps_its_agent():
    """OpenAI Agents JS as it exports a handoff (captured against the loopback OpenAI stub):
    its agent spans name their agents only by graph.node.id. The handing agent's calls stay in
    the trace's run; the agent handed to opens a sub-run under it, and its model call, two spans
    below the agent's, keeps that agent although its siblings' agent is the other one."""
    body = (AGENTS_JS_CAPTURES / "openai_agents_handoff.json").read_bytes()
    request = otlp.decode_request(body, otlp.JSON)
    result = otlp.normalise_export(request, now=datetime(2030, 1, 1, tzinfo=UTC))
    assert result.rejected_spans == 0, result.error_message
    calls = sorted((r for r in result.records if r.kind == "model_call"), key=lambda r: r.ts)
    top = calls[0].run_id
    booker = next(s for s in request.resource_spans[0].scope_spans[0].spans if s.name == "booker")
    sub = f"{top}-{booker.span_id.hex()}"
    assert [(c.run_id, c.agent, c.parent_run_id) for c in calls] == [
        (top, "triage", None),
        (top, "triage", None),
        (sub, "booker", top),
    ]
    turns = [r for r in result.records if r.kind == "turn"]
    assert {(t.run_id, t.agent) for t in turns} == {(top, "triage")}
