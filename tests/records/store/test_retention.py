"""Retention: records past it expire (whole partitions on PostgreSQL, batched deletes on SQLite),
rollups outlive them, ids stay idempotent across partitions, and pages and exports say when a
range starts before what is kept."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from records.catchup import catch_up
from records.contract import rollup_keys
from records.contract.normalise import normalise
from records.models import (
    AuditEntry,
    Classification,
    Membership,
    Record,
    RecordKey,
    Rollup,
    Run,
    ToolDecision,
    ToolMiss,
)
from records.store import audit_trail, partitions, retention
from records.store.writer import store_records
from tests.support.factories import record
from tests.support.plans import node_types, plan_nodes, scans_of, shape, uses_index

NOW = timezone.now()
TODAY = partitions.day_of(NOW)


@pytest.fixture(autouse=True)
def _fresh_partition_cache():
    """Partitions a test creates are rolled back with it: ingest must not remember them."""
    partitions.forget_cache()
    yield
    partitions.forget_cache()


@pytest.fixture
def retain(settings):
    def set_days(records: int, rollups: int = 400) -> None:
        settings.DECISIONBOARD = {
            **settings.DECISIONBOARD,
            "RETENTION_DAYS": records,
            "ROLLUP_RETENTION_DAYS": rollups,
        }

    return set_days


def at(days_ago: float, **envelope) -> dict:
    ts = NOW - timedelta(days=days_ago)
    return record(ts=ts.isoformat().replace("+00:00", "Z"), **envelope)


def store(persona, *records: dict):
    return store_records(persona.project.pk, [normalise(r, now=NOW) for r in records], NOW)


def operator(persona) -> Client:
    user = get_user_model().objects.create_user("operator")
    Membership.objects.create(user=user, project=persona.project)
    client = Client()
    client.force_login(user)
    return client


def keys_of(persona) -> set[str]:
    return set(
        RecordKey.objects.filter(project=persona.project).values_list("record_key", flat=True)
    )


def table_of(record_key: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM records_record WHERE record_key = %s",
            [record_key],
        )
        return cursor.fetchone()[0]


def table_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


# --- expiry -------------------------------------------------------------------------------------


@pytest.mark.both_dbs
def test_it_expires_records_past_retention_and_keeps_their_rollups_and_runs(alice, retain):
    retain(3)
    store(alice, at(5, id="old", run_id="run-old"), at(1, id="recent", run_id="run-new"))
    catch_up()
    old_day = (NOW - timedelta(days=5)).replace(hour=0, minute=0, second=0, microsecond=0)
    rollups_before = Rollup.objects.filter(grain="day", bucket=old_day).count()
    assert rollups_before > 0

    retention.expire(NOW)

    assert list(Record.objects.values_list("record_key", flat=True)) == ["recent"]
    assert Rollup.objects.filter(grain="day", bucket=old_day).count() == rollups_before
    assert Run.objects.filter(run_id="run-old").exists()


def days_of(persona) -> dict[str, date]:
    return dict(RecordKey.objects.filter(project=persona.project).values_list("record_key", "day"))


def test_it_drops_the_partition_of_a_day_past_retention_with_its_keys(alice, bob, retain, postgres):
    retain(3)
    store(alice, at(5, id="old"), at(3, id="oldest-kept"), at(1, id="recent"))
    store(bob, at(5, id="old"), at(5.1, id="bob-old"))
    catch_up()
    old = partitions.day_name(TODAY - timedelta(days=5))
    assert table_of("old") == old
    rollups = rollup_rows()

    result = retention.expire(NOW)

    assert old in result.partitions_dropped
    assert not table_exists(old)
    assert not partitions.expired_tables()
    assert result.records_deleted == 0  # a DROP, not a DELETE
    assert result.keys_deleted == 3  # every project's keys of the day
    assert rollup_rows() == rollups
    # The keys of the other days are untouched, with the days of their records.
    assert days_of(alice) == {
        "oldest-kept": TODAY - timedelta(days=3),
        "recent": TODAY - timedelta(days=1),
    }
    assert days_of(bob) == {}
    # The key went with its record: the id may be posted again, with its old ts (past
    # retention: the default partition, until the next expiry) or a new one.
    assert store(alice, at(5, id="old")).accepted == 1
    assert table_of("old") == partitions.DEFAULT
    assert store(bob, at(1, id="old")).accepted == 1
    assert store(alice, at(5, id="old"), at(1, id="recent")).duplicates == 2


def test_an_expiry_stopped_between_detach_and_drop_is_finished_by_the_next(alice, retain, postgres):
    retain(3)
    store(alice, at(5, id="old"), at(1, id="recent"))
    catch_up()
    day = TODAY - timedelta(days=5)
    # A crash after the DETACH: the day is detached and renamed, its keys still there.
    table = partitions.detach_day(day, folded=2**62)
    assert partitions.expired_tables() == [table]
    assert store(alice, at(5, id="old")).duplicates == 1

    result = retention.expire(NOW)

    assert result.keys_deleted == 1
    assert not partitions.expired_tables() and not table_exists(table)
    assert keys_of(alice) == {"recent"}


def test_a_record_of_an_expiring_day_posted_after_its_detach_keeps_its_key(alice, retain, postgres):
    retain(3)
    store(alice, at(5, id="old"))
    catch_up()
    table = partitions.detach_day(TODAY - timedelta(days=5), folded=2**62)
    # Posted in between (a new id of that day): the default partition takes it, with its key.
    assert store(alice, at(5, id="late")).accepted == 1
    assert table_of("late") == partitions.DEFAULT

    assert partitions.drop_expired(table) == 1

    assert keys_of(alice) == {"late"}
    assert store(alice, at(5, id="late")).duplicates == 1
    catch_up()
    retention.expire(NOW)  # and it expires with its key, row by row from the default partition
    assert not Record.objects.exists() and keys_of(alice) == set()


@pytest.mark.both_dbs
def test_it_expires_nothing_the_catch_up_has_not_rolled_up(alice, retain):
    retain(3)
    store(alice, at(5, id="old"))

    retention.expire(NOW)
    assert Record.objects.filter(record_key="old").exists()

    catch_up()
    retention.expire(NOW)
    assert not Record.objects.filter(record_key="old").exists()
    assert Rollup.objects.filter(grain="day").exists()


@pytest.mark.both_dbs
def test_a_project_with_a_shorter_retention_loses_only_its_own_older_records(alice, bob, retain):
    retain(10)
    bob.project.retention_days = 2
    bob.project.save()
    store(alice, at(5, id="alice-5"), at(1, id="alice-1"))
    store(bob, at(5, id="bob-5"), at(1, id="bob-1"))
    catch_up()

    result = retention.expire(NOW)

    kept = set(Record.objects.values_list("record_key", flat=True))
    assert kept == {"alice-5", "alice-1", "bob-1"}
    assert result.records_deleted == 1
    if connection.vendor == "postgresql":
        assert keys_of(bob) == {"bob-1"}  # the trigger deleted the key with its record
        assert result.partitions_dropped == [
            partitions.day_name(day)
            for day in partitions.days_between(TODAY - timedelta(days=30), TODAY)
            if day < TODAY - timedelta(days=10)
        ]


@pytest.mark.both_dbs
def test_rollups_and_runs_expire_after_their_own_longer_retention(alice, retain):
    retain(3, rollups=20)
    store(alice, at(25, id="ancient", run_id="run-ancient"), at(5, id="old", run_id="run-old"))
    catch_up()

    result = retention.expire(NOW)

    assert not Record.objects.exists()
    buckets = set(Rollup.objects.filter(grain="day").values_list("bucket", flat=True))
    assert [b.date() for b in buckets] == [(NOW - timedelta(days=5)).date()]
    assert list(Run.objects.values_list("run_id", flat=True)) == ["run-old"]
    assert result.runs_deleted == 1


# --- the catch-up's state beside the rollups ----------------------------------------------------


def a_run(days_ago: float, run_id: str) -> list[dict]:
    """A run with a classification that fell back (rung 0, then rung 1) and a tool decision
    that missed read_file (offered, not served, called): a row in each of Classification,
    ToolDecision and ToolMiss."""
    verdict = {"toolCallId": "call-1"}
    return [
        at(days_ago, kind="classifier.verdict", run_id=run_id, data={**verdict, "rung": 0}),
        at(days_ago - 0.001, kind="classifier.verdict", run_id=run_id,
           data={**verdict, "rung": 1}),
        at(days_ago, kind="tool_choice.pick", run_id=run_id),
        at(days_ago - 0.001, kind="tool_choice.outcome", run_id=run_id,
           data={"called": ["read_file"]}),
    ]  # fmt: skip


def state_runs(model) -> set[str]:
    return set(model.objects.values_list("run_id", flat=True))


def rollup_rows() -> list[tuple]:
    return sorted(
        Rollup.objects.values_list(
            "grain", "bucket", "kind", "agent", "model", "key", "count", "tokens_in", "tokens_out"
        )
    )


def kind_total(kind: str) -> int:
    return sum(Rollup.objects.filter(grain="day", kind=kind).values_list("count", flat=True))


@pytest.mark.both_dbs
def test_the_state_of_runs_past_retention_expires_and_their_rollups_stay(alice, retain):
    retain(3)
    store(alice, *a_run(5, "run-old"), *a_run(1, "run-new"))
    catch_up()
    for model in (Classification, ToolDecision, ToolMiss):
        assert state_runs(model) == {"run-old", "run-new"}, model
    rollups = rollup_rows()

    result = retention.expire(NOW)

    assert state_runs(Classification) == state_runs(ToolDecision) == {"run-new"}
    assert result.side_rows_deleted == 2
    # The tools pages list runs with their misses: kept as long as the runs.
    assert state_runs(ToolMiss) == {"run-old", "run-new"}
    assert rollup_rows() == rollups
    assert not Record.objects.filter(run_id="run-old").exists()
    # An expiry with nothing new to expire deletes nothing more.
    assert retention.expire(NOW).side_rows_deleted == 0
    assert state_runs(Classification) == {"run-new"}


@pytest.mark.both_dbs
def test_a_late_record_of_an_expired_state_moves_nothing_it_did_not_count(alice, retain):
    retain(3)
    store(alice, *a_run(5, "run-old"))
    catch_up()
    retention.expire(NOW)
    assert not state_runs(Classification) and not state_runs(ToolDecision)
    classifications, links = (
        kind_total(rollup_keys.CLASSIFICATION),
        kind_total(rollup_keys.TOOL_LINK),
    )
    verdicts = kind_total(rollup_keys.VERDICT)
    assert classifications == 1 and links > 0

    # A re-asked rung-1 attempt of the expired call and an outcome of the expired decision,
    # posted late (older than retention: ingest takes them, the catch-up folds them in).
    late = [
        at(5, kind="classifier.verdict", run_id="run-old",
           data={"toolCallId": "call-1", "rung": 1, "reask": True}),
        at(5, kind="tool_choice.outcome", run_id="run-old", data={"called": ["grep"]}),
    ]  # fmt: skip
    assert store(alice, *late).accepted == 2
    catch_up()

    assert kind_total(rollup_keys.VERDICT) == verdicts + 1  # the record itself counts
    # its call counted once, as before
    assert kind_total(rollup_keys.CLASSIFICATION) == classifications
    assert kind_total(rollup_keys.TOOL_LINK) == links  # an outcome without its pick joins nothing
    assert not Rollup.objects.filter(count__lt=0).exists()
    assert list(ToolMiss.objects.values_list("run_id", "misses")) == [("run-old", 1)]
    # Their new state goes at the next expiry, with the late records themselves.
    assert state_runs(Classification) == state_runs(ToolDecision) == {"run-old"}
    result = retention.expire(NOW)
    assert result.side_rows_deleted == 2
    assert not state_runs(Classification) and not state_runs(ToolDecision)
    assert not Record.objects.exists()


@pytest.mark.both_dbs
def test_the_state_waits_while_a_record_past_retention_is_not_folded_in(alice, retain):
    retain(3)
    store(alice, *a_run(5, "run-old"))
    catch_up()
    store(alice, at(6, id="unfolded", run_id="run-other"))

    result = retention.expire(NOW)

    assert result.side_waiting == ["acme"]
    assert state_runs(Classification) == state_runs(ToolDecision) == {"run-old"}
    catch_up()
    assert retention.expire(NOW).side_rows_deleted == 2
    assert not state_runs(Classification) and not state_runs(ToolDecision)


@pytest.mark.both_dbs
def test_tool_misses_and_any_state_left_go_with_their_run(alice, bob, retain):
    retain(3, rollups=20)
    store(alice, *a_run(25, "run-ancient"), *a_run(5, "run-old"))
    store(bob, *a_run(25, "run-ancient"))
    catch_up()
    # A record past retention not folded in yet: alice's state waits for it...
    store(alice, at(6, id="unfolded", run_id="run-other"))

    result = retention.expire(NOW)

    # ... except the state of her runs past the rollups' horizon, which goes with the runs.
    assert result.side_waiting == ["acme"]
    assert result.runs_deleted == 2
    assert result.tool_misses_deleted == 2
    assert set(Run.objects.values_list("run_id", flat=True)) >= {"run-old"}
    assert not Run.objects.filter(run_id="run-ancient").exists()
    for model in (Classification, ToolDecision, ToolMiss):
        assert set(model.objects.values_list("project__name", "run_id")) == {("acme", "run-old")}, (
            model
        )


def insert_records(project_id: int, day, count: int, prefix: str) -> None:
    """`count` records of `day` with their keys, as ingest stores them, straight in SQL."""
    start, _ = partitions.day_bounds(day)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH ins AS (INSERT INTO records_record (project_id, record_key, kind, run_id, ts, "
            "received_at, is_swap, is_fallback, is_error, is_contract_break, rollup_key, "
            "has_violation, data, derived) SELECT %s, %s || n, 'turn', 'run', %s, %s, false, "
            "false, false, false, '', false, '{}', '{}' FROM generate_series(1, %s) AS n "
            "RETURNING project_id, record_key, ts) "
            "INSERT INTO records_recordkey (project_id, record_key, day) "
            "SELECT project_id, record_key, (ts AT TIME ZONE 'UTC')::date FROM ins",
            [project_id, prefix, start + timedelta(hours=1), NOW, count],
        )


def key_delete_plan(day) -> list[dict]:
    start, end = partitions.day_bounds(day)
    with connection.cursor() as cursor:
        cursor.execute(partitions.KEY_DELETE_PLAN)
        params = {"day": day, "start": start, "end": end}
        plan = plan_nodes(cursor, partitions.KEY_DELETE, params)
        cursor.execute(
            "RESET enable_seqscan; RESET enable_nestloop; RESET enable_mergejoin; "
            "RESET synchronous_commit"
        )
    return plan


@pytest.mark.parametrize("statistics", ["none", "analysed", "before the day"])
def test_the_keys_of_an_expired_day_are_deleted_by_their_day_whatever_the_statistics(
    alice, postgres, statistics
):
    expired, kept = TODAY - timedelta(days=2), TODAY - timedelta(days=1)
    # Few records: ids are not given back on rollback, and every later test's catch-up walks
    # them from 0.
    insert_records(alice.project.pk, kept, 5_000, "kept-")
    if statistics == "before the day":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {partitions.KEYS}")
    insert_records(alice.project.pk, expired, 5_000, "old-")
    name = partitions.day_name(expired)
    with connection.cursor() as cursor:
        if statistics == "analysed":
            # As the catch-up's ANALYZE and the keys' VACUUM (ANALYZE) leave them: the day is
            # half the keys, and left to itself the planner reads the whole table for it.
            cursor.execute(f"ANALYZE {name}, {partitions.KEYS}")
        elif statistics == "none":
            # As if never analysed (an earlier test's may have committed some); rolled back with
            # the test.
            cursor.execute(
                "UPDATE pg_class SET reltuples = -1 WHERE oid = %s::regclass", [partitions.KEYS]
            )
            cursor.execute(
                "DELETE FROM pg_statistic WHERE starelid = %s::regclass", [partitions.KEYS]
            )
        cursor.execute(f"ALTER TABLE {partitions.PARENT} DETACH PARTITION {name}")
        cursor.execute(f"ALTER TABLE {name} RENAME TO {partitions.EXPIRED_PREFIX}{expired:%Y%m%d}")

    plan = key_delete_plan(expired)

    assert uses_index(plan, "record_key_day"), plan  # an index scan, or a bitmap one
    assert not scans_of(plan, "Seq Scan", "records_recordkey"), plan
    assert "Nested Loop" not in node_types(plan), plan  # left to itself: each key re-reads the day
    (table,) = partitions.expired_tables()
    assert partitions.drop_expired(table) == 5_000
    assert not partitions.expired_tables()
    # The other day's keys are untouched, with their day.
    assert RecordKey.objects.count() == 5_000
    assert set(RecordKey.objects.values_list("day", flat=True)) == {kept}


@pytest.mark.django_db(transaction=True)
def test_the_keys_are_vacuumed_once_their_dead_rows_reach_a_share_of_the_live_ones(postgres):
    from records.models import Project

    def counters() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE relname = %s",
                [partitions.KEYS],
            )
            return cursor.fetchone()

    def vacuum() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM {partitions.KEYS}")

    # Counts of earlier tests' rolled-back keys still on their way to the statistics (a
    # backend sends its counters at most once a second) land first; then a VACUUM sets them.
    vacuum()
    time.sleep(1.2)
    counters()
    vacuum()
    project = Project.objects.create(name="vacuumed")
    RecordKey.objects.bulk_create(
        RecordKey(project=project, record_key=f"k{n}", day=TODAY) for n in range(500)
    )
    RecordKey.objects.filter(record_key__in=[f"k{n}" for n in range(200)]).delete()
    deadline = time.monotonic() + 15
    while counters() != (200, 300):  # counted a moment after the commit
        assert time.monotonic() < deadline, counters()
        time.sleep(0.3)

    assert not retention.vacuum_keys(share=0.7)  # 200 dead of 300 live: below 70 %
    assert retention.vacuum_keys(share=0.5)
    assert counters() == (0, 300)


# --- idempotency across partitions --------------------------------------------------------------


@pytest.mark.both_dbs
def test_a_duplicate_id_across_a_partition_boundary_is_still_a_duplicate(alice, bob):
    midnight = datetime(TODAY.year, TODAY.month, TODAY.day, tzinfo=UTC) - timedelta(days=1)
    before = record(id="dup", ts=(midnight - timedelta(milliseconds=100)).isoformat())
    after = {**before, "ts": (midnight + timedelta(milliseconds=100)).isoformat()}

    assert store(alice, before).accepted == 1
    # Re-sent with another ts, on the other side of midnight: another partition.
    result = store(alice, after)
    assert (result.accepted, result.duplicates) == (0, 1)
    assert store(alice, before).duplicates == 1
    assert Record.objects.get(record_key="dup").ts == midnight - timedelta(milliseconds=100)
    # Ids are unique per project: another project's "dup" is its own record.
    assert store(bob, after).accepted == 1
    if connection.vendor == "postgresql":
        assert table_of("dup") in {
            partitions.day_name(TODAY - timedelta(days=2)),
            partitions.day_name(TODAY - timedelta(days=1)),
        }
        assert RecordKey.objects.count() == 2
        # The key keeps the day of the record stored: its partition's, which expires it.
        assert days_of(alice) == {"dup": (midnight - timedelta(milliseconds=100)).date()}


def test_a_batch_repeating_a_key_with_two_timestamps_stores_it_once(alice, postgres):
    first, again = at(1, id="twice"), at(4, id="twice")
    result = store(alice, first, again)
    assert (result.accepted, result.duplicates) == (1, 1)
    assert Record.objects.count() == 1


# --- partitions ---------------------------------------------------------------------------------


def test_ingest_creates_the_partition_of_a_day_inside_retention_on_demand(alice, retain, postgres):
    retain(60)
    day = TODAY - timedelta(days=45)  # the migration created 30 days back
    assert day not in partitions.existing_days()

    assert store(alice, at(45, id="backfill")).accepted == 1

    assert table_of("backfill") == partitions.day_name(day)


def test_a_record_older_than_any_partition_goes_to_the_default_one_and_expires(
    alice, retain, postgres
):
    retain(30)
    ancient = record(id="ancient", ts="2001-02-03T04:05:06Z")

    assert store(alice, ancient).accepted == 1
    assert table_of("ancient") == partitions.DEFAULT
    assert date_2001_has_no_partition()

    catch_up()
    result = retention.expire(NOW)
    assert result.records_deleted == 1
    assert not Record.objects.exists()
    assert keys_of(alice) == set()


def date_2001_has_no_partition() -> bool:
    return not any(day.year == 2001 for day in partitions.existing_days())


def test_expiry_moves_kept_days_out_of_the_default_partition_and_keeps_their_keys(
    alice, retain, postgres
):
    retain(30)
    store(alice, at(45, id="early"))  # outside the window: the default partition
    assert table_of("early") == partitions.DEFAULT

    retain(60)
    retention.expire(NOW)

    assert table_of("early") == partitions.day_name(TODAY - timedelta(days=45))
    assert keys_of(alice) == {"early"}
    assert store(alice, at(45, id="early")).duplicates == 1


def test_expiry_creates_the_partitions_ahead(db, postgres):
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {partitions.day_name(TODAY + timedelta(days=2))}")

    retention.expire(NOW)

    assert {TODAY + timedelta(days=n) for n in range(3)} <= partitions.existing_days()


def test_the_catch_up_reads_an_unanalysed_partitioned_table_by_index(alice, postgres):
    today = partitions.day_name(TODAY)
    with connection.cursor() as cursor:
        # An earlier test on this database may have analysed today's partition and left its
        # statistics behind; TRUNCATE gives the partition a new, unanalysed file (and is
        # rolled back with the test).
        cursor.execute(f"TRUNCATE {today}")
        # A day's worth of records, bulk-loaded and never analysed (autovacuum may be off).
        cursor.execute(
            "INSERT INTO records_record (project_id, record_key, kind, run_id, ts, received_at, "
            "is_swap, is_fallback, is_error, is_contract_break, rollup_key, has_violation, data, "
            "derived) SELECT %s, 'k' || n, 'turn', 'run', %s, %s, false, false, false, false, "
            "'', false, '{}', '{}' FROM generate_series(1, 50000) AS n",
            [alice.project.pk, NOW - timedelta(seconds=1), NOW],
        )
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [today])
        assert cursor.fetchone()[0] <= 0  # no statistics
        plans = {}
        for name, sql in {
            "fetch": "SELECT * FROM records_record WHERE id > 100 AND id <= 20100",
            "high water": "SELECT max(id) FROM records_record",
        }.items():
            plans[name] = plan_nodes(cursor, sql)
    for name, plan in plans.items():
        scans = [node for node in plan if node.get("Relation Name") == today]
        # An index scan, or a bitmap heap scan over the primary key's index: never a Seq Scan.
        assert scans and "Seq Scan" not in node_types(scans), (name, plan)


# --- what pages and exports say -----------------------------------------------------------------


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


@pytest.mark.both_dbs
def test_the_runs_page_says_when_the_range_starts_before_retention(alice, retain):
    retain(7)
    store(alice, at(1))
    page = operator(alice)
    kept = retention.kept_since(alice.project, NOW)

    past = page.get("/runs/", {"period": "custom", "from": _iso(NOW - timedelta(days=9))})
    within = page.get("/runs/", {"period": "custom", "from": _iso(NOW - timedelta(days=2))})

    assert past.status_code == within.status_code == 200
    notice = (
        f"Records before {kept:%Y-%m-%d %H:%M} UTC are past this project&#x27;s retention (7 days)"
    )
    assert notice in past.content.decode()
    assert "retention-notice" not in within.content.decode()


@pytest.mark.both_dbs
def test_a_run_whose_first_records_are_past_retention_says_so(alice, retain):
    retain(3)
    store(alice, at(5, run_id="long-run"), at(1, run_id="long-run"))
    catch_up()
    page = operator(alice).get("/runs/long-run/")
    assert "past this project&#x27;s retention (3 days)" in page.content.decode()


@pytest.mark.both_dbs
def test_a_chart_page_says_when_the_range_starts_before_the_rollups_kept(alice, retain):
    retain(3, rollups=10)
    page = operator(alice)
    start, end = _iso(NOW - timedelta(days=20)), _iso(NOW - timedelta(days=1))
    response = page.get("/classifiers/", {"period": "custom", "from": start, "to": end})
    assert "Rollups before" in response.content.decode()
    assert "past retention (10 days)" in response.content.decode()


@pytest.mark.both_dbs
def test_an_export_says_in_a_header_when_its_range_is_past_retention(alice, retain):
    retain(7)
    store(alice, at(1, id="kept"))
    client = alice.client(alice.read_key)
    kept = retention.kept_since(alice.project, NOW)

    past = client.get("/api/v1/export", {"format": "csv", "from": _iso(NOW - timedelta(days=9))})
    within = client.get("/api/v1/export", {"format": "csv", "from": _iso(NOW - timedelta(days=2))})

    assert past.status_code == within.status_code == 200
    assert "(7 days)" in past[retention.PAST_RETENTION_HEADER]
    assert retention.PAST_RETENTION_HEADER not in within
    assert past[retention.RETAINED_SINCE_HEADER] == _iso(kept)
    assert b"kept" in b"".join(past.streaming_content)


@pytest.mark.both_dbs
def test_an_export_job_says_when_its_range_is_past_retention(alice, retain):
    retain(7)
    client = alice.client(alice.read_key)
    response = client.post(
        "/api/v1/exports",
        {"format": "csv", "from": _iso(NOW - timedelta(days=9))},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert "(7 days)" in response.json()["past_retention"]
    listed = client.get("/api/v1/exports").json()["results"][0]
    assert listed["past_retention"] == response.json()["past_retention"]


# --- operating it -------------------------------------------------------------------------------


def test_the_doctor_asks_for_the_expiry_when_tomorrows_partition_is_missing(db, postgres):
    from ops.doctor import retention as findings

    assert [f.ok for f in findings(NOW)] == [True]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {partitions.day_name(TODAY + timedelta(days=1))}")

    (missing,) = findings(NOW)
    assert not missing.ok
    assert "manage.py expire_records" in missing.fix


def test_the_doctor_names_partitions_past_retention_still_attached(db, retain, postgres):
    from ops.doctor import retention as findings

    retain(7)
    (stale,) = findings(NOW)
    assert not stale.ok
    assert "past retention still attached" in stale.message


def test_expire_records_drops_what_is_past_retention(alice, retain, postgres):
    from io import StringIO

    from django.core.management import call_command

    retain(3)
    store(alice, at(5, id="old"))
    catch_up()
    out = StringIO()
    call_command("expire_records", stdout=out)
    assert partitions.day_name(TODAY - timedelta(days=5)) in out.getvalue()
    assert not Record.objects.exists()


@pytest.mark.both_dbs
def test_audit_entries_outlive_every_retention(alice, bob, retain):
    """The audit log is kept as long as its project: no expiry deletes it, however old."""
    retain(1, rollups=2)
    alice.project.retention_days = 1
    alice.project.save()
    actor = audit_trail.command_actor("a test")
    with transaction.atomic():
        for persona in (alice, bob):
            audit_trail.record(persona.project, "update", "project", actor=actor, after={"n": 1})
    long_ago = NOW - timedelta(days=4000)
    AuditEntry.objects.update(at=long_ago)
    store(alice, at(5, id="old", run_id="run-old"))
    store(bob, at(5, id="old", run_id="run-old"))
    catch_up()

    retention.expire(NOW + timedelta(days=10))
    call_command("expire_records", stdout=StringIO())

    assert not Record.objects.exists() and not Run.objects.exists()
    assert list(AuditEntry.objects.values_list("project__name", "at").order_by("id")) == [
        ("acme", long_ago),
        ("globex", long_ago),
    ]


# --- a project's own retention on PostgreSQL ----------------------------------------------------


def insert_spread(
    project_id: int, day, count: int, prefix: str, *, shuffled=False, data: str = "{}"
) -> None:
    """`count` records of `day` a millisecond apart, with their keys, straight in SQL; stored
    in `ts` order, or in random order (as out-of-order ingest leaves them) when `shuffled`."""
    start, _ = partitions.day_bounds(day)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH ins AS (INSERT INTO records_record (project_id, record_key, kind, run_id, ts, "
            "received_at, is_swap, is_fallback, is_error, is_contract_break, rollup_key, "
            "has_violation, data, derived) SELECT %s, %s || n, 'turn', 'run', "
            "%s + n * interval '1 millisecond', %s, false, false, false, false, '', false, "
            "%s, '{}' FROM generate_series(1, %s) AS n "
            + ("ORDER BY random() " if shuffled else "")
            + "RETURNING project_id, record_key, ts) "
            "INSERT INTO records_recordkey (project_id, record_key, day) "
            "SELECT project_id, record_key, (ts AT TIME ZONE 'UTC')::date FROM ins",
            [project_id, prefix, start + timedelta(hours=1), NOW, data, count],
        )


def project_delete_plan(table: str, project_id: int, before: datetime) -> list[tuple]:
    """The plan of one batch of a project's expiry, as delete_project_records runs it, without
    the costs and row estimates (which follow the statistics)."""
    params = {"project": project_id, "since": datetime.min.replace(tzinfo=UTC), "before": before,
              "folded": 2**62, "batch": retention.PROJECT_BATCH}  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(retention.PROJECT_DELETE_PLAN)
        plan = shape(plan_nodes(cursor, retention.PROJECT_DELETE.format(table=table), params))
        cursor.execute(retention.PROJECT_DELETE_RESET)
    return plan


def test_a_projects_expiry_has_the_same_plan_with_statistics_absent_and_analysed(
    alice, bob, postgres
):
    expired = TODAY - timedelta(days=3)
    table = partitions.day_name(expired)
    before, _ = partitions.day_bounds(expired + timedelta(days=1))
    # The project is most of the day, its records wide and out of `ts` order: analysed, a
    # whole-table read and a sort look cheaper to the planner than the index.
    body = '{"text": "%s"}' % ("x" * 1_000)
    insert_spread(alice.project.pk, expired, 3_000, "alice-", shuffled=True, data=body)
    insert_spread(bob.project.pk, expired, 100, "bob-", shuffled=True, data=body)
    with connection.cursor() as cursor:
        # As if never analysed (an earlier test's may have committed some); rolled back with the
        # test.
        cursor.execute("UPDATE pg_class SET reltuples = -1 WHERE oid = %s::regclass", [table])
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = %s::regclass", [table])
    absent = project_delete_plan(table, alice.project.pk, before)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")
    analysed = project_delete_plan(table, alice.project.pk, before)

    assert absent == analysed
    assert ("Index Scan", table, f"{table}_project_id_ts_idx") in analysed, analysed
    assert ("Tid Scan", table, None) in analysed, analysed
    types = [node_type for node_type, _, _ in analysed]
    assert "Seq Scan" not in types and "Sort" not in types, analysed
    assert retention.delete_project_records(alice.project.pk, before, 2**62, batch=1_000) == 3_000
    assert keys_of(bob) == {f"bob-{n}" for n in range(1, 101)}
    assert not keys_of(alice)


@pytest.mark.django_db(transaction=True)
def test_a_projects_expiry_never_holds_ingest_for_a_second(alice, postgres):
    """Ingest re-posting ids of records being expired waits for the batch that deletes their
    keys: each batch is its own short transaction, so no statement waits a second (lock_timeout
    makes one that would fail)."""
    import threading

    from django.db import connections

    expired = TODAY - timedelta(days=3)
    partitions.ensure_days([expired])
    count, batch = 300_000, 5_000
    insert_spread(alice.project.pk, expired, count, "old-")
    before, _ = partitions.day_bounds(expired + timedelta(days=1))
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(id) FROM records_record")
        (folded,) = cursor.fetchone()
    deleted, failed = [], []

    def expire() -> None:
        try:
            deleted.append(
                retention.delete_project_records(alice.project.pk, before, folded, batch=batch)
            )
        except Exception as exc:  # reported by the assertion below
            failed.append(exc)
        finally:
            connections.close_all()

    expiry = threading.Thread(target=expire)
    waits = []
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '1s'")
    try:
        expiry.start()
        while expiry.is_alive():
            # Ids from all over the expiring range (some deleted a moment ago, some not yet)
            # posted again, and a new record.
            n = len(waits)
            resent = [at(3, id=f"old-{1 + (k * 6_000 + n * 37) % count}") for k in range(50)]
            started = time.perf_counter()
            store(alice, *resent, at(0, id=f"new-{n}"))
            waits.append(time.perf_counter() - started)
            time.sleep(0.01)
    finally:
        expiry.join()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

    assert not failed, failed
    assert deleted == [count]
    assert len(waits) >= 10, waits  # ingest went on while the expiry ran
    assert max(waits) < 1.0, waits
