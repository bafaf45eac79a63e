"""The bulk store underneath ingest."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from django.db import transaction

from records.contract.normalise import normalise
from records.models import Record
from records.store.writer import STAGE, store_records
from tests.conftest import database_url
from tests.factories import record

NOW = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def batch(n):
    return [normalise(record(), now=NOW) for _ in range(n)]


@pytest.mark.both_dbs
def test_it_stores_several_batches_in_one_transaction(alice):
    with transaction.atomic():
        assert store_records(alice.project.pk, batch(3), NOW).accepted == 3
        assert store_records(alice.project.pk, batch(2), NOW).accepted == 2
    assert Record.objects.count() == 5


def test_it_empties_the_postgresql_stage_between_batches(alice, postgres):
    with transaction.atomic():
        store_records(alice.project.pk, batch(30), NOW)
        store_records(alice.project.pk, batch(4), NOW)
        with postgres.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {STAGE}")
            assert cursor.fetchone()[0] == 4


def test_it_keeps_the_postgresql_stage_file_between_transactions(transactional_db, alice, postgres):
    # A TRUNCATE a batch would give the temporary stage a new file and pg_class row version.
    def stage_file():
        with postgres.cursor() as cursor:
            cursor.execute(f"SELECT relfilenode FROM pg_class WHERE oid = '{STAGE}'::regclass")
            return cursor.fetchone()[0]

    store_records(alice.project.pk, batch(3), NOW)
    first = stage_file()
    assert store_records(alice.project.pk, batch(2), NOW).accepted == 2
    assert stage_file() == first
    assert Record.objects.count() == 5


def test_ingest_never_waits_for_a_catch_up_pass_that_updated_the_run(
    transactional_db, alice, postgres
):
    store_records(alice.project.pk, [normalise(record(run_id="busy"), now=NOW)], NOW)
    with psycopg.connect(database_url()) as catch_up:
        # A pass has updated the run (records.catchup.upserts.merge_runs) and not committed yet.
        catch_up.execute("UPDATE records_run SET record_count = 1 WHERE run_id = 'busy'")
        with postgres.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # waiting would fail the batch
        late = normalise(record(run_id="busy"), now=NOW)
        assert store_records(alice.project.pk, [late], NOW).accepted == 1
        catch_up.rollback()
