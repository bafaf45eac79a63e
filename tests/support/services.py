"""The services the tests need (PostgreSQL, Redis) and the personas that own projects and keys."""

from __future__ import annotations

import os
from urllib.parse import quote

import pytest
from django.db import connection
from rest_framework.test import APIClient

from records.models import ApiKey, Project

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"


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
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    # The session settings the suite's own connections start with (.ci/run's, say), so that
    # the processes a test starts run as the test does.
    options = db.get("OPTIONS", {}).get("options")
    return f"{url}?options={quote(options)}" if options else url


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
