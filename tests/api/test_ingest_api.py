"""POST /api/v1/records, as docs/api.md ("Ingest") specifies it.

Runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import threading

import orjson
import pytest
from django.db import connection, connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from records import catchup
from records.models import ApiKey, Record, Run
from tests.support.factories import record

pytestmark = pytest.mark.both_dbs
URL = "/api/v1/records"


def post(client, body, content_type="application/json"):
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    return client.post(URL, data=body, content_type=content_type)


def test_it_accepts_one_record(alice):
    response = post(alice.client(), record("model_selection"))
    assert response.status_code == 200
    assert response.json() == {"accepted": 1, "duplicates": 0, "rejected": []}
    assert Record.objects.filter(project=alice.project).count() == 1


def test_it_accepts_a_batch_of_every_kind(alice):
    from tests.support.factories import KINDS

    body = {"records": [record(kind) for kind in KINDS]}
    response = post(alice.client(), body)
    assert response.json() == {"accepted": len(KINDS), "duplicates": 0, "rejected": []}
    assert sorted(Record.objects.values_list("kind", flat=True)) == sorted(KINDS)


def test_it_accepts_ndjson_and_skips_blank_lines(alice):
    lines = b"\n".join(orjson.dumps(record()) for _ in range(3)) + b"\n\n"
    response = post(alice.client(), lines, "application/x-ndjson")
    assert response.json() == {"accepted": 3, "duplicates": 0, "rejected": []}


def test_it_stores_the_envelope_facets_data_and_derived_fields(alice):
    raw = record(
        "model_selection",
        parent_run_id="run-0",
        data={"selected_model": "gpt-5", "vendorField": {"x": 1}},
    )
    post(alice.client(), raw)
    stored = Record.objects.get(record_key=raw["id"])
    assert stored.kind == "model_selection" and stored.run_id == "run-1"
    assert stored.agent == "support-bot" and stored.session_id == "sess-1"
    assert stored.parent_run_id == "run-0"
    assert stored.model == "claude-sonnet-4-5" and stored.is_swap and stored.iteration == 0
    assert stored.data == raw["data"]
    assert stored.derived == {"swap": True, "switch": False, "selected_model": "gpt-5"}
    assert stored.ts.isoformat().startswith(raw["ts"].rstrip("Z"))


def test_it_creates_a_run_on_first_sight(alice):
    post(alice.client(), record(run_id="r1", ts="2026-11-20T09:00:05Z", parent_run_id="r0"))
    run = Run.objects.get(project=alice.project, run_id="r1")
    assert run.first_ts.isoformat() == run.last_ts.isoformat() == "2026-11-20T09:00:05+00:00"
    assert (run.agent, run.session_id, run.parent_run_id) == ("support-bot", "sess-1", "r0")


def test_the_catch_up_widens_the_run_and_counts_its_records(alice):
    client = alice.client()
    post(client, record(run_id="r1", ts="2026-11-20T09:00:05Z"))
    post(
        client,
        {
            "records": [
                record(run_id="r1", ts="2026-11-20T09:00:01Z"),
                record(run_id="r1", ts="2026-11-20T09:00:09Z"),
            ]
        },
    )
    catchup.catch_up()
    run = Run.objects.get(project=alice.project, run_id="r1")
    assert run.first_ts.isoformat() == "2026-11-20T09:00:01+00:00"
    assert run.last_ts.isoformat() == "2026-11-20T09:00:09+00:00"
    assert run.record_count == 3


def test_it_reports_rejections_with_207_and_keeps_the_valid_neighbours(alice):
    bad = record("tool_choice.pick")
    bad["data"]["ranked"].append({"name": "grep", "score": "high"})
    body = {"records": [record(), bad, record(), {"kind": "nope"}]}
    response = post(alice.client(), body)
    assert response.status_code == 207
    payload = response.json()
    assert (payload["accepted"], payload["duplicates"]) == (2, 0)
    assert payload["rejected"][0] == {
        "index": 1,
        "id": bad["id"],
        "errors": {"data.ranked[2].score": ["must be a number, got a string"]},
    }
    assert payload["rejected"][1]["index"] == 3
    assert Record.objects.count() == 2


def test_it_rejects_one_unreadable_ndjson_line_and_keeps_the_others(alice):
    body = orjson.dumps(record()) + b"\n{not json\n" + orjson.dumps(record())
    response = post(alice.client(), body, "application/x-ndjson")
    assert response.status_code == 207
    payload = response.json()
    assert payload["accepted"] == 2
    assert payload["rejected"][0]["index"] == 1
    assert "line 2" in payload["rejected"][0]["errors"]["record"][0]


def test_it_rejects_only_the_record_with_a_number_beyond_the_float_range(alice):
    good = orjson.dumps(record()).decode()
    bad = (
        orjson.dumps(record("tool_choice.pick"))
        .decode()
        .replace('"confidence":0.6', '"confidence":1e400')
    )
    response = post(alice.client(), f'{{"records": [{good}, {bad}]}}')
    assert response.status_code == 207
    assert response.json()["rejected"][0]["errors"] == {
        "data.confidence": ["must be a finite number"]
    }
    assert response.json()["accepted"] == 1


def test_it_rejects_nan_literals_per_record(alice):
    bad = (
        orjson.dumps(record("model_call"))
        .decode()
        .replace('"durationMs":1800.0', '"durationMs":NaN')
    )
    response = post(alice.client(), f'{{"records": [{bad}]}}')
    assert response.status_code == 207
    assert "finite" in response.json()["rejected"][0]["errors"]["data.durationMs"][0]


def test_it_counts_a_resent_id_as_a_duplicate(alice):
    client = alice.client()
    raw = record()
    assert post(client, raw).json()["accepted"] == 1
    changed = dict(raw, ts="2026-11-20T09:30:00Z")  # same id: the first one stands
    assert post(client, changed).json() == {"accepted": 0, "duplicates": 1, "rejected": []}
    assert Record.objects.count() == 1
    catchup.catch_up()
    assert Run.objects.get().record_count == 1


def test_it_counts_a_repeat_inside_one_batch_as_a_duplicate(alice):
    raw = record()
    response = post(alice.client(), {"records": [raw, raw, record(), raw]})
    assert response.json() == {"accepted": 2, "duplicates": 2, "rejected": []}


def test_it_deduplicates_records_without_id_by_their_content(alice):
    raw = record("model_call", id=None)
    client = alice.client()
    assert post(client, {"records": [raw, raw]}).json() == {
        "accepted": 1,
        "duplicates": 1,
        "rejected": [],
    }
    assert post(client, raw).json()["duplicates"] == 1
    other = record("model_call", id=None, data={"durationMs": 5.0})
    assert post(client, other).json()["accepted"] == 1
    assert Record.objects.filter(record_key__startswith="sha256:").count() == 2


def test_it_keeps_ids_per_project(alice, bob):
    raw = record()
    assert post(alice.client(), raw).json()["accepted"] == 1
    assert post(bob.client(), raw).json()["accepted"] == 1
    assert Record.objects.filter(record_key=raw["id"]).count() == 2


def test_it_stores_text_with_a_nul_character_without_failing(alice):
    raw = record("turn", data={"text": "before\u0000after", "odd\u0000key": 1})
    response = post(alice.client(), raw)
    assert response.status_code == 200, response.content
    stored = Record.objects.get()
    assert stored.data["text"] == "before\ufffdafter"
    assert stored.derived["nul_replaced"] == ["data.text", "data.odd\ufffdkey"]


def test_it_rejects_a_nul_character_in_the_run_id(alice):
    response = post(alice.client(), record(run_id="run\u00001"))
    assert response.status_code == 207
    assert response.json()["rejected"][0]["errors"] == {
        "run_id": ["must not contain a NUL character"]
    }


def test_it_answers_401_without_a_key(alice):
    response = post(APIClient(), record())
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer nope", "Token abc", "Bearer", "Basic dXNlcjpwYXNz"])
def test_it_answers_401_for_a_bad_key(alice, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    assert post(client, record()).status_code == 401


def test_it_answers_401_for_a_revoked_key(alice):
    from django.utils import timezone

    ApiKey.objects.filter(pk=alice.ingest_key_obj.pk).update(revoked_at=timezone.now())
    assert post(alice.client(), record()).status_code == 401


def test_it_refuses_a_key_revoked_after_use_once_the_cache_bound_has_passed(
    alice, settings, monkeypatch
):
    from django.utils import timezone

    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "API_KEY_CACHE_SECONDS": 5}
    clock = [1000.0]
    monkeypatch.setattr("api.auth.monotonic", lambda: clock[0])
    assert post(alice.client(), record(id="r1")).status_code == 200
    ApiKey.objects.filter(pk=alice.ingest_key_obj.pk).update(revoked_at=timezone.now())
    clock[0] += 4.9
    assert post(alice.client(), record(id="r2")).status_code == 200  # within the bound
    clock[0] += 0.1
    assert post(alice.client(), record(id="r3")).status_code == 401
    assert post(alice.client(), record(id="r4")).status_code == 401
    assert set(Record.objects.values_list("record_key", flat=True)) == {"r1", "r2"}


def test_it_refuses_a_revoked_key_at_once_without_the_cache(alice, settings):
    from django.utils import timezone

    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "API_KEY_CACHE_SECONDS": 0}
    assert post(alice.client(), record(id="r1")).status_code == 200
    ApiKey.objects.filter(pk=alice.ingest_key_obj.pk).update(revoked_at=timezone.now())
    assert post(alice.client(), record(id="r2")).status_code == 401


def test_it_looks_a_key_up_once_per_bound(alice, settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "API_KEY_CACHE_SECONDS": 60}
    client = alice.client()
    assert post(client, record(id="r1")).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert post(client, record(id="r2")).status_code == 200
    assert not [q for q in queries.captured_queries if "records_apikey" in q["sql"]]


def test_it_refuses_a_cached_key_whose_project_was_deleted(alice, bob, settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "API_KEY_CACHE_SECONDS": 60}
    project_id = alice.project.pk
    assert post(alice.client(), record(id="r1")).status_code == 200
    alice.project.delete()
    response = post(alice.client(), record(id="r2"))
    assert response.status_code == 401
    assert response.json()["detail"] == "Unknown or revoked API key."
    assert not Record.objects.filter(project_id=project_id).exists()
    assert post(bob.client(), record(id="r2")).status_code == 200


def test_it_answers_403_for_a_key_without_the_ingest_scope(alice):
    response = post(alice.client(alice.read_key), record())
    assert response.status_code == 403
    assert "ingest scope" in response.json()["detail"]
    assert Record.objects.count() == 0


def test_it_accepts_an_all_scope_key(alice):
    _, raw_key = ApiKey.issue(alice.project, ApiKey.Scope.ALL)
    assert post(alice.client(raw_key), record()).status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", ""])
def test_it_answers_415_for_other_content_types(alice, content_type):
    response = alice.client().generic("POST", URL, json.dumps(record()), content_type=content_type)
    assert response.status_code == 415
    assert "application/x-ndjson" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "empty"),
        (b"[1, 2]", "one record"),
        (b'"a string"', "one record"),
        (b'{"records": {"kind": "turn"}}', "must be an array"),
    ],
)
def test_it_answers_400_for_a_body_of_the_wrong_shape(alice, body, words):
    response = post(alice.client(), body)
    assert response.status_code == 400
    assert words in response.json()["detail"]


def test_it_answers_413_over_the_body_limit_and_stores_nothing(alice):
    filler = "x" * (5 * 1024 * 1024)
    response = post(alice.client(), {"records": [record("turn", data={"text": filler})]})
    assert response.status_code == 413
    assert "5,242,880-byte limit" in response.json()["detail"]
    assert Record.objects.count() == 0


def test_it_accepts_a_body_just_under_the_limit(alice):
    # 20 records of 200 KB each: ~4 MB, under 5 MB, each under the 256 KB data limit.
    records = [record("turn", data={"text": "y" * 200_000}) for _ in range(20)]
    response = post(alice.client(), {"records": records})
    assert response.status_code == 200
    assert response.json()["accepted"] == 20


@override_settings(
    CACHES={
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "rate-test",
        }
    }
)
def test_it_answers_429_with_retry_after_past_the_key_rate(alice):
    ApiKey.objects.filter(pk=alice.ingest_key_obj.pk).update(rate_limit="2/min")
    client = alice.client()
    assert post(client, record()).status_code == 200
    assert post(client, record()).status_code == 200
    response = post(client, record())
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    # Another key of the same project has its own budget.
    assert post(alice.client(ApiKey.issue(alice.project)[1]), record()).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_it_commits_before_it_answers(alice):
    """A 2xx means the records are committed: another connection sees them at once."""
    response = post(alice.client(), {"records": [record(), record()]})
    assert response.status_code == 200
    seen = []

    def count_from_another_connection():
        seen.append(Record.objects.count())
        connections.close_all()

    thread = threading.Thread(target=count_from_another_connection)
    thread.start()
    thread.join()
    assert seen == [2]
