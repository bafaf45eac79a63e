from __future__ import annotations

import os

import pytest
from django.db import connection
from rest_framework.test import APIClient

from dashboard.http.staticfiles import ensure_collected
from records.models import ApiKey, Project

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"


def pytest_report_header(config):
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    return f"decisionboard: database {engine}, REQUIRE_SERVICES={int(REQUIRE_SERVICES)}"


def need_service(available: bool, what: str) -> None:
    """Skip a test whose service is missing, unless REQUIRE_SERVICES=1 (CI): then fail it."""
    if available:
        return
    if REQUIRE_SERVICES:
        pytest.fail(f"{what} is required (REQUIRE_SERVICES=1) but not available")
    pytest.skip(f"{what} is not available")


def database_url() -> str:
    """The test database as a DATABASE_URL, for processes the tests start."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture(scope="session", autouse=True)
def _static_collected(django_test_environment) -> None:
    """Pages link the hashed static names of the manifest, as under bin/start, and a browser
    test loads the current scripts, not those of an earlier collect (dashboard.http.staticfiles)."""
    ensure_collected()


@pytest.fixture(autouse=True)
def _no_worker_nudges(settings):
    """Ingest enqueues nothing unless a test runs a worker (tests/test_worker_integration.py).
    API keys and price overrides are looked up on every request unless a test sets their cache
    itself: a key another request read a moment before would otherwise change a test's query
    count, and an override another test's project had would price this one's records."""
    settings.DECISIONBOARD = {
        **settings.DECISIONBOARD,
        "NUDGE_WORKERS": False,
        "API_KEY_CACHE_SECONDS": 0,
        "PRICE_OVERRIDE_CACHE_SECONDS": 0,
    }


@pytest.fixture
def postgres(db):
    if connection.vendor != "postgresql" and os.environ.get("DECISIONBOARD_TEST_PASS") == "sqlite":
        # bin/test's second pass re-runs the both_dbs tests on SQLite; this one is
        # PostgreSQL-only and already ran (and had to pass) in the first pass.
        pytest.skip("PostgreSQL-only: runs in the PostgreSQL pass")
    need_service(connection.vendor == "postgresql", "PostgreSQL (set DATABASE_URL)")
    return connection


class Persona:
    """A project with keys, named as in the tests: alice owns `acme`, bob owns `globex`."""

    def __init__(self, project: str):
        self.project = Project.objects.create(name=project)
        self.ingest_key_obj, self.ingest_key = ApiKey.issue(self.project, ApiKey.Scope.INGEST)
        self.read_key_obj, self.read_key = ApiKey.issue(self.project, ApiKey.Scope.READ)

    def client(self, key: str | None = None) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key or self.ingest_key}")
        return client


@pytest.fixture
def alice(db) -> Persona:
    return Persona("acme")


@pytest.fixture
def bob(db) -> Persona:
    return Persona("globex")
