from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client, TransactionTestCase

from dashboard.http.staticfiles import ensure_collected
from tests.support.module_data import quick_hashers, quiet
from tests.support.pages import operator
from tests.support.quick_flush import flush_quickly
from tests.support.services import REQUIRE_SERVICES, Persona, need_service
from tests.support.static_scan import static_files_scanned_once

# Markers by folder: tests/live starts servers, workers or private clusters as processes;
# tests/browser drives Chromium. `bin/test --fast` leaves both out. A browser module's tests
# share its worker's live server and Chromium, so pytest-xdist keeps each module on one worker
# (--dist loadgroup).
FOLDER_MARKERS = {"live": [pytest.mark.live], "browser": [pytest.mark.browser]}
FIRST = ("live", "browser")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    # The tests that start processes or a browser first: they are the longest, and xdist hands
    # tests out in this order, so they spread over the workers instead of ending the run on one.
    items.sort(key=lambda item: Path(item.path).resolve().relative_to(TESTS).parts[0] not in FIRST)
    for item in items:
        folder = Path(item.path).resolve().relative_to(TESTS).parts[0]
        for marker in FOLDER_MARKERS.get(folder, ()):
            item.add_marker(marker)
        if folder == "browser":
            item.add_marker(pytest.mark.xdist_group(f"browser-{Path(item.path).stem}"))


def pytest_report_header(config):
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    return f"decisionboard: database {engine}, REQUIRE_SERVICES={int(REQUIRE_SERVICES)}"


@pytest.fixture(scope="session", autouse=True)
def _static_collected(django_test_environment) -> None:
    """Pages link the hashed static names of the manifest, as under bin/start, and a browser
    test loads the current scripts, not those of an earlier collect (dashboard.http.staticfiles)."""
    ensure_collected()


@pytest.fixture(scope="session", autouse=True)
def _static_scanned_once(_static_collected) -> None:
    """Each test client's WhiteNoise takes the static files of the first one's scan
    (tests/support/static_scan.py)."""
    with static_files_scanned_once():
        yield


@pytest.fixture(scope="session", autouse=True)
def _quick_flush() -> None:
    """A transactional test ends by emptying the tables it filled, not every table
    (tests/support/quick_flush.py)."""
    flush_all = TransactionTestCase._fixture_teardown
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            TransactionTestCase, "_fixture_teardown", lambda test: flush_quickly(test, flush_all)
        )
        yield


@pytest.fixture(autouse=True)
def _no_worker_nudges(settings):
    """Ingest enqueues nothing unless a test runs a worker (tests/live/test_worker_integration.py).
    API keys and price overrides are looked up on every request unless a test sets their cache
    itself: a key another request read a moment before would otherwise change a test's query
    count, and an override another test's project had would price this one's records."""
    settings.DECISIONBOARD = quiet(settings.DECISIONBOARD)


@pytest.fixture(autouse=True)
def _quick_password_hashes(settings):
    """Passwords the tests set are hashed at one iteration (tests/support/hashers.py); every
    hash the product's own hashers read is still read."""
    settings.PASSWORD_HASHERS = quick_hashers(settings.PASSWORD_HASHERS)


@pytest.fixture
def postgres(db):
    if connection.vendor != "postgresql" and os.environ.get("DECISIONBOARD_TEST_PASS") == "sqlite":
        # bin/test's second pass re-runs the both_dbs tests on SQLite; this one is
        # PostgreSQL-only and already ran (and had to pass) in the first pass.
        pytest.skip("PostgreSQL-only: runs in the PostgreSQL pass")
    need_service(connection.vendor == "postgresql", "PostgreSQL (set DATABASE_URL)")
    return connection


@pytest.fixture
def alice(db) -> Persona:
    return Persona("acme")


@pytest.fixture
def bob(db) -> Persona:
    return Persona("globex")


@pytest.fixture
def alice_page(alice) -> Client:
    return operator("alice", alice)
