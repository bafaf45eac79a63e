"""The real JavaScript packages from npm: a LangGraph ReAct agent on LangChain.js and an OpenAI
Agents JS run with a handoff, each traced by OpenInference and exported over OTLP/HTTP (protobuf)
by the OpenTelemetry JS SDK, against an OpenAI-compatible server on the loopback, into the
product under gunicorn. Each run is the recipe docs/connect.md shows, run as it is written.

The node project is tests/agents_js/langchain; `npm ci` installs it from its committed lock.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import node_packages
from tests.support.live import (
    STARTUP_SECONDS,
    answers_2xx,
    answers_recorded,
    page_words,
    read_api,
    wait_until,
)
from tests.support.openai_stub import Script, openai_stub
from tests.support.services import database_url, need_service
from workers import processes

ROOT = Path(__file__).parents[2]
PROJECT = ROOT / "tests" / "agents_js" / "langchain"
DOCS = ROOT / "docs" / "connect.md"
RECIPES = ("langgraph_agent.mjs", "openai_agents.mjs")
# One xdist worker runs them all: `npm ci` installs the one node_modules once, not twice at once.
pytestmark = pytest.mark.xdist_group("agents_js")


@pytest.fixture(scope="module")
def node_project() -> Path:
    """The node project installed from its lock (once; `npm ci` when node_modules is absent)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are required (Node 20 or later)")
    return node_packages.install(PROJECT)


@pytest.fixture(scope="module")
def base(django_db_setup, tmp_path_factory):
    """gunicorn and a Celery worker (with beat) on Redis, each its own process: what the
    pages show was folded by the worker."""
    redis_url = os.environ.get("REDIS_URL")
    need_service(bool(redis_url), "Redis (set REDIS_URL)")
    tmp = tmp_path_factory.mktemp("agents-js")
    port = processes.free_port()
    env = dict(
        os.environ, DATABASE_URL=database_url(), REDIS_URL=redis_url, DECISIONBOARD_VAR_DIR=str(tmp)
    )
    default, _exports = processes.worker_commands(tmp / "beat-schedule")
    with (
        processes.running(processes.web_command(f"127.0.0.1:{port}", 1), env=env,
                          log=tmp / "web.log"),
        processes.running(default, env=env, log=tmp / "worker.log"),
    ):  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers_2xx(f"{url}/accounts/login/"), STARTUP_SECONDS, "gunicorn")
        yield url


@pytest.fixture
def alice(transactional_db):
    from tests.support.services import Persona

    return Persona("acme")


def run_recipe(project: Path, recipe: str, base: str, key: str, script: Script) -> None:
    """The recipe as docs/connect.md gives it, configured only through the environment."""
    with openai_stub(script) as url, answers_recorded(base) as (hop, answers):
        env = dict(
            os.environ,
            OPENAI_BASE_URL=url,
            OPENAI_API_KEY="sk-test",
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{hop}/v1/traces",
            OTEL_EXPORTER_OTLP_HEADERS=f"Authorization=Bearer {key}",
        )
        done = subprocess.run(
            ["node", recipe], cwd=project, env=env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr[-4000:]
    assert answers, "nothing was exported"
    # Every span was mapped or counted as seen: no answer names a rejected span.
    assert all(not a.HasField("partial_success") for a in answers), [
        a.partial_success.error_message for a in answers
    ]


def folded_runs(base: str, key: str, count: int) -> list[dict]:
    """The project's runs once the worker has folded all `count` of them with their agents."""

    def folded() -> list[dict] | None:
        runs = read_api(base, key, "/api/v1/runs")["results"]
        return runs if len(runs) >= count and all("agent" in r for r in runs) else None

    return wait_until(folded, 60, f"{count} runs folded by the worker")


def records(base: str, key: str, run_id: str, kind: str) -> list[dict]:
    found = read_api(base, key, "/api/v1/records", run_id=run_id, kind=kind)["results"]
    return sorted(found, key=lambda r: r["ts"])


def assert_calls_complete(calls: list[dict]) -> None:
    for call in calls:
        data = call["data"]
        assert data["model"] != "unknown" and data["provider"] == "openai", data
        assert data["usage"]["input"] > 0 and data["usage"]["output"] > 0, data
        assert "usageReported" not in data["otel"]


def test_a_langgraph_react_agent_lands_each_tool_call_once_with_its_swap_and_fallback(
    node_project, base, alice, alice_pages
):
    script = Script(
        [
            {"model": "gpt-4.1-mini",
             "tool_calls": [("get_weather", '{"city": "Oslo"}'),
                            ("get_weather", '{"city": "Bergen"}')]},
            {"model": "gpt-4.1-mini", "tool_calls": [("search_docs", '{"query": "wind"}')]},
            {"model": "gpt-4.1-mini", "content": "Sunny in both."},
            {"content": "The forecast."},
        ],
        down=("gpt-4o",),
    )  # fmt: skip
    run_recipe(node_project, "langgraph_agent.mjs", base, alice.ingest_key, script)
    assert [r["model"] for r in script.requests] == ["gpt-4o-mini"] * 3 + ["gpt-4o", "gpt-4.1"]
    key = alice.read_key
    runs = folded_runs(base, key, 2)
    # The agent's run and the fallback's: the openai client's spans, each in a trace of its
    # own, are the same requests as LangChain's and open no run.
    assert len(runs) == 2, runs
    (agent_run,) = [r for r in runs if r["agent"] == "support"]
    run_id = agent_run["run_id"]
    calls = records(base, key, run_id, "model_call")
    assert [c["data"]["iteration"] for c in calls] == [0, 1, 2]
    assert_calls_complete(calls)
    assert {c["agent"] for c in calls} == {"support"}
    # The model that answered is not the one the agent was configured with: a swap.
    selections = records(base, key, run_id, "model_selection")
    assert [(s["data"]["default_model"], s["data"]["selected_model"]) for s in selections] == [
        ("gpt-4o-mini", "gpt-4.1-mini")
    ] * 3
    assert all(s["derived"]["swap"] for s in selections)
    # Three tool calls, each once, though LangGraph runs them under its tools node.
    turns = records(base, key, run_id, "turn")
    called = [(c["name"], c.get("id")) for t in turns for c in t["data"]["toolCalls"]]
    assert sorted(called) == [
        ("get_weather", "call_1_0"),
        ("get_weather", "call_1_1"),
        ("search_docs", "call_2_0"),
    ]
    assert sorted(len(t["data"]["otel"].get("toolSpanIds", [])) for t in turns) == [0, 1, 2]

    # The model behind a fallback: the 503, one verdict in both records, the call that answered.
    (error,) = [e for r in runs for e in records(base, key, r["run_id"], "provider.error")]
    fallback_run = error["run_id"]
    assert (error["data"]["model"], error["data"]["status"]) == ("gpt-4o", 503)
    assert error["data"]["retryable"] is True and error["data"]["provider"] == "openai"
    (fallback,) = records(base, key, fallback_run, "reliability")
    assert (fallback["data"]["primary"], fallback["data"]["fallback"]) == ("gpt-4o", "gpt-4.1")
    assert fallback["data"]["errorKind"] == error["data"]["error"] == "5xx-transient"
    (answered,) = records(base, key, fallback_run, "model_call")
    assert answered["data"]["model"] == "gpt-4.1"
    assert error["data"]["otel"]["iteration"] == answered["data"]["iteration"] == 0

    def weather_page() -> str | None:
        page = page_words(alice_pages.get("/tools/get_weather/").content)
        found = re.search(r"Turn calls (\d+)", page)
        return page if found and found.group(1) == "2" else None

    wait_until(weather_page, 60, "both get_weather calls on the tool's page")
    detail = page_words(alice_pages.get(f"/runs/{run_id}/").content)
    assert "support" in detail and "search_docs" in detail
    chain = page_words(alice_pages.get(f"/fallbacks/runs/{fallback_run}/").content)
    assert "gpt-4.1" in chain and "gpt-4o" in chain


def test_an_openai_agents_js_run_names_its_agents_and_its_handoff_opens_a_sub_run(
    node_project, base, alice, alice_pages
):
    script = Script(
        [
            {"tool_calls": [("get_weather", '{"city": "Oslo"}')]},
            {"tool_calls": [("transfer_to_booker", "{}")]},
            {"content": "Booked."},
        ]
    )
    run_recipe(node_project, "openai_agents.mjs", base, alice.ingest_key, script)
    assert [r["model"] for r in script.requests] == ["gpt-4o-mini", "gpt-4o-mini", "gpt-4o"]
    key = alice.read_key
    runs = folded_runs(base, key, 2)
    (top,) = [r for r in runs if r["parent_run_id"] is None]
    (sub,) = [r for r in runs if r["parent_run_id"] == top["run_id"]]
    assert (top["agent"], sub["agent"]) == ("triage", "booker")
    calls = records(base, key, top["run_id"], "model_call")
    assert [c["data"]["iteration"] for c in calls] == [0, 1]
    assert_calls_complete(calls)
    (booker_call,) = records(base, key, sub["run_id"], "model_call")
    assert booker_call["data"]["model"] == "gpt-4o" and booker_call["agent"] == "booker"
    assert_calls_complete([booker_call])
    turns = records(base, key, top["run_id"], "turn")
    called = sorted(c["name"] for t in turns for c in t["data"]["toolCalls"])
    # The handoff's own span (handoff_to_booker) is not a second tool call.
    assert called == ["get_weather", "transfer_to_booker"]
    detail = page_words(alice_pages.get(f"/runs/{top['run_id']}/").content)
    assert "triage" in detail and "get_weather" in detail


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipe_in_the_docs_is_the_file_the_test_runs(recipe):
    docs = DOCS.read_text()
    blocks = re.findall(r"<!-- recipe: (\S+) -->\n```js\n(.*?)```\n", docs, re.S)
    shown = dict(blocks)
    assert f"tests/agents_js/langchain/{recipe}" in shown
    assert shown[f"tests/agents_js/langchain/{recipe}"] == (PROJECT / recipe).read_text()
