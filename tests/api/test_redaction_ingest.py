"""Redaction before storage, through the API (docs/operations.md, "Redaction"): a corpus of
records with planted secrets and personal data is posted natively and over OTLP/HTTP; nothing
planted may be anywhere a record is kept or read back (the whole row, the read API, the CSV and
JSONL exports), and every look-alike must be kept as sent."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client

from records import catchup
from records.models import Record, RedactionPolicy, RedactionRule
from tests.support.factories import record
from tests.support.metrics_scrape import TOKEN, parse, value
from tests.support.otlp_payloads import chat, export, json_string_form, span
from tests.support.redaction_corpus import LOOK_ALIKES, corpus

PROTOBUF = "application/x-protobuf"


def row_text(project) -> str:
    """Every stored row of the project, each column of it, as PostgreSQL prints the row."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT string_agg(r::text, E'\\n') FROM records_record r WHERE project_id = %s",
            [project.pk],
        )
        return cursor.fetchone()[0] or ""


def read_back(persona) -> dict[str, str]:
    """What the read API and the two text exports give back for the project."""
    client = persona.client(persona.read_key)
    listed = client.get("/api/v1/records", {"limit": 500})
    assert listed.status_code == 200
    out = {"api": listed.content.decode()}
    for fmt in ("csv", "jsonl"):
        response = client.get("/api/v1/export", {"format": fmt})
        assert response.status_code == 200
        out[fmt] = b"".join(response.streaming_content).decode()
    return out


def every_personal_detector(project) -> None:
    RedactionPolicy.objects.create(project=project, emails=True, phones=True, ibans=True)


def assert_gone_and_kept(persona, gone, kept) -> None:
    places = {"row": row_text(persona.project), **read_back(persona)}
    for place, text in places.items():
        assert text, place
        for planted in gone:
            assert planted not in text, (place, planted)
        for look_alike in kept:
            assert look_alike in text, (place, look_alike)


def test_it_stores_no_planted_value_of_a_native_batch(alice, postgres):
    every_personal_detector(alice.project)
    planted = corpus(seed=11)
    response = alice.client().post(
        "/api/v1/records", {"records": [p.raw for p in planted]}, format="json"
    )
    assert response.json() == {"accepted": len(planted), "duplicates": 0, "rejected": []}
    assert_gone_and_kept(
        alice, {v for p in planted for v in p.gone}, {v for p in planted for v in p.kept}
    )
    for p in planted:
        stored = Record.objects.get(project=alice.project, record_key=p.raw["id"])
        assert stored.derived["redacted"] == dict(p.counts)


def database_text() -> str:
    """Every row of every table of the database, as PostgreSQL prints it: what a search of the
    whole database's text finds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        parts = []
        quote = connection.ops.quote_name
        for schema, table in cursor.fetchall():
            cursor.execute(
                f"SELECT string_agg(t::text, E'\\n') FROM {quote(schema)}.{quote(table)} t"
            )
            parts.append(cursor.fetchone()[0] or "")
    return "\n".join(parts)


def test_ten_thousand_planted_records_leave_no_planted_value_anywhere(alice, postgres):
    """The corpus at scale: posted in batches, folded by the catch-up, then searched for in the
    whole database's text and in both exports."""
    every_personal_detector(alice.project)
    planted = corpus(seed=5, n=10_000)
    for at in range(0, len(planted), 1_000):
        batch = [p.raw for p in planted[at : at + 1_000]]
        response = alice.client().post("/api/v1/records", {"records": batch}, format="json")
        assert response.json() == {"accepted": len(batch), "duplicates": 0, "rejected": []}
    assert catchup.catch_up() == len(planted)
    gone = {v for p in planted for v in p.gone}
    kept = {v for p in planted for v in p.kept}
    assert len(gone) > 10 and len(kept) > 10  # every kind of planted value, and of look-alike
    client = alice.client(alice.read_key)
    places = {"database": database_text()}
    for fmt in ("csv", "jsonl"):
        response = client.get("/api/v1/export", {"format": fmt})
        assert response.status_code == 200
        places[fmt] = b"".join(response.streaming_content).decode()
        assert places[fmt].count(LINE_OF[fmt]) >= len(planted), fmt  # every record exported
    for place, text in places.items():
        for planted_value in gone:
            assert planted_value not in text, (place, planted_value)
        for look_alike in kept:
            assert look_alike in text, (place, look_alike)
    counted = Counter()
    for stored in Record.objects.filter(project=alice.project).values_list("derived", flat=True):
        counted.update(stored.get("redacted") or {})
    assert counted == sum((p.counts for p in planted), Counter())


# What starts each exported record: a CSV row's id column, a JSONL line's first field.
LINE_OF = {"csv": "\r\n", "jsonl": '{"id":'}


def test_a_new_project_redacts_secrets_and_keeps_personal_data(alice, postgres):
    planted = corpus(seed=12, personal=False)
    alice.client().post("/api/v1/records", {"records": [p.raw for p in planted]}, format="json")
    kept = {v for p in planted for v in p.kept}
    assert any("@" in v for v in kept)  # the corpus did plant personal data
    assert_gone_and_kept(alice, {v for p in planted for v in p.gone}, kept)


def test_it_stores_no_planted_value_of_an_otlp_export(alice, postgres):
    every_personal_detector(alice.project)
    email, card, key = (
        "dana.whitfield@northwind-example.com",
        "4111 1111 1111 1111",
        ("sk-ant-api03-Wx7Kp2Qr9Lm4Nz8Vb3Hc6Tj1Yf5Gd0Su-AbCd"),
    )
    iban, jwt_payload = "DE89 3704 0044 0532 0130 00", "eyJzdWIiOiJjdXN0LTQ0MjEifQ"
    jwt = f"eyJhbGciOiJIUzI1NiJ9.{jwt_payload}.Qm9k8Xz2Lp4Vr7Ns1Tc6Yh3Jw5"
    looks = LOOK_ALIKES[:8]
    output = [
        {
            "role": "assistant",
            "finish_reason": "tool_call",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call-1",
                    "name": "send_mail",
                    "arguments": {"to": email, "body": f"pay with {card}", "ref": looks[0]},
                }
            ],
        }
    ]
    turn = {
        "protocol": "implicit",
        "text": f"Forwarding {email}; {looks[1]}; header Bearer {key}",
        "toolCalls": [{"name": "charge", "arguments": {"iban": iban, "memo": looks[2]}}],
    }
    notice = {
        "code": "agent.credentials",
        "message": f"session token {jwt}, {looks[3]}",
        "detail": {"attempts": [{"auth": f"token={key}"}, looks[4]]},
    }
    spans = [
        span("chat gpt-4o", chat(**{"gen_ai.output.messages": json.dumps(output)})),
        span("step", events=[("decisionboard.turn", json_string_form(turn))]),
        span("note", events=[("decisionboard.notice", json_string_form(notice))]),
    ]
    response = alice.client().generic(
        "POST", "/v1/traces", export(*spans).SerializeToString(), content_type=PROTOBUF
    )
    assert response.status_code == 200
    stored = Record.objects.filter(project=alice.project)
    assert {"turn", "notice", "model_call"} <= set(stored.values_list("kind", flat=True))
    assert_gone_and_kept(alice, {email, card, key, iban, jwt_payload}, set(looks[:5]))
    found = Counter()
    for r in stored:
        found.update(r.derived.get("redacted", {}))
    assert found == {"email": 2, "card": 1, "anthropic": 2, "iban": 1, "jwt": 1}


def test_a_projects_own_pattern_and_json_key_apply_on_ingest(alice, postgres):
    RedactionRule.objects.create(
        project=alice.project, kind="pattern", name="customer-id", value=r"CUST-\d{6}"
    )
    RedactionRule.objects.create(project=alice.project, kind="json_key", value="password")
    raw = record(
        "turn",
        data={
            "text": "Refund CUST-004211 (not CUST-12)",
            "toolCalls": [{"name": "login", "arguments": {"user": "dana", "Password": "letmein"}}],
        },
    )
    alice.client().post("/api/v1/records", raw, format="json")
    stored = Record.objects.get(project=alice.project)
    assert stored.data["text"] == "Refund [REDACTED:customer-id] (not CUST-12)"
    assert stored.data["toolCalls"][0]["arguments"] == {
        "user": "dana",
        "Password": "[REDACTED:key]",
    }
    assert stored.derived["redacted"] == {"customer-id": 1, "key": 1}
    assert "letmein" not in row_text(alice.project)


def test_metrics_count_redactions_by_detector(alice, settings, postgres):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "METRICS_TOKEN": TOKEN}

    def cards() -> float:
        response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        samples = parse(response.content.decode())
        return value(samples, "decisionboard_redactions_total", project="acme", detector="card")

    before = cards()
    text = "cards 4111 1111 1111 1111 and 5555555555554444, not 4111 1111 1111 1112"
    alice.client().post("/api/v1/records", record("turn", data={"text": text}), format="json")
    assert cards() - before == 2


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_admin_refuses_a_pattern_that_could_backtrack(alice, admin_client):
    response = admin_client.post(
        "/admin/records/redactionrule/add/",
        {"project": alice.project.pk, "kind": "pattern", "name": "nested", "value": r"^(a+)+\1$"},
    )
    assert response.status_code == 200
    assert "backreferences are refused" in response.content.decode()
    assert not RedactionRule.objects.exists()
    response = admin_client.post(
        "/admin/records/redactionrule/add/",
        {"project": alice.project.pk, "kind": "pattern", "name": "order", "value": r"ORD-\d+"},
    )
    assert response.status_code == 302
    assert RedactionRule.objects.get().value == r"ORD-\d+"
    page = admin_client.get(f"/admin/records/project/{alice.project.pk}/change/")
    assert page.status_code == 200 and "Redaction polic" in page.content.decode()


def test_a_rule_is_checked_on_save_outside_forms_too(alice):
    with pytest.raises(ValidationError, match="lookaround"):
        RedactionRule.objects.create(
            project=alice.project, kind="pattern", name="peek", value=r"(?=secret)\w+"
        )
    with pytest.raises(ValidationError, match="built-in"):
        RedactionRule.objects.create(project=alice.project, kind="pattern", name="card", value="x")
    assert not RedactionRule.objects.exists()
