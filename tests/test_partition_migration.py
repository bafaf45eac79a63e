"""Migration 0009 converts an existing records table, with its data, to the daily partitions and
back (PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from records import partitions

BEFORE = [("records", "0008_apikey_last_used")]
NOW = timezone.now()


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


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
            "INSERT INTO records_recordkey (project_id, record_key) VALUES (%s, 'rec-1') "
            "ON CONFLICT DO NOTHING RETURNING 1",
            [project],
        )
        == []
    )
    assert rows(
        "SELECT contype FROM pg_constraint WHERE conrelid = 'records_record'::regclass "
        "ORDER BY contype"
    ) == [("f",), ("p",)]

    migrate(BEFORE)

    assert rows("SELECT count(*) FROM pg_inherits") == [(0,)]
    assert len(rows("SELECT id FROM records_record")) == 7
    assert rows(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'records_record'::regclass "
        "AND contype = 'u'"
    ) == [("record_key_unique",)]
