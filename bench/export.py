"""Export throughput through the API against PostgreSQL's COPY TO ceiling, in the same run.

    .venv/bin/python bench/export.py [--records 1000000] [--batch 5000]
                                     [--database-url postgres://…/postgres]

1. Creates a scratch database (`decisionboard_bench_export`, dropped first and at the end),
   migrates it, makes a project and a read key.
2. Loads the demo records (records.demo.generator) fast: generated, normalised and stored with COPY
   by records.store.writer, `--batch` at a time.
3. Starts the product under gunicorn (one sync worker) and downloads GET /api/v1/export as JSONL,
   CSV and Parquet, streamed, counting the rows; rate = rows / wall time of the download.
4. COPYs the export's own query (records.formats.record_export.export_values: the same columns, rows
   and order) TO STDOUT: the ceiling of reading those rows out of PostgreSQL at all.
5. Reads the peak resident memory (VmHWM) of the gunicorn worker that served the exports (all
   three formats: Parquet holds a row group at a time and weighs the most).

Last line: `export jsonl N rows/s (ratio R), csv N rows/s (ratio R), copy N rows/s, web peak M MB`
(goals: ratio >= 0.3, web peak < 200 MB whatever the row count).
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import exit_on_signals, gunicorn  # noqa: E402
from bench.results import record_result  # noqa: E402

BENCH_DB = "decisionboard_bench_export"
READ_SIZE = 1 << 20


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def _admin(admin_url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(statement)


def load(records: int, batch: int) -> int:
    """Generate, normalise and store `records` demo records; returns the project id."""
    from records.contract.normalise import NormalisedRecord, normalise
    from records.demo.generator import generate_records
    from records.models import Project
    from records.store.writer import store_records

    project = Project.objects.create(name="bench")
    now = datetime.now(UTC).replace(microsecond=0)
    pending: list[NormalisedRecord] = []
    stored = 0
    started = time.perf_counter()
    for raw in generate_records(records=records, runs=max(1, records // 100), seed=7, end=now):
        result = normalise(raw, now=now)
        if not isinstance(result, NormalisedRecord):
            raise SystemExit(f"a demo record was rejected: {result}")
        pending.append(result)
        if len(pending) >= batch:
            stored += store_records(project.pk, pending, now).accepted
            pending = []
    if pending:
        stored += store_records(project.pk, pending, now).accepted
    if stored != records:
        raise SystemExit(f"stored {stored:,} of {records:,} records")
    seconds = time.perf_counter() - started
    print(f"loaded {stored:,} records in {seconds:.1f} s ({stored / seconds:,.0f}/s)", flush=True)
    return project.pk


def _worker_pid(master: int) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise RuntimeError("gunicorn started no worker")


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the most resident memory the process has held since it started."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


def download(port: int, key: str, fmt: str) -> tuple[int, int, float]:
    """Stream one export; returns (rows, bytes, seconds)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    conn.request("GET", f"/api/v1/export?format={fmt}", headers={"Authorization": f"Bearer {key}"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read(500)!r}")
    lines = size = 0
    with tempfile.TemporaryFile() as parquet:
        while chunk := response.read1(READ_SIZE):
            size += len(chunk)
            if fmt == "parquet":
                parquet.write(chunk)
            else:
                lines += chunk.count(b"\n")
        seconds = time.perf_counter() - started
        if fmt == "parquet":
            import pyarrow.parquet as pq

            parquet.seek(0)
            lines = pq.ParquetFile(parquet).metadata.num_rows
    conn.close()
    rows = lines - 1 if fmt == "csv" else lines  # the CSV header
    return rows, size, seconds


def copy_ceiling(project_id: int) -> tuple[int, int, float]:
    """COPY the export's query TO STDOUT; returns (rows, bytes, seconds)."""
    from django.db import connection

    from records.formats.record_export import export_values
    from records.models import Record

    query = export_values(Record.objects.filter(project_id=project_id)).query
    sql, params = query.get_compiler(connection=connection).as_sql()
    with connection.cursor() as cursor:
        # The statement as the export sends it, its parameters inlined (COPY takes none).
        statement = cursor.cursor.mogrify(sql, params)
        started = time.perf_counter()
        size = lines = 0
        with cursor.cursor.copy(f"COPY ({statement}) TO STDOUT") as copy:
            for data in copy:
                size += len(data)
                lines += bytes(data).count(b"\n")
        return lines, size, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "BENCH_ADMIN_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        ),
        help="a PostgreSQL URL whose user may create databases",
    )
    parser.add_argument("--keep", action="store_true", help="leave the scratch database")
    args = parser.parse_args()
    exit_on_signals()  # a killed run stops its gunicorn and Celery children

    _admin(args.database_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    _admin(args.database_url, f"CREATE DATABASE {BENCH_DB}")
    try:
        run(args)
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            _admin(args.database_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def run(args: argparse.Namespace) -> None:
    os.environ["DATABASE_URL"] = _with_database(args.database_url, BENCH_DB)
    os.environ.pop("REDIS_URL", None)  # exports stream from the database; no broker needed
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from records.models import ApiKey, Project

    call_command("migrate", verbosity=0)
    project_id = load(args.records, args.batch)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE records_record")
        cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('records_record'))")
        print(f"records table {cursor.fetchone()[0]}", flush=True)
    _, key = ApiKey.issue(Project.objects.get(pk=project_id), ApiKey.Scope.READ)
    connection.close()

    # Warm the cache the same way for both sides: one COPY that is not counted.
    copy_ceiling(project_id)

    results: dict[str, tuple[int, int, float]] = {}
    with gunicorn(1, timeout=900) as (port, server):
        worker = _worker_pid(server.pid)
        # The first request loads the URLconf and the views; keep that out of the timing.
        warm = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        warm.request("GET", "/api/v1/runs?limit=1", headers={"Authorization": f"Bearer {key}"})
        assert warm.getresponse().status == 200
        warm.close()
        for fmt in ("jsonl", "csv", "parquet"):
            results[fmt] = download(port, key, fmt)
            rows, size, seconds = results[fmt]
            print(
                f"{fmt}: {rows:,} rows, {size / 2**20:,.0f} MiB in {seconds:.1f} s; "
                f"web peak so far {peak_rss_mb(worker):.0f} MB",
                flush=True,
            )
            if rows != args.records:
                raise SystemExit(f"the {fmt} export had {rows:,} rows, not {args.records:,}")
        web_peak = peak_rss_mb(worker)

    rows, size, seconds = copy_ceiling(project_id)
    if rows != args.records:
        raise SystemExit(f"COPY returned {rows:,} rows, not {args.records:,}")
    copy_rate = rows / seconds
    print(f"copy: {rows:,} rows, {size / 2**20:,.0f} MiB in {seconds:.1f} s", flush=True)
    rates = {fmt: r[0] / r[2] for fmt, r in results.items()}
    print(f"parquet {rates['parquet']:,.0f} rows/s (ratio {rates['parquet'] / copy_rate:.2f})")
    print(
        f"export jsonl {rates['jsonl']:,.0f} rows/s (ratio {rates['jsonl'] / copy_rate:.2f}), "
        f"csv {rates['csv']:,.0f} rows/s (ratio {rates['csv'] / copy_rate:.2f}), "
        f"copy {copy_rate:,.0f} rows/s, web peak {web_peak:.0f} MB"
    )
    figures = {"options": vars(args), "copy_rows_s": copy_rate, "web_peak_mb": web_peak}
    for fmt, rate in rates.items():
        figures[f"{fmt}_rows_s"] = rate
        figures[f"{fmt}_ratio"] = rate / copy_rate
    record_result("export", figures)


if __name__ == "__main__":
    main()
