"""The TypeScript client (client-js/) against the product under gunicorn.

`npm ci` installs its dev dependencies from client-js/package-lock.json (tests/support/
node_packages.py: once for a lock); the module builds it and its examples once (what `npm test`
does before its own tests), runs its own tests (failing servers made on the loopback; the
frameworks' types are checked by the examples' build), and `npm run test:live` sends records to
the product started here. Each live test writes what it sent to a file; the tests below read every
record back through the read API and compare.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
import requests
from decisionboard_client import call_usage

from records.models import ApiKey, Project
from tests.support import node_packages
from tests.support.live import web_server
from tests.support.services import need_service

# The records are written by the server the module starts, under keys made once for the module;
# each test only reads. django_db has the test database set up (and each test's own writes,
# none, rolled back); the group keeps the module on one xdist worker, so that one `npm ci` and
# one run of the client's live tests serve every test here.
pytestmark = [pytest.mark.django_db, pytest.mark.xdist_group("client_js")]

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "client-js"
EXAMPLES = ROOT / "examples" / "records.jsonl"
ENVELOPE = ("id", "kind", "run_id", "agent", "session_id", "parent_run_id", "release")


def npm(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["npm", *args],
        cwd=PACKAGE,
        env=env or os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"npm {' '.join(args)}:\n{output}"
    return done


@pytest.fixture(scope="module")
def built() -> Path:
    """client-js with its dev dependencies, installed by `npm ci` from the lock, built, and its
    examples and type tests compiled against the build (tsc fails on a type error)."""
    need_service(shutil.which("npm") is not None and shutil.which("node") is not None, "node/npm")
    node_packages.install(PACKAGE)
    npm("run", "build")
    npm("run", "build:examples")
    return PACKAGE


@pytest.fixture(scope="module")
def live(built, django_db_setup, django_db_blocker, tmp_path_factory):
    """The product under gunicorn, the client's live tests run against it: (base URL, read
    headers, {test name: the records it sent})."""
    with django_db_blocker.unblock():
        project = Project.objects.create(name="client-js")
        ingest = ApiKey.issue(project, ApiKey.Scope.INGEST)[1]
        read = ApiKey.issue(project, ApiKey.Scope.READ)[1]
        limited, limited_raw = ApiKey.issue(project, ApiKey.Scope.INGEST)
        limited.rate_limit = "1/s"
        limited.save()
    sent = tmp_path_factory.mktemp("client-js-sent")
    try:
        with web_server(tmp_path_factory.mktemp("client-js-web")) as base:
            env = dict(
                os.environ,
                DECISIONBOARD_URL=base,
                DECISIONBOARD_KEY=ingest,
                DECISIONBOARD_LIMITED_KEY=limited_raw,
                DECISIONBOARD_EXAMPLES=str(EXAMPLES),
                DECISIONBOARD_SENT=str(sent),
            )
            npm("run", "test:live", env=env)
            recipe = subprocess.run(
                ["node", "build-examples/examples/quickstart.js"],
                cwd=PACKAGE,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert recipe.returncode == 0, recipe.stderr
            manifests = {p.stem: json.loads(p.read_text()) for p in sent.glob("*.json")}
            manifests["quickstart"] = json.loads(recipe.stdout.strip().splitlines()[-1])
            yield base, {"Authorization": f"Bearer {read}"}, manifests
    finally:
        with django_db_blocker.unblock():
            project.delete()


def stored(live, **filters) -> dict[str, dict]:
    """The project's records through the read API, by id."""
    base, headers, _ = live
    url, params, records = f"{base}/api/v1/records", {"limit": 1000, **filters}, {}
    while url:
        page = requests.get(url, params=params, headers=headers, timeout=30)
        assert page.status_code == 200, page.text
        records.update((r["id"], r) for r in page.json()["results"])
        url, params = page.json()["next"], None
    return records


def assert_stored_as_sent(live, name: str) -> dict[str, dict]:
    expected = live[2][name]
    records = stored(live)
    for record in expected:
        got = records.get(record["id"])
        assert got is not None, f"{record['id']} ({name}) was not stored"
        for field in ENVELOPE:
            assert got.get(field) == record.get(field), (record["id"], field)
        assert got["data"] == record["data"], record["id"]
        if "ts" in record:
            assert datetime.fromisoformat(got["ts"]) == datetime.fromisoformat(record["ts"])
    return records


def test_it_passes_its_own_tests_against_failing_servers_and_the_frameworks_types(built):
    out = npm("run", "test:unit").stdout
    assert re.search(r"^# fail 0$", out, re.M) and re.search(r"^# pass [1-9]", out, re.M), out


def test_it_stores_every_kind_as_its_framework_gave_it(live):
    records = assert_stored_as_sent(live, "every-kind")
    examples = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    assert {records[f"js-{e['id']}"]["kind"] for e in examples} == {e["kind"] for e in examples}
    defaults = next(r for r in live[2]["every-kind"] if r["run_id"] == "js-defaults")
    assert records[defaults["id"]]["ts"]  # stamped by the client


def test_it_counts_each_providers_tokens_once_as_the_python_client_does(live):
    records = stored(live, run_id="js-usage")
    for sent in live[2]["usage"]:
        assert records[sent["id"]]["data"]["usage"] == call_usage(sent["provider_response"])


def test_the_servers_429_is_waited_out_and_nothing_is_lost(live):
    assert_stored_as_sent(live, "limited")


def test_shutdown_and_the_end_of_the_process_send_what_is_queued(live):
    assert len(assert_stored_as_sent(live, "shutdown")) >= 300
    assert len(live[2]["exit"]) == 50
    assert_stored_as_sent(live, "exit")


def test_decisionboard_span_events_arrive_through_the_span_processor(live):
    assert_stored_as_sent(live, "otel")


def test_the_documented_recipe_runs_and_its_records_are_stored(live):
    stats = live[2]["quickstart"]
    assert (stats["sent"] + stats["duplicates"], stats["rejected"], stats["lost"]) == (5, 0, 0)
    records = stored(live, run_id="run-ts-1")
    assert sorted(r["kind"] for r in records.values()) == [
        "classifier.verdict",
        "model_call",
        "reliability",
        "tool_choice.pick",
        "turn",
    ]
    call = next(r for r in records.values() if r["kind"] == "model_call")
    assert call["data"]["usage"] == {"input": 86, "output": 300, "cacheRead": 1920}
    assert {r["agent"] for r in records.values()} == {"support-bot"}
    assert {r["release"] for r in records.values()} == {"2026.12.1"}


def test_the_docs_show_the_recipe_that_runs():
    docs = (ROOT / "docs" / "connect.md").read_text()
    section = docs[docs.index("## The TypeScript client") :]
    block = re.search(r"```ts\n(.*?)```", section, re.S)
    assert block is not None
    assert block.group(1) == (PACKAGE / "examples" / "quickstart.ts").read_text()
