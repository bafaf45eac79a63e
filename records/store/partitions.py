"""The daily partitions of the records table on PostgreSQL (plain SQL, no extension).

`records_record` is partitioned by RANGE (ts): one partition a UTC day, named
records_record_pYYYYMMDD, and a default partition (records_record_default) for whatever no day
partition takes: a record older than the retention window, or a day not created yet. So a
record is never refused for its `ts`.

- Days are created ahead by a beat task (records.store.retention.expire, hourly) and on demand by
  ingest for a day inside the window that has none yet (`cover`). A day is created as a plain
  table and then ATTACHed: that takes SHARE UPDATE EXCLUSIVE on the parent (ingest and reads go
  on) and ACCESS EXCLUSIVE only on the default partition, which is kept small. Rows of that day
  already in the default partition move into the new table first.
- A day past retention is DETACHed (a moment's ACCESS EXCLUSIVE on the parent, under a lock
  timeout), renamed records_record_expired_YYYYMMDD, its record keys (records.models.RecordKey)
  deleted by their day, then DROPped. Readers stop seeing it at the DETACH.

Every record key lives exactly as long as its record: deleting a record deletes its key (the
trigger below, for the default partition's and per-project batched deletes), and a dropped day's
keys, which carry the day of their record (RecordKey.day), are deleted by that day in the
DROP's transaction. Moving rows between partitions sets `decisionboard.keep_keys` so that the
trigger leaves their keys alone; their day stays right, since a day's records move only into
that day's partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from django.db import DatabaseError, connection, transaction

from records.store.locks import PARTITION_LOCK_KEY

log = logging.getLogger(__name__)

PARENT = "records_record"
DEFAULT = "records_record_default"
KEYS = "records_recordkey"
DAY_PREFIX = "records_record_p"
EXPIRED_PREFIX = "records_record_expired_"
# Batched deletes (records.store.retention.delete_in_batches: the default partition's, the rollups')
# go this many rows a statement (a project's own retention: records.store.retention.PROJECT_BATCH),
# so that no single statement holds locks (or builds WAL) for long. An expired day's keys go in one
# (KEY_DELETE).
BATCH = 50_000

# The trigger that keeps RecordKey in step with deletes (installed by migration 0009).
KEY_TRIGGER_SQL = f"""
CREATE OR REPLACE FUNCTION records_forget_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('decisionboard.keep_keys', true), '') <> 'on' THEN
        DELETE FROM {KEYS} WHERE project_id = OLD.project_id AND record_key = OLD.record_key;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER record_forget_key AFTER DELETE ON {PARENT}
    FOR EACH ROW EXECUTE FUNCTION records_forget_key();
"""


def day_name(day: date) -> str:
    return f"{DAY_PREFIX}{day:%Y%m%d}"


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def day_of(ts: datetime) -> date:
    return ts.astimezone(UTC).date()


def days_between(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def existing_days() -> set[date]:
    """The days that have a partition attached."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [PARENT],
        )
        names = [name for (name,) in cursor.fetchall()]
    return {
        datetime.strptime(name.removeprefix(DAY_PREFIX), "%Y%m%d").date()
        for name in names
        if name.startswith(DAY_PREFIX)
    }


# No column statistics on the JSON bodies: no plan filters on them, and collecting them was half the
# time of an ANALYZE of a partition (records.catchup.housekeeping.analyze_if_grown). Set on the
# parent by migration 0013 (which reaches the partitions then there) and on every new one.
NO_STATISTICS = "ALTER COLUMN data SET STATISTICS 0, ALTER COLUMN derived SET STATISTICS 0"


def create_day(day: date, *, lock_timeout: str = "2s") -> bool:
    """Create and attach the partition of `day`, moving its rows out of the default partition;
    returns False when a lock was not had within `lock_timeout` (try again later: the day's
    records keep going to the default partition meanwhile)."""
    name = day_name(day)
    start, end = day_bounds(day)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [lock_timeout])
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PARTITION_LOCK_KEY])
            if day in existing_days():
                return True
            cursor.execute(f"CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS)")
            cursor.execute(f"ALTER TABLE {name} {NO_STATISTICS}")
            cursor.execute("SELECT set_config('decisionboard.keep_keys', 'on', true)")
            cursor.execute(
                f"WITH moved AS (DELETE FROM {DEFAULT} WHERE ts >= %s AND ts < %s RETURNING *) "
                f"INSERT INTO {name} SELECT * FROM moved",
                [start, end],
            )
            moved = cursor.rowcount
            cursor.execute("SELECT set_config('decisionboard.keep_keys', '', true)")
            cursor.execute(
                f"ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)",
                [start, end],
            )
    except DatabaseError as exc:  # lock timeout, or a creator in another database session
        log.warning("could not create the records partition of %s (%s); will retry", day, exc)
        return False
    if moved:
        log.info("created %s, moving %s records into it from %s", name, moved, DEFAULT)
    return True


def ensure_days(days: Iterable[date], *, lock_timeout: str = "2s") -> list[date]:
    """Create the partitions of `days` that are missing; returns those it could not create."""
    have = existing_days()
    return [
        day for day in sorted(set(days) - have) if not create_day(day, lock_timeout=lock_timeout)
    ]


# Ingest's view of which days have a partition, so that a batch costs no catalog query: a day
# seen missing is created, or retried after RETRY_AFTER; the set is re-read every REFRESH.
REFRESH = 300.0
RETRY_AFTER = 60.0
_known: dict[str, tuple[float, set[date]]] = {}
_failed: dict[tuple[str, date], float] = {}


def cover(timestamps: Iterable[datetime], first: date, last: date) -> None:
    """Before ingest stores records with these `ts`: create the missing partitions of their
    days within [first, last] (the retention window and a day ahead). Days outside go to the
    default partition, and so does a day whose partition could not be created in time."""
    database = connection.settings_dict["NAME"]
    now = time.monotonic()
    read_at, known = _known.get(database, (0.0, set()))
    wanted = {day_of(ts) for ts in timestamps}
    missing = {day for day in wanted - known if first <= day <= last}
    if not missing and now - read_at < REFRESH:
        return
    known = existing_days()
    _known[database] = (now, known)
    for day in sorted(missing - known):
        if now - _failed.get((database, day), -RETRY_AFTER) < RETRY_AFTER:
            continue
        if create_day(day, lock_timeout="1s"):
            known.add(day)
            _failed.pop((database, day), None)
        else:
            _failed[(database, day)] = now


def forget_cache() -> None:
    """Drop ingest's view of the partitions (tests, after rolling back a partition)."""
    _known.clear()
    _failed.clear()


class NotRolledUp(Exception):
    """The partition holds records the catch-up has not folded in yet: it stays attached."""


def detach_day(
    day: date, *, folded: int, lock_timeout: str = "2s", attempts: int = 3
) -> str | None:
    """Detach the partition of `day` and rename it for `drop_expired`; returns its new name,
    or None when the parent's lock was not had in time, `attempts` times (a query held the
    table throughout; the next expiry tries again). While it waits, new queries of the table
    queue behind it: hence the short timeout.

    Raises NotRolledUp, attaching it back, when it holds a record with an id above `folded`:
    checked once detached, when no insert can reach it any more (a late record of that day
    may have arrived a moment before)."""
    name, expired = day_name(day), f"{EXPIRED_PREFIX}{day:%Y%m%d}"
    for attempt in range(attempts):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [lock_timeout])
                cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {name}")
                cursor.execute(f"SELECT 1 FROM {name} WHERE id > %s LIMIT 1", [folded])
                if cursor.fetchone() is not None:
                    raise NotRolledUp(name)  # rolls the DETACH back
                cursor.execute(f"ALTER TABLE {name} RENAME TO {expired}")
            return expired
        except DatabaseError as exc:
            log.warning("could not detach %s (%s), attempt %s", name, exc, attempt + 1)
            time.sleep(1.0)
    return None


def expired_tables() -> list[str]:
    """Detached partitions whose keys are still to be deleted (a crash between DETACH and
    DROP leaves one; the next expiry finishes it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE %s "
            "AND relnamespace = 'public'::regnamespace ORDER BY relname",
            [EXPIRED_PREFIX.replace("_", r"\_") + "%"],
        )
        return [name for (name,) in cursor.fetchall()]


def expired_day(table: str) -> date:
    """The day of a detached partition, from its name."""
    return datetime.strptime(table.removeprefix(EXPIRED_PREFIX), "%Y%m%d").date()


# An expired day's keys are found by their own day: a range of the record_key_day index, whose
# entries of one day come in heap order (the index breaks ties by row address) and so visit the
# keys table's pages in one forward sweep, never the detached table and never the primary key.
# The index is used whatever the statistics: on a small or freshly analysed keys table a day is
# a large share of the rows and the planner would rather read all of them (sequential scans
# off). A key of that day whose record is still attached stays: a record of the day posted after
# the DETACH goes to the default partition, and a partition of the day may be created again if
# retention grew while a detached one waited. Those are nearly always none, and the hash of them
# is built from a scan of that day's records alone (nested loops and merge joins off: a probe or
# a sort per key would cost what this plan avoids).
#
# One statement a day, not batches: nothing waits on an expired day's keys (ingest only for a
# resend of one of them), and batches by row address (LIMITed) cost more in all
# (bench/retention.py measures the expiry). The commit need not wait for
# the disk: a delete lost in a crash is done again by the next expiry, with the DROP.
KEY_DELETE_PLAN = (
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_nestloop = off; "
    "SET LOCAL enable_mergejoin = off; SET LOCAL synchronous_commit = off"
)
KEY_DELETE = f"""
DELETE FROM {KEYS} AS k WHERE day = %(day)s AND NOT EXISTS (
    SELECT 1 FROM {PARENT} AS r WHERE r.ts >= %(start)s AND r.ts < %(end)s
    AND r.project_id = k.project_id AND r.record_key = k.record_key
)
"""


def drop_expired(table: str) -> int:
    """Delete the record keys of a detached partition's day and drop it, in one transaction;
    returns how many keys were deleted. The keys are found by their day (see KEY_DELETE),
    whatever the size of the keys table: the detached table is not read."""
    day = expired_day(table)
    start, end = day_bounds(day)
    in_callers_transaction = connection.in_atomic_block  # (always true inside the block below)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(KEY_DELETE_PLAN)
        cursor.execute(KEY_DELETE, {"day": day, "start": start, "end": end})
        deleted = cursor.rowcount
        # Deferred foreign-key checks of rows inserted earlier in the same transaction (only
        # ever the case in tests) would otherwise forbid the DROP.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"DROP TABLE {table}")
        if in_callers_transaction:  # it goes on after this block: plan as before
            cursor.execute(
                "RESET enable_seqscan; RESET enable_nestloop; RESET enable_mergejoin; "
                "RESET synchronous_commit"
            )
    return deleted
