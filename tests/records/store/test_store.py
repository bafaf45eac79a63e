"""The bulk store underneath ingest."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import orjson
import psycopg
import pytest
from django.db import connections, transaction

from records.contract.normalise import normalise
from records.models import PendingBatch, Project, Record, RecordKey, Run
from records.store.writer import COLUMNS, STAGE, ProjectGone, store_records
from tests.support.factories import record
from tests.support.services import database_url

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


def runs_read(postgres, schema: str) -> int:
    """The rows of `schema`'s runs table read so far in this transaction."""
    with postgres.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_xact_user_tables WHERE schemaname = %s AND relname = 'records_run'",
            [schema],
        )
        return cursor.fetchone()[0]


def private_runs_table(postgres, schema: str, *, statistics_targets: bool = False) -> None:
    """A copy of the runs table, same columns and indexes (and with `statistics_targets`, the
    same per-column statistics targets), first on the search path until the test's transaction
    ends, so that what the test does to its statistics leaves the shared table's alone."""
    with postgres.cursor() as cursor:
        cursor.execute(
            "SELECT attname, attstattarget FROM pg_attribute "
            "WHERE attrelid = 'public.records_run'::regclass AND attnum > 0 "
            "AND NOT attisdropped AND attstattarget >= 0"
        )
        targets = cursor.fetchall() if statistics_targets else []
        cursor.execute(
            f"CREATE SCHEMA {schema}; "
            f"CREATE TABLE {schema}.records_run (LIKE public.records_run INCLUDING ALL); "
            f"SET LOCAL search_path = {schema}, public"
        )
        for column, target in targets:
            cursor.execute(f"ALTER TABLE records_run ALTER COLUMN {column} SET STATISTICS {target}")


def add_runs(postgres, project_id: int, prefix: str, count: int) -> None:
    """`count` runs of the project, named `prefix` and a number from 1."""
    with postgres.cursor() as cursor:
        cursor.execute(
            "INSERT INTO records_run (project_id, run_id, first_ts, last_ts, record_count, "
            "created_at, kind_counts, models_seen, has_swap, has_fallback, has_error, "
            "has_contract_break, has_violation) "
            "SELECT %s, %s || g, now(), now(), 1, now(), '{}', '{}', "
            "false, false, false, false, false FROM generate_series(1, %s) AS g",
            [project_id, prefix, count],
        )


def test_a_batch_reads_its_own_runs_not_every_run_of_the_project(alice, postgres):
    # A runs table as a new database has it, never analysed (autovacuum is off), whatever the
    # tests before did to the shared one. A plan that hashed the project's runs to find the
    # batch's new ones would read all 20,000 of them for every batch.
    private_runs_table(postgres, "never_analysed")
    add_runs(postgres, alice.project.pk, "old-", 20_000)

    before = runs_read(postgres, "never_analysed")
    rows = [normalise(record(run_id=run), now=NOW) for run in ("old-7", "new-1", "new-1", "new-2")]
    assert store_records(alice.project.pk, rows, NOW).accepted == 4
    assert runs_read(postgres, "never_analysed") - before < 100
    new = Run.objects.filter(project=alice.project, run_id__startswith="new-")
    assert sorted(new.values_list("run_id", flat=True)) == ["new-1", "new-2"]
    assert Run.objects.filter(project=alice.project).count() == 20_002


def test_a_new_projects_batch_probes_its_runs_whatever_the_last_analyze_saw(alice, bob, postgres):
    # The runs table as the catch-up leaves it when it analysed the table while only another
    # project had runs, and the project then gained 20,000.
    private_runs_table(postgres, "analysed_before", statistics_targets=True)
    add_runs(postgres, bob.project.pk, "bob-", 50)
    with postgres.cursor() as cursor:
        cursor.execute("ANALYZE records_run")
    add_runs(postgres, alice.project.pk, "old-", 20_000)

    before = runs_read(postgres, "analysed_before")
    rows = [normalise(record(run_id=run), now=NOW) for run in ("old-7", "new-1", "new-2")]
    assert store_records(alice.project.pk, rows, NOW).accepted == 3
    # One probe of the (project, run) index per run, not a filter over the project's runs.
    assert runs_read(postgres, "analysed_before") - before < 100
    # A run's page reads its run alike.
    assert Run.objects.get(project=alice.project, run_id="new-2").record_count == 0
    assert runs_read(postgres, "analysed_before") - before < 100
    assert Run.objects.filter(project=alice.project).count() == 20_002


def stored_of(project_id: int) -> tuple[int, int]:
    """Records and record keys of a project, deleted or not."""
    return (
        Record.objects.filter(project_id=project_id).count(),
        RecordKey.objects.filter(project_id=project_id).count(),
    )


@pytest.mark.both_dbs
def test_it_stores_nothing_for_a_deleted_project(alice, bob):
    gone = alice.project.pk
    store_records(gone, batch(2), NOW)
    alice.project.delete()
    assert stored_of(gone) == (0, 0)
    with pytest.raises(ProjectGone):
        store_records(gone, batch(3), NOW)
    assert stored_of(gone) == (0, 0)
    assert store_records(bob.project.pk, batch(1), NOW).accepted == 1


def wait_for_a_lock_wait(seconds: float = 10) -> None:
    """Until some backend of the test database waits for a lock (seen from a connection of its
    own: pg_stat_activity is read once per transaction)."""
    deadline = time.monotonic() + seconds
    with psycopg.connect(database_url(), autocommit=True) as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.02)
    raise AssertionError("nothing waited for a lock")


def in_thread(function) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run():
        try:
            outcome.append(function())
        except Exception as exc:
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_delete_waits_for_a_batch_under_way_and_deletes_its_records(
    transactional_db, alice, postgres
):
    project_id = alice.project.pk
    with transaction.atomic():
        assert store_records(project_id, batch(3), NOW).accepted == 3
        deleting, outcome = in_thread(lambda: Project.objects.get(pk=project_id).delete())
        wait_for_a_lock_wait()  # the delete, on the project row the batch holds
        assert deleting.is_alive()
    deleting.join(10)
    assert not isinstance(outcome[0], Exception)
    assert stored_of(project_id) == (0, 0)


def test_a_batch_waits_for_a_delete_under_way_and_stores_nothing(transactional_db, alice, postgres):
    project_id = alice.project.pk
    store_records(project_id, batch(2), NOW)
    with transaction.atomic():
        Project.objects.get(pk=project_id).delete()
        storing, outcome = in_thread(lambda: store_records(project_id, batch(3), NOW))
        wait_for_a_lock_wait()  # the batch, on the project row the delete holds
        assert storing.is_alive()
    storing.join(10)
    assert isinstance(outcome[0], ProjectGone)
    assert stored_of(project_id) == (0, 0)


@pytest.mark.both_dbs
def test_it_stores_every_column_as_normalised(alice):
    tricky = 'a\\b\tc\nd "e" \u00e9\u4e2d\U0001f600 \\N'
    posted = record(
        "tool_choice.pick",
        id="r\\1\t",
        run_id=tricky,
        agent=tricky,
        data={"latencyMs": 0.1 + 0.2, "extra": {"text": tricky, "big": 2**70, "neg": -1e-300}},
    )
    normalised = normalise(posted, now=NOW)
    store_records(alice.project.pk, [normalised], NOW)
    stored = Record.objects.get(project=alice.project)
    assert stored.record_key == "r\\1\t" and stored.run_id == tricky and stored.agent == tricky
    assert stored.ts == normalised.ts and stored.latency_ms == 0.1 + 0.2
    assert stored.tokens_in == 800 and stored.iteration == 0 and stored.is_swap is False
    assert stored.data["extra"] == {"text": tricky, "big": 2**70, "neg": -1e-300}
    assert stored.data == posted["data"]
    for column in COLUMNS:
        expected = getattr(normalised, column, None)
        if column in ("data", "derived"):
            expected = orjson.loads(getattr(normalised, f"{column}_json"))
        assert getattr(stored, column) == expected, column


@pytest.mark.both_dbs
def test_a_batch_of_new_and_resent_records_stores_the_new_ones(alice):
    first = [normalise(record(run_id="old"), now=NOW) for _ in range(3)]
    store_records(alice.project.pk, first, NOW)
    new = [normalise(record(run_id="new"), now=NOW) for _ in range(2)]
    result = store_records(alice.project.pk, [first[2], new[0], first[0], new[1]], NOW)
    assert (result.accepted, result.duplicates) == (2, 2)
    assert result.accepted_by_kind == {"model_selection": 2}
    assert Record.objects.filter(project=alice.project).count() == 5
    assert set(Run.objects.values_list("run_id", flat=True)) == {"old", "new"}
    assert PendingBatch.objects.count() == 2


@pytest.mark.both_dbs
def test_a_batch_of_resent_records_only_stores_nothing_more(alice):
    sent = batch(3)
    store_records(alice.project.pk, sent, NOW)
    result = store_records(alice.project.pk, sent, NOW)
    assert (result.accepted, result.duplicates) == (0, 3)
    assert Record.objects.filter(project=alice.project).count() == 3
    assert PendingBatch.objects.count() == 1


def test_a_batch_sharing_keys_with_one_under_way_waits_and_counts_them_as_duplicates(
    transactional_db, alice, postgres
):
    project_id = alice.project.pk
    shared = batch(3)
    with transaction.atomic():
        assert store_records(project_id, shared, NOW).accepted == 3
        storing, outcome = in_thread(lambda: store_records(project_id, [*shared, *batch(1)], NOW))
        wait_for_a_lock_wait()  # on the keys the first batch inserted and has not committed
        assert storing.is_alive()
    storing.join(10)
    assert (outcome[0].accepted, outcome[0].duplicates) == (1, 3)
    assert stored_of(project_id) == (4, 4)
