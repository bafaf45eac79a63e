"""Requests while the database cannot be reached: 503 with Retry-After, then recovery.

In-process here, against a database address where nothing answers; tests/live/test_outage_live.py
stops a real PostgreSQL under a live server while clients post.
"""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection
from django.test import RequestFactory

from config.outage import RETRY_AFTER_SECONDS, server_error
from tests.support.factories import record
from tests.support.pages import operator
from workers import processes

pytestmark = pytest.mark.both_dbs


class Database:
    """Takes the default connection where no database is, and back (each reconnects)."""

    def __init__(self, tmp_path) -> None:
        self.saved = dict(connection.settings_dict)
        self.nowhere = str(tmp_path / "no such folder" / "db.sqlite3")

    def down(self) -> None:
        connection.close()
        if connection.vendor == "postgresql":
            connection.settings_dict.update(HOST="127.0.0.1", PORT=processes.free_port())
        else:
            connection.settings_dict["NAME"] = self.nowhere

    def up(self) -> None:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(self.saved)


@pytest.fixture
def database(transactional_db, tmp_path):
    database = Database(tmp_path)
    yield database
    database.up()


def assert_json_503(response) -> None:
    assert response.status_code == 503
    assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == "database_unavailable" and "database" in body["detail"]


def test_ingest_answers_503_with_retry_after_and_json_and_then_recovers(alice, database):
    batch = {"records": [record(), record()]}
    database.down()
    assert_json_503(alice.client().post("/api/v1/records", batch, format="json"))
    database.up()
    answer = alice.client().post("/api/v1/records", batch, format="json")
    assert answer.status_code == 200 and answer.json()["accepted"] == 2


@pytest.mark.parametrize("url", ["/api/v1/runs", "/api/v1/metrics/records", "/api/v1/streaks"])
def test_the_read_api_answers_503_with_json(alice, database, url):
    database.down()
    assert_json_503(alice.client(alice.read_key).get(url))


def test_a_page_answers_a_plain_503_page_and_then_recovers(alice, database):
    page = operator("alice", alice)
    database.down()
    response = page.get("/runs/")
    assert response.status_code == 503
    assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert response["Content-Type"].startswith("text/html")
    assert "cannot reach its database" in response.content.decode()
    database.up()
    assert page.get("/runs/").status_code == 200


def test_an_outage_outside_a_view_is_a_503_and_anything_else_still_a_500():
    request = RequestFactory().get("/runs/")
    try:
        raise OperationalError("connection refused")
    except OperationalError:
        assert server_error(request).status_code == 503
    try:
        raise ValueError("a bug")
    except ValueError:
        assert server_error(request).status_code == 500
