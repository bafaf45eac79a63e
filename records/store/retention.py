"""Retention: how long raw records, and the rollups built from them, are kept, and expiring them.

Raw records are kept DECISIONBOARD_RETENTION_DAYS (a project's `retention_days` overrides it)
counted in whole UTC days: with 30, on 2026-12-01 the records from 2026-11-01 00:00 on are kept.
Rollups, runs and streak segments are kept DECISIONBOARD_ROLLUP_RETENTION_DAYS (longer), so the
charts and the runs list reach further back than the records behind them.

`expire` runs hourly (config.beat_schedule). On PostgreSQL a day past retention is a whole partition
DETACHed and DROPped (records.store.partitions), never a DELETE of its rows; the partitions are
dropped at the longest retention of any project, and a project whose own retention is shorter has
its older rows deleted in batches (a partition holds every project's records of its day, so it
cannot be dropped for one). On SQLite the records table is a plain table and every expiry is batched
deletes. Either way no record above the catch-up watermark is expired: its rollups come first.

The catch-up's state beside the rollups is keyed by run, and expires with what it is for:

- Classification and ToolDecision rows (records.catchup.passes, records.catchup.tool_funnel) are a
  run's pending joins: the attempts of a tool call, the pick and outcome of an iteration, kept so
  that the next record of the same call or iteration moves the rollups it counted in. They go once
  the whole run is past the project's raw retention (its Run.last_ts, the latest record folded in,
  before the horizon), which is when the run's last records go; not while the project has a record
  before the horizon that the catch-up has not folded in (it may belong to such a run), the rule the
  records' own expiry keeps. Checked for the runs whose last_ts crossed the horizon since the
  previous expiry and the runs of records folded in since then with a `ts` before the horizon (late
  ones), before those records are expired (a Watermark row per project, SIDE_MARK): the cost follows
  the runs expiring, not the runs kept.
- ToolMiss rows count a run's missed tools for the tools pages, which list runs: they go with
  the run (Run is kept DECISIONBOARD_ROLLUP_RETENTION_DAYS), and so do whatever Classification
  and ToolDecision rows a run still has then (none, unless the rule above was kept from running
  all that time): nothing keyed by a run outlives it.

A record that arrives after its run's state went (ingest takes any `ts`; older than retention it
is stored, folded in, and expired at the next run) starts a new state: the catch-up takes back
only what a stored state counted, so nothing goes negative and nothing else moves. Such a record
counts as the first of its call or iteration: a late rung-1 attempt then counts no fallback (its
classification's count stays where it was), a late pick or outcome joins nothing, and a
record re-sent after its original expired counts again, as every expired id may be posted again
(records.store.partitions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from records.models import (
    Classification,
    Project,
    Record,
    Rollup,
    Run,
    StreakSegment,
    ToolDecision,
    ToolMiss,
    Watermark,
)
from records.store import partitions
from records.store.backends import backend

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
    return Watermark.objects.folded_upto()


@dataclass
class Expiry:
    """What one `expire` did."""

    partitions_dropped: list[str]
    partitions_waiting: list[str]  # past retention, but holding records not rolled up yet
    keys_deleted: int = 0
    records_deleted: int = 0  # by batched deletes (SQLite, per-project, the default partition)
    rollups_deleted: int = 0
    runs_deleted: int = 0
    # The catch-up's state of runs past retention: classifications and tool decisions
    # (`side_rows_deleted`), tool misses with their runs, and the projects whose state waits
    # for records before their horizon to be folded in.
    side_rows_deleted: int = 0
    tool_misses_deleted: int = 0
    side_waiting: list[str] = field(default_factory=list)
    keys_vacuumed: bool = False  # the keys table's follow-up VACUUM ran (see vacuum_keys)


def expire(now: datetime | None = None) -> Expiry:
    """Expire what is past retention and create the partitions ahead (PostgreSQL)."""
    now = now or timezone.now()
    folded = folded_upto()
    result = Expiry([], [])
    for project in Project.objects.all():
        _expire_side_state(project, kept_since(project, now), folded, result)
    store = backend()
    if store.features.partitioned_records:
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
    if store.features.vacuums and not connection.in_atomic_block:
        result.keys_vacuumed = vacuum_keys()
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
        result.records_deleted += delete_project_records(
            project.pk, kept_since(project, now), folded
        )


# --- a project's records past its own (shorter) retention, on PostgreSQL -------------------------
# Each batch is one statement and its own transaction on one partition: the next PROJECT_BATCH
# rows of the project in `ts` order from where the previous batch ended, read along the
# record_ts (project_id, ts) index, then deleted by their row addresses (a TID scan). That is
# the only plan whose cost is bounded by the batch, so it is forced (PROJECT_DELETE_PLAN):
# the records are bulk-loaded, autovacuum may be off, and with statistics absent or stale the
# planner otherwise chose to read whole partitions in every batch (bench/retention.py).
# Sequential and bitmap scans and sorts are off, so record_ts (which yields `ts` order) is the
# only way to the batch; the DELETE names nothing but row addresses, so a TID scan is the only
# way to its rows. A batch holds row locks on its own rows alone, for one short transaction:
# ingest (new rows, new keys) and the catch-up (reads) never wait on it.
PROJECT_BATCH = 5_000
PROJECT_DELETE_PLAN = (
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off"
)
PROJECT_DELETE_RESET = "RESET enable_seqscan; RESET enable_bitmapscan; RESET enable_sort"
PROJECT_DELETE = """
WITH batch AS MATERIALIZED (
    SELECT ctid FROM {table} WHERE project_id = %(project)s AND ts >= %(since)s
    AND ts < %(before)s AND id <= %(folded)s ORDER BY ts LIMIT %(batch)s
), gone AS (
    DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM batch)) RETURNING ts
)
SELECT count(*), max(ts) FROM gone
"""


def project_delete_tables(before: datetime) -> list[tuple[str, datetime]]:
    """The partitions that may hold records before `before`, each with the start of its day
    (the default partition, which may hold any day: the earliest time), oldest first."""
    tables = [
        (partitions.day_name(day), partitions.day_bounds(day)[0])
        for day in sorted(partitions.existing_days())
        if partitions.day_bounds(day)[0] < before
    ]
    return [*tables, (partitions.DEFAULT, datetime.min.replace(tzinfo=UTC))]


def delete_project_records(
    project_id: int, before: datetime, folded: int, *, batch: int | None = None
) -> int:
    """Delete the project's records with a `ts` before `before` and an id up to `folded`, a
    partition at a time and a batch at a time (PROJECT_DELETE); returns how many."""
    batch = batch or PROJECT_BATCH
    in_callers_transaction = connection.in_atomic_block
    total = 0
    with connection.cursor() as cursor:
        for table, since in project_delete_tables(before):
            sql = PROJECT_DELETE.format(table=table)
            while True:
                with transaction.atomic():
                    cursor.execute(PROJECT_DELETE_PLAN)
                    cursor.execute(
                        sql,
                        {"project": project_id, "since": since, "before": before,
                         "folded": folded, "batch": batch},
                    )  # fmt: skip
                    deleted, last = cursor.fetchone()
                if in_callers_transaction:  # SET LOCAL lasts until the caller's commit
                    cursor.execute(PROJECT_DELETE_RESET)
                total += deleted
                if deleted < batch:
                    break
                since = last  # rows at `last` not deleted yet are read again: ts >= last
    return total


def _default_days(since: datetime) -> list[date]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM {partitions.DEFAULT} "
            "WHERE ts >= %s",
            [since],
        )
        return [day for (day,) in cursor.fetchall()]


def _expire_rollups(now: datetime, result: Expiry) -> None:
    kept = rollups_kept_since(now)
    for model in (Rollup, StreakSegment):
        result.rollups_deleted += delete_in_batches(
            model._meta.db_table, "bucket < %s", [_db_time(kept)], row="id"
        )
    for project in Project.objects.all():
        _expire_runs(project.pk, kept, result)


# --- the catch-up's state, by run ----------------------------------------------------------------
# A Watermark row per project: last_pass_at, the horizon up to which its runs' state expired;
# last_id, the catch-up's watermark (folded_upto) then.
SIDE_MARK = "retention:state:{}"
RUN_PAGE = 1_000  # runs whose state is deleted in one transaction
_RUN_STATE = (Classification, ToolDecision)  # pending joins: they go with the run's records
_RUN_KEYED = (*_RUN_STATE, ToolMiss)  # everything keyed by a run: it goes with the run


def _unfolded_before(project_id: int, horizon: datetime, folded: int) -> bool:
    """Has the project a record before `horizon` that the catch-up has not folded in? (An
    index range of the ids above the watermark; on PostgreSQL only the partitions before the
    horizon.)"""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {Record._meta.db_table} WHERE id > %s AND project_id = %s "
            "AND ts < %s LIMIT 1",
            [folded, project_id, _db_time(horizon)],
        )
        return cursor.fetchone() is not None


def _expire_side_state(project: Project, horizon: datetime, folded: int, result: Expiry) -> None:
    """Delete the classifications and tool decisions of the project's runs wholly before
    `horizon` (see the module's docstring). Runs before the records' expiry: it reads the late
    records folded in since the previous time, before they go."""
    if _unfolded_before(project.pk, horizon, folded):
        result.side_waiting.append(project.name)
        return
    name = SIDE_MARK.format(project.pk)
    mark = Watermark.objects.filter(name=name).first()
    runs = Run.objects.filter(project=project, last_ts__lt=horizon)
    since = None if mark is None else mark.last_pass_at  # None: every run before the horizon
    # The runs whose last record crossed the horizon since the previous expiry, in (last_ts,
    # id) order: each page a range of the run_recent index.
    last = (since, 0)
    while True:
        page = runs
        if last[0] is not None:
            page = page.filter(last_ts__gte=last[0]).filter(
                Q(last_ts__gt=last[0]) | Q(last_ts=last[0], id__gt=last[1])
            )
        page = list(page.order_by("last_ts", "id").values_list("id", "run_id", "last_ts")[
            :RUN_PAGE
        ])  # fmt: skip
        if not page:
            break
        last = (page[-1][2], page[-1][0])
        _delete_state_of(project.pk, [run_id for _, run_id, _ in page], result)
    if since is not None and mark.last_id < folded:
        # And the runs of records folded in since then with a `ts` before the horizon: late
        # records, whose state (new, or of a run whose state had gone) would stay otherwise.
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT DISTINCT run_id FROM {Record._meta.db_table} WHERE project_id = %s "
                "AND ts < %s AND id > %s AND id <= %s",
                [project.pk, _db_time(horizon), mark.last_id, folded],
            )
            late = [run_id for (run_id,) in cursor.fetchall()]
        for start in range(0, len(late), RUN_PAGE):
            page = runs.filter(run_id__in=late[start : start + RUN_PAGE])
            _delete_state_of(project.pk, list(page.values_list("run_id", flat=True)), result)
    done_upto = horizon if since is None else max(since, horizon)
    Watermark.objects.update_or_create(
        name=name, defaults={"last_id": folded, "last_pass_at": done_upto}
    )


def _delete_state_of(project_id: int, run_ids: list[str], result: Expiry) -> None:
    if not run_ids:
        return
    with transaction.atomic():
        for model in _RUN_STATE:
            result.side_rows_deleted += _delete_of_runs(model, project_id, run_ids)


def _expire_runs(project_id: int, kept: datetime, result: Expiry) -> None:
    """Delete the project's runs whose last record is before `kept` (the rollups' horizon), a
    page at a time, with everything keyed by them."""
    runs = Run.objects.filter(project_id=project_id, last_ts__lt=kept)
    while page := list(runs.order_by("last_ts", "id").values_list("id", "run_id")[:RUN_PAGE]):
        with transaction.atomic():
            for model in _RUN_KEYED:
                deleted = _delete_of_runs(model, project_id, [run_id for _, run_id in page])
                if model is ToolMiss:
                    result.tool_misses_deleted += deleted
                else:
                    result.side_rows_deleted += deleted
            result.runs_deleted += delete_in_batches(
                Run._meta.db_table, *_in("id", [run_pk for run_pk, _ in page]), row="id"
            )


def _delete_of_runs(model, project_id: int, run_ids: list[str]) -> int:
    """Delete the rows of `model` (keyed by project and run_id) of these runs, by the
    (project_id, run_id, ...) index each of these tables has."""
    where, params = _in("run_id", run_ids)
    return delete_in_batches(
        model._meta.db_table, f"project_id = %s AND {where}", [project_id, *params], row="id"
    )


def _in(column: str, values: list) -> tuple[str, list]:
    """`column` is one of `values`: one array parameter on PostgreSQL, a list on SQLite."""
    return backend().in_values(column, values)


# --- the keys' follow-up VACUUM --------------------------------------------------------------
# Expired keys are dead rows in records_recordkey until a VACUUM, and autovacuum may be off.
# A VACUUM reads the whole table and its index, so running one after every expired
# day would cost in proportion to every key kept; it runs once the dead keys reach this share
# of the live ones (autovacuum's own default), so that its cost per expired key stays the same
# at any size. It follows the expiry: readers and ingest stopped seeing the day before it.
VACUUM_DEAD_SHARE = 0.2


def vacuum_keys(*, share: float = VACUUM_DEAD_SHARE) -> bool:
    """VACUUM (ANALYZE) the record keys when their dead rows reach `share` of the live ones
    (PostgreSQL's counters, which lag by up to a second or so); returns whether it ran."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE relname = %s",
            [partitions.KEYS],
        )
        row = cursor.fetchone()
        if row is None or row[0] == 0 or row[0] < share * row[1]:
            return False
        cursor.execute(f"VACUUM (ANALYZE) {partitions.KEYS}")
    log.info("vacuumed %s: %s dead keys of %s", partitions.KEYS, row[0], row[0] + row[1])
    return True


def _db_time(when: datetime):
    """A datetime as the database compares it (SQLite stores text)."""
    return backend().time_param(when)


def delete_in_batches(table: str, where: str, params: list, *, row: str = "ctid") -> int:
    """DELETE the rows of `table` matching `where`, a batch at a time (each batch its own
    transaction unless the caller holds one); returns how many. `row` addresses one row: ctid
    on a plain table or one partition (not on a partitioned parent, where ctids repeat), id
    elsewhere. On PostgreSQL the records' trigger deletes their keys."""
    sql, params, batch = backend().delete_batch(table, where, params, row)
    total = 0
    with connection.cursor() as cursor:
        while True:
            with transaction.atomic():
                cursor.execute(sql, params)
                total += cursor.rowcount
            if cursor.rowcount < batch:
                return total
