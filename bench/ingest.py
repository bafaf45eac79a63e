"""Ingest throughput against PostgreSQL's COPY ceiling, measured in the same run.

    .venv/bin/python bench/ingest.py [--records 200000] [--batch 500] [--web-workers 2]
                                     [--clients 4]

1. Recreates a scratch database (decisionboard_bench_ingest), migrates it, issues a key.
2. Generates the demo records (records.demo) and serialises them into JSON batches up front.
3. Starts the product under gunicorn and posts every batch from separate client processes over
   keep-alive connections: ingest rate = records / wall time of the posting.
4. COPYs the same rows, already normalised, into an empty table shaped like the records table.

Prints `ingest N rec/s, copy M rows/s, ratio R` as its last line (goal: R >= 0.5).
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    copy_ceiling,
    exit_on_signals,
    gunicorn,
    setup_django,
    store_rows,
)


def post_batches(args: tuple[int, str, list[bytes]]) -> int:
    """One client process: post its batches in order over one keep-alive connection."""
    port, key, bodies = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    accepted = 0
    for body in bodies:
        conn.request("POST", "/api/v1/records", body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")
        accepted += int(payload.split(b'"accepted":')[1].split(b",")[0])
    conn.close()
    return accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    exit_on_signals()  # a killed run stops its gunicorn and Celery children

    setup_django("decisionboard_bench_ingest")
    import orjson

    from records.demo import generate_records
    from records.models import ApiKey, Project, Record
    from records.normalise import normalise

    project = Project.objects.create(name="bench")
    _, key = ApiKey.issue(project, ApiKey.Scope.INGEST)
    end = datetime.now(UTC).replace(microsecond=0)
    records = list(
        generate_records(records=args.records, runs=max(1, args.records // 100), seed=7, end=end)
    )
    bodies = [
        orjson.dumps({"records": records[i : i + args.batch]})
        for i in range(0, len(records), args.batch)
    ]
    print(
        f"{len(records):,} demo records, {sum(map(len, bodies)) / len(records):.0f} bytes "
        f"each as JSON, in {len(bodies):,} batches of {args.batch}",
        flush=True,
    )

    with gunicorn(args.web_workers) as (port, _):
        # Round-robin, so that every client posts a similar mix of batches.
        shares = [(port, key, bodies[i :: args.clients]) for i in range(args.clients)]
        with multiprocessing.get_context("fork").Pool(args.clients) as pool:
            start = time.perf_counter()
            accepted = sum(pool.map(post_batches, shares))
            ingest_seconds = time.perf_counter() - start
    stored = Record.objects.filter(project=project).count()
    if accepted != len(records) or stored != len(records):
        raise SystemExit(f"accepted {accepted:,}, stored {stored:,} of {len(records):,}")
    ingest_rate = len(records) / ingest_seconds
    print(
        f"posted with {args.clients} clients to {args.web_workers} gunicorn workers "
        f"in {ingest_seconds:.1f} s",
        flush=True,
    )

    now = datetime.now(UTC)
    rows = store_rows(project.pk, now, (normalise(r, now=now) for r in records))
    copy_rate = copy_ceiling(rows)
    print(
        f"ingest {ingest_rate:,.0f} rec/s, copy {copy_rate:,.0f} rows/s, "
        f"ratio {ingest_rate / copy_rate:.2f}"
    )


if __name__ == "__main__":
    main()
