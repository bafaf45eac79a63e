"""`release` through the API: posted on the envelope, judged record by record, stored, shown by
the read API, read by the metrics per release (a rollup dimension), kept on the run."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from records import catchup
from records.models import Record, Run
from tests.support.factories import record

pytestmark = pytest.mark.both_dbs


def post(client, records: list[dict]):
    return client.post(
        "/api/v1/records", data=json.dumps({"records": records}), content_type="application/json"
    )


def test_it_rejects_each_bad_release_with_its_reason_and_stores_the_rest(alice):
    good = [record(release="agent-1.4.0"), record(), record(release="sha:9f2c1e0")]
    bad = [
        record(release={"version": "1.4"}),
        record(release="line one\nline two"),
        record(release="v" * 201),
    ]
    response = post(alice.client(), [good[0], bad[0], good[1], bad[1], good[2], bad[2]])
    assert response.status_code == 207
    body = response.json()
    assert (body["accepted"], body["duplicates"]) == (3, 0)
    assert body["rejected"] == [
        {
            "index": 1,
            "id": bad[0]["id"],
            "errors": {"release": ["must be a string, got an object"]},
        },
        {
            "index": 3,
            "id": bad[1]["id"],
            "errors": {
                "release": ["must not contain control characters (newlines, tabs, NUL, ...)"]
            },
        },
        {"index": 5, "id": bad[2]["id"], "errors": {"release": ["must be at most 200 characters"]}},
    ]
    stored = dict(Record.objects.values_list("record_key", "release"))
    assert stored == {
        good[0]["id"]: "agent-1.4.0",
        good[1]["id"]: None,
        good[2]["id"]: "sha:9f2c1e0",
    }


def test_the_records_list_shows_each_records_release_and_null_without_one(alice):
    assert post(alice.client(), [record(release="Größe 2.0 — 試験"), record()]).status_code == 200
    response = alice.client(alice.read_key).get("/api/v1/records")
    assert response.status_code == 200
    assert [r["release"] for r in response.json()["results"]] == ["Größe 2.0 — 試験", None]


def test_a_resend_with_another_release_is_a_duplicate_of_the_posted_id(alice):
    first = record(id="pick-7", release="v1")
    assert post(alice.client(), [first]).json()["accepted"] == 1
    again = post(alice.client(), [dict(first, release="v2")]).json()
    assert (again["accepted"], again["duplicates"]) == (0, 1)
    assert Record.objects.get(record_key="pick-7").release == "v1"


def test_the_metrics_read_each_release_and_all_of_them_add_up_without_the_filter(alice):
    errors = [record("tool_choice.pick_error", run_id=f"e{i}", release=release)
              for i, release in enumerate(("v1", "v2", "v2", None))]  # fmt: skip
    picks = [record("tool_choice.pick", run_id=f"p{i}", release=release)
             for i, release in enumerate(("v1", "v1", "v1", "v2", None))]  # fmt: skip
    assert post(alice.client(), errors + picks).status_code == 200
    catchup.catch_up()
    client = alice.client(alice.read_key)

    def totals(**params) -> tuple[float, int]:
        params = {"from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z",
                  "group_by": "agent", **params}  # fmt: skip
        response = client.get("/api/v1/metrics/pick_error_rate", params)
        assert response.status_code == 200, response.content
        return tuple((t["value"], t["count"]) for t in response.json()["totals"])

    assert totals(release="v1") == ((0.25, 4),)
    assert totals(release="v2") == ((2 / 3, 3),)
    assert totals(release="v1,v2") == ((3 / 7, 7),)
    # Records without a release count only when no release is asked for: the sum over all.
    assert totals() == ((4 / 9, 9),)


def test_the_metrics_refuse_a_run_filter_rather_than_ignore_it(alice):
    response = alice.client(alice.read_key).get("/api/v1/metrics/records", {"run_id": "r1"})
    assert response.status_code == 400
    assert response.json() == {
        "run_id": ["is not available for metrics (rollups are kept per agent, release and model, "
                   "not per run)"]
    }  # fmt: skip


def test_the_schema_documents_release_on_records_and_as_a_filter(db):
    response = APIClient().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200, response.content
    schema = response.json()
    for path in ("/api/v1/records", "/api/v1/runs", "/api/v1/export"):
        names = {p["name"] for p in schema["paths"][path]["get"]["parameters"]}
        assert "release" in names, path
    release = schema["components"]["schemas"]["Record"]["properties"]["release"]
    assert release["type"] == ["string", "null"], release


def test_a_run_carries_the_release_of_its_records(alice):
    records = [record(run_id="r1"), record(run_id="r1", release="v3"), record(run_id="r2")]
    assert post(alice.client(), records).status_code == 200
    catchup.catch_up()
    releases = dict(Run.objects.filter(project=alice.project).values_list("run_id", "release"))
    assert releases == {"r1": "v3", "r2": None}
