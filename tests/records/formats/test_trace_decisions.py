"""The decisions read from plain traces (records.formats.trace_decisions), and hostile
OpenInference spans: stored or rejected with a reason, never an error."""

from __future__ import annotations

import json

import pytest

from records.formats import otlp
from records.formats import trace_decisions as td
from tests.support.otlp_payloads import SPANS_NOW, chat, export, span, span_id


@pytest.mark.parametrize(
    ("requested", "answered", "swap"),
    [
        ("gpt-4o-mini", "gpt-4o-mini-2024-07-18", False),
        ("claude-3-5-sonnet", "claude-3-5-sonnet-20241022", False),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini", False),
        ("gpt-4o-mini", "gpt-4o", True),
        ("gpt-4o", "gpt-4o-mini-2024-07-18", True),
        ("gpt-4o-mini", "llama-3.3-70b", True),
        ("gemini-1.5-pro", "gemini-1.5-pro-001", True),  # a revision, not a dated snapshot
        (None, "gpt-4o", False),
    ],
)
def test_a_swap_is_another_model_than_requested_dated_snapshots_excepted(requested, answered, swap):
    assert td.is_swap(requested, answered) is swap


def llm(**attributes):
    return {"openinference.span.kind": "LLM", "llm.provider": "openai",
            "llm.model_name": "gpt-4o-mini", **attributes}  # fmt: skip


def tools(*names):
    return {f"llm.tools.{i}.tool.json_schema": json.dumps({"type": "function",
            "function": {"name": n}}) for i, n in enumerate(names)}  # fmt: skip


def test_calls_of_a_run_are_numbered_by_start_time_whatever_their_order_in_the_export():
    later = span("b", llm(), start_ms=2000)
    earlier = span("a", llm(), start_ms=0)
    result = otlp.normalise_export(export(later, earlier), now=SPANS_NOW)
    by_span = {json.loads(r.data_json)["otel"]["span"]: r.iteration
               for r in result.records if r.kind == "model_call"}  # fmt: skip
    assert by_span == {"a": 0, "b": 1}


def call(name: str, model: str, start: int, *, failed: bool = False) -> td.Call:
    return td.Call(span_key=("t", name), run_id="run", start_ns=start, request_model=model,
                   response_model=None if failed else model, provider="openai",
                   failed=failed)  # fmt: skip


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        # Another model answers the step the failure left; the next call is the next step.
        ([("a", "gpt-4o-mini", True), ("b", "claude-sonnet-4-5", False),
          ("c", "claude-sonnet-4-5", False)], [0, 0, 1]),
        # A retry of the same model is the same step too, however many it takes.
        ([("a", "gpt-4o", True), ("b", "gpt-4o", True), ("c", "gpt-4o", False),
          ("d", "gpt-4o", False)], [0, 0, 0, 1]),
        ([("a", "gpt-4o", False), ("b", "gpt-4o", True), ("c", "o3", False)], [0, 1, 1]),
    ],
)  # fmt: skip
def test_a_call_after_a_failure_retries_the_failed_step(calls, expected):
    made = [call(name, model, i, failed=failed) for i, (name, model, failed) in enumerate(calls)]
    numbered = td.iterations(made)
    assert [numbered[c.span_key] for c in made] == expected


def failing_then_fallback_export(*, fallback: str):
    failed = chat("gpt-4o-mini", **{"error.type": "InternalServerError",
                                    "http.response.status_code": 503})  # fmt: skip
    return export(
        span("c", chat(fallback), start_ms=4000),
        span("a", failed, start_ms=0, error="overloaded"),
        span("b", chat(fallback), start_ms=2000),
    )


def test_a_fallback_answers_the_iteration_of_the_failure_and_the_next_call_is_the_next():
    result = otlp.normalise_export(failing_then_fallback_export(fallback="claude-sonnet-4-5"),
                                   now=SPANS_NOW)  # fmt: skip
    by_kind: dict[str, list[dict]] = {}
    for record in result.records:
        by_kind.setdefault(record.kind, []).append(json.loads(record.data_json))
    assert sorted(c["iteration"] for c in by_kind["model_call"]) == [0, 1]
    (error,) = by_kind["provider.error"]
    (fallback,) = by_kind["reliability"]
    assert (error["otel"]["iteration"], fallback["otel"]["iteration"]) == (0, 0)
    assert (fallback["primary"], fallback["fallback"]) == ("gpt-4o-mini", "claude-sonnet-4-5")


def test_a_retry_of_the_failed_model_is_the_same_iteration_and_no_fallback():
    result = otlp.normalise_export(
        failing_then_fallback_export(fallback="gpt-4o-mini"), now=SPANS_NOW
    )
    iterations = sorted(r.iteration for r in result.records if r.kind == "model_call")
    assert iterations == [0, 1]
    assert not [r for r in result.records if r.kind == "reliability"]


def test_hostile_openinference_spans_are_stored_or_rejected_with_a_reason():
    many = tools(*(f"tool_{i}" for i in range(10_000)))
    bad_schema = {"llm.tools.0.tool.json_schema": "{not json",
                  "llm.tools.1.tool.json_schema": json.dumps({"name": "ok"})}  # fmt: skip
    nameless = {"llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1"}
    huge = {"llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "x",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments":
                "a" * 1_000_000, "metadata": "m" * 1_000_000}  # fmt: skip
    request = export(
        span("many", llm(**many), span_id_hex=span_id()),
        span("bad", llm(**bad_schema)),
        span("nameless", llm(**nameless)),
        span("huge", llm(**huge)),
        span("no ids", {"openinference.span.kind": "LLM"}),
        span("retriever", {"openinference.span.kind": "RETRIEVER"}),
    )
    result = otlp.normalise_export(request, now=SPANS_NOW)
    message = result.error_message
    assert result.rejected_spans == 3, message
    assert "'many': (turn) rejected:" in message
    assert "data.offered: must have at most 1000 items" in message
    assert "llm.tools.0.tool.json_schema is not JSON" in message
    assert "tool_calls.0 has no tool_call.function.name" in message
    calls = [r for r in result.records if r.kind == "model_call"]
    assert len(calls) == 5  # every model call kept, the bare one flagged
    huge_turn = next(json.loads(r.data_json) for r in result.records if r.kind == "turn"
                     and json.loads(r.data_json)["otel"]["span"] == "huge")  # fmt: skip
    assert huge_turn["toolCalls"] == [{"name": "x", "argumentsOmitted": "1,000,000 characters"}]
    bare = next(json.loads(r.data_json) for r in calls
                if json.loads(r.data_json)["otel"]["span"] == "no ids")  # fmt: skip
    assert bare["otel"]["missing"] == ["llm.provider (or llm.system)", "llm.model_name"]


def test_spans_of_one_export_read_their_tools_as_each_would_alone():
    def turns(*spans):
        result = otlp.normalise_export(export(*spans), now=SPANS_NOW)
        found = {}
        for record in result.records:
            data = json.loads(record.data_json)
            if record.kind == "turn":
                found[data["otel"]["span"]] = (data.get("offered"), data["toolCalls"])
        return found, result.error_message

    call = "llm.output_messages.0.message.tool_calls.0.tool_call.function.name"
    schema = tools("search")["llm.tools.0.tool.json_schema"]
    spans = [
        span("a", llm(**tools("search", "refund"), **{call: "refund"}), start_ms=0),
        span("b", llm(**tools("refund", "search"), **{call: "search"}), start_ms=10),
        span("c", llm(**{"llm.tools.0.tool.json_schema": "{not json",
                         "llm.tools.1.tool.json_schema": schema,
                         "llm.tools.01.tool.name": "lookup", call: "lookup"}), start_ms=20),
        span("d", llm(**{"llm.tools.1.tool.json_schema": "{not json", call: "search"}),
             start_ms=30),
    ]  # fmt: skip
    together, message = turns(*spans)
    alone = {}
    for one in spans:
        found, _ = turns(one)
        alone.update(found)
    assert together == alone
    assert together["a"] == (["search", "refund"], [{"name": "refund"}])
    # llm.tools.01 is index 1: its name wins over the schema there.
    assert together["c"][0] == ["lookup"]
    assert "'c': llm.tools.0.tool.json_schema is not JSON" in message
    assert "'d': llm.tools.1.tool.json_schema is not JSON" in message
