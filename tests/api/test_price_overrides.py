"""/api/v1/price-overrides: CRUD, permissions, validation, and the re-pricing a change starts.

Personas: alice owns `acme`, bob owns `globex`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from celery import current_app
from django.contrib.admin.sites import site as admin_site
from rest_framework.test import APIClient

from records.models import ApiKey, PriceOverride, Record
from tests.support.cost_data import OVERRIDE
from tests.support.factories import record

pytestmark = pytest.mark.both_dbs


def all_key(persona) -> APIClient:
    _, raw = ApiKey.issue(persona.project, ApiKey.Scope.ALL)
    return persona.client(raw)


def test_it_creates_an_override_in_the_keys_project(alice):
    response = all_key(alice).post("/api/v1/price-overrides", OVERRIDE, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["project"] == "acme"
    assert body["currency"] == "USD"
    assert body["input_per_mtok"] == 2.5
    assert body["cache_read_per_mtok"] is None
    saved = PriceOverride.objects.get(pk=body["id"])
    assert saved.output_per_mtok == Decimal(12)
    assert saved.effective_from == datetime(2026, 11, 1, tzinfo=UTC)


def test_it_lists_only_the_projects_own_overrides(alice, bob):
    all_key(alice).post("/api/v1/price-overrides", OVERRIDE, format="json")
    all_key(bob).post("/api/v1/price-overrides", {**OVERRIDE, "model": "gpt-5"}, format="json")
    listed = alice.client(alice.read_key).get("/api/v1/price-overrides").json()["results"]
    assert [o["model"] for o in listed] == ["claude-sonnet-4-5"]
    theirs = PriceOverride.objects.get(project=bob.project)
    assert all_key(alice).delete(f"/api/v1/price-overrides/{theirs.pk}").status_code == 404
    assert PriceOverride.objects.filter(pk=theirs.pk).exists()


def test_it_needs_the_all_scope_to_change_prices(alice):
    response = alice.client(alice.read_key).post("/api/v1/price-overrides", OVERRIDE, format="json")
    assert response.status_code == 403
    assert "all` scope" in response.json()["detail"]
    assert not PriceOverride.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("input_per_mtok", -1, "greater than or equal to 0"),
        ("output_per_mtok", -0.01, "greater than or equal to 0"),
        ("cache_read_per_mtok", -5, "greater than or equal to 0"),
        ("input_per_mtok", 250000, "less than or equal to 100000"),
        ("input_per_mtok", "NaN", "valid number"),
        ("currency", "EUR", "unknown currency 'EUR'"),
        ("currency", "XYZ", "unknown currency 'XYZ'"),
        ("model", "", "may not be blank"),
        ("effective_from", "yesterday", "Datetime has wrong format"),
        ("treshold", 1, "is not a field here"),
    ],
)
def test_it_rejects_a_bad_price_with_a_400_naming_the_field(alice, field, value, message):
    response = all_key(alice).post(
        "/api/v1/price-overrides", {**OVERRIDE, field: value}, format="json"
    )
    assert response.status_code == 400, response.content
    assert message in str(response.json()[field])
    assert not PriceOverride.objects.exists()


def test_it_refuses_a_second_price_of_a_model_from_the_same_moment(alice):
    client = all_key(alice)
    assert client.post("/api/v1/price-overrides", OVERRIDE, format="json").status_code == 201
    again = client.post("/api/v1/price-overrides", OVERRIDE, format="json")
    assert again.status_code == 400
    assert "already has a price" in str(again.json())


@pytest.fixture
def tasks_run_here():
    """Celery runs the tasks a request sends in this process, as a worker would."""
    current_app.conf.task_always_eager = True
    yield
    current_app.conf.task_always_eager = False


def test_it_reprices_stored_records_when_an_override_is_added(
    alice, django_capture_on_commit_callbacks, tasks_run_here
):
    call = record(
        "model_call",
        ts="2026-11-20T09:00:00Z",
        data={"model": "claude-sonnet-4-5", "usage": {"input": 1000, "output": 100}},
    )
    posted = alice.client().post("/api/v1/records", {"records": [call]}, format="json")
    assert posted.status_code == 200, posted.content
    stored = Record.objects.get()
    assert stored.cost_source == "genai-prices"
    with django_capture_on_commit_callbacks(execute=True):
        response = all_key(alice).post("/api/v1/price-overrides", OVERRIDE, format="json")
    assert response.status_code == 201, response.content
    stored.refresh_from_db()
    assert stored.cost_source == "override"
    # 1,000 input tokens at $2.5 and 100 output at $12 per million: $0.0037.
    assert stored.cost_nano == 3_700_000
    got = alice.client(alice.read_key).get("/api/v1/records").json()["results"][0]
    assert got["derived"]["cost"] == {"usd": 0.0037, "source": "override"}


def test_the_admin_knows_price_overrides():
    assert admin_site.is_registered(PriceOverride)
