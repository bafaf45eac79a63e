"""Freshness (how far the rollups lag the records) costs the same whatever the backlog."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from records import catchup
from records.catchup.rebuild import reset_rollups
from records.contract.normalise import normalise
from records.demo.generator import generate_records
from records.metrics.freshness import describe, freshness, project_freshness
from records.models import Project, Record
from records.store import partitions
from records.store.writer import store_records
from tests.support.factories import record
from tests.support.pages import operator, post

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
RANGE = {"from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z", "interval": "day"}


def test_it_counts_what_waits_by_ids_and_says_when_that_is_an_estimate():
    def pending(newest: int, oldest_id: int | None) -> tuple[int, bool, float]:
        oldest = (oldest_id, T0 - timedelta(seconds=42)) if oldest_id else None
        f = describe(
            watermark_id=10, last_pass_at=T0, newest_id=newest, oldest_pending=oldest, now=T0
        )
        return f["pending_records"], f["pending_estimated"], f["lag_seconds"]

    assert pending(10, None) == (0, False, 0.0)  # caught up: exact, and no lag
    assert pending(12, 12) == (1, False, 42.0)  # one record waits: exact
    # Ids used up by duplicates or rolled-back batches would count too: at most 24.
    assert pending(35, 12) == (24, True, 42.0)


def freshness_of(persona) -> dict:
    response = persona.client(persona.read_key).get("/api/v1/metrics/records", RANGE)
    assert response.status_code == 200, response.content
    return response.json()["freshness"]


@pytest.mark.both_dbs
def test_the_metrics_api_reports_whether_the_projects_records_wait(alice):
    post(alice, [record(ts="2026-11-20T09:30:00Z") for _ in range(3)])
    waiting = freshness_of(alice)
    assert waiting["pending"] is True and waiting["lag_seconds"] >= 0
    assert waiting["last_pass_at"] is None
    catchup.catch_up()
    done = freshness_of(alice)
    assert (done["pending"], done["lag_seconds"]) == (False, 0)
    assert done["last_pass_at"]
    # Nothing of the installation: no count, no record id.
    assert set(done) == {"pending", "lag_seconds", "last_pass_at"}


def store(project: Project, n: int, at: datetime) -> None:
    """n records of `project`, received at `at`, in one batch."""
    rows = [normalise(record(ts="2026-11-20T08:30:00Z"), now=at) for _ in range(n)]
    store_records(project.pk, rows, at)


@pytest.mark.both_dbs
def test_a_project_learns_nothing_of_another_projects_backlog(alice, bob):
    post(bob, [record(ts="2026-11-20T09:30:00Z")])
    catchup.catch_up()
    fresh = freshness_of(bob)
    # alice's records wait in the lane that bob's project shares with hers.
    post(alice, [record(ts="2026-11-20T09:31:00Z") for _ in range(700)])
    assert freshness_of(bob) == fresh
    assert fresh["pending"] is False and freshness_of(alice)["pending"] is True
    catchup.catch_up()
    for persona in (alice, bob):
        assert (freshness_of(persona)["pending"], freshness_of(persona)["lag_seconds"]) == (
            False,
            0,
        )


@pytest.mark.both_dbs
def test_a_projects_lag_is_its_own_oldest_waiting_record(alice, bob):
    store(alice.project, 50, T0)  # waits longer than anything of bob's
    store(bob.project, 2, T0 + timedelta(seconds=60))
    store(bob.project, 3, T0 + timedelta(seconds=65))
    store(alice.project, 50, T0 + timedelta(seconds=66))
    now = T0 + timedelta(seconds=67)
    assert project_freshness(bob.project.pk, now) == {
        "pending": True,
        "lag_seconds": 7.0,
        "last_pass_at": None,
    }
    assert project_freshness(alice.project.pk, now)["lag_seconds"] == 67.0
    catchup.catch_up()
    for persona in (alice, bob):
        state = project_freshness(persona.project.pk, now)
        assert (state["pending"], state["lag_seconds"]) == (False, 0.0)
        assert state["last_pass_at"] is not None


@pytest.mark.both_dbs
def test_a_project_reads_its_own_lanes_watermark(alice, bob):
    lane = catchup.lane_of(bob.project.pk, 2)
    assert catchup.lane_of(alice.project.pk, 2) != lane  # project ids are consecutive
    catchup.catch_up(lanes=2)  # the two lanes' watermarks, before any record
    store(alice.project, 5, T0)
    store(bob.project, 5, T0)
    catchup.catch_up(lane=lane, lanes=2)
    now = T0 + timedelta(seconds=3)
    assert project_freshness(bob.project.pk, now)["pending"] is False
    waiting = project_freshness(alice.project.pk, now)
    assert (waiting["pending"], waiting["lag_seconds"]) == (True, 3.0)


@pytest.mark.both_dbs
def test_after_a_rebuild_every_projects_records_wait_again(alice, bob):
    store(alice.project, 3, T0)
    catchup.catch_up()
    assert project_freshness(alice.project.pk)["pending"] is False
    reset_rollups({m.__name__: m for m in apps.get_app_config("records").get_models()})
    assert project_freshness(alice.project.pk)["pending"] is True
    assert project_freshness(bob.project.pk)["pending"] is False  # no record to fold
    catchup.catch_up()
    assert project_freshness(alice.project.pk)["pending"] is False


@pytest.mark.both_dbs
def test_a_projects_freshness_is_one_statement_whatever_the_backlog(
    alice, bob, django_assert_num_queries
):
    catchup.catch_up()  # the lane's watermark row
    store(bob.project, 1, T0)
    for backlog in (10, 2_000):
        store(alice.project, backlog, T0)
        with django_assert_num_queries(1):
            state = project_freshness(bob.project.pk, T0 + timedelta(seconds=5))
        assert (state["pending"], state["lag_seconds"]) == (True, 5.0)


@pytest.mark.both_dbs
def test_with_one_lane_it_is_one_statement_that_sees_what_came_after_a_pass(alice):
    post(alice, [record(ts="2026-11-20T09:30:00Z") for _ in range(3)])
    catchup.catch_up()
    folded = freshness()["watermark_id"]
    post(alice, [record(ts="2026-11-20T09:31:00Z") for _ in range(2)])
    first_after = Record.objects.filter(id__gt=folded).order_by("id")[0]
    with CaptureQueriesContext(connection) as queries:
        state = freshness(now=first_after.received_at + timedelta(seconds=7))
    # Every scrape asks: under load each round trip waits for a core twice.
    assert len(queries.captured_queries) == 1
    newest = Record.objects.order_by("-id")[0].id
    assert (state["watermark_id"], state["newest_id"]) == (folded, newest)
    assert state["pending_records"] == newest - first_after.id + 1 == 2
    assert state["lag_seconds"] == 7.0
    assert [lane["pending_records"] for lane in state["lanes"]] == [2]


@pytest.mark.both_dbs
def test_a_resent_batch_can_only_overstate_the_backlog(alice):
    batch = [record(ts="2026-11-20T09:30:00Z") for _ in range(3)]
    post(alice, batch)
    catchup.catch_up()
    post(alice, [*batch, record(ts="2026-11-20T09:31:00Z")])  # three duplicates, one new
    waiting = freshness()
    # Exactly one record waits; PostgreSQL used up an id for each duplicate, SQLite did not.
    assert waiting["pending_records"] >= 1
    assert waiting["pending_records"] == 1 or waiting["pending_estimated"]


_COUNT_ON_RECORDS = re.compile(r"\bCOUNT\s*\(.*\bFROM\s+\"?records_record\"?", re.I | re.S)


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/runs/",
        "/models/",
        "/classifiers/",
        "/streaks/",
        "/api/v1/metrics/records",
        "/api/v1/metrics/classifier_latency_p95",
        "/api/v1/streaks",
        "/api/v1/runs",
    ],
)
def test_no_page_or_api_request_counts_the_records(alice, url):
    # A backlog: records of every kind that no pass has folded in yet.
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    post(alice, list(generate_records(records=600, runs=6, seed=3, end=end)))
    client = (
        operator("alice", alice) if not url.startswith("/api/") else alice.client(alice.read_key)
    )
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    counted = [q["sql"] for q in queries.captured_queries if _COUNT_ON_RECORDS.search(q["sql"])]
    assert counted == []
    if url == "/":
        assert "Records of this project wait to be rolled up" in response.content.decode()


def test_its_kept_plans_see_a_day_partition_made_after_them(postgres, alice):
    # PostgreSQL keeps the plans of freshness's reads for the session (records_newest_id and
    # records_first_above); a day partition attached since must not hide its records from them.
    day = partitions.day_of(datetime.now(UTC)) - timedelta(days=3)
    with connection.cursor() as cursor:  # the day has no partition yet
        cursor.execute(f"DROP TABLE {partitions.day_name(day)}")
    partitions.forget_cache()
    post(alice, [record(ts="2026-11-20T09:30:00Z")])
    catchup.catch_up()
    assert freshness()["pending_records"] == 0
    assert freshness()["pending_records"] == 0  # the plans are made, and kept
    assert day not in partitions.existing_days()
    post(alice, [record(ts=f"{day.isoformat()}T12:00:00Z")])
    assert day in partitions.existing_days()
    newest = Record.objects.order_by("-id")[0]
    assert newest.ts.date() == day
    state = freshness(now=newest.received_at + timedelta(seconds=3))
    assert (state["newest_id"], state["pending_records"], state["lag_seconds"]) == (
        newest.id,
        1,
        3.0,
    )
