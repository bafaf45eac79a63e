"""Hostile query parameters, cursors, paths and API bodies (no request gets a 5xx).

Each test is a cause of a 500 found by an attacker's probe, or a gap found beside
them: NUL in a parameter or a path, times whose UTC offset pushes them past the calendar,
a default range that underflows, a body field the API does not know, a `?project=` of someone
else's project on the alert and export pages. PostgreSQL is where NUL crashed, so these run in
the PostgreSQL pass (and on SQLite when the suite runs there).
"""

from __future__ import annotations

import base64
from urllib.parse import urlencode

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from alerts.models import Channel, Rule
from records.models import ApiKey, Membership
from tests.support.factories import record

EXTREME_TIMES = ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59")
LISTS = ("/api/v1/records", "/api/v1/runs", "/api/v1/alert-events", "/api/v1/exports")
FILTERED = ("/api/v1/records", "/api/v1/runs", "/api/v1/export?format=csv")
PAGES = ("/", "/runs/", "/models/", "/classifiers/", "/streaks/", "/alerts/", "/alerts/events/",
         "/exports/")  # fmt: skip


def operator(username: str, *personas) -> Client:
    user = get_user_model().objects.create_user(username)
    for persona in personas:
        Membership.objects.create(user=user, project=persona.project, role="admin")
    client = Client()
    client.force_login(user)
    return client


def all_key(persona) -> APIClient:
    _, raw = ApiKey.issue(persona.project, ApiKey.Scope.ALL)
    return persona.client(raw)


@pytest.fixture
def reader(alice) -> APIClient:
    client = alice.client()
    response = client.post("/api/v1/records", {"records": [record()]}, format="json")
    assert response.status_code == 200
    return alice.client(alice.read_key)


def with_query(url: str, params: dict) -> str:
    return f"{url}{'&' if '?' in url else '?'}{urlencode(params)}"


def cursor(*values) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(values))).decode().rstrip("=")


# --- 5. NUL in a query parameter or a path ---------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        *(f"{u}{'&' if '?' in u else '?'}agent=a%00b" for u in FILTERED),
        "/api/v1/records?run_id=%00",
        "/api/v1/metrics/records?model=a%00b",
        "/api/v1/streaks?model=%00",
        "/api/v1/alert-events?group=a%00b",
        "/api/v1/records?project=a%00b",
        "/api/v1/records?cursor=%00",
        "/api/v1/runs/%00",
        "/api/v1/runs/a%00b",
        "/api/v1/metrics/a%00b",
        "/api/v1/alert-rules/%00",
    ],
)
def test_it_answers_400_for_a_nul_in_an_api_url(reader, url):
    response = reader.get(url)
    assert response.status_code == 400, (url, response.status_code)
    assert "NUL" in str(response.json())


@pytest.mark.parametrize(
    "url",
    [
        *(f"{page}?agent=a%00b" for page in PAGES),
        "/runs/?run_id=%00&has=swap",
        "/runs/?after=%00",
        "/alerts/?q=%00",
        "/alerts/events/?group=a%00b",
        "/exports/?project=%00",
        "/runs/a%00b/",
        "/runs/a%00b/picks/1/",
        "/runs/%00/",
    ],
)
def test_it_answers_400_for_a_nul_in_a_page_url(alice, url):
    response = operator("alice", alice).get(url)
    assert response.status_code == 400, (url, response.status_code)
    assert b"NUL" in response.content


def test_it_answers_400_for_a_nul_inside_an_export_jobs_body(alice):
    response = alice.client(alice.read_key).post(
        "/api/v1/exports", {"format": "csv", "agent": "a\x00b"}, format="json"
    )
    assert response.status_code == 400
    assert "agent" in response.json()


# --- 6. extreme UTC offsets in from/to and in cursors --------------------------------------------
@pytest.mark.parametrize("value", EXTREME_TIMES)
@pytest.mark.parametrize("param", ["from", "to"])
@pytest.mark.parametrize("url", [*FILTERED, "/api/v1/metrics/records", "/api/v1/alert-events"])
def test_it_answers_400_naming_a_time_beyond_the_calendar(reader, url, param, value):
    response = reader.get(with_query(url, {param: value}))
    assert response.status_code == 400, (url, response.status_code)
    assert param in response.json()
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize("value", EXTREME_TIMES)
def test_the_streamed_export_answers_400_before_sending_headers(reader, value):
    response = reader.get("/api/v1/export", {"format": "jsonl", "from": value})
    assert response.status_code == 400
    assert not response.streaming


@pytest.mark.parametrize("value", EXTREME_TIMES)
def test_it_answers_400_for_a_forged_cursor_beyond_the_calendar(reader, value):
    response = reader.get("/api/v1/records", {"cursor": cursor(value, 1)})
    assert response.status_code == 400
    assert "cursor" in response.json()


@pytest.mark.parametrize("value", EXTREME_TIMES)
@pytest.mark.parametrize("param", ["from", "to"])
def test_the_runs_page_names_a_time_beyond_the_calendar(alice, param, value):
    response = operator("alice", alice).get("/runs/", {param: value})
    assert response.status_code == 200
    assert b"is out of range" in response.content


@pytest.mark.parametrize("value", EXTREME_TIMES)
def test_the_runs_page_refuses_a_forged_cursor_beyond_the_calendar(alice, value):
    response = operator("alice", alice).get("/runs/", {"after": cursor(value, 1)})
    assert response.status_code == 200
    assert b"this page link is damaged" in response.content


@pytest.mark.parametrize("value", EXTREME_TIMES)
def test_the_alert_history_page_names_a_time_beyond_the_calendar(alice, value):
    response = operator("alice", alice).get("/alerts/events/", {"from": value})
    assert response.status_code == 200
    assert b"is out of range" in response.content


# --- 7. the metrics' default range -----------------------------------------------------------
def test_it_answers_400_when_the_default_metric_range_would_start_before_year_one(reader):
    response = reader.get("/api/v1/metrics/records", {"to": "0001-01-01T00:00:00Z"})
    assert response.status_code == 400
    assert "to" in response.json()


# --- one handler for the domain's parameter errors -------------------------------------------
@pytest.mark.parametrize(
    ("url", "param"),
    [
        ("/api/v1/records?kind=nope", "kind"),
        ("/api/v1/runs?limit=0", "limit"),
        ("/api/v1/records?cursor=zzz", "cursor"),
        ("/api/v1/metrics/nope", "metric"),
        ("/api/v1/metrics/records?interval=week", "interval"),
        ("/api/v1/alert-events?rule=x", "rule"),
        ("/api/v1/alert-events?rule=%C2%B2", "rule"),  # "²" is a digit to str.isdigit
        ("/api/v1/export?format=xls", "format"),
        ("/api/v1/exports?limit=x", "limit"),
    ],
)
def test_it_answers_400_json_naming_the_parameter(reader, url, param):
    response = reader.get(url)
    assert response.status_code == 400
    assert list(response.json()) == [param]
    assert isinstance(response.json()[param][0], str)


# --- unknown fields in API bodies ----------------------------------------------------------------
def test_an_export_job_with_an_unknown_field_is_a_400_naming_it(alice):
    response = alice.client(alice.read_key).post(
        "/api/v1/exports", {"format": "csv", "filters": {"agent": "a"}}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()) == ["filters"]


RULE = {
    "name": "pick errors",
    "metric": "pick_error_rate",
    "comparator": "gt",
    "threshold": 0.1,
    "window_minutes": 10,
}


def test_an_alert_rule_with_an_unknown_field_is_a_400_naming_it(alice):
    client = all_key(alice)
    response = client.post("/api/v1/alert-rules", {**RULE, "treshold": 0.5}, format="json")
    assert response.status_code == 400
    assert "treshold" in response.json()
    assert not Rule.objects.exists()

    rule = Rule.objects.create(project=alice.project, **RULE)
    patch = client.patch(f"/api/v1/alert-rules/{rule.pk}", {"pasued": True}, format="json")
    assert patch.status_code == 400 and "pasued" in patch.json()


def test_an_alert_rule_may_carry_back_its_own_read_only_fields(alice):
    client = all_key(alice)
    created = client.post("/api/v1/alert-rules", RULE, format="json").json()
    response = client.put(f"/api/v1/alert-rules/{created['id']}", created, format="json")
    assert response.status_code == 200, response.content


def test_an_alert_channel_with_an_unknown_field_is_a_400_naming_it(alice):
    response = all_key(alice).post(
        "/api/v1/alert-channels",
        {"name": "mail", "kind": "email", "addresses": ["a@example.com"], "adresses": []},
        format="json",
    )
    assert response.status_code == 400
    assert "adresses" in response.json()
    assert not Channel.objects.exists()


# --- ?project= of someone else's project on the alert and export pages -----------------------
@pytest.mark.parametrize("url", ["/alerts/", "/alerts/events/", "/exports/"])
def test_a_page_answers_404_for_a_project_the_operator_is_not_in(alice, bob, url):
    client = operator("alice", alice)
    assert client.get(url, {"project": "acme"}).status_code == 200
    assert client.get(url, {"project": "globex"}).status_code == 404
    assert client.get(url, {"project": "nope"}).status_code == 404
