"""Migration 0010 converts an existing records table, with its data, to the daily partitions and
back (PostgreSQL); 0015 gives the existing record keys the days of their records."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from records.store import partitions
from tests.support.migrations import latest, migrate

BEFORE = [("records", "0008_apikey_last_used")]
NOW = timezone.now()


def rows(sql: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def insert(project_id: int, key: str, days_ago: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO records_record (project_id, record_key, kind, run_id, ts, received_at, "
            "is_swap, is_fallback, is_error, is_contract_break, rollup_key, has_violation, data, "
            "derived) VALUES (%s, %s, 'turn', 'run-1', %s, %s, false, false, false, false, '', "
            "false, '{\"text\": \"hi\"}', '{}')",
            [project_id, key, NOW - timedelta(days=days_ago), NOW],
        )


@pytest.fixture
def unpartitioned(transactional_db, postgres):
    migrate(BEFORE)
    yield
    migrate(latest())
    partitions.forget_cache()


def test_it_partitions_an_existing_table_with_its_data_and_back(unpartitioned):
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO records_project (name, created_at) VALUES ('acme', now())")
        cursor.execute("SELECT id FROM records_project")
        (project,) = cursor.fetchone()
    for n, days_ago in enumerate([0.1, 1, 5, 29, 45, 400]):
        insert(project, f"rec-{n}", days_ago)
    before = rows("SELECT id, record_key, ts, data FROM records_record ORDER BY id")

    migrate(latest())

    assert rows("SELECT id, record_key, ts, data FROM records_record ORDER BY id") == before
    where = dict(rows("SELECT record_key, tableoid::regclass::text FROM records_record"))
    today = partitions.day_of(NOW)
    assert where["rec-2"] == partitions.day_name(partitions.day_of(NOW - timedelta(days=5)))
    assert where["rec-4"] == where["rec-5"] == partitions.DEFAULT  # older than 30 days
    assert today + timedelta(days=2) in partitions.existing_days()
    assert rows("SELECT count(*) FROM records_recordkey") == [(6,)]
    # Ids carry on from the old sequence, and the keys stay unique.
    insert(project, "rec-new", 0)
    assert rows("SELECT max(id) FROM records_record") == [(before[-1][0] + 1,)]
    assert (
        rows(
            "INSERT INTO records_recordkey (project_id, record_key, day) "
            "VALUES (%s, 'rec-1', current_date) ON CONFLICT DO NOTHING RETURNING 1",
            [project],
        )
        == []
    )
    # The primary key alone: the project's foreign key is gone since 0029 (records.store.writer
    # holds the project row for each batch instead).
    assert rows(
        "SELECT contype FROM pg_constraint WHERE conrelid = 'records_record'::regclass "
        "ORDER BY contype"
    ) == [("p",)]

    migrate(BEFORE)

    assert rows("SELECT count(*) FROM pg_inherits") == [(0,)]
    assert len(rows("SELECT id FROM records_record")) == 7
    assert rows(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'records_record'::regclass "
        "AND contype = 'u'"
    ) == [("record_key_unique",)]


BEFORE_KEY_DAYS = [("records", "0014_catchup_tables_no_project_index")]


@pytest.fixture
def keys_without_days(transactional_db):
    migrate(BEFORE_KEY_DAYS)
    yield
    migrate(latest())
    partitions.forget_cache()


def test_it_gives_the_existing_keys_the_days_of_their_records(keys_without_days, postgres):
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO records_project (name, created_at) VALUES ('acme', now())")
        cursor.execute("SELECT id FROM records_project")
        (project,) = cursor.fetchone()
    ages = {"rec-today": 0.1, "rec-5": 5, "rec-45": 45}  # the last in the default partition
    for key, days_ago in ages.items():
        insert(project, key, days_ago)
        rows(
            "INSERT INTO records_recordkey (project_id, record_key) VALUES (%s, %s) RETURNING 1",
            [project, key],
        )
    # The key of a record gone (a partition detached, not dropped, when an expiry stopped).
    rows(
        "INSERT INTO records_recordkey (project_id, record_key) VALUES (%s, 'gone') RETURNING 1",
        [project],
    )

    migrate(latest())

    assert dict(rows("SELECT record_key, day FROM records_recordkey")) == {
        key: partitions.day_of(NOW - timedelta(days=days_ago)) for key, days_ago in ages.items()
    }
    assert rows(
        "SELECT is_nullable FROM information_schema.columns "
        "WHERE table_name = 'records_recordkey' AND column_name = 'day'"
    ) == [("NO",)]
    assert rows("SELECT indexdef FROM pg_indexes WHERE indexname = 'record_key_day'") == [
        ("CREATE INDEX record_key_day ON public.records_recordkey USING btree (day)",)
    ]


@pytest.mark.both_dbs
def test_the_key_days_migrate_on_either_database(keys_without_days):
    from records.models import Project, RecordKey

    migrate(latest())  # from 0013, which the fixture migrated back to

    project = Project.objects.create(name="acme")
    RecordKey.objects.create(project=project, record_key="rec", day=partitions.day_of(NOW))
    assert RecordKey.objects.get().day == partitions.day_of(NOW)
