"""Retention: how long raw records, and the rollups built from them, are kept, and expiring them.

Raw records are kept DECISIONBOARD_RETENTION_DAYS (a project's `retention_days` overrides it)
counted in whole UTC days: with 30, on 2026-12-01 the records from 2026-11-01 00:00 on are kept.
Rollups, runs and streak segments are kept DECISIONBOARD_ROLLUP_RETENTION_DAYS (longer), so the
charts and the runs list reach further back than the records behind them.

`expire` runs hourly (workers.schedule). On PostgreSQL a day past retention is a whole partition
DETACHed and DROPped (records.partitions), never a DELETE of its rows; the partitions are dropped
at the longest retention of any project, and a project whose own retention is shorter has its
older rows deleted in batches (a partition holds every project's records of its day, so it cannot
be dropped for one). On SQLite the records table is a plain table and every expiry is batched
deletes. Either way no record above the catch-up watermark is expired: its rollups come first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from records import partitions
from records.models import Project, Record, Rollup, Run, StreakSegment

log = logging.getLogger(__name__)

# Days of partitions created ahead of today, so that ingest after midnight never waits for one.
DAYS_AHEAD = 2


def global_days() -> int:
    return settings.DECISIONBOARD["RETENTION_DAYS"]


def rollup_days() -> int:
    return settings.DECISIONBOARD["ROLLUP_RETENTION_DAYS"]


def project_days(project: Project) -> int:
    return project.retention_days or global_days()


def longest_days() -> int:
    """The longest retention of any project: PostgreSQL drops partitions past it."""
    return max(global_days(), Project.objects.aggregate(m=Max("retention_days"))["m"] or 0)


def horizon(days: int, now: datetime) -> datetime:
    """The oldest `ts` kept under a retention of `days`: midnight UTC, `days` days ago."""
    start, _ = partitions.day_bounds(partitions.day_of(now) - timedelta(days=days))
    return start


def kept_since(project: Project, now: datetime | None = None) -> datetime:
    """The oldest `ts` of the project's raw records still kept."""
    return horizon(project_days(project), now or timezone.now())


def rollups_kept_since(now: datetime | None = None) -> datetime:
    return horizon(rollup_days(), now or timezone.now())


def partition_window(now: datetime) -> tuple[date, date]:
    """The days ingest creates a partition for on demand: inside the global retention, up to
    DAYS_AHEAD ahead. Older records go to the default partition until they expire."""
    today = partitions.day_of(now)
    return today - timedelta(days=global_days()), today + timedelta(days=DAYS_AHEAD)


def past_retention_notice(project: Project, start: datetime | None, now=None) -> str | None:
    """What a page or an export says when the range asked for starts before the project's raw
    records are kept (None when it does not, or has no start)."""
    if start is None:
        return None
    kept = kept_since(project, now)
    if start >= kept:
        return None
    return (
        f"Records before {kept:%Y-%m-%d %H:%M} UTC are past this project's retention "
        f"({project_days(project)} days) and have been deleted: what is shown here misses them."
    )


# The header of an export or a records page whose range starts before the records kept, and the
# one every such answer carries: the oldest record time kept (RFC 3339).
PAST_RETENTION_HEADER = "Decisionboard-Past-Retention"
RETAINED_SINCE_HEADER = "Decisionboard-Retained-Since"


def retention_headers(project: Project, start: datetime | None, now=None) -> dict[str, str]:
    """The headers an export or a records list answers with (see the two names above)."""
    kept = kept_since(project, now)
    headers = {RETAINED_SINCE_HEADER: kept.isoformat().replace("+00:00", "Z")}
    notice = past_retention_notice(project, start, now)
    if notice:
        headers[PAST_RETENTION_HEADER] = notice
    return headers


def past_rollup_retention_notice(start: datetime | None, now=None) -> str | None:
    """The same for the chart pages, which read rollups (kept longer)."""
    if start is None:
        return None
    kept = rollups_kept_since(now)
    if start >= kept:
        return None
    return (
        f"Rollups before {kept:%Y-%m-%d} UTC are past retention ({rollup_days()} days) and have "
        "been deleted: the charts start there."
    )


def folded_upto() -> int:
    """The highest record id every catch-up lane has folded in: nothing above it may expire."""
    from records import rollup  # (records.rollup imports the store, which imports partitions)

    return rollup.folded_upto()


@dataclass
class Expiry:
    """What one `expire` did."""

    partitions_dropped: list[str]
    partitions_waiting: list[str]  # past retention, but holding records not rolled up yet
    keys_deleted: int = 0
    records_deleted: int = 0  # by batched deletes (SQLite, per-project, the default partition)
    rollups_deleted: int = 0
    runs_deleted: int = 0


def expire(now: datetime | None = None) -> Expiry:
    """Expire what is past retention and create the partitions ahead (PostgreSQL)."""
    now = now or timezone.now()
    folded = folded_upto()
    result = Expiry([], [])
    if connection.vendor == "postgresql":
        _expire_partitions(now, folded, result)
    else:
        for project in Project.objects.all():
            result.records_deleted += delete_in_batches(
                Record._meta.db_table,
                "project_id = %s AND ts < %s AND id <= %s",
                [project.pk, _db_time(kept_since(project, now)), folded],
                row="id",
            )
    _expire_rollups(now, result)
    log.info("retention: %s", result)
    return result


def _expire_partitions(now: datetime, folded: int, result: Expiry) -> None:
    today = partitions.day_of(now)
    longest = longest_days()
    first_kept = today - timedelta(days=longest)
    # Ahead, and the kept days that have records in the default partition (a day whose
    # partition was not created in time, or rows the migration put there).
    partitions.ensure_days(
        [*partitions.days_between(today, today + timedelta(days=DAYS_AHEAD)),
         *_default_days(horizon(longest, now))],
        lock_timeout="5s",
    )  # fmt: skip
    for day in sorted(partitions.existing_days()):
        if day >= first_kept:
            break
        name = partitions.day_name(day)
        try:
            if partitions.detach_day(day, folded=folded) is not None:
                result.partitions_dropped.append(name)
        except partitions.NotRolledUp:
            result.partitions_waiting.append(name)
    for table in partitions.expired_tables():
        result.keys_deleted += partitions.drop_expired(table)
    result.records_deleted += delete_in_batches(
        partitions.DEFAULT, "ts < %s AND id <= %s", [horizon(longest, now), folded]
    )
    for project in Project.objects.filter(retention_days__lt=longest):
        # Prune to the partitions older than the project's horizon (and the default one).
        result.records_deleted += delete_in_batches(
            partitions.PARENT,
            "project_id = %s AND ts < %s AND id <= %s",
            [project.pk, kept_since(project, now), folded],
            row="id",
        )
    if result.keys_deleted and not connection.in_atomic_block:
        # Deleted keys are dead rows until a VACUUM; autovacuum may be off (FACTS.md).
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM (ANALYZE) {partitions.KEYS}")


def _default_days(since: datetime) -> list[date]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM {partitions.DEFAULT} "
            "WHERE ts >= %s",
            [since],
        )
        return [day for (day,) in cursor.fetchall()]


def _expire_rollups(now: datetime, result: Expiry) -> None:
    kept = _db_time(rollups_kept_since(now))
    for model in (Rollup, StreakSegment):
        result.rollups_deleted += delete_in_batches(
            model._meta.db_table, "bucket < %s", [kept], row="id"
        )
    result.runs_deleted += delete_in_batches(Run._meta.db_table, "last_ts < %s", [kept], row="id")


def _db_time(when: datetime):
    """A datetime as the database compares it (SQLite stores text)."""
    if connection.vendor == "postgresql":
        return when
    return connection.ops.adapt_datetimefield_value(when.astimezone(UTC))


def delete_in_batches(table: str, where: str, params: list, *, row: str = "ctid") -> int:
    """DELETE the rows of `table` matching `where`, a batch at a time (each batch its own
    transaction unless the caller holds one); returns how many. `row` addresses one row: ctid
    on a plain table or one partition (not on a partitioned parent, where ctids repeat), id
    elsewhere. On PostgreSQL the records' trigger deletes their keys."""
    batch = partitions.BATCH if connection.vendor == "postgresql" else 5_000
    select = f"SELECT {row} FROM {table} WHERE {where} LIMIT {batch}"
    if connection.vendor == "postgresql":
        # The outer WHERE repeats the condition so that a partitioned parent prunes.
        sql = f"DELETE FROM {table} WHERE {row} = ANY(ARRAY({select})) AND {where}"
        params = [*params, *params]
    else:
        sql = f"DELETE FROM {table} WHERE {row} IN ({select})"
    total = 0
    with connection.cursor() as cursor:
        while True:
            with transaction.atomic():
                cursor.execute(sql, params)
                total += cursor.rowcount
            if cursor.rowcount < batch:
                return total
