"""Expiring a day of records on PostgreSQL, against deleting the same day, in the same run.

    .venv/bin/python bench/retention.py [--per-day 300000] [--days 3] [--extra-keys 0]
    .venv/bin/python bench/retention.py --records 10000000 [--days 20] [--timeout 60]

1. Recreates a scratch database (--database, decisionboard_bench_retention), migrates it.
2. Stores --per-day demo records (records.demo.generator) through the ingest store into the oldest
   day past retention, then copies them in SQL (new ids, keys and runs of the same shape) into the
   --days - 1 days after it, the last of which is still kept; records the size on disk. Then
   ANALYZEs the records and their keys, as the catch-up's own ANALYZE does in production
   (records.catchup.housekeeping.analyze_if_grown), and adds --extra-keys keys to the project, as if
   more of its days were kept: the expiry's cost must not grow with them.
3. Expires the oldest day as records.store.retention.expire does: DETACH (the moment readers and
   ingest stop seeing it), then the keys' cleanup (by their day,
   records.store.partitions.KEY_DELETE) and the DROP. The VACUUM of the keys is timed after it,
   apart: it is follow-up maintenance, not part of the expiry (records.store.retention.vacuum_keys
   runs it once the dead keys reach a fifth of the live ones).
4. For comparison, the next day's keys deleted as before the keys had a day (BEFORE_KEY_DELETE:
   the detached table joined to the keys, a primary-key lookup per key), rolled back.
5. Deletes the next day's records instead, in the batches the per-project retention and SQLite
   use (the ceiling the day expiry avoids), for the ratio.

Prints the database size per million records and `expire N s (detach D s), delete M s, ratio R`
as its last line (goal: expire < 1 s at 300,000 records a day).

With --records N it measures a project's own retention instead (a project whose retention is
shorter than the others', its older records deleted in batches: records.store.retention.
delete_project_records), in two shapes, the expiring project 10 % and 70 % of N records spread
over --days day partitions beside three other projects, half of its days past its retention.
The other projects are loaded first and ANALYZEd, then the expiring project's records: the
statistics are stale; then forgotten (as never analysed): absent; then ANALYZEd again: fresh.
In each state it prints the EXPLAIN of the batch statement before (BEFORE_PROJECT_DELETE, from
the partitioned parent, timed over two batches under --timeout) and after, the after's
batches over its first day partition (each one's seconds: the longest is what ingest could
wait), and the ratio of that rate to one plain DELETE of the same rows (the ceiling, rolled
back like the rest). It appends the figures as one JSON line to bench/results/retention.jsonl.

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

    from records.store import partitions

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
    """Expire the oldest day partition that holds records as records.store.retention does, timed
    step by step: the DETACH, the keys' cleanup and the DROP, the VACUUM of the keys
    (autovacuum may be off). Records loaded without their keys (a COPY straight into the
    table) make the cleanup look cheaper than ingest's records would: see `keys`."""
    from django.db import connection

    from records.store import partitions

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
    delete_s = []

    def time_the_delete(execute, sql, params, many, context):
        if sql != partitions.KEY_DELETE:
            return execute(sql, params, many, context)
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            delete_s.append(time.perf_counter() - started)

    with connection.execute_wrapper(time_the_delete):
        keys = partitions.drop_expired(table)
    dropped = time.perf_counter()
    # Follow-up maintenance, not part of the expiry (see records.store.retention.vacuum_keys), timed
    # apart: it reads the whole keys table, so it grows with every key kept.
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {partitions.KEYS}")
    vacuumed = time.perf_counter()
    return {
        "day": day.isoformat(),
        "records": records,
        "keys": keys,
        "detach_s": detached - start,
        "keys_and_drop_s": dropped - detached,
        "keys_delete_s": sum(delete_s),  # the statement; the DROP's files go at the commit
        "expire_s": dropped - start,
        "vacuum_keys_s": vacuumed - dropped,
    }


# How the keys of a detached day were deleted before they had a day (records.store.partitions until
# migration 0015): the detached table joined to the keys in batches of ids, one primary-key
# lookup per key, forced to nested loops (a hash join read the whole keys table in each batch).
BEFORE_KEY_DELETE_PLAN = (
    "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SET LOCAL jit = off; "
    "SET LOCAL synchronous_commit = off"
)
BEFORE_KEY_DELETE = (
    "DELETE FROM records_recordkey k USING {table} e WHERE e.id >= %s AND e.id < %s "
    "AND k.project_id = e.project_id AND k.record_key = e.record_key"
)


def keys_delete_before(day) -> tuple[float, int]:
    """Seconds to delete the keys of `day` as before they had a day (BEFORE_KEY_DELETE), and
    how many; rolled back."""
    from django.db import connection, transaction

    from records.store import partitions

    name = partitions.day_name(day)
    deleted = 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {partitions.PARENT} DETACH PARTITION {name}")
        cursor.execute(BEFORE_KEY_DELETE_PLAN)
        started = time.perf_counter()
        cursor.execute(f"SELECT min(id), max(id) FROM {name}")
        low, high = cursor.fetchone()
        for start in range(low, high + 1, partitions.BATCH):
            cursor.execute(BEFORE_KEY_DELETE.format(table=name), [start, start + partitions.BATCH])
            deleted += cursor.rowcount
        seconds = time.perf_counter() - started
        transaction.set_rollback(True)
    return seconds, deleted


def keys_delete_plan(day) -> list[str]:
    """The plan of records.store.partitions.KEY_DELETE for `day`, as drop_expired runs it: once the
    day is detached (rolled back)."""
    from django.db import connection, transaction

    from records.store import partitions

    start, end = partitions.day_bounds(day)
    name = partitions.day_name(day)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {partitions.PARENT} DETACH PARTITION {name}")
        cursor.execute(partitions.KEY_DELETE_PLAN)
        cursor.execute("EXPLAIN " + partitions.KEY_DELETE, {"day": day, "start": start, "end": end})
        plan = [line for (line,) in cursor.fetchall()]
        transaction.set_rollback(True)
    return plan


def add_keys(project_id: int, count: int, days: list) -> None:
    """`count` more keys of the project spread over `days`, as if more of its days were kept (no
    records behind them: the expiry never reads them, it must only not be slowed down by them)."""
    from django.db import connection

    from records.store import partitions

    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {partitions.KEYS} (project_id, record_key, day) "
            "SELECT %s, 'kept-' || md5(n::text), (%s::date[])[1 + mod(n, %s)] "
            "FROM generate_series(1, %s) AS n",
            [project_id, days, len(days), count],
        )
        cursor.execute(f"VACUUM (ANALYZE) {partitions.KEYS}")


def load(per_day: int, days: int, first_day) -> int:
    """Store `per_day` demo records on `first_day` through the ingest store, then copy them
    to the `days - 1` days after it; returns the project id."""
    from django.db import connection

    from records.contract.normalise import normalise
    from records.demo.generator import generate_records
    from records.models import Project
    from records.store import partitions
    from records.store.writer import COLUMNS, store_records

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
                "WHERE ts >= %(start)s AND ts < %(end)s RETURNING project_id, record_key, ts) "
                f"INSERT INTO {partitions.KEYS} (project_id, record_key, day) "
                "SELECT project_id, record_key, (ts AT TIME ZONE 'UTC')::date FROM ins",
                {"tag": f"-d{n}", "shift": timedelta(days=n), "start": start, "end": end},
            )
            print(
                f"copied them to {first_day + timedelta(days=n)} in "
                f"{time.perf_counter() - copied_at:.1f} s",
                flush=True,
            )
    return project.pk


# --- a project's own retention (--records) --------------------------------------------------
# The per-project batched delete as it was before records.store.retention.delete_project_records:
# from the partitioned parent, by id, the plan left to the statistics.
BEFORE_PROJECT_BATCH = 50_000
BEFORE_PROJECT_WHERE = "project_id = %(project)s AND ts < %(before)s AND id <= %(folded)s"
BEFORE_PROJECT_DELETE = (
    "DELETE FROM records_record WHERE id = ANY(ARRAY(SELECT id FROM records_record WHERE "
    f"{BEFORE_PROJECT_WHERE} LIMIT {BEFORE_PROJECT_BATCH})) AND {BEFORE_PROJECT_WHERE}"
)
PROJECTS = 4  # the expiring project and three others
DATA = '{"kind": "turn", "model": "gpt-4o", "iteration": 3, "text": "' + "x" * 160 + '"}'


def load_project_records(project_id: int, days: list, count: int, tag: str) -> float:
    """`count` records of the project spread evenly over `days`, with their keys, straight in
    SQL (one statement a day, so each goes to one partition); returns the seconds taken."""
    from django.db import connection

    from records.store import partitions

    started = time.perf_counter()
    per_day = count // len(days)
    with connection.cursor() as cursor:
        for day in days:
            start, _ = partitions.day_bounds(day)
            cursor.execute(
                f"WITH ins AS (INSERT INTO {partitions.PARENT} (project_id, record_key, kind, "
                "run_id, ts, received_at, is_swap, is_fallback, is_error, is_contract_break, "
                "rollup_key, has_violation, data, derived) SELECT %(project)s, "
                "%(tag)s || n, (ARRAY['turn', 'call', 'pick', 'outcome'])[1 + n %% 4], "
                "'run-' || (n / 100), %(start)s + n * (interval '86399 seconds' / %(count)s), "
                "now(), false, false, false, false, '', false, %(data)s, '{}' "
                "FROM generate_series(1, %(count)s) AS n RETURNING project_id, record_key, ts) "
                f"INSERT INTO {partitions.KEYS} (project_id, record_key, day) "
                "SELECT project_id, record_key, (ts AT TIME ZONE 'UTC')::date FROM ins",
                {"project": project_id, "tag": f"{tag}-{day:%Y%m%d}-", "start": start,
                 "count": per_day, "data": DATA},
            )  # fmt: skip
    return time.perf_counter() - started


def forget_statistics() -> None:
    """Leave the records and their keys as if never analysed (nor vacuumed)."""
    from django.db import connection

    from records.store import partitions

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.oid FROM pg_class c WHERE c.oid IN (SELECT inhrelid FROM pg_inherits "
            "WHERE inhparent = %s::regclass) OR c.oid IN (%s::regclass, %s::regclass)",
            [partitions.PARENT, partitions.PARENT, partitions.KEYS],
        )
        tables = [oid for (oid,) in cursor.fetchall()]
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = ANY(%s)", [tables])
        cursor.execute(
            "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = ANY(%s) "
            "OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = ANY(%s))",
            [tables, tables],
        )


def plan_of(sql: str, params, setup: str | None = None) -> list[str]:
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        if setup:
            cursor.execute(setup)
        cursor.execute("EXPLAIN " + sql, params)
        plan = [line for (line,) in cursor.fetchall()]
        transaction.set_rollback(True)
    return plan


def plan_shape(plan: list[str]) -> str:
    """The plan's nodes, costs and row estimates left out (what stays the same if the plan
    does)."""
    nodes = []
    for line in plan:
        text = line.strip().removeprefix("->").strip()
        if text.startswith(("Filter", "Index Cond", "TID Cond", "Output", "Recheck")):
            continue
        nodes.append(text.split("  (cost=")[0])
    return " / ".join(nodes)


def timed_batches(run_batch, batches: int, timeout_s: int) -> dict:
    """Run `batches` batches in one transaction, rolled back; each under a statement timeout.
    Returns the rows, the seconds of each batch, and whether one ran out of time."""
    from django.db import OperationalError, connection, transaction

    seconds, rows, timed_out = [], 0, False
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL statement_timeout = '{timeout_s}s'")
        for _ in range(batches):
            started = time.perf_counter()
            try:
                with transaction.atomic():
                    deleted = run_batch(cursor)
            except OperationalError:
                seconds.append(time.perf_counter() - started)
                timed_out = True
                break
            seconds.append(time.perf_counter() - started)
            rows += deleted
            if not deleted:
                break
        transaction.set_rollback(True)
    return {"rows": rows, "batch_s": seconds, "timed_out": timed_out}


def measure_state(project_id: int, before, first_table: str, timeout_s: int) -> dict:
    """Plans and timings of the statement before and after, and the ceiling, as the
    statistics stand."""
    from django.db import connection

    from records.store import retention

    folded = 2**62
    old = {"project": project_id, "before": before, "folded": folded}
    new = {**old, "since": datetime.min.replace(tzinfo=UTC), "batch": retention.PROJECT_BATCH}
    new_sql = retention.PROJECT_DELETE.format(table=first_table)
    result = {
        "before_plan": plan_of(BEFORE_PROJECT_DELETE, old),
        "after_plan": plan_of(new_sql, new, retention.PROJECT_DELETE_PLAN),
    }

    def before_batch(cursor) -> int:
        cursor.execute(BEFORE_PROJECT_DELETE, old)
        return cursor.rowcount

    result["before"] = timed_batches(before_batch, 2, timeout_s)
    # After: the first day partition, batch after batch as delete_project_records goes.
    cursor_at = {"since": new["since"]}

    def after_batch(cursor) -> int:
        cursor.execute(retention.PROJECT_DELETE_PLAN)
        cursor.execute(new_sql, {**new, **cursor_at})
        deleted, last = cursor.fetchone()
        cursor_at["since"] = last
        return deleted

    result["after"] = timed_batches(after_batch, 10_000, timeout_s)
    # The ceiling: the same rows in one plain DELETE, no batches (rolled back).
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {first_table}")  # the same cache for both

    def ceiling(cursor) -> int:
        cursor.execute(
            f"DELETE FROM {first_table} WHERE project_id = %(project)s AND id <= %(folded)s",
            old,
        )
        return cursor.rowcount

    result["ceiling"] = timed_batches(ceiling, 1, 600)
    return result


def report_state(shape: str, state: str, measured: dict) -> dict:
    before, after, ceiling = measured["before"], measured["after"], measured["ceiling"]
    before_rate = before["rows"] / sum(before["batch_s"]) if before["rows"] else 0.0
    after_rate = after["rows"] / sum(after["batch_s"])
    median = sorted(after["batch_s"])[len(after["batch_s"]) // 2]
    ceiling_rate = ceiling["rows"] / sum(ceiling["batch_s"])
    print(f"\n[{shape}, statistics {state}]")
    print("before, plan: " + plan_shape(measured["before_plan"]))
    for line in measured["before_plan"]:
        print("    " + line)
    print("after, plan: " + plan_shape(measured["after_plan"]))
    for line in measured["after_plan"]:
        print("    " + line)
    print(
        f"before: {len(before['batch_s'])} batches, {before['rows']:,} rows, batch s "
        + ", ".join(f"{s:.2f}" for s in before["batch_s"])
        + (" (ran out of time)" if before["timed_out"] else "")
        + f"; {before_rate:,.0f} rows/s"
    )
    print(
        f"after: {len(after['batch_s'])} batches, {after['rows']:,} rows, batch s max "
        f"{max(after['batch_s']):.3f} median {median:.3f}"
        f"; {after_rate:,.0f} rows/s; ceiling (one plain DELETE of the same rows) "
        f"{ceiling_rate:,.0f} rows/s; ratio {after_rate / ceiling_rate:.2f}",
        flush=True,
    )
    return {
        "shape": shape,
        "statistics": state,
        "before_plan": plan_shape(measured["before_plan"]),
        "after_plan": plan_shape(measured["after_plan"]),
        "before_batch_s": [round(s, 3) for s in before["batch_s"]],
        "before_rows": before["rows"],
        "before_timed_out": before["timed_out"],
        "after_batches": len(after["batch_s"]),
        "after_max_batch_s": round(max(after["batch_s"]), 3),
        "after_rows_per_s": round(after_rate),
        "ceiling_rows_per_s": round(ceiling_rate),
        "ratio": round(after_rate / ceiling_rate, 3),
    }


def machine() -> str:
    import os
    import platform

    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {model}, {os.cpu_count()} cores"


def commit() -> str:
    import subprocess

    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip() or "unknown"


def project_expiry(args) -> None:
    """Measure a project's own expiry at --records records, both shapes, three statistics
    states each; append the figures to bench/results/retention.jsonl."""
    import json

    rows = []
    for shape, share in (("minority", 0.1), ("majority", 0.7)):
        setup_django(args.database)
        from django.db import connection

        from records.models import Project
        from records.store import partitions

        today = partitions.day_of(datetime.now(UTC))
        days = partitions.days_between(today - timedelta(days=args.days), today - timedelta(days=1))
        partitions.ensure_days(partitions.days_between(days[0], today))
        expiring = Project.objects.create(name="expiring", retention_days=args.days // 2)
        others = [Project.objects.create(name=f"other-{n}") for n in range(1, PROJECTS)]
        before, _ = partitions.day_bounds(days[0] + timedelta(days=args.days // 2))
        first_table = partitions.day_name(days[0])
        mine = int(args.records * share)
        # Stale: the statistics are taken before the expiring project's records arrive.
        took = sum(
            load_project_records(p.pk, days, (args.records - mine) // len(others), f"o{p.pk}")
            for p in others
        )
        print(
            f"[{shape}] loaded {args.records - mine:,} records of other projects in {took:.0f} s",
            flush=True,
        )
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {partitions.PARENT}, {partitions.KEYS}")
        took = load_project_records(expiring.pk, days, mine, "e")
        print(f"[{shape}] then {mine:,} of the expiring project in {took:.0f} s", flush=True)
        for state in ("stale", "absent", "fresh"):
            if state == "absent":
                forget_statistics()
            elif state == "fresh":
                with connection.cursor() as cursor:
                    cursor.execute(f"ANALYZE {partitions.PARENT}, {partitions.KEYS}")
            measured = measure_state(expiring.pk, before, first_table, args.timeout)
            rows.append(report_state(shape, state, measured))
        connection.close()
    import psycopg

    from bench.common import ADMIN_URL

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {args.database} WITH (FORCE)")
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    line = {
        "bench": "retention --records",
        "machine": machine(),
        "commit": commit(),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "records": args.records,
        "days": args.days,
        "figures": rows,
    }
    with (results / "retention.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")
    worst = min(row["ratio"] for row in rows)
    print(
        "\nproject expiry: batched delete / one plain DELETE of the same rows, "
        f"worst ratio {worst:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-day", type=int, default=300_000)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument(
        "--extra-keys",
        type=int,
        default=0,
        help="keys added to the project before the expiry, as if more of its days were kept",
    )
    parser.add_argument(
        "--database", default="decisionboard_bench_retention", help="the scratch database"
    )
    parser.add_argument(
        "--records",
        type=int,
        default=0,
        help="measure a project's own expiry instead, over this many records (see above)",
    )
    parser.add_argument(
        "--timeout", type=int, default=60, help="--records: seconds allowed one old statement"
    )
    args = parser.parse_args()
    if args.records:
        project_expiry(args)
        return

    setup_django(args.database)
    from django.conf import settings
    from django.db import connection

    from records.store import partitions, retention

    today = partitions.day_of(datetime.now(UTC))
    first_day = today - timedelta(days=settings.DECISIONBOARD["RETENTION_DAYS"] + args.days - 1)
    partitions.ensure_days(partitions.days_between(first_day, today))
    # Nothing older than the first day: it is the oldest partition.
    for day in sorted(partitions.existing_days()):
        if day < first_day:
            with connection.cursor() as cursor:
                cursor.execute(f"DROP TABLE {partitions.day_name(day)}")
    project_id = load(args.per_day, args.days, first_day)
    with connection.cursor() as cursor:
        # Bulk-loaded and never analysed, as after a burst with autovacuum off: the plan the
        # catch-up gets for its id range (records.catchup.reads.fetch_records) must still use the
        # index.
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
    with connection.cursor() as cursor:
        # Statistics, as the catch-up's ANALYZE keeps them in production (every partition).
        cursor.execute(f"ANALYZE {partitions.PARENT}, {partitions.KEYS}")
    if args.extra_keys:
        added_at = time.perf_counter()
        kept = partitions.days_between(first_day + timedelta(days=args.days), today)
        add_keys(project_id, args.extra_keys, kept)
        print(
            f"added {args.extra_keys:,} more keys of the project in "
            f"{time.perf_counter() - added_at:.1f} s",
            flush=True,
        )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {partitions.KEYS}")
        (key_count,) = cursor.fetchone()
    print(f"{key_count:,} keys in {partitions.KEYS}", flush=True)
    plan = keys_delete_plan(first_day)
    scans = [line.strip().removeprefix("->").strip() for line in plan if " on " in line]
    print("the keys' delete reads: " + "; ".join(scan.split("  ")[0] for scan in scans))

    expired = expire_oldest_day()
    assert expired["keys"] == expired["records"], expired  # every stored record had its key
    print(
        f"expired {expired['day']} ({expired['records']:,} records): detach "
        f"{expired['detach_s']:.3f} s, keys and drop {expired['keys_and_drop_s']:.2f} s "
        f"(the keys' DELETE {expired['keys_delete_s']:.2f} s); "
        f"then, as follow-up maintenance apart from the expiry, a VACUUM of the keys "
        f"{expired['vacuum_keys_s']:.2f} s",
        flush=True,
    )
    next_day = first_day + timedelta(days=1)
    before_s, before_keys = keys_delete_before(next_day)
    print(
        f"the next day's {before_keys:,} keys deleted as before they had a day (a primary-key "
        f"lookup each, from the detached table): {before_s:.2f} s (rolled back)",
        flush=True,
    )
    started = time.perf_counter()
    deleted = retention.delete_in_batches(partitions.day_name(next_day), "true", [])
    delete_s = time.perf_counter() - started
    print(f"deleted the next day's {deleted:,} records in batches in {delete_s:.2f} s", flush=True)
    print(
        f"expire {expired['expire_s']:.2f} s (detach {expired['detach_s']:.3f} s), "
        f"delete {delete_s:.2f} s, ratio {expired['expire_s'] / delete_s:.2f}"
    )


if __name__ == "__main__":
    main()
