"""How fresh the metrics stay under load, and how fast the worker catches up on a backlog.

    .venv/bin/python bench/passes.py [--rate 5000] [--seconds 60] [--backlog 500000]

Part 1, lag: gunicorn and the product's Celery workers with beat (workers.processes.
worker_commands) on Redis (REDIS_URL, default the local one), on a scratch PostgreSQL database.
One client posts batches of 500 at `rate` records/s for `seconds`; a second process polls
GET /api/v1/metrics/records every 100 ms. A batch's lag is the time from its 200 (committed) to
the first poll whose total covers every record acknowledged by then. The records are a live
stream: timestamps over the run, posted in ts order.

Part 2, catch-up: with no worker running, `backlog` records of the past hour are stored
directly in ts order (what piles up while the worker is down), then one process runs the
catch-up to the end. Its rate is set against the COPY ceiling of the same rows
into an empty table shaped like the records table (bench.common.copy_ceiling), in the same run.

Prints `lag p95 X s (p50 Y s), catch-up N rec/s, copy M rows/s, ratio R` as its last line
(goals: p95 < 5 s, R >= 0.5).
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    copy_ceiling,
    exit_on_signals,
    gunicorn,
    setup_django,
    store_rows,
)
from bench.results import record_result  # noqa: E402
from workers.processes import running, worker_commands  # noqa: E402

BATCH = 500


def poll_totals(port: int, key: str, until: float, out) -> None:
    """Child process: (monotonic time, records visible in the metrics API) every 100 ms."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {key}"}
    start = (datetime.now(UTC) - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    end = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = f"/api/v1/metrics/records?interval=day&from={start}&to={end}"
    samples = []
    import json

    while time.monotonic() < until:
        conn.request("GET", path, headers=headers)
        body = json.loads(conn.getresponse().read())
        samples.append((time.monotonic(), sum(t["value"] for t in body["totals"])))
        time.sleep(0.1)
    out.send(samples)


def measure_lag(args, project, ingest_key: str, read_key: str) -> list[float]:
    import orjson

    from records.demo.generator import generate_records

    total = args.rate * args.seconds
    # A live stream: timestamps over the next `seconds`, posted in ts order as they happen.
    end = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=args.seconds + 10)
    records = sorted(
        generate_records(records=total, runs=max(1, total // 100), seed=11, end=end,
                         span=timedelta(seconds=args.seconds)),
        key=lambda r: r["ts"],
    )  # fmt: skip
    bodies = [
        orjson.dumps({"records": records[i : i + BATCH]}) for i in range(0, len(records), BATCH)
    ]
    log_dir = Path(os.environ["DECISIONBOARD_VAR_DIR"])
    # The product's workers (workers.processes.worker_commands); the catch-up runs on the first.
    default, jobs = worker_commands(log_dir / "beat-schedule", loglevel="WARNING")
    env = dict(os.environ)
    with (
        gunicorn(2, log_dir / "web.log") as (port, _),
        running(default, env=env, log=log_dir / "worker.log", timeout=30),
        running(jobs, env=env, log=log_dir / "jobs-worker.log", timeout=30),
    ):
        time.sleep(3)  # let the worker connect
        receiver, sender = multiprocessing.Pipe(duplex=False)
        poller = multiprocessing.get_context("fork").Process(
            target=poll_totals, args=(port, read_key, time.monotonic() + args.seconds + 30, sender)
        )
        poller.start()
        headers = {"Authorization": f"Bearer {ingest_key}", "Content-Type": "application/json"}
        local = threading.local()

        def post(body: bytes) -> float:
            if not hasattr(local, "conn"):
                local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            local.conn.request("POST", "/api/v1/records", body=body, headers=headers)
            response = local.conn.getresponse()
            payload = response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")
            return time.monotonic()

        # Batches leave on a fixed schedule (rate records/s) whatever the answers' latency;
        # a few connections so that one slow answer does not hold the schedule up.
        interval = BATCH / args.rate
        start = time.monotonic()
        futures = []
        with ThreadPoolExecutor(max_workers=4) as pool:
            for i, body in enumerate(bodies):
                time.sleep(max(0.0, start + i * interval - time.monotonic()))
                futures.append(pool.submit(post, body))
        ack_times = sorted(f.result() for f in futures)
        count = len(ack_times) * BATCH
        # (time of a 200, records acknowledged by then): all of them must become visible.
        acked = [(t, (n + 1) * BATCH) for n, t in enumerate(ack_times)]
        achieved = count / (time.monotonic() - start)
        samples = receiver.recv()
        poller.join()
    print(f"posted {count:,} records at {achieved:,.0f} rec/s for {args.seconds} s", flush=True)
    lags = []
    for acked_at, needed in acked:
        seen = next((t for t, visible in samples if visible >= needed and t >= acked_at), None)
        if seen is None:
            raise SystemExit(f"{needed:,} records never became visible within 30 s")
        lags.append(seen - acked_at)
    return lags


def measure_catch_up(args, project) -> tuple[float, float]:
    from records import catchup
    from records.contract.normalise import normalise
    from records.demo.generator import generate_records
    from records.models import Record, Watermark
    from records.store.writer import store_records

    catchup.catch_up()  # fold in part 1's records first
    # The backlog of a worker that was down for an hour: records of the past hour, stored in
    # the order they arrived (ts order).
    now = datetime.now(UTC)
    generated = generate_records(
        records=args.backlog,
        runs=max(1, args.backlog // 100),
        seed=12,
        end=now.replace(microsecond=0),
        span=timedelta(hours=1),
    )
    normalised = [normalise(r, now=now) for r in sorted(generated, key=lambda r: r["ts"])]
    for i in range(0, len(normalised), 5000):
        store_records(project.pk, normalised[i : i + 5000], now)
    pending = Record.objects.filter(
        id__gt=Watermark.objects.get(name=catchup.WATERMARK).last_id
    ).count()
    start = time.perf_counter()
    folded = catchup.catch_up(max_seconds=3600)
    seconds = time.perf_counter() - start
    assert folded == pending == args.backlog, (folded, pending)
    catch_up_rate = folded / seconds
    print(f"caught up on {folded:,} records in {seconds:.1f} s", flush=True)
    return catch_up_rate, copy_ceiling(store_rows(project.pk, now, normalised))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--backlog", type=int, default=500_000)
    args = parser.parse_args()
    exit_on_signals()  # a killed run stops its gunicorn and Celery children

    var = Path("/tmp/decisionboard-bench-rollup")
    var.mkdir(exist_ok=True)
    os.environ["DECISIONBOARD_VAR_DIR"] = str(var)
    setup_django(
        "decisionboard_bench_rollup",
        redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    from records.models import ApiKey, Project

    project = Project.objects.create(name="bench")
    ingest_key = ApiKey.issue(project, ApiKey.Scope.INGEST)[1]
    read_key = ApiKey.issue(project, ApiKey.Scope.READ)[1]

    lags = sorted(measure_lag(args, project, ingest_key, read_key))
    p95 = lags[int(0.95 * (len(lags) - 1))]
    p50 = statistics.median(lags)
    rate, ceiling = measure_catch_up(args, project)
    print(
        f"lag p95 {p95:.2f} s (p50 {p50:.2f} s), catch-up {rate:,.0f} rec/s, "
        f"copy {ceiling:,.0f} rows/s, ratio {rate / ceiling:.2f}"
    )
    record_result(
        "rollup",
        {
            "options": vars(args),
            "lag_p95_s": p95,
            "lag_p50_s": p50,
            "catch_up_rec_s": rate,
            "copy_rows_s": ceiling,
            "ratio": rate / ceiling,
        },
    )


if __name__ == "__main__":
    main()
