"""The real instrumentations from PyPI (OpenInference, OpenLLMetry, the official OpenTelemetry
GenAI one, the OpenAI Agents SDK with OpenInference) driving the real `openai` client against an
OpenAI-compatible server on the loopback, exporting over OTLP/HTTP to the product under
gunicorn. What is asserted is what an operator sees: pages and the read API."""

from __future__ import annotations

import asyncio
import re
import types

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from records.catchup import catch_up
from tests.support.live import page_words, read_api, wait_until, web_server
from tests.support.openai_stub import Script, openai_stub

openai = pytest.importorskip("openai", reason="the otel-test extra is not installed")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "search_docs",
                                      "parameters": {"type": "object", "properties": {}}}},
]  # fmt: skip
# The service's version, which every record of its runs takes as its release.
RELEASE = "support-2.4.0"
MESSAGES = [{"role": "user", "content": "What is the weather in Oslo? Then book me a flight."}]
# One run: tools offered and two called (one never offered), a response from a model of
# another family than requested, a 503, then a call to another model.
SCRIPT = [
    {"model": "gpt-4o-mini-2024-07-18",
     "tool_calls": [("get_weather", '{"city": "Oslo"}'), ("book_flight", "{}")]},
    {"model": "llama-3.3-70b"},
    {"status": 503, "content": "overloaded"},
    {"model": "claude-sonnet-4-5", "content": "Sunny in Oslo."},
]  # fmt: skip


@pytest.fixture(autouse=True)
def client_as_it_was():
    """Each test leaves the openai client as it found it. OpenLLMetry's uninstrument() leaves
    its wrapper on the async chat completions; the wrapper keeps making spans with the provider
    of the test that set it up (shut down, so they are never exported) and makes them current,
    so the next test's spans hang from a parent no export holds: a generation span no longer
    contains the ChatCompletion span it wraps. The client's methods are restored after each
    test, and a test that finds one wrapped fails rather than measuring a mix. The client
    imports its resource modules on first use, so they are imported here before the methods
    are saved: a test that runs first would otherwise save nothing and restore nothing."""
    saved = _client_methods()
    yield
    for (cls, name), method in saved.items():
        if cls.__dict__.get(name) is not method:
            setattr(cls, name, method)


def _client_methods() -> dict:
    import importlib
    import inspect
    import pkgutil

    import openai.resources

    found = {}
    for info in pkgutil.walk_packages(openai.resources.__path__, "openai.resources."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == info.name:
                for name, value in vars(cls).items():
                    if callable(value) and not name.startswith("__"):
                        found[(cls, name)] = value
    return found


@pytest.fixture(scope="module")
def base(django_db_setup, tmp_path_factory):
    with web_server(tmp_path_factory.mktemp("otel-web")) as url:
        yield url


@pytest.fixture
def alice(transactional_db):
    from tests.support.services import Persona

    return Persona("acme")


@pytest.fixture
def latest_genai_conventions(monkeypatch):
    """The official GenAI instrumentation with messages on the span (gen_ai.output.messages).

    OpenTelemetry reads OTEL_SEMCONV_STABILITY_OPT_IN once per process, when the first
    instrumentor is instrumented, and keeps the answer; after another instrumentation's test it
    would ignore the variable and send the older conventions (no tool calls on the span). The
    cached answer is reset here so the variable is read again, and restored afterwards.
    """
    from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability

    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    stability = _OpenTelemetrySemanticConventionStability
    monkeypatch.setattr(stability, "_initialized", False)
    monkeypatch.setattr(stability, "_OTEL_SEMCONV_STABILITY_SIGNAL_MAPPING", {})


def provider_to(base: str, key: str) -> TracerProvider:
    """What a team configures: an OTLP/HTTP exporter at Decisionboard behind a batch processor,
    and the service's version on its resource (each record's release)."""
    provider = TracerProvider(resource=Resource.create({"service.version": RELEASE}))
    exporter = OTLPSpanExporter(
        endpoint=f"{base}/v1/traces", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def drive(client) -> None:
    """The agent's four model calls, in order, through the real client."""
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    client.chat.completions.create(model="claude-sonnet-4-5", messages=MESSAGES)


def assert_the_operator_sees_the_run(base, alice, pages, run_id: str, *, offered: bool) -> None:
    catch_up()
    key = alice.read_key
    run = read_api(base, key, f"/api/v1/runs/{run_id}")
    assert (run["agent"], run["session_id"]) == ("support", "sess-42")
    calls = read_api(base, key, "/api/v1/records", run_id=run_id, kind="model_call")["results"]
    # The call to claude-sonnet-4-5 answers the step the 503 left: the same iteration.
    assert sorted(c["data"]["iteration"] for c in calls) == [0, 1, 2]
    assert {c["release"] for c in calls} == {RELEASE}
    (error,) = read_api(base, key, "/api/v1/records", run_id=run_id, kind="provider.error")[
        "results"
    ]
    assert (error["data"]["model"], error["data"]["status"]) == ("gpt-4o-mini", 503)
    assert error["data"]["otel"]["iteration"] == 2
    selections = read_api(base, key, "/api/v1/records", run_id=run_id, kind="model_selection")
    swapped = {
        (s["data"]["default_model"], s["data"]["selected_model"])
        for s in selections["results"]
        if s["derived"]["swap"]
    }
    # The dated snapshot of the first call is no swap; the other family is.
    assert swapped == {("gpt-4o-mini", "llama-3.3-70b")}

    fallbacks = page_words(pages.get("/fallbacks/").content)
    assert "gpt-4o-mini → claude-sonnet-4-5" in fallbacks or "gpt-4o-mini" in fallbacks
    chain = page_words(pages.get(f"/fallbacks/runs/{run_id}/").content)
    assert "claude-sonnet-4-5" in chain and "InternalServerError" in chain

    def weather_page() -> str | None:
        catch_up()  # a pass may leave the newest records to the next one: run until folded
        page = page_words(pages.get("/tools/get_weather/").content)
        found = re.search(r"Turn calls (\d+)", page)
        return page if found and found.group(1) == "1" else None

    weather = wait_until(weather_page, 30, "the turn call of get_weather on its page")
    tools = pages.get("/tools/")
    assert tools.status_code == 200
    page = page_words(tools.content)
    listed = re.search(r'id="tools-table".*?</table>', tools.content.decode(), re.S).group(0)
    invented = re.search(r'id="tools-invented".*?</table>', tools.content.decode(), re.S).group(0)
    # Called though never offered; judged invented only when the trace says what was offered.
    assert ("book_flight" in invented) is offered
    # Listed either way; when the trace does not say what was offered, the list says so.
    weather_row = re.search(r"<tr><td><a [^>]*>get_weather</a>.*?</tr>", listed).group(0)
    assert ("not reported" in weather_row.split("</td>")[1]) is not offered
    if offered:
        assert re.search(r"Offered to a model call (\d+)", weather).group(1) == "2"
        assert re.search(r"Called by that call (\d+)", weather).group(1) == "1"
        assert "not reported by plain OpenTelemetry traces" in page
    sessions = page_words(pages.get("/sessions/sess-42/").content)
    assert run_id in sessions


def test_an_openinference_instrumented_client_lands_its_decisions(base, alice, alice_pages):
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai import OpenAIInstrumentor

    provider = provider_to(base, alice.ingest_key)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with openai_stub(Script(SCRIPT)) as url, using_session("sess-42"):
            client = openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0)
            tracer = provider.get_tracer("support-agent")
            attributes = {"openinference.span.kind": "AGENT", "agent.name": "support"}
            with tracer.start_as_current_span("support", attributes=attributes) as agent:
                drive(client)
            assert provider.force_flush(30_000)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    run_id = f"{agent.get_span_context().trace_id:032x}"
    assert_the_operator_sees_the_run(base, alice, alice_pages, run_id, offered=True)


def run_under_an_agent_span(base: str, key: str, instrumentor, script=None, agent=None) -> str:
    """Drive the client, instrumented by `instrumentor`, inside an invoke_agent span that names
    the agent and the session, export it all, and return the run id (the trace's id).
    `agent` drives the client (`drive` by default) against the stub serving `script`."""
    provider = provider_to(base, key)
    instrumentor.instrument(tracer_provider=provider)
    try:
        with openai_stub(script or Script(SCRIPT)) as url:
            client = openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0)
            tracer = provider.get_tracer("support-agent")
            attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                          "gen_ai.conversation.id": "sess-42"}  # fmt: skip
            with tracer.start_as_current_span("invoke_agent support", attributes=attributes) as a:
                (agent or drive)(client)
            assert provider.force_flush(30_000)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    return f"{a.get_span_context().trace_id:032x}"


def test_the_official_genai_instrumentation_lands_its_decisions(
    base, alice, alice_pages, latest_genai_conventions
):
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    run_id = run_under_an_agent_span(base, alice.ingest_key, OpenAIInstrumentor())
    # This instrumentation does not record the tools a request offered: called, not offered.
    assert_the_operator_sees_the_run(base, alice, alice_pages, run_id, offered=False)


def test_an_openllmetry_instrumented_client_lands_its_decisions(base, alice, alice_pages):
    # OpenLLMetry's instrumentation (traceloop): gen_ai.tool.definitions for the offered tools,
    # gen_ai.output.messages for the called ones; no session of its own, so the agent span
    # names it, as a team's own code would.
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    run_id = run_under_an_agent_span(base, alice.ingest_key, OpenAIInstrumentor())
    assert_the_operator_sees_the_run(base, alice, alice_pages, run_id, offered=True)
    # Each call's tool decision, in its iteration: offered both tools, called one of them and
    # a name never offered (the invented one on the tools page), then called nothing.
    turns = read_api(base, alice.read_key, "/api/v1/records", run_id=run_id, kind="turn")["results"]
    decided = {t["data"]["iteration"]: t["data"] for t in turns if "offered" in t["data"]}
    assert sorted(decided) == [0, 1]
    assert decided[0]["offered"] == ["get_weather", "search_docs"]
    assert [c["name"] for c in decided[0]["toolCalls"]] == ["get_weather", "book_flight"]
    assert decided[1]["toolCalls"] == []


def falls_back_when_its_model_is_down(client) -> None:
    """An agent of two steps that moves to its fallback model when its own answers 503, and
    stays there: the calls fail on gpt-4o-mini, answer on claude-sonnet-4-5, answer again."""
    models = ["gpt-4o-mini", "claude-sonnet-4-5"]
    for _step in range(2):
        while True:
            try:
                client.chat.completions.create(model=models[0], messages=MESSAGES)
                break
            except openai.InternalServerError:
                models.pop(0)


def instrumentor_of(name: str, request):
    if name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
    elif name == "official genai":
        request.getfixturevalue("latest_genai_conventions")
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    else:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    return OpenAIInstrumentor()


@pytest.mark.parametrize("instrumentation", ["openinference", "official genai", "openllmetry"])
def test_a_fallback_after_a_503_answers_the_failed_iteration_and_the_next_call_is_the_next(
    base, alice, instrumentation, request
):
    script = Script([{"content": "Sunny."}, {"content": "Booked."}], down=("gpt-4o-mini",))
    instrumentor = instrumentor_of(instrumentation, request)
    run_id = run_under_an_agent_span(
        base, alice.ingest_key, instrumentor, script, falls_back_when_its_model_is_down
    )
    assert [r["model"] for r in script.requests] == ["gpt-4o-mini"] + ["claude-sonnet-4-5"] * 2
    catch_up()
    key = alice.read_key

    def records(kind: str) -> list[dict]:
        found = read_api(base, key, "/api/v1/records", run_id=run_id, kind=kind)["results"]
        return sorted(found, key=lambda r: r["ts"])

    calls = records("model_call")
    assert [(c["data"]["model"], c["data"]["iteration"]) for c in calls] == [
        ("claude-sonnet-4-5", 0),
        ("claude-sonnet-4-5", 1),
    ]
    (error,) = records("provider.error")
    assert (error["data"]["model"], error["data"]["status"]) == ("gpt-4o-mini", 503)
    (fallback,) = records("reliability")
    assert (fallback["data"]["primary"], fallback["data"]["fallback"]) == (
        "gpt-4o-mini",
        "claude-sonnet-4-5",
    )
    # The failure, the fallback that answered it and the first model call: one iteration.
    assert error["data"]["otel"]["iteration"] == fallback["data"]["otel"]["iteration"] == 0


def test_an_openai_agents_sdk_run_with_a_handoff_lands_as_a_run_and_a_sub_run(
    base, alice, alice_pages
):
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    @function_tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return "sunny"

    provider = provider_to(base, alice.ingest_key)
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    script = Script([
        {"tool_calls": [("get_weather", '{"city": "Oslo"}')]},
        {"tool_calls": [("transfer_to_booker", "{}")]},
        {"status": 503, "content": "overloaded"},
    ])  # fmt: skip
    try:
        with openai_stub(script) as url:
            client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
            booker = Agent(
                name="booker",
                instructions="Book flights.",
                model=OpenAIChatCompletionsModel("gpt-4o", client),
            )
            triage = Agent(name="triage", instructions="Help.", tools=[get_weather],
                           handoffs=[booker],
                           model=OpenAIChatCompletionsModel("gpt-4o-mini", client))  # fmt: skip
            with pytest.raises(openai.InternalServerError):
                asyncio.run(Runner.run(triage, "Weather in Oslo, then book.",
                                       run_config=RunConfig(tracing_disabled=False)))  # fmt: skip
            assert provider.force_flush(30_000)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    catch_up()
    key = alice.read_key
    runs = read_api(base, key, "/api/v1/runs")["results"]
    (top,) = [r for r in runs if r["parent_run_id"] is None]
    (sub,) = [r for r in runs if r["parent_run_id"] == top["run_id"]]
    assert (top["agent"], sub["agent"]) == ("triage", "booker")
    calls = read_api(base, key, "/api/v1/records", run_id=top["run_id"], kind="model_call")
    assert sorted(c["data"]["iteration"] for c in calls["results"]) == [0, 1]
    turns = read_api(base, key, "/api/v1/records", run_id=top["run_id"], kind="turn")["results"]
    called = sorted(c["name"] for t in turns for c in t["data"]["toolCalls"])
    assert called == ["get_weather", "transfer_to_booker"]
    (error,) = read_api(base, key, "/api/v1/records", run_id=sub["run_id"], kind="provider.error")[
        "results"
    ]
    assert error["agent"] == "booker" and error["data"]["model"] == "gpt-4o"
    detail = page_words(alice_pages.get(f"/runs/{top['run_id']}/").content)
    assert "transfer_to_booker" in detail
    # The SDK's model calls do not say which tools they were offered: the tool is listed,
    # its offers "not reported" rather than 0.
    listed = re.search(r'id="tools-table".*?</table>', alice_pages.get("/tools/").content.decode(),
                       re.S).group(0)  # fmt: skip
    weather_row = re.search(r"<tr><td><a [^>]*>get_weather</a>.*?</tr>", listed).group(0)
    assert "not reported" in weather_row.split("</td>")[1]


def test_the_agents_sdk_beside_the_openai_client_instrumentation_counts_each_request_once(
    base, alice
):
    """The SDK's generation span wraps the ChatCompletion span of OpenInference's openai
    instrumentation: one request, two model-call spans. Each request is one model call, its
    iteration in call order, and each tool call is counted once."""
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    @function_tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return "sunny"

    create = vars(openai.resources.chat.completions.AsyncCompletions)["create"]
    # type(), not isinstance(): wrapt's wrapper answers isinstance as the function it wraps.
    assert type(create) is types.FunctionType, "an earlier test left the client instrumented"
    provider = provider_to(base, alice.ingest_key)
    instrumentors = [OpenAIAgentsInstrumentor(), OpenAIInstrumentor()]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider)
    script = Script([
        {"tool_calls": [("get_weather", '{"city": "Oslo"}')]},
        {"tool_calls": [("get_weather", '{"city": "Bergen"}')]},
        {"tool_calls": [("get_weather", '{"city": "Tromso"}')]},
        {"content": "Sunny everywhere."},
    ])  # fmt: skip
    try:
        with openai_stub(script) as url:
            client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
            agent = Agent(name="weather", instructions="Help.", tools=[get_weather],
                          model=OpenAIChatCompletionsModel("gpt-4o-mini", client))  # fmt: skip
            asyncio.run(Runner.run(agent, "Weather in three cities?",
                                   run_config=RunConfig(tracing_disabled=False)))  # fmt: skip
            assert provider.force_flush(30_000)
    finally:
        for instrumentor in reversed(instrumentors):
            instrumentor.uninstrument()
        provider.shutdown()
    assert len(script.requests) == 4
    catch_up()
    key = alice.read_key
    (run,) = [r for r in read_api(base, key, "/api/v1/runs")["results"] if r["agent"] == "weather"]
    calls = read_api(base, key, "/api/v1/records", run_id=run["run_id"], kind="model_call")
    in_time_order = sorted(calls["results"], key=lambda c: c["ts"])
    assert [c["data"]["iteration"] for c in in_time_order] == [0, 1, 2, 3]
    turns = read_api(base, key, "/api/v1/records", run_id=run["run_id"], kind="turn")["results"]
    cities = sorted(c["arguments"]["city"] for t in turns for c in t["data"]["toolCalls"])
    assert cities == ["Bergen", "Oslo", "Tromso"]
