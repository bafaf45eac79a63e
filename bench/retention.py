"""Expiring a day of records on PostgreSQL, against deleting the same day, in the same run.

    .venv/bin/python bench/retention.py [--per-day 300000] [--days 3]

1. Recreates a scratch database (decisionboard_bench_retention), migrates it.
2. Stores --per-day demo records (records.demo) through the ingest store into the oldest day
   past retention, then copies them in SQL (new ids, keys and runs of the same shape) into the
   --days - 1 days after it, the last of which is still kept; records the size on disk.
3. Expires the oldest day as records.retention.expire does: DETACH (the moment readers and
   ingest stop seeing it), then the keys' cleanup and the DROP; the VACUUM of the keys after.
4. Deletes the next day's records instead, in the batches the per-project retention and SQLite
   use (the ceiling this design avoids), for the ratio.

Prints the database size per million records and `expire N s (detach D s), delete M s, ratio R`
as its last line (goal: expire < 1 s at 300,000 records a day).

`expire_oldest_day()` and `size_per_million()` work on any database the product migrated, so a
larger benchmark (bench/scale.py) can call them on what it loaded:
`expire_oldest_day()["expire_s"]` is the time to expire one day.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import setup_django  # noqa: E402


def size_per_million() -> dict[str, float]:
    """MB on disk per million records: the records (every partition, indexes and TOAST
    included) and their keys (records_recordkey)."""
    from django.db import connection

    from records import partitions

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits "
            "WHERE inhparent = %s::regclass",
            [partitions.PARENT],
        )
        (records,) = cursor.fetchone()
        cursor.execute("SELECT pg_total_relation_size(%s)", [partitions.KEYS])
        (keys,) = cursor.fetchone()
        cursor.execute(f"SELECT count(*) FROM {partitions.PARENT}")
        (count,) = cursor.fetchone()
    millions = max(count, 1) / 1e6
    return {
        "records": count,
        "records_mb": records / 2**20 / millions,
        "keys_mb": keys / 2**20 / millions,
        "total_mb": (records + keys) / 2**20 / millions,
    }


def expire_oldest_day() -> dict[str, float]:
    """Expire the oldest day partition that holds records as records.retention does, timed
    step by step: the DETACH, the keys' cleanup with the DROP, the VACUUM of the keys
    (autovacuum may be off). Records loaded without their keys (a COPY straight into the
    table) make the cleanup look cheaper than ingest's records would: see `keys`."""
    from django.db import connection

    from records import partitions

    with connection.cursor() as cursor:
        for day in sorted(partitions.existing_days()):
            cursor.execute(f"SELECT count(*) FROM {partitions.day_name(day)}")
            (records,) = cursor.fetchone()
            if records:
                break
        else:
            raise RuntimeError("no day partition holds records")
    start = time.perf_counter()
    # As if the catch-up had folded everything in (this benchmark runs none).
    table = partitions.detach_day(day, folded=2**62)
    detached = time.perf_counter()
    if table is None:
        raise RuntimeError(f"could not detach the partition of {day}")
    keys = partitions.drop_expired(table)
    dropped = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {partitions.KEYS}")
    vacuumed = time.perf_counter()
    return {
        "day": day.isoformat(),
        "records": records,
        "keys": keys,
        "detach_s": detached - start,
        "keys_and_drop_s": dropped - detached,
        "expire_s": dropped - start,
        "vacuum_keys_s": vacuumed - dropped,
    }


def load(per_day: int, days: int, first_day) -> int:
    """Store `per_day` demo records on `first_day` through the ingest store, then copy them
    to the `days - 1` days after it; returns the project id."""
    from django.db import connection

    from records import partitions
    from records.demo import generate_records
    from records.models import Project
    from records.normalise import normalise
    from records.store import COLUMNS, store_records

    project = Project.objects.create(name="bench")
    start, end = partitions.day_bounds(first_day)
    now = datetime.now(UTC)
    batch = []
    stored_at = time.perf_counter()
    runs = max(1, per_day // 100)
    last = end - timedelta(seconds=1)
    records = generate_records(
        records=per_day, runs=runs, seed=3, end=last, span=timedelta(hours=23)
    )
    for raw in records:
        batch.append(normalise(raw, now=now))
        if len(batch) == 5_000:
            store_records(project.pk, batch, now)
            batch = []
    if batch:
        store_records(project.pk, batch, now)
    print(
        f"stored {per_day:,} demo records on {first_day} through the ingest store "
        f"in {time.perf_counter() - stored_at:.1f} s",
        flush=True,
    )
    names = [c for c in ("project_id", "received_at", *COLUMNS) if c != "record_key"]
    columns = ", ".join(names)
    changed = {"ts": "ts + %(shift)s", "run_id": "run_id || %(tag)s"}
    shifted = ", ".join(changed.get(c, c) for c in names)
    with connection.cursor() as cursor:
        for n in range(1, days):
            copied_at = time.perf_counter()
            cursor.execute(
                f"WITH ins AS (INSERT INTO {partitions.PARENT} (record_key, {columns}) "
                f"SELECT record_key || %(tag)s, {shifted} FROM {partitions.PARENT} "
                "WHERE ts >= %(start)s AND ts < %(end)s RETURNING project_id, record_key) "
                f"INSERT INTO {partitions.KEYS} (project_id, record_key) "
                "SELECT project_id, record_key FROM ins",
                {"tag": f"-d{n}", "shift": timedelta(days=n), "start": start, "end": end},
            )
            print(
                f"copied them to {first_day + timedelta(days=n)} in "
                f"{time.perf_counter() - copied_at:.1f} s",
                flush=True,
            )
    return project.pk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-day", type=int, default=300_000)
    parser.add_argument("--days", type=int, default=3)
    args = parser.parse_args()

    setup_django("decisionboard_bench_retention")
    from django.conf import settings
    from django.db import connection

    from records import partitions, retention

    today = partitions.day_of(datetime.now(UTC))
    first_day = today - timedelta(days=settings.DECISIONBOARD["RETENTION_DAYS"] + args.days - 1)
    partitions.ensure_days(partitions.days_between(first_day, today))
    # Nothing older than the first day: it is the oldest partition.
    for day in sorted(partitions.existing_days()):
        if day < first_day:
            with connection.cursor() as cursor:
                cursor.execute(f"DROP TABLE {partitions.day_name(day)}")
    load(args.per_day, args.days, first_day)
    with connection.cursor() as cursor:
        # Bulk-loaded and never analysed, as after a burst with autovacuum off: the plan the
        # catch-up gets for its id range (records.rollup._fetch) must still use the index.
        cursor.execute(
            f"EXPLAIN SELECT id FROM {partitions.PARENT} WHERE id > 1000 AND id <= 21000"
        )
        plan = [line for (line,) in cursor.fetchall()]
    scans = [line.strip() for line in plan if partitions.day_name(first_day) in line]
    print(f"catch-up read on an unanalysed day: {scans[0] if scans else plan[0]}")
    size = size_per_million()
    print(
        f"{size['records']:,} records: {size['total_mb']:,.0f} MB per million on disk "
        f"({size['records_mb']:,.0f} MB records and indexes, {size['keys_mb']:,.0f} MB keys)",
        flush=True,
    )

    expired = expire_oldest_day()
    assert expired["keys"] == expired["records"], expired  # every stored record had its key
    print(
        f"expired {expired['day']} ({expired['records']:,} records): detach "
        f"{expired['detach_s']:.3f} s, keys and drop {expired['keys_and_drop_s']:.2f} s; "
        f"VACUUM of the keys after {expired['vacuum_keys_s']:.2f} s",
        flush=True,
    )
    next_day = partitions.day_name(first_day + timedelta(days=1))
    started = time.perf_counter()
    deleted = retention.delete_in_batches(next_day, "true", [])
    delete_s = time.perf_counter() - started
    print(f"deleted the next day's {deleted:,} records in batches in {delete_s:.2f} s", flush=True)
    print(
        f"expire {expired['expire_s']:.2f} s (detach {expired['detach_s']:.3f} s), "
        f"delete {delete_s:.2f} s, ratio {expired['expire_s'] / delete_s:.2f}"
    )


if __name__ == "__main__":
    main()
