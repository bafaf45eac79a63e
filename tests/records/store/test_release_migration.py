"""Migration 0032 adds `release` to the partitioned records table: every day partition gets the
column, the records stored before it read null, and new ones store theirs beside them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from records.models import Record
from records.store import partitions
from records.store.ingest import ingest
from tests.support.factories import record
from tests.support.migrations import latest, migrate

BEFORE = [("records", "0031_redaction_rules")]
NOW = timezone.now()


def rows(sql: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def partitions_with_release() -> dict[str, bool]:
    """Each partition of the records table: whether it has the release column."""
    return dict(
        rows(
            "SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
            "AND a.attname = 'release' AND NOT a.attisdropped) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'records_record'::regclass"
        )
    )


@pytest.fixture
def before_release(transactional_db, postgres):
    migrate(BEFORE)
    yield
    migrate(latest())
    partitions.forget_cache()


def test_every_partition_gets_the_column_and_old_records_read_null(before_release):
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO records_project (name, created_at) VALUES ('acme', now())")
        cursor.execute("SELECT id FROM records_project")
        (project,) = cursor.fetchone()
        for n, days_ago in enumerate([0.1, 2, 45]):  # two day partitions and the default
            cursor.execute(
                "INSERT INTO records_record (project_id, record_key, kind, run_id, ts, "
                "received_at, is_swap, is_fallback, is_error, is_contract_break, rollup_key, "
                "has_violation, data, derived) VALUES (%s, %s, 'turn', 'run-1', %s, %s, false, "
                "false, false, false, '', false, '{}', '{}')",
                [project, f"old-{n}", NOW - timedelta(days=days_ago), NOW],
            )
    assert set(partitions_with_release().values()) == {False}

    migrate(latest())

    assert set(partitions_with_release().values()) == {True}
    assert len(partitions_with_release()) > 3
    partitions.forget_cache()
    ingest(
        project, enumerate([record("turn", id="new-1", release="v2", ts=NOW.isoformat())]), now=NOW
    )
    stored = dict(Record.objects.filter(project_id=project).values_list("record_key", "release"))
    assert stored == {"old-0": None, "old-1": None, "old-2": None, "new-1": "v2"}

    migrate(BEFORE)  # and back: the column goes from every partition
    assert set(partitions_with_release().values()) == {False}
