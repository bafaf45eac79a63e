"""The partitioning migration (records 0010) on an existing records table, against rewriting the
same table once, in the same run.

    .venv/bin/python bench/migrate.py [--records 1000000] [--days 45] [--database NAME]

1. Recreates a scratch database (--database, decisionboard_bench_migrate) and migrates the
   records app to 0009_tool_decisions only: the plain records table as it was before retention.
2. Loads --records demo records (records.demo.generator) spread over the last --days days (older
   than the 30-day retention too, which the migration moves to the default partition) with COPY, one
   project, then VACUUM ANALYZE, as autovacuum would have left a table that old.
3. The ceiling, on the same rows: `CREATE TABLE ... AS SELECT * FROM records_record` and the
   table's own indexes (primary key, record_key_unique and the others) built on the copy: the
   cost of writing these rows and their indexes once, with nothing of the migration in the way.
   The copy is dropped.
4. Times `migrate records 0010_retention_partitions` (the table rewritten into daily
   partitions, its keys into records_recordkey, the trigger, ANALYZE), then `migrate` for the
   rest (the later migrations' indexes among them), of which `records 0015_record_key_day` (the
   keys' days, from their records) is timed apart.

Prints the machine's load average before and after (the numbers mean little on a busy machine)
and as its last line `migrate 0010 N s (S s per million records), 0015 K s, the rest M s,
ceiling C s, ratio R` (R = the 0010 migration's time / the ceiling's).

No runs, rollups or other tables are loaded: 0010 reads and writes the records table and the
keys alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ADMIN_URL, store_rows  # noqa: E402
from bench.results import record_result  # noqa: E402

BEFORE = "0009_tool_decisions"
PARTITIONED = "0010_retention_partitions"
BEFORE_KEY_DAYS = "0014_catchup_tables_no_project_index"
KEY_DAYS = "0015_record_key_day"  # timed apart: it rewrites every key
BATCH = 50_000


def setup(name: str) -> None:
    """Recreate the scratch database `name`, point Django at it, migrate records to BEFORE."""
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    os.environ["DATABASE_URL"] = urlunsplit(urlsplit(ADMIN_URL)._replace(path=f"/{name}"))
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "records", BEFORE, verbosity=0)


def load(records: int, days: int) -> float:
    """COPY `records` demo records over the last `days` days into the plain records table (the
    columns the store writes, records.store.writer.COLUMNS); returns the seconds it took."""
    from django.db import connection
    from django.utils import timezone

    from records.contract.normalise import normalise
    from records.demo.generator import generate_records
    from records.store.writer import COLUMNS, RECORD_TABLE

    now = timezone.now()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        # Raw SQL: the Project model has fields of later migrations.
        cursor.execute(
            "INSERT INTO records_project (name, created_at) VALUES ('bench', %s) RETURNING id",
            [now],
        )
        (project_id,) = cursor.fetchone()
    columns = ", ".join(("project_id", "received_at", *COLUMNS))
    raw = generate_records(
        records=records,
        runs=max(1, records // 100),
        seed=5,
        end=now.replace(microsecond=0),
        span=timedelta(days=days),
    )
    pending = []

    def flush() -> None:
        with connection.cursor() as cursor:
            with cursor.cursor.copy(f"COPY {RECORD_TABLE} ({columns}) FROM STDIN") as copy:
                for row in store_rows(project_id, now, pending):
                    copy.write_row(row)
        pending.clear()

    for count, record in enumerate(raw, 1):
        pending.append(normalise(record, now=now))
        if len(pending) == BATCH:
            flush()
            if count % (BATCH * 10) == 0:
                print(f"  loaded {count:,} records", flush=True)
    if pending:
        flush()
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {RECORD_TABLE}")
    return time.perf_counter() - started


def ceiling() -> tuple[float, float]:
    """(seconds to copy the records table with CREATE TABLE AS, and to build its indexes on
    the copy); the copy is dropped."""
    from django.db import connection

    from records.store.writer import RECORD_TABLE

    copy = "bench_ceiling"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [RECORD_TABLE]
        )
        indexes = cursor.fetchall()
        cursor.execute(f"DROP TABLE IF EXISTS {copy}")
        started = time.perf_counter()
        cursor.execute(f"CREATE TABLE {copy} AS SELECT * FROM {RECORD_TABLE}")
        copied = time.perf_counter()
        for name, definition in indexes:
            cursor.execute(
                definition.replace(f" {name} ", f" {copy}_{name[:40]} ").replace(
                    f" ON public.{RECORD_TABLE} ", f" ON public.{copy} "
                )
            )
        indexed = time.perf_counter()
        cursor.execute(f"DROP TABLE {copy}")
    return copied - started, indexed - copied


def load_average() -> str:
    return ", ".join(f"{n:.2f}" for n in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=45)
    parser.add_argument("--database", default="decisionboard_bench_migrate")
    args = parser.parse_args()

    print(f"load average {load_average()} ({os.cpu_count()} cores)", flush=True)
    setup(args.database)
    from django.core.management import call_command
    from django.db import connection

    seconds = load(args.records, args.days)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size('records_record')")
        (size,) = cursor.fetchone()
    print(
        f"loaded {args.records:,} records over {args.days} days at {BEFORE} in {seconds:.1f} s "
        f"({size / 2**20:,.0f} MB with indexes)",
        flush=True,
    )
    copy_s, index_s = ceiling()
    ceiling_s = copy_s + index_s
    print(
        f"ceiling: CREATE TABLE AS {copy_s:.1f} s, its indexes {index_s:.1f} s "
        f"(together {ceiling_s:.1f} s)",
        flush=True,
    )
    started = time.perf_counter()
    call_command("migrate", "records", PARTITIONED, verbosity=0)
    partitioned_s = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM records_record_default")
        (in_default,) = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM records_recordkey")
        (keys,) = cursor.fetchone()
    assert keys == args.records, (keys, args.records)
    print(
        f"migrate records {PARTITIONED}: {partitioned_s:.1f} s ({in_default:,} records older "
        "than retention in the default partition)",
        flush=True,
    )
    started = time.perf_counter()
    call_command("migrate", "records", BEFORE_KEY_DAYS, verbosity=0)
    rest_s = time.perf_counter() - started
    started = time.perf_counter()
    call_command("migrate", "records", KEY_DAYS, verbosity=0)
    key_days_s = time.perf_counter() - started
    print(
        f"migrate records {KEY_DAYS}: {key_days_s:.1f} s "
        f"({key_days_s / keys * 1e6:.1f} µs a key, every key rewritten)",
        flush=True,
    )
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    rest_s += time.perf_counter() - started
    print(f"migrate (the rest): {rest_s:.1f} s", flush=True)
    print(f"load average {load_average()}", flush=True)
    per_million = partitioned_s / (args.records / 1e6)
    print(
        f"migrate 0010 {partitioned_s:.1f} s ({per_million:.1f} s per million records), "
        f"0015 {key_days_s:.1f} s, the rest {rest_s:.1f} s, ceiling {ceiling_s:.1f} s, "
        f"ratio {partitioned_s / ceiling_s:.2f}"
    )
    record_result(
        "migrate",
        {
            "options": vars(args),
            "partitioned_s": partitioned_s,
            "partitioned_s_per_million": per_million,
            "key_days_s": key_days_s,
            "rest_s": rest_s,
            "ceiling_s": ceiling_s,
            "ratio": partitioned_s / ceiling_s,
        },
    )


if __name__ == "__main__":
    main()
