"""Agents on the real Vercel AI SDK from npm (`ai` 4, 5 and 6 with their own telemetry, `ai` 7
with `@ai-sdk/otel`; tests/agents_js, one project a version, installed with `npm ci`) driving
`@ai-sdk/openai` against the loopback OpenAI stub and exporting over OTLP/HTTP to the product
under gunicorn. The agents are the docs' recipes, run as written (AI SDK 5 runs AI SDK 6's file,
linked; AI SDK 4 the same agent in its own spelling). What is asserted is what an operator
sees: the export's answer, the read API and the pages."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from records.catchup import catch_up
from tests.support import node_packages
from tests.support.live import answers_recorded, page_words, read_api, wait_until, web_server
from tests.support.openai_stub import Script, openai_stub
from tests.support.services import Persona, need_service

# One worker runs them all: `npm ci` rewrites each project's node_modules, once.
pytestmark = pytest.mark.xdist_group("ai-sdk-agents")
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
AGENTS = ROOT / "tests" / "agents_js"
VERSIONS = [4, 5, 6, 7]


def recipe_script(version: int) -> list[dict]:
    """The recipe's run: three steps, the second moved to gpt-4o and forced to search the docs;
    the first calls a tool it was never offered, but on AI SDK 4, which throws on one."""
    invented = [] if version == 4 else [("book_flight", "{}")]
    return [
        {"tool_calls": [("get_weather", '{"city": "Oslo"}'), ("get_weather", '{"city": "Paris"}'),
                        *invented]},
        {"tool_calls": [("search_docs", '{"query": "baggage"}')]},
        {"content": "Sunny in Oslo and Paris."},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def node_projects() -> dict[int, Path]:
    """Each AI SDK version's project, installed from its committed lock."""
    need_service(bool(shutil.which("node") and shutil.which("npm")), "Node.js and npm")
    projects = {version: AGENTS / f"ai_sdk{version}" for version in VERSIONS}
    for project in projects.values():
        node_packages.install(project)
    return projects


@pytest.fixture
def alice(transactional_db) -> Persona:
    return Persona("acme")


@pytest.fixture(scope="module")
def base(django_db_setup, tmp_path_factory):
    with web_server(tmp_path_factory.mktemp("ai-sdk-web")) as url:
        yield url


def run_agent(project: Path, file: str, base: str, key: str, script: Script, **env: str) -> list:
    """Run one of the project's agents against the stub, exporting to `base`; the answers."""
    with openai_stub(script) as stub, answers_recorded(base) as (endpoint, answers):
        environment = dict(
            os.environ,
            OPENAI_BASE_URL=stub,
            OPENAI_API_KEY="sk-test",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_HEADERS=f"Authorization=Bearer%20{key}",
            **env,
        )
        # AI SDK 5 runs AI SDK 6's files through links: their imports resolve from the link.
        node = ["node", "--preserve-symlinks", "--preserve-symlinks-main", file]
        done = subprocess.run(node, cwd=project, env=environment, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert answers, "the agent exported nothing"
    return answers


@pytest.mark.parametrize("version", VERSIONS)
def test_an_ai_sdk_agent_lands_its_decisions(base, alice, alice_pages, node_projects, version):
    script = Script(recipe_script(version))
    answers = run_agent(node_projects[version], "agent.mjs", base, alice.ingest_key, script)
    # No span rejected: a normal export answers with no partial success.
    assert all(not a.HasField("partial_success") for a in answers), answers
    # prepareStep's second step went to gpt-4o and forced search_docs.
    assert [r["model"] for r in script.requests] == ["gpt-4o-mini", "gpt-4o", "gpt-4o-mini"]
    assert script.requests[1]["tool_choice"]["function"]["name"] == "search_docs"
    catch_up()
    key = alice.read_key
    (run,) = read_api(base, key, "/api/v1/runs")["results"]
    run_id = run["run_id"]
    assert (run["agent"], run["session_id"]) == ("support", "sess-42")

    def records(kind: str) -> list[dict]:
        found = read_api(base, key, "/api/v1/records", run_id=run_id, kind=kind)["results"]
        return sorted(found, key=lambda r: (r["data"].get("iteration", r["data"].get("step")),))

    calls = records("model_call")
    assert [(c["data"]["iteration"], c["data"]["model"], c["data"]["usage"]["input"],
             c["data"]["usage"]["output"]) for c in calls] == [
        (0, "gpt-4o-mini", 101, 11), (1, "gpt-4o", 102, 12), (2, "gpt-4o-mini", 103, 13)
    ]  # fmt: skip
    turns = records("turn")
    first_calls = [name for name, _ in recipe_script(version)[0]["tool_calls"]]
    assert [[c["name"] for c in t["data"]["toolCalls"]] for t in turns] == [
        first_calls, ["search_docs"], []
    ]  # fmt: skip
    assert turns[1]["data"]["toolChoice"] == {"type": "tool", "name": "search_docs"}
    selections = records("model_selection")
    swaps = [(s["data"]["default_model"], s["data"]["selected_model"]) for s in selections
             if s["derived"]["swap"]]  # fmt: skip
    assert swaps == [("gpt-4o-mini", "gpt-4o")]
    assert selections[1]["data"]["request_patch"]["tool_choice"]["name"] == "search_docs"

    def weather_page() -> str | None:
        catch_up()
        page = page_words(alice_pages.get("/tools/get_weather/").content)
        found = re.search(r"Turn calls (\d+)", page)
        return page if found and found.group(1) == "2" else None

    # Two calls of get_weather, each counted once; offered to all three model calls.
    weather = wait_until(weather_page, 30, "the two turn calls of get_weather on its page")
    assert re.search(r"Offered to a model call (\d+)", weather).group(1) == "3"
    tools = alice_pages.get("/tools/").content.decode()
    if "book_flight" in first_calls:
        invented = re.search(r'id="tools-invented".*?</table>', tools, re.S).group(0)
        assert "book_flight" in invented and "get_weather" not in invented
    detail = page_words(alice_pages.get(f"/runs/{run_id}/").content)
    assert "search_docs" in detail and "gpt-4o" in detail
    sessions = page_words(alice_pages.get("/sessions/sess-42/").content)
    assert run_id in sessions


@pytest.mark.parametrize("version", [5, 6, 7])
def test_a_streaming_ai_sdk_agent_lands_each_step_and_tool_call_once(
    base, alice, node_projects, version
):
    # streamText runs a tool while the step's stream is still open: the tool span starts before
    # the model call's span ends.
    script = Script([{"tool_calls": [("get_weather", '{"city": "Oslo"}')]}, {"content": "Sunny."}])
    answers = run_agent(node_projects[version], "stream.mjs", base, alice.ingest_key, script)
    assert all(not a.HasField("partial_success") for a in answers), answers
    assert all(r["stream"] for r in script.requests)
    catch_up()
    key = alice.read_key
    (run,) = read_api(base, key, "/api/v1/runs")["results"]
    assert run["agent"] == "support"

    def records(kind: str) -> list[dict]:
        found = read_api(base, key, "/api/v1/records", run_id=run["run_id"], kind=kind)["results"]
        return sorted(found, key=lambda r: r["data"]["iteration"])

    calls = [(c["data"]["iteration"], c["data"]["usage"]["input"]) for c in records("model_call")]
    assert calls == [(0, 101), (1, 102)]
    turns = [[c["name"] for c in t["data"]["toolCalls"]] for t in records("turn")]
    assert turns == [["get_weather"], []]


@pytest.mark.parametrize("version", [5, 6, 7])
def test_an_ai_sdk_agent_falling_back_after_a_503_lands_the_fallback(
    base, alice, alice_pages, node_projects, version
):
    run_id = f"ai-sdk-{version}-fallback"
    script = Script([{"content": "Sunny."}], down=("gpt-4o-mini",))
    answers = run_agent(node_projects[version], "fallback.mjs", base, alice.ingest_key, script,
                        OTEL_RESOURCE_ATTRIBUTES=f"decisionboard.run_id={run_id}")  # fmt: skip
    assert all(not a.HasField("partial_success") for a in answers), answers
    assert [r["model"] for r in script.requests] == ["gpt-4o-mini", "gpt-4.1-mini"]
    catch_up()
    key = alice.read_key
    run = read_api(base, key, f"/api/v1/runs/{run_id}")
    assert run["agent"] == "support"

    def records(kind: str) -> list[dict]:
        return read_api(base, key, "/api/v1/records", run_id=run_id, kind=kind)["results"]

    (error,) = records("provider.error")
    assert error["data"]["model"] == "gpt-4o-mini"
    (call,) = records("model_call")
    assert (call["data"]["model"], call["data"]["iteration"]) == ("gpt-4.1-mini", 0)
    (fallback,) = records("reliability")
    assert (fallback["data"]["primary"], fallback["data"]["fallback"]) == (
        "gpt-4o-mini",
        "gpt-4.1-mini",
    )
    chain = page_words(alice_pages.get(f"/fallbacks/runs/{run_id}/").content)
    assert "gpt-4o-mini" in chain and "gpt-4.1-mini" in chain


def test_the_docs_recipes_are_the_files_the_tests_run():
    docs = (ROOT / "docs" / "connect.md").read_text()
    blocks = dict(re.findall(r"<!-- (tests/agents_js/\S+) -->\n```js\n(.*?)```", docs, re.S))
    assert sorted(blocks) == [
        "tests/agents_js/ai_sdk6/agent.mjs",
        "tests/agents_js/ai_sdk7/agent.mjs",
    ]
    for path, block in blocks.items():
        assert block == (ROOT / path).read_text(), f"docs/connect.md's copy of {path} differs"
