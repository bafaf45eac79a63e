"""/api/v1/releases: deploy markers posted with an ingest key (201, a repeat 200 that replaces
the description and link), refused field by field (400), listed with a read key newest first,
keyset paged and filtered by agent, another project's never seen."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from records.models import ReleaseMarker

pytestmark = pytest.mark.both_dbs

URL = "/api/v1/releases"


def post(client, body):
    return client.post(URL, data=json.dumps(body), content_type="application/json")


def test_it_marks_a_release_and_answers_the_marker(alice):
    response = post(alice.client(), {
        "name": "2026.12.1", "agent": "support-bot", "time": "2026-12-01T09:30:00Z",
        "description": "The new ranking prompt", "link": "https://ci.example/deploys/41",
    })  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert {k: body[k] for k in ("project", "agent", "name", "description", "link", "source")} == {
        "project": "acme",
        "agent": "support-bot",
        "name": "2026.12.1",
        "description": "The new ranking prompt",
        "link": "https://ci.example/deploys/41",
        "source": "api",
    }
    assert datetime.fromisoformat(body["time"]) == datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def test_a_marker_without_a_time_begins_now(alice):
    before = datetime.now(UTC)
    response = post(alice.client(), {"name": "v2", "agent": "router"})
    assert response.status_code == 201
    assert datetime.fromisoformat(response.json()["time"]) >= before.replace(microsecond=0)


def test_a_repeat_replaces_description_and_link_keeps_the_time_and_answers_200(alice):
    first = {"name": "v3", "agent": "router", "time": "2026-12-01T10:00:00+01:00",
             "description": "first words"}  # fmt: skip
    assert post(alice.client(), first).status_code == 201
    again = {"name": "v3", "agent": "router", "time": "2026-12-05T00:00:00Z",
             "description": "better words", "link": "http://notes.example/v3"}  # fmt: skip
    response = post(alice.client(), again)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["description"], body["link"]) == ("better words", "http://notes.example/v3")
    assert datetime.fromisoformat(body["time"]) == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    assert ReleaseMarker.objects.filter(project=alice.project).count() == 1


def test_posting_a_release_its_first_record_marked_keeps_that_marker_s_time(alice):
    ReleaseMarker.objects.create(
        project=alice.project, agent="router", name="v4",
        time=datetime(2026, 12, 1, tzinfo=UTC), source=ReleaseMarker.Source.FIRST_RECORD,
    )  # fmt: skip
    response = post(alice.client(), {"name": "v4", "agent": "router", "description": "why"})
    assert response.status_code == 200
    assert response.json()["source"] == "first record"
    assert response.json()["description"] == "why"


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"agent": "a"}, "name", "required"),
        ({"name": "v1"}, "agent", "required"),
        ({"name": "", "agent": "a"}, "name", "blank"),
        ({"name": "v" * 201, "agent": "a"}, "name", "200"),
        ({"name": "v1\nv2", "agent": "a"}, "name", "control characters"),
        ({"name": "v1", "agent": "a\x00b"}, "agent", "Null"),
        ({"name": "v1", "agent": "a", "description": "d" * 2001}, "description", "2000"),
        ({"name": "v1", "agent": "a", "link": "javascript:alert(1)"}, "link", "http"),
        ({"name": "v1", "agent": "a", "link": "ftp://files.example/x"}, "link", "http"),
        ({"name": "v1", "agent": "a", "link": "https://"}, "link", "http"),
        ({"name": "v1", "agent": "a", "time": "2026-12-01T09:00:00"}, "time", "offset"),
        ({"name": "v1", "agent": "a", "time": "yesterday"}, "time", "RFC 3339"),
        ({"name": "v1", "agent": "a", "time": "9999-12-31T23:59:59-23:59"}, "time", "range"),
        ({"name": "v1", "agent": "a", "colour": "red"}, "colour", "not a field"),
    ],
)
def test_it_refuses_a_bad_field_naming_it(alice, body, field, words):
    response = post(alice.client(), body)
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert words.lower() in " ".join(errors[field]).lower(), errors
    assert not ReleaseMarker.objects.exists()


def test_every_error_of_a_body_is_named_at_once(alice):
    response = post(alice.client(), {"name": "", "agent": "", "link": "mailto:x@example.com"})
    assert response.status_code == 400
    assert set(response.json()) == {"name", "agent", "link"}


def test_posting_needs_the_ingest_scope_and_reading_the_read_scope(alice):
    assert post(alice.client(alice.read_key), {"name": "v1", "agent": "a"}).status_code == 403
    assert alice.client(alice.ingest_key).get(URL).status_code == 403
    assert post(alice.client("dbk_nope"), {"name": "v1", "agent": "a"}).status_code == 401


def test_it_lists_newest_first_in_keyset_pages_filtered_by_agent(
    alice, bob, django_assert_max_num_queries
):
    for day, agent in [(1, "router"), (2, "support-bot"), (3, "router"), (4, "router")]:
        body = {"name": f"v{day}", "agent": agent, "time": f"2026-12-0{day}T00:00:00Z"}
        assert post(alice.client(), body).status_code == 201
    assert post(bob.client(), {"name": "v9", "agent": "router"}).status_code == 201
    reader = alice.client(alice.read_key)
    with django_assert_max_num_queries(3):
        page = reader.get(URL, {"agent": "router", "limit": 2}).json()
    assert [m["name"] for m in page["results"]] == ["v4", "v3"]
    rest = reader.get(page["next"]).json()
    assert [m["name"] for m in rest["results"]] == ["v1"] and rest["next"] is None
    everything = reader.get(URL).json()["results"]
    assert [m["name"] for m in everything] == ["v4", "v3", "v2", "v1"]


def test_a_bad_cursor_or_limit_is_a_400_naming_it(alice):
    reader = alice.client(alice.read_key)
    assert "cursor" in reader.get(URL, {"cursor": "nope"}).json()
    assert "limit" in reader.get(URL, {"limit": "0"}).json()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"name": "v\\ud800", "agent": "a"}',
        b'{"name": "v1", "agent": "a", "description": "\\u0000"}',
        b'{"name": "v1", "agent": "a", "time": "99999-01-01T00:00:00Z"}',
        b"\xff\xfe",
        b"[1, 2]",
        b"",
    ],
)
def test_no_body_however_broken_costs_a_5xx(alice, raw):
    response = alice.client().post(URL, data=raw, content_type="application/json")
    assert response.status_code == 400, response.content
    assert not ReleaseMarker.objects.exists()
