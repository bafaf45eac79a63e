"""Deploy markers from records (records.catchup.marker_fold): the first record of a release
nobody marked marks it at its own time, in the pass that folds it; an earlier record arriving
later moves that marker earlier, never a posted one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from records import catchup
from records.models import Project, ReleaseMarker
from tests.support.factories import BASE_TS, record
from tests.support.rollup_data import newest_id, start_at, store_now

pytestmark = pytest.mark.both_dbs


def at(minutes: float) -> str:
    return (BASE_TS + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def markers(project) -> dict[tuple[str, str], tuple]:
    return {
        (m.agent, m.name): (m.time, m.source) for m in ReleaseMarker.objects.filter(project=project)
    }


@pytest.fixture
def acme(db) -> Project:
    start_at(newest_id())
    return Project.objects.create(name="acme")


def test_the_first_record_of_a_release_marks_it_at_its_time(acme):
    store_now(acme, [
        record("notice", release="v1", ts=at(5)),
        record("notice", release="v1", ts=at(2)),
        record("notice", release="v2", ts=at(9), agent="router"),
        record("notice", release="v2", ts=at(7), agent=None),
        record("notice", ts=at(1)),  # no release: no marker
    ])  # fmt: skip
    catchup.catch_up()
    assert markers(acme) == {
        ("support-bot", "v1"): (BASE_TS + timedelta(minutes=2), "first record"),
        ("router", "v2"): (BASE_TS + timedelta(minutes=9), "first record"),
        ("", "v2"): (BASE_TS + timedelta(minutes=7), "first record"),
    }


def test_an_earlier_record_arriving_later_moves_the_marker_earlier(acme):
    store_now(acme, [record("notice", release="v1", ts=at(10))])
    catchup.catch_up()
    store_now(acme, [record("notice", release="v1", ts=at(3))])
    store_now(acme, [record("notice", release="v1", ts=at(20))])
    catchup.catch_up()
    assert markers(acme) == {
        ("support-bot", "v1"): (BASE_TS + timedelta(minutes=3), "first record")
    }


def test_a_posted_marker_keeps_its_time_and_its_source(acme):
    posted = ReleaseMarker.objects.create(
        project=acme, agent="support-bot", name="v1", time=BASE_TS + timedelta(minutes=30),
        description="the new ranking prompt", link="https://ci.example/run/7",
    )  # fmt: skip
    store_now(acme, [record("notice", release="v1", ts=at(1))])
    catchup.catch_up()
    posted.refresh_from_db()
    assert (posted.time, posted.source) == (BASE_TS + timedelta(minutes=30), "api")
    assert posted.description == "the new ranking prompt"


def test_a_pass_run_again_over_the_same_records_changes_no_marker(acme):
    first = newest_id()
    store_now(acme, [record("notice", release="v1", ts=at(4))])
    catchup.catch_up()
    before = markers(acme)
    start_at(first)  # as after a crash: the same window folded again
    catchup.catch_up()
    assert markers(acme) == before
    assert ReleaseMarker.objects.filter(project=acme).count() == 1


def test_each_pass_writes_its_markers_in_one_statement(acme):
    store_now(acme, [record("notice", release=f"v{i}", ts=at(i)) for i in range(50)])
    with CaptureQueriesContext(connection) as queries:
        catchup.catch_up()
    inserts = [
        q["sql"] for q in queries.captured_queries if ReleaseMarker._meta.db_table in q["sql"]
    ]
    assert len(inserts) == 1, inserts
    assert ReleaseMarker.objects.filter(project=acme).count() == 50
