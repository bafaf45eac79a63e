"""Hostile ingest bodies (no request gets a 5xx) through Django's test client.

Each test is a cause of a 500 found by an attacker's probe: invalid UTF-8, deep
nesting, the standard-library fallback letting lone surrogates through. The answer is a 4xx
that names the problem, or a 207 that stores the good records. Chunked bodies and over-limit
bodies need a real server: tests/live/test_hostile_http.py.
"""

from __future__ import annotations

import json

import orjson
import pytest

from records.models import Record
from tests.support.factories import record

pytestmark = pytest.mark.both_dbs
URL = "/api/v1/records"


def post(client, body: bytes, content_type: str = "application/json"):
    return client.post(URL, data=body, content_type=content_type)


def stored_ids(persona) -> set[str]:
    return set(Record.objects.filter(project=persona.project).values_list("record_key", flat=True))


# --- 1. invalid UTF-8 ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"kind": "notice", "run_id": "\xff\xfe"}', "application/json"),
        (b'{"kind": "notice", "run_id": "\xc0\xaf"}', "application/json"),
        ('{"kind": "notice", "run_id": "café"}'.encode("latin-1"), "application/json"),
        (
            '{"kind": "notice", "run_id": "café"}'.encode("latin-1"),
            "application/json; charset=latin-1",
        ),
    ],
)
def test_it_answers_400_naming_invalid_utf8_in_a_json_body(alice, body, content_type):
    response = post(alice.client(), body, content_type)
    assert response.status_code == 400
    assert "UTF-8" in response.json()["detail"]


def test_it_keeps_the_good_ndjson_lines_around_one_that_is_not_utf8(alice):
    good = [record(), record()]
    lines = [
        orjson.dumps(good[0]),
        b'{"kind": "notice", "run_id": "\xff\xfe"}',
        orjson.dumps(good[1]),
    ]
    response = post(alice.client(), b"\n".join(lines), "application/x-ndjson")
    assert response.status_code == 207
    body = response.json()
    assert body["accepted"] == 2
    assert [r["index"] for r in body["rejected"]] == [1]
    assert "UTF-8" in body["rejected"][0]["errors"]["record"][0]
    assert stored_ids(alice) == {good[0]["id"], good[1]["id"]}


# --- 2. deep nesting -----------------------------------------------------------------------------
def test_it_answers_400_for_ten_thousand_nested_arrays(alice):
    response = post(alice.client(), b"[" * 10_000 + b"]" * 10_000)
    assert response.status_code == 400
    assert "nested" in response.json()["detail"]


def test_it_answers_400_for_ten_thousand_nested_objects_in_data(alice):
    text = json.dumps(record(data={"deep": "__DEEP__"}))
    deep = '{"a":' * 10_000 + "1" + "}" * 10_000
    response = post(alice.client(), text.replace('"__DEEP__"', deep).encode())
    assert response.status_code == 400
    assert "nested" in response.json()["detail"]


@pytest.mark.parametrize("levels", [300, 600, 900])
@pytest.mark.parametrize("nul", [False, True])
def test_it_rejects_a_record_nested_hundreds_deep_and_keeps_its_neighbour(alice, levels, nul):
    leaf = '"a\\u0000b"' if nul else "1"
    deep = '{"a":' * levels + leaf + "}" * levels
    good = record()
    text = json.dumps({"records": [good, record(data={"deep": "__DEEP__"})]})
    response = post(alice.client(), text.replace('"__DEEP__"', deep).encode())
    assert response.status_code == 207, response.content[:300]
    body = response.json()
    assert body["accepted"] == 1
    assert body["rejected"][0]["index"] == 1
    assert "nested" in str(body["rejected"][0]["errors"])
    assert stored_ids(alice) == {good["id"]}


# --- 3. the standard-library fallback (NaN, Infinity, 1e400) and lone surrogates ---------------
def test_it_rejects_lone_surrogates_per_record_when_the_body_holds_nan(alice):
    good = record(agent="NaN-agent")  # the text NaN sends the body down the fallback path
    in_data = record(data={"note": "\udc00"})
    in_envelope = record(run_id="run-\ud800")
    in_key = record(data={"\udfff": 1})
    body = json.dumps({"records": [good, in_data, in_envelope, in_key]})  # escapes \udc00
    response = post(alice.client(), body.encode())
    assert response.status_code == 207, response.content[:300]
    result = response.json()
    assert result["accepted"] == 1
    errors = {r["index"]: r["errors"] for r in result["rejected"]}
    assert set(errors) == {1, 2, 3}
    assert "surrogate" in errors[1]["data.note"][0]
    assert "surrogate" in errors[2]["run_id"][0]
    assert "surrogate" in str(errors[3])
    assert stored_ids(alice) == {good["id"]}


def test_it_rejects_a_huge_number_and_a_surrogate_and_keeps_the_valid_neighbour(alice):
    good = record()
    huge = json.dumps(record(data={"extra": "__HUGE__"})).replace('"__HUGE__"', "1e400")
    surrogate = json.dumps(record(data={"text": "\udc00"}))
    body = f'{{"records": [{json.dumps(good)}, {huge}, {surrogate}]}}'
    response = post(alice.client(), body.encode())
    assert response.status_code == 207, response.content[:300]
    result = response.json()
    assert result["accepted"] == 1
    assert [r["index"] for r in result["rejected"]] == [1, 2]
    assert result["rejected"][0]["errors"] == {"data.extra": ["must be a finite number"]}
    assert stored_ids(alice) == {good["id"]}


def test_it_rejects_surrogates_in_ndjson_lines_that_take_the_fallback(alice):
    good = record(agent="Infinity-agent")
    bad = json.dumps(record(session_id="\udc00", agent="NaN"))
    lines = b"\n".join([orjson.dumps(good), bad.encode()])
    response = post(alice.client(), lines, "application/x-ndjson")
    assert response.status_code == 207, response.content[:300]
    result = response.json()
    assert result["accepted"] == 1
    assert "surrogate" in result["rejected"][0]["errors"]["session_id"][0]
    # A retrying agent is not stuck: the same body again is a duplicate plus the same rejection.
    again = post(alice.client(), lines, "application/x-ndjson").json()
    assert again["duplicates"] == 1 and len(again["rejected"]) == 1
