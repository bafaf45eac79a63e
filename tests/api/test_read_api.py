"""GET /api/v1/runs, /api/v1/runs/{run_id}, /api/v1/records; the OpenAPI schema and the docs."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from drf_spectacular.validation import validate_schema
from genai_prices import Usage, calc_price
from rest_framework.test import APIClient

from records import catchup
from records.contract.kinds import KIND_NAMES, KINDS
from records.models import Membership, Project
from tests.support import read_data
from tests.support.factories import BASE_TS, record
from tests.support.read_data import at, post_records

pytestmark = pytest.mark.both_dbs


@pytest.fixture
def loaded(alice, bob):
    read_data.load(alice, bob)
    return alice


def operator(*projects: Project, name: str = "carol") -> APIClient:
    user = User.objects.create_user(name, password="not-used-here")
    for project in projects:
        Membership.objects.create(user=user, project=project)
    client = APIClient()
    client.force_login(user)
    return client


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


# --- records -----------------------------------------------------------------------------------


def test_it_returns_records_as_posted_plus_derived(alice):
    posted = record(
        "tool_choice.pick",
        id="pick-1",
        ts="2026-11-20T10:00:00.250+01:00",
        parent_run_id="run-0",
        release="agent-1.4.0",
        data={"vendorField": {"kept": True}},
    )
    post_records(alice.client(), [posted])
    (got,) = results(alice.client(alice.read_key).get("/api/v1/records"))
    assert got == {
        "id": "pick-1",
        "kind": "tool_choice.pick",
        "run_id": "run-1",
        "ts": "2026-11-20T09:00:00.250000Z",  # the same instant, in UTC
        "session_id": "sess-1",
        "agent": "support-bot",
        "parent_run_id": "run-0",
        "release": "agent-1.4.0",
        "data": posted["data"],
        "derived": {
            "doors": ["read_skill", "present"],
            # The classifier's 800 input and 9 output tokens at genai-prices' price.
            "cost": {"usd": library_usd("claude-haiku-4-5", 800, 9), "source": "genai-prices"},
        },
    }


def library_usd(model: str, input_tokens: int, output_tokens: int) -> float:
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    at = datetime(2026, 11, 20, 9, tzinfo=UTC)
    return float(calc_price(usage, model_ref=model, genai_request_timestamp=at).total_price)


def test_it_returns_null_for_envelope_fields_not_posted(alice):
    post_records(alice.client(), [record("turn", agent=None, session_id=None)])
    (got,) = results(alice.client(alice.read_key).get("/api/v1/records"))
    assert got["agent"] is None and got["session_id"] is None and got["parent_run_id"] is None
    assert got["release"] is None


def test_it_shows_a_key_only_its_own_project(loaded, bob):
    ids = [r["id"] for r in results(bob.client(bob.read_key).get("/api/v1/records"))]
    assert ids == ["bob-1"]
    runs = results(bob.client(bob.read_key).get("/api/v1/runs"))
    assert [(r["run_id"], r["record_count"]) for r in runs] == [("run-a", 1)]


# --- runs --------------------------------------------------------------------------------------


def test_it_lists_runs_with_their_counters(loaded):
    runs = {r["run_id"]: r for r in results(loaded.client(loaded.read_key).get("/api/v1/runs"))}
    assert runs["run-a"] == {
        "run_id": "run-a",
        "parent_run_id": None,
        "agent": "support-bot",
        "session_id": "sess-1",
        "first_ts": at(0),
        "last_ts": at(2),
        "record_count": 3,
        "kind_counts": {"model_selection": 1, "provider.error": 1, "tool_choice.pick": 1},
        # Every model a record names: a1's default sonnet and the gpt-5 it selected.
        "models_seen": {
            "claude-haiku-4-5": 1,
            "claude-opus-5-5": 1,
            "claude-sonnet-4-5": 1,
            "gpt-5": 1,
        },
        "has": {
            "swap": True,
            "fallback": False,
            "error": True,
            "contract_break": False,
            "violation": False,
        },
        # The pick's classifier usage, priced: the run's only record with usage.
        "cost_usd": pytest.approx(library_usd("claude-haiku-4-5", 800, 9), rel=1e-9),
        "cost_unknown": 0,
    }
    assert runs["run-b"]["parent_run_id"] == "run-a"
    assert runs["run-b"]["has"] == {
        "swap": False,
        "fallback": True,
        "error": False,
        "contract_break": True,
        "violation": False,
    }


def test_it_shows_a_run_with_its_sub_runs(loaded):
    response = loaded.client(loaded.read_key).get("/api/v1/runs/run-a")
    assert response.status_code == 200
    body = response.json()
    assert body["run_id"] == "run-a" and body["record_count"] == 3
    assert [s["run_id"] for s in body["sub_runs"]] == ["run-b"]
    assert body["sub_runs"][0]["record_count"] == 3
    assert "sub_runs" not in body["sub_runs"][0]


def test_it_answers_404_for_another_projects_run(alice, bob):
    post_records(bob.client(), [record(run_id="bobs-run")])
    response = alice.client(alice.read_key).get("/api/v1/runs/bobs-run")
    assert response.status_code == 404
    assert alice.client(alice.read_key).get("/api/v1/runs/no-such-run").status_code == 404


def test_it_answers_404_for_another_projects_run_to_an_operator(alice, bob):
    post_records(bob.client(), [record(run_id="bobs-run")])
    client = operator(alice.project)
    assert client.get("/api/v1/runs/bobs-run").status_code == 404
    assert client.get("/api/v1/runs/bobs-run", {"project": "globex"}).status_code == 404


def test_it_finds_a_run_whose_id_holds_a_slash(alice):
    post_records(alice.client(), [record(run_id="team/run 7")])
    response = alice.client(alice.read_key).get("/api/v1/runs/team/run%207")
    assert response.status_code == 200 and response.json()["run_id"] == "team/run 7"


@pytest.mark.parametrize("run_id", ["compare", "ran-ünïcødé-日本", "a/b", "x?y#z", "100%", "a b"])
def test_it_finds_a_run_whatever_its_id(alice, run_id):
    post_records(alice.client(), [record(run_id=run_id)])
    for safe in ("", "/"):  # a client may leave slashes as they are or encode them
        response = alice.client(alice.read_key).get("/api/v1/runs/" + quote(run_id, safe=safe))
        assert response.status_code == 200 and response.json()["run_id"] == run_id


# --- who may read ------------------------------------------------------------------------------

READ_URLS = ["/api/v1/records", "/api/v1/runs", "/api/v1/runs/run-a"]


@pytest.mark.parametrize("url", READ_URLS)
def test_it_refuses_a_request_without_a_key(loaded, url):
    response = APIClient().get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("url", READ_URLS)
def test_it_refuses_an_ingest_only_key(loaded, url):
    assert loaded.client(loaded.ingest_key).get(url).status_code == 403


def test_it_still_refuses_ingest_with_a_read_key(alice):
    response = alice.client(alice.read_key).post(
        "/api/v1/records", data=json.dumps(record()), content_type="application/json"
    )
    assert response.status_code == 403


@pytest.mark.parametrize("url", READ_URLS)
def test_it_serves_an_operator_session_of_the_project(loaded, url):
    assert operator(loaded.project).get(url).status_code == 200


def test_it_asks_an_operator_of_several_projects_to_name_one(loaded, bob):
    client = operator(loaded.project, bob.project)
    assert client.get("/api/v1/records").status_code == 400
    ids = [r["id"] for r in results(client.get("/api/v1/records", {"project": "globex"}))]
    assert ids == ["bob-1"]


def test_it_refuses_an_operator_outside_every_project(loaded):
    assert operator().get("/api/v1/records").status_code == 403


def test_it_answers_404_when_a_key_names_another_project(loaded):
    response = loaded.client(loaded.read_key).get("/api/v1/records", {"project": "globex"})
    assert response.status_code == 404


# --- keyset pagination -------------------------------------------------------------------------


def walk(client, url: str, params: dict, between=None) -> list[dict]:
    """Follow `next` links to the end, calling between() after each page."""
    seen, response = [], client.get(url, params)
    while True:
        body = response.json()
        assert response.status_code == 200, body
        seen.extend(body["results"])
        if between:
            between()
        if body["next"] is None:
            return seen
        assert "offset" not in body["next"]
        response = client.get(body["next"])


def _spread_records(rng: random.Random, prefix: str, n: int) -> list[dict]:
    # Whole seconds over an hour, so that several records share a ts and the id breaks ties.
    return [
        record(
            id=f"{prefix}-{i}",
            run_id=f"run-{rng.randrange(8)}",
            ts=(BASE_TS + timedelta(seconds=rng.randrange(0, 3600, 30)))
            .isoformat()
            .replace("+00:00", "Z"),
        )
        for i in range(n)
    ]


def test_it_returns_every_record_exactly_once_while_new_records_arrive(alice):
    rng = random.Random(4)
    original = _spread_records(rng, "old", 150)
    post_records(alice.client(), original)
    batches = iter(range(100))

    def more():  # new records anywhere in the range: before and after the cursor
        post_records(alice.client(), _spread_records(rng, f"new{next(batches)}", 7))

    seen = walk(alice.client(alice.read_key), "/api/v1/records", {"limit": 20}, between=more)
    ids = [r["id"] for r in seen]
    assert len(ids) == len(set(ids)), "a record came back twice"
    assert {r["id"] for r in original} <= set(ids), "a record was skipped"
    keys = [(r["ts"], r["id"]) for r in seen]
    assert [ts for ts, _ in keys] == sorted(ts for ts, _ in keys)


def test_it_returns_every_run_exactly_once_while_runs_grow_and_start(alice):
    rng = random.Random(5)
    post_records(alice.client(), [record(run_id=f"run-{i}", ts=at(i)) for i in range(23)])
    counter = iter(range(1000))

    def more():  # old runs get newer records (their last_ts moves), new runs start
        n = next(counter)
        post_records(
            alice.client(),
            [record(run_id=f"run-{rng.randrange(23)}", ts=at(30 + n)), record(run_id=f"new-{n}")],
        )

    seen = walk(alice.client(alice.read_key), "/api/v1/runs", {"limit": 4}, between=more)
    run_ids = [r["run_id"] for r in seen]
    assert len(run_ids) == len(set(run_ids))
    assert {f"run-{i}" for i in range(23)} <= set(run_ids)


def test_it_keeps_the_filters_on_the_next_page(loaded):
    client = loaded.client(loaded.read_key)
    first = client.get("/api/v1/records", {"agent": "support-bot,code-reviewer", "limit": 2})
    assert [r["id"] for r in first.json()["results"]] == ["a1", "a2"]
    seen = walk(client, "/api/v1/records", {"agent": "support-bot,code-reviewer", "limit": 2})
    assert [r["id"] for r in seen] == ["a1", "a2", "a3", "b1", "b2", "b3"]


def test_it_reads_a_deep_page_without_offset(alice):
    post_records(alice.client(), [record() for _ in range(30)])
    client = alice.client(alice.read_key)
    page = client.get("/api/v1/records", {"limit": 10}).json()
    page = client.get(page["next"]).json()
    with CaptureQueriesContext(connection) as queries:
        third = client.get(page["next"])
    assert len(third.json()["results"]) == 10 and third.json()["next"] is None
    sql = " ".join(q["sql"] for q in queries.captured_queries).upper()
    assert "OFFSET" not in sql and "LIMIT 11" in sql


@pytest.mark.parametrize(
    "params,param",
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "WzFd"}, "cursor"),  # [1]: a runs cursor on the records list
        ({"cursor": "WyJ5ZXN0ZXJkYXkiLDFd"}, "cursor"),  # ["yesterday",1]
    ],
)
def test_it_answers_400_for_a_bad_page_parameter(alice, params, param):
    response = alice.client(alice.read_key).get("/api/v1/records", params)
    assert response.status_code == 400
    assert list(response.json()) == [param]


# --- query counts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url,params,queries",
    [
        # the key, the page
        ("/api/v1/records", {}, 2),
        ("/api/v1/runs", {}, 2),
        ("/api/v1/runs", {"model": "gpt-5", "has": "swap,error", "from": at(0)}, 2),
        # the key, the run, its sub-runs
        ("/api/v1/runs/run-a", {}, 3),
    ],
)
def test_it_reads_a_list_in_a_fixed_number_of_queries(
    alice, django_assert_num_queries, url, params, queries
):
    # On SQLite a key's first lookup in a minute marks its use apart (ApiKey.find_live): one
    # UPDATE, not counted.
    alice.client(alice.read_key).get("/api/v1/runs")
    for n in (3, 40):  # the count must not grow with the rows
        post_records(
            alice.client(),
            [record(run_id=f"run-{i % 5}", parent_run_id=None) for i in range(n)]
            + [record(run_id="run-a"), record(run_id=f"sub-{n}", parent_run_id="run-a")],
        )
        catchup.catch_up()
        with django_assert_num_queries(queries):
            response = alice.client(alice.read_key).get(url, params)
        assert response.status_code == 200


def test_it_reads_a_list_for_an_operator_in_a_fixed_number_of_queries(
    loaded, django_assert_num_queries
):
    client = operator(loaded.project)
    # session, user, the operator's project, the page
    with django_assert_num_queries(4):
        assert client.get("/api/v1/records").status_code == 200


# --- OpenAPI and the docs ----------------------------------------------------------------------


@pytest.fixture
def openapi(db) -> dict:
    response = APIClient().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


def test_it_serves_a_valid_openapi_3_schema(openapi):
    assert openapi["openapi"].startswith("3.1")
    validate_schema(openapi)  # against the OpenAPI 3.1 JSON Schema drf-spectacular ships
    paths = openapi["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/records"])
    for path in ("/api/v1/runs", "/api/v1/runs/{run_id}", "/api/v1/export"):
        assert "get" in paths[path]
    assert {"get", "post"} <= set(paths["/api/v1/exports"])
    assert "get" in paths["/api/v1/exports/{job_id}"]


def test_it_documents_the_ingest_endpoint(openapi):
    post = openapi["paths"]["/api/v1/records"]["post"]
    assert set(post["responses"]) == {"200", "207", "400", "401", "403", "413", "415", "429"}
    assert "Retry-After" in post["responses"]["429"]["headers"]
    content = post["requestBody"]["content"]
    assert set(content) == {"application/json", "application/x-ndjson"}
    body = openapi["components"]["schemas"]["IngestBody"]
    shapes = [s["$ref"].rsplit("/", 1)[1] for s in body["oneOf"]]
    assert shapes == ["PostedRecord", "IngestBatch"]
    batch = openapi["components"]["schemas"]["IngestBatch"]
    assert batch["properties"]["records"]["items"] == {"$ref": "#/components/schemas/PostedRecord"}
    assert post["security"] == [{"apiKey": []}]


def test_it_documents_every_record_kind(openapi):
    schemas = openapi["components"]["schemas"]
    posted = schemas["PostedRecord"]
    assert posted["discriminator"]["propertyName"] == "kind"
    assert set(posted["discriminator"]["mapping"]) == set(KIND_NAMES)
    for spec in KINDS.values():
        envelope = schemas[spec.envelope.__name__]
        assert envelope["properties"]["data"] == {
            "$ref": f"#/components/schemas/{spec.data_type.__name__}"
        }
        assert {"kind", "run_id", "ts", "data"} <= set(envelope["required"])
        assert spec.summary in envelope["description"]
        assert schemas[spec.data_type.__name__]["type"] == "object"
    pick = schemas["Pick"]
    assert {"iteration", "classifier", "offered", "ranked", "served"} <= set(pick["required"])
    record_schema = schemas["Record"]
    assert record_schema["properties"]["data"] == {"$ref": "#/components/schemas/RecordData"}
    every_ref = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(openapi)))
    assert every_ref <= set(schemas), "a $ref points at no component"


def test_it_serves_the_docs_from_this_host_only(db):
    client = APIClient()
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html, re.I), "an external URL"
    assert '"validatorUrl": null' in html
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert len(assets) == 4
    for url in assets:
        assert url.startswith("/api/docs/assets/")
        asset = client.get(url)
        assert asset.status_code == 200
        assert b"".join(asset.streaming_content)
    assert "/api/v1/schema/" in html


def test_it_serves_no_other_file_as_a_docs_asset(db):
    for name in ("oauth2-redirect.html", "swagger-ui-bundle.js.map", "..%2F..%2Fsettings.py"):
        assert APIClient().get(f"/api/docs/assets/{name}").status_code == 404
