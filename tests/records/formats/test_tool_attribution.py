"""Which model call asked for each tool execution (records.formats.trace_decisions,
attribute_tools): by the tool call's id, wherever the spans nest, whatever order the export
lists them in and however finely it times them; by time only where no id exists. And what the
LangChain.js and OpenAI Agents JS instrumentations say beyond the flattened attributes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from records.formats import trace_decisions as td
from records.formats.otlp_mapping import map_export
from tests.support.otlp_payloads import TRACE, export, key_values, ns, span

ROOT, TOOLS_NODE = "00000000000000aa", "00000000000000ab"
# Each model call: the tools its response calls (name, city).
CALLS = [
    [("get_weather", "Oslo"), ("get_weather", "Bergen")],
    [("search_docs", "wind")],
    [],
    [("get_weather", "Tromso")],
]
# Where the tool spans hang: beside their model call, under LangGraph's tools node, or
# straight under the run's root.
PARENTAGES = ("beside", "tools node", "root")


def llm_span(i: int, start: int, end: int, parent: str, *, ids: bool) -> Span:
    attributes: dict[str, Any] = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.invocation_parameters": json.dumps({"model": "gpt-4o-mini"}),
        "metadata": json.dumps({"ls_provider": "openai", "ls_integration": "langchain"}),
        "llm.token_count.prompt": 100 + i,
        "llm.token_count.completion": 10 + i,
    }
    calls = []
    for j, (name, city) in enumerate(CALLS[i]):
        prefix = f"llm.output_messages.0.message.tool_calls.{j}.tool_call."
        attributes[prefix + "function.name"] = name
        attributes[prefix + "function.arguments"] = json.dumps({"city": city})
        calls.append({"name": name, "args": {"city": city}, "id": f"call_{i}_{j}"})
    if ids:  # as LangChain.js has them: only in the message of output.value
        message = {"kwargs": {"tool_calls": calls,
                              "response_metadata": {"model_name": "gpt-4.1-mini"}}}  # fmt: skip
        attributes["output.value"] = json.dumps({"generations": [[{"message": message}]]})
    return make(f"{i + 1:016x}", "ChatOpenAI", parent, start, end, attributes)


def tool_span(i: int, j: int, start: int, end: int, parent: str, *, ids: bool) -> Span:
    name, city = CALLS[i][j]
    attributes: dict[str, Any] = {
        "openinference.span.kind": "TOOL",
        "tool.name": name,
        "input.value": city,
    }
    if ids:
        tool_message = {"kwargs": {"tool_call_id": f"call_{i}_{j}", "content": "Sunny."}}
        attributes["output.value"] = json.dumps({"output": tool_message})
    return make(f"{0x100 + 16 * i + j:016x}", name, parent, start, end, attributes)


def make(span_id: str, name: str, parent: str, start: int, end: int, attributes) -> Span:
    return Span(
        trace_id=bytes.fromhex(TRACE),
        span_id=bytes.fromhex(span_id),
        parent_span_id=bytes.fromhex(parent),
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=key_values(attributes),
        status=Status(code=Status.STATUS_CODE_OK),
    )


def run_spans(parentage: str, rounded: bool, *, ids: bool) -> list[Span]:
    """A ReAct run: model call, its tools, model call, ... timed to the nanosecond, or cut to
    the millisecond as the OpenTelemetry JS SDK and the Agents SDKs time spans."""
    t0 = ns()

    def at(offset_us: float) -> int:
        value = t0 + int(offset_us * 1000) + 137
        return value - value % 1_000_000 if rounded else value

    root = {"openinference.span.kind": "CHAIN", "metadata": '{"ls_integration":"langgraph"}'}
    spans = [make(ROOT, "support", "", at(0), at(900_000), root)]
    node = {"openinference.span.kind": "CHAIN", "metadata": '{"langgraph_node":"tools"}'}
    spans.append(make(TOOLS_NODE, "tools", ROOT, at(1), at(899_000), node))
    for i, tools in enumerate(CALLS):
        start = i * 200_000 + 10
        spans.append(llm_span(i, at(start), at(start + 50_400.5), ROOT, ids=ids))
        for j in range(len(tools)):
            parent = {"beside": ROOT, "tools node": TOOLS_NODE, "root": ROOT}[parentage]
            begin = start + 50_400.9 + 300 * j
            spans.append(tool_span(i, j, at(begin), at(begin + 120.2), parent, ids=ids))
    return spans


def records_of(spans: list[Span]) -> list[tuple]:
    """The records, without what the timing alone decides (ts, durations)."""
    mapping = map_export(export(*spans))
    assert not mapping.problems
    out = []
    for mapped in mapping.records:
        raw = mapped.raw
        data = {k: v for k, v in raw["data"].items() if k != "durationMs"}
        otel = dict(data.pop("otel", {}))
        data["toolSpanIds"] = sorted(otel.get("toolSpanIds", []))
        out.append((raw["id"], raw["kind"], raw["run_id"], raw.get("agent"),
                    json.dumps(data, sort_keys=True)))  # fmt: skip
    return sorted(out)


def tool_calls(records: list[tuple]) -> list[tuple[int, str, str]]:
    found = []
    for _, kind, _, _, data in records:
        if kind == "turn":
            data = json.loads(data)
            for call in data["toolCalls"]:
                city = call["arguments"]["city"] if isinstance(call["arguments"], dict) else None
                found.append((data.get("iteration"), call["name"], city))
    return sorted(found, key=str)


EXPECTED_CALLS = [
    (0, "get_weather", "Bergen"),
    (0, "get_weather", "Oslo"),
    (1, "search_docs", "wind"),
    (3, "get_weather", "Tromso"),
]


@pytest.mark.parametrize("ids", [True, False], ids=["with ids", "by time"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parentage=st.sampled_from(PARENTAGES),
    rounded=st.booleans(),
    order=st.randoms(use_true_random=False),
)
def test_each_tool_call_lands_once_with_its_call_whatever_the_nesting_order_and_timing(
    ids, parentage, rounded, order
):
    reference = records_of(run_spans("beside", False, ids=ids))
    spans = run_spans(parentage, rounded, ids=ids)
    order.shuffle(spans)
    found = records_of(spans)
    assert found == reference
    assert tool_calls(found) == EXPECTED_CALLS
    calls = [json.loads(d) for _, kind, _, _, d in found if kind == "model_call"]
    assert sorted(c["iteration"] for c in calls) == [0, 1, 2, 3]
    # Every tool span joined the turn of its call: no turn of executions alone (the call that
    # asked for none, and was offered none that the span says, has no turn).
    turns = [json.loads(d) for _, kind, _, _, d in found if kind == "turn"]
    assert sorted(len(t["toolSpanIds"]) for t in turns) == [1, 1, 2]


def test_langchain_names_the_provider_the_answering_model_and_the_graph_as_the_agent():
    found = records_of(run_spans("tools node", True, ids=True))
    calls = [(a, json.loads(d)) for _, kind, _, a, d in found if kind == "model_call"]
    assert {(agent, c["provider"], c["model"]) for agent, c in calls} == {
        ("support", "openai", "gpt-4.1-mini")
    }
    selections = [json.loads(d) for _, kind, _, _, d in found if kind == "model_selection"]
    assert {(s["default_model"], s["selected_model"], s["action"]) for s in selections} == {
        ("gpt-4o-mini", "gpt-4.1-mini", "select")
    }


def test_an_unnamed_graph_and_the_graph_s_nodes_name_no_agent():
    spans = run_spans("tools node", False, ids=True)
    spans[0].name = "LangGraph"
    found = records_of(spans)
    assert {agent for _, _, _, agent, _ in found} == {None}


def attribution(calls: list[td.Call], *tools: td.ToolRun) -> list[tuple]:
    found = td.attribute_tools(calls, tools)
    return [(found[t.span_key].call, found[t.span_key].index) for t in tools]


def a_call(name: str, start: int, end: int, called: list[dict], *, failed=False) -> td.Call:
    return td.Call(("t", name), "run", start, "m", "m", "p", failed, called=called, end_ns=end)


def test_an_id_wins_over_time_and_time_decides_only_without_one():
    first = a_call("a", 0, 10, [{"name": "f", "id": "x"}])
    second = a_call("b", 20, 30, [{"name": "f", "id": "y"}])
    late = td.ToolRun(("t", "t1"), "run", 40, "f", "x")  # after b, yet a's call
    no_id = td.ToolRun(("t", "t2"), "run", 41, "f", None)  # b's, by time
    assert attribution([first, second], late, no_id) == [(("t", "a"), 0), (("t", "b"), 0)]


def test_an_id_no_call_of_the_export_lists_is_not_given_to_a_call_with_other_ids():
    listed = a_call("a", 0, 10, [{"name": "f", "id": "x"}])
    elsewhere = td.ToolRun(("t", "t1"), "run", 20, "f", "z")
    assert attribution([listed], elsewhere) == [(None, None)]


def test_a_call_executed_twice_is_counted_once_and_a_failed_call_asks_for_no_tool():
    answered = a_call("a", 0, 10, [{"name": "f"}])
    failed = a_call("b", 12, 15, [], failed=True)
    runs = [td.ToolRun(("t", f"t{i}"), "run", 20 + i, "f", None) for i in range(2)]
    # The second execution of the one listed call joins the same turn as an added call.
    assert attribution([answered, failed], *runs) == [(("t", "a"), 0), (("t", "a"), None)]


@pytest.mark.parametrize(
    ("error_type", "status", "message", "verdict"),
    [
        (None, None, "503 gpt-4o is overloaded\n\nError: 503 …", ("5xx-transient", 503, True)),
        ("InternalServerError", 503, None, ("InternalServerError", 503, True)),
        ("RateLimitError", None, "Error code: 429", ("RateLimitError", 429, True)),
        ("BadRequestError", 400, "invalid tool", ("BadRequestError", 400, False)),
        (None, None, "Request timed out.", ("5xx-transient", None, True)),
        (None, None, "something broke", ("error", None, False)),
    ],
)
def test_a_failure_gets_one_verdict(error_type, status, message, verdict):
    found = td.error_verdict(error_type, status, message)
    assert (found.error, found.status, found.retryable) == verdict
    kinds = {"5xx-transient": "5xx-transient", "error": "unknown"}
    assert found.kind == kinds.get(found.error, found.kind)


def client_span(span_id: str, trace_id: str, start: int, end: int, **extra) -> Span:
    attributes = {
        "openinference.span.kind": "LLM",
        "llm.system": "openai",
        "llm.model_name": "gpt-4.1-mini",
        "llm.invocation_parameters": json.dumps({"model": "gpt-4o-mini"}),
        "llm.token_count.prompt": 100,
        "llm.token_count.completion": 10,
        "output.value": json.dumps(
            {"id": extra.get("response", "chatcmpl-1"), "model": "gpt-4.1-mini", "choices": []}
        ),  # fmt: skip
    }
    out = make(span_id, "OpenAI Chat Completions", "", start, end, attributes)
    out.trace_id = bytes.fromhex(trace_id)
    return out


def langchain_call(response: str = "chatcmpl-1") -> Span:
    t0 = ns()
    root = make(ROOT, "support", "", t0, t0 + 90_000_000,
                {"openinference.span.kind": "CHAIN",
                 "metadata": '{"ls_integration":"langgraph"}'})  # fmt: skip
    message = {"kwargs": {"id": response, "response_metadata": {"model_name": "gpt-4.1-mini"}}}
    call = llm_span(2, t0 + 1_000_000, t0 + 60_000_000, ROOT, ids=False)
    call.attributes.extend(
        key_values({"output.value": json.dumps({"generations": [[{"message": message}]]})})
    )
    return [root, call]


@pytest.mark.parametrize(
    ("response", "timing", "counted"),
    [
        ("chatcmpl-1", (5, 55), 1),  # the same request: once, in the agent's run
        ("chatcmpl-2", (5, 55), 2),  # another response
        ("chatcmpl-1", (5, 75), 2),  # not within the call's time
    ],
)
def test_a_client_span_in_a_trace_of_its_own_within_a_langchain_call_is_that_call(
    response, timing, counted
):
    t0 = ns()
    other_trace = "6c0f" + TRACE[4:]
    start, end = (t0 + ms * 1_000_000 for ms in timing)
    client = client_span("00000000000000f1", other_trace, start, end, response=response)
    spans = [*langchain_call(), client]
    found = records_of(spans)
    calls = [(run, agent) for _, kind, run, agent, _ in found if kind == "model_call"]
    assert len(calls) == counted
    assert (TRACE, "support") in calls


def test_a_model_call_span_wrapping_another_is_read_once_from_the_inner_one():
    t0 = ns()
    outer = llm_span(0, t0, t0 + 80_000_000, ROOT, ids=False)
    inner = client_span("00000000000000f2", TRACE, t0 + 1_000_000, t0 + 70_000_000)
    inner.parent_span_id = outer.span_id
    root = make(ROOT, "support", "", t0, t0 + 90_000_000, {"openinference.span.kind": "AGENT",
                "agent.name": "support"})  # fmt: skip
    found = records_of([root, outer, inner])
    (call,) = [json.loads(d) for _, kind, _, _, d in found if kind == "model_call"]
    assert call["iteration"] == 0 and call["usage"] == {"input": 100, "output": 10}
    # The outer span's tool calls go with the one call.
    (turn,) = [json.loads(d) for _, kind, _, _, d in found if kind == "turn"]
    assert [c["name"] for c in turn["toolCalls"]] == ["get_weather", "get_weather"]


def genai_call(name: str, start_ms: float, calls: list[tuple[str, str]]) -> Span:
    parts = [{"type": "tool_call", "id": i, "name": n, "arguments": {}} for n, i in calls]
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}]),
    }
    return span(name, attributes, parent=ROOT, start_ms=start_ms, duration_ms=100)


def test_genai_tool_spans_join_the_call_their_gen_ai_tool_call_id_names_not_the_latest():
    # Two calls ask for a tool each; the first call's tool runs late, after the second call
    # answered, in a span of its own part of the tree: time alone would give it to the second.
    root = span("invoke_agent support", {"gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "support"}, span_id_hex=ROOT, duration_ms=2000)  # fmt: skip
    first = genai_call("chat a", 0, [("lookup", "id-a")])
    second = genai_call("chat b", 200, [("fetch", "id-b")])
    tools_node = span("tools", {}, parent=ROOT, span_id_hex=TOOLS_NODE, start_ms=350)
    late = span("execute_tool lookup", {"gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.call.id": "id-a"}, parent=TOOLS_NODE, start_ms=400)  # fmt: skip
    own = span("execute_tool fetch", {"gen_ai.operation.name": "execute_tool",
               "gen_ai.tool.call.id": "id-b"}, parent=ROOT, start_ms=401)  # fmt: skip
    mapping = map_export(export(root, first, second, tools_node, late, own))
    turns = {m.raw["data"]["otel"]["span"]: m.raw["data"] for m in mapping.records
             if m.raw["kind"] == "turn"}  # fmt: skip
    assert set(turns) == {"chat a", "chat b"}
    assert [c["name"] for c in turns["chat a"]["toolCalls"]] == ["lookup"]
    assert turns["chat a"]["otel"]["toolSpanIds"] == [late.span_id.hex()]
    assert [c["name"] for c in turns["chat b"]["toolCalls"]] == ["fetch"]
    assert turns["chat b"]["otel"]["toolSpanIds"] == [own.span_id.hex()]
