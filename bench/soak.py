"""Soak: sustained out-of-order ingest while an operator reads.

    .venv/bin/python bench/soak.py [--minutes 10] [--rate 3000] [--clients 2] [--backlog 200000]
                                   [--read-pause 0.2] [--database decisionboard_bench_soak]
                                   [--random-ids] [--keep]

Killed (SIGTERM, SIGINT, SIGHUP, `timeout`), it stops the gunicorn and Celery workers it started
before it exits (bench.common.exit_on_signals); a second signal kills them at once.

On a scratch PostgreSQL database (`--database`; autovacuum as the server has it) and
Redis (REDIS_URL, default the local one), the product runs as shipped: gunicorn with
gunicorn.conf.py and the Celery workers with beat (workers.processes.worker_commands).

1. Load, `minutes` long: `clients` processes post batches of 500 on a fixed schedule, together
   `rate` records/s. Each batch is whole runs of every kind (records.demo.generator, run after run)
   with timestamps spread over the 30 minutes before it is sent: agents flush a run when it ends, so
   records arrive up to half an hour late, a third of them verdicts or picks of past minutes. Record
   and run ids count up per client, as the decisionboard client's do; `--random-ids` makes them
   uuid4s, as OpenTelemetry span ids or records posted without an id have, which scatter the inserts
   into the record key index over the whole of it. Meanwhile a reader requests, one after another,
   the overview, the runs list, a run, the classifiers page and the metrics API (a latency
   percentile by model, per minute), with `read-pause` seconds between requests (0.2: about five a
   second, a busy team of operators and dashboards; back to back, the reader alone keeps a web
   thread and most of a core busy, which the ingest ceiling below does not pay for); and a poller
   reads the records total from the metrics API every 250 ms to time each batch's lag (from its 200
   to the first poll that counts it).
2. Drain: the time from the last batch to the rollups counting every record.
3. Ceiling: with no worker running, the same clients post the same kind of batches as fast as
   they can for 20 s (what bench/ingest.py measures), in the same run, on records of their own.
   It is measured twice: before the load, after 5 s of the same posting uncounted to warm the
   server up (the workers start after it and fold its records before the clock), and after
   the load. This VM's speed moves by a third from minute to minute. The ratio printed is
   against the higher of the two ceilings, so it is the lower of the two ratios (even warmed
   up, the ceiling before a long load can read well under the one after it).
4. Backlog (`--backlog`, 0 skips it): that many records of the last 30 minutes stored shuffled,
   with no worker running, then one catch-up to the end, against the COPY ceiling of the same
   rows (bench.common.copy_ceiling).

Prints the sustained rate as a ratio to the ceiling with the lag p95 and the drain (goals, at
the highest rate that keeps them: lag p95 < 5 s, drain < 30 s, ratio >= 0.5; run it at a few
rates to find that one), p50/p95 of every page and API call during the load (goal p95 < 150 ms),
the RSS of web and workers at the start, middle and end of the load and, from samples every
10 s of RSS and PSS (PSS splits the pages a master shares with its forked children), their
range in the first minute (warming up) and after it with the growth from the first half of the
rest to the second (goal: flat), and the shuffled catch-up's ratio to COPY (goal >= 0.5). Also,
to explain them: the tables the catch-up updates in place at the end of the load (live rows,
dead versions, VACUUMs, HOT updates) and the WAL the server wrote during the load (bytes a
record, full-page images, checkpoints).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    ADMIN_URL,
    copy_ceiling,
    exit_on_signals,
    gunicorn,
    setup_django,
    store_rows,
)
from bench.results import record_result  # noqa: E402
from workers.processes import running, worker_commands  # noqa: E402

BATCH = 500
SPREAD = timedelta(minutes=30)
CHUNK = 20  # batches generated at a time by a client
CEILING_SECONDS = 20
RSS_EVERY = 10  # seconds between the RSS and PSS samples of web and worker during the load
RANDOM_IDS = False  # --random-ids; set before the clients fork
# The demo's record and run ids name their seed, seed_base + client * 1,000,000 + chunk (a chunk
# of CHUNK batches): each posting needs seeds of its own. The load's clients start at 100 and
# post a few hundred chunks each in ten minutes; the ceilings start far past any load's. (The
# ceiling after the load once started at 200: past ~100 chunks a client, it posted the load's
# own records again, all duplicates.)
LOAD_SEEDS = 100
WARM_UP_SEEDS = 500_000
WARM_UP_SECONDS = 5
CEILING_SEEDS = (600_000, 700_000)  # before and after the load


# --- clients (child processes) ------------------------------------------------------------------
def _batches(client: int, seed_base: int):
    """Endless batches of whole runs with timestamps over the last 30 minutes, made as sent."""
    import orjson

    from records.demo.generator import generate_records

    chunk = 0
    while True:
        seed = seed_base + client * 1_000_000 + chunk
        records = list(
            generate_records(records=BATCH * CHUNK, runs=BATCH * CHUNK // 100, seed=seed,
                             end=datetime.now(UTC).replace(microsecond=0), span=SPREAD)
        )  # fmt: skip
        if RANDOM_IDS:
            _randomise_ids(records)
        for i in range(0, len(records), BATCH):
            yield orjson.dumps({"records": records[i : i + BATCH]})
        chunk += 1


def _randomise_ids(records: list[dict]) -> None:
    """Random record and run ids (uuid4), as OpenTelemetry span ids, a framework's uuid4 run
    ids or records posted without an id (their key is a sha256) have: the demo's own ids count
    up, so each client's keys land together in the key and run indexes. A run keeps one id."""
    import uuid

    runs: dict[str, str] = {}
    for record in records:
        record["id"] = uuid.uuid4().hex
        for field in ("run_id", "parent_run_id"):
            if field in record:
                record[field] = runs.setdefault(record[field], str(uuid.uuid4()))


class _Client:
    """One keep-alive connection, as a browser or an HTTP library keeps one: a request that
    finds it closed by the server (idle past the keep-alive timeout, or a gunicorn worker
    leaving when DECISIONBOARD_WEB_MAX_REQUESTS is set) is sent again on a new one, once, and
    counted. The time measured includes the failed attempt. Ingest is idempotent on record ids,
    so a POST is sent again too (the decisionboard client does the same)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.reconnects = 0

    def get(self, path: str, headers: dict) -> tuple[int, bytes]:
        return self.request("GET", path, headers)

    def request(self, method: str, path: str, headers: dict, body=None) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                response = self.conn.getresponse()
                return response.status, response.read()
            except (ConnectionError, http.client.RemoteDisconnected):
                if attempt == 2:
                    raise
                self.reconnects += 1
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        raise AssertionError("unreachable")


def post_at_rate(args) -> list[tuple[float, int, int]]:
    """One client: batches on a fixed schedule (rate 0: back to back) until `until` (or
    `most` batches); returns (time of each 200, records acknowledged, of which duplicates)."""
    port, key, rate, until, client, seed_base, most = args
    http_client = _Client(port)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    acks = []
    start = time.monotonic()
    for n, body in enumerate(_batches(client, seed_base)):
        if rate:
            time.sleep(max(0.0, start + n * BATCH / rate - time.monotonic()))
        if time.monotonic() >= until or n >= most:
            break
        status, payload = http_client.request("POST", "/api/v1/records", headers, body)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {payload[:300]!r}")
        answer = json.loads(payload)
        # A batch sent again after a lost answer is stored once: its ids come back duplicates.
        acks.append((time.monotonic(), answer["accepted"] + answer["duplicates"],
                     answer["duplicates"]))  # fmt: skip
    return acks


def _metrics_path(metric: str, interval: str, **extra: str) -> str:
    now = datetime.now(UTC)
    params = {"interval": interval, "from": (now - timedelta(days=1)).isoformat(),
              "to": (now + timedelta(days=1)).isoformat(), **extra}  # fmt: skip
    return f"/api/v1/metrics/{metric}?{urlencode(params)}"


def poll_totals(port: int, key: str, until: float, expected, out) -> None:
    """(time, records counted by the rollups) every 250 ms until `until`, or until the count
    reaches `expected` (a shared value, 0 while the load runs: the posted total after it)."""
    client = _Client(port)
    headers = {"Authorization": f"Bearer {key}"}
    samples = []
    while time.monotonic() < until:
        _, body = client.get(_metrics_path("records", "day"), headers)
        samples.append((time.monotonic(), sum(t["value"] for t in json.loads(body)["totals"])))
        if expected.value and samples[-1][1] >= expected.value:
            break  # drained
        time.sleep(0.25)
    out.send(samples)


def read_pages(
    port: int, session: str, key: str, run_id: str, until: float, pause: float, out
) -> None:
    """An operator and a dashboard client reading in turn, `pause` seconds between requests:
    {name: [seconds]} until `until`."""
    client = _Client(port)
    page = {"Cookie": f"sessionid={session}"}
    api = {"Authorization": f"Bearer {key}"}
    calls = [
        ("overview", "/", page),
        ("runs list", "/runs/", page),
        ("a run", f"/runs/{run_id}/", page),
        ("classifiers", "/classifiers/", page),
        ("metrics API", None, api),
    ]
    times: dict[str, list[float]] = {name: [] for name, _, _ in calls}
    while time.monotonic() < until:
        for name, path, headers in calls:
            path = path or _metrics_path("classifier_latency_p95", "minute", group_by="model")
            start = time.perf_counter()
            status, _ = client.get(path, headers)
            if status != 200:
                raise RuntimeError(f"{name}: HTTP {status}")
            times[name].append(time.perf_counter() - start)
            time.sleep(pause)
    times["(reconnects)"] = [client.reconnects]
    out.send(times)


# --- measurements -------------------------------------------------------------------------------
_WORKER_PIDS: set[int] = set()  # every process of the default worker's group seen by a sample


def memory_mb(pid: int, seen: set[int] | None = None) -> tuple[float, float]:
    """Resident memory of a process group (a gunicorn or Celery master and its children): the
    sum of their RSS and of their PSS. RSS counts a page shared by the master and its forked
    children once in each; PSS splits it among them, so its sum is what the group holds."""
    rss = pss = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            # The master's process group, and its children: a gunicorn worker leads its own
            # session (gunicorn.conf.py post_fork).
            if pid in (int(fields[1]), int(fields[2])):
                status = (stat.parent / "status").read_text()
                rollup = (stat.parent / "smaps_rollup").read_text()
                rss += int(status.split("VmRSS:")[1].split()[0])
                pss += int(rollup.split("\nPss:")[1].split()[0])
                if seen is not None:
                    seen.add(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return rss / 1024, pss / 1024


def group_memory(web: int, worker: int) -> tuple[float, float, float, float]:
    """(web RSS, worker RSS, web PSS, worker PSS) in MB."""
    (web_rss, web_pss), (worker_rss, worker_pss) = memory_mb(web), memory_mb(worker, _WORKER_PIDS)
    return web_rss, worker_rss, web_pss, worker_pss


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def print_rss_trend(series: list[tuple[float, ...]], seconds: float) -> None:
    """The RSS and PSS samples of the load's first minute (the processes warm up: imports,
    caches, the first passes' heaps) and the rest apart: the low and high of each, and the growth
    from the first half of the rest to the second half (means of each half's samples): a leak
    grows there, a bounded process does not."""
    warm = [s for s in series if s[0] < 60]
    rest = [s for s in series if s[0] >= 60]
    for name, column in (("RSS web", 1), ("RSS default worker", 2), ("PSS web", 3),
                         ("PSS default worker", 4)):  # fmt: skip
        if warm:
            print(f"{name:18} first minute {min(s[column] for s in warm):5.0f}-"
                  f"{max(s[column] for s in warm):5.0f} MB", end="")  # fmt: skip
        if len(rest) >= 4:
            half = len(rest) // 2
            early = sum(s[column] for s in rest[:half]) / half
            late = sum(s[column] for s in rest[half:]) / (len(rest) - half)
            print(f"; after it {min(s[column] for s in rest):5.0f}-"
                  f"{max(s[column] for s in rest):5.0f} MB, {len(rest)} samples, mean "
                  f"{early:5.0f} then {late:5.0f} MB ({late - early:+.0f} MB over "
                  f"{(seconds - 60) / 2 / 60:.1f} min)", end="")  # fmt: skip
        print()


def setup(args):
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from records.models import ApiKey, Membership, Project

    project = Project.objects.create(name="soak")
    ingest_key = ApiKey.issue(project, ApiKey.Scope.INGEST)[1]
    read_key = ApiKey.issue(project, ApiKey.Scope.READ)[1]
    user = get_user_model().objects.create_user("soak", password="soak")
    Membership.objects.create(user=user, project=project, role="admin")
    session = SessionStore()
    session.update({"_auth_user_id": str(user.pk),
                    "_auth_user_backend": "django.contrib.auth.backends.ModelBackend",
                    "_auth_user_hash": user.get_session_auth_hash()})  # fmt: skip
    session.create()
    return project, ingest_key, read_key, session.session_key


def load(args, project, ingest_key, read_key, session, var: Path) -> dict:
    from records.models import Record

    default, jobs = worker_commands(var / "beat-schedule", loglevel="WARNING")
    env = dict(os.environ)
    fork = multiprocessing.get_context("fork")
    seconds = args.minutes * 60
    with gunicorn(2, var / "web.log") as (port, web):
        # The ceiling before the load, no worker running yet (its records are folded below,
        # before the clock starts), after a few seconds of the same posting uncounted: cold,
        # the server's first batches held it ~20-25 % under the one after the load. The one
        # after the load is measured the same way, on a server warm from the load.
        ceiling_rate(args, port, ingest_key, WARM_UP_SEEDS, seconds=WARM_UP_SECONDS)
        ceiling_before, duplicates_before = ceiling_rate(args, port, ingest_key, CEILING_SEEDS[0])
        with (
            running(default, env=env, log=var / "worker.log", timeout=30) as worker,
            running(jobs, env=env, log=var / "jobs-worker.log", timeout=30),
        ):
            # A first flush so that the pages have a run to show, folded in (with the ceiling's
            # records) before the clock.
            post_at_rate((port, ingest_key, 0, time.monotonic() + 60, 99, 7, 1))
            while Record.objects.filter(project=project).count() and not _rolled_up(project):
                time.sleep(0.5)
            run_id = Record.objects.filter(project=project).values_list("run_id", flat=True)[0]
            already = Record.objects.filter(project=project).count()
            rss = {"start": group_memory(web.pid, worker.pid)}
            processes_at_start = len(_WORKER_PIDS)
            wal_before = wal_totals()
            start = time.monotonic()
            until = start + seconds
            poll_in, poll_out = multiprocessing.Pipe(duplex=False)
            read_in, read_out = multiprocessing.Pipe(duplex=False)
            expected = fork.Value("q", 0)
            # Daemons: a run killed before their deadline must not wait for them at exit.
            poller = fork.Process(
                target=poll_totals,
                args=(port, read_key, until + args.drain_limit, expected, poll_out),
                daemon=True,
            )
            reading = (port, session, read_key, run_id, until, args.read_pause, read_out)
            reader = fork.Process(target=read_pages, args=reading, daemon=True)
            poller.start()
            reader.start()
            # The children hold the sending ends: a child that dies closes its pipe, and the
            # recv below raises instead of waiting for ever.
            poll_out.close()
            read_out.close()
            shares = [(port, ingest_key, args.rate / args.clients, until, c, LOAD_SEEDS, 10**9)
                      for c in range(args.clients)]  # fmt: skip
            rss_series = []  # (seconds into the load, *group_memory) every RSS_EVERY s
            try:
                with fork.Pool(args.clients) as pool:
                    pending = pool.map_async(post_at_rate, shares)
                    while not pending.ready():
                        at = time.monotonic() - start
                        rss_series.append((at, *group_memory(web.pid, worker.pid)))
                        if "middle" not in rss and at >= seconds / 2:
                            rss["middle"] = rss_series[-1][1:]
                        pending.wait(RSS_EVERY)
                    per_client = pending.get()
                ended = time.monotonic()
                wal_after = wal_totals()
                wal = [a - b for a, b in zip(wal_after, wal_before, strict=True)]
                expected.value = already + sum(n for c in per_client for _, n, _ in c)
                reads = read_in.recv()
                samples = poll_in.recv()
            finally:  # killed: before the servers stop under them
                for child in (poller, reader):
                    if child.is_alive():
                        child.terminate()
            poller.join()
            reader.join()
            rss["end"] = group_memory(web.pid, worker.pid)
            # Pool processes replaced (the memory bound) show as new pids in the group.
            replaced = len(_WORKER_PIDS) - processes_at_start
            churn = table_churn()
        acks = sorted(a for client in per_client for a in client)
        posted = sum(n for _, n, _ in acks)
        # Lag of each batch: from its 200 to the first poll counting every record acked by then.
        lags, acked = [], already
        for at, n, _ in acks:
            acked += n
            seen = next((t for t, total in samples if t >= at and total >= acked), None)
            lags.append(seen - at if seen is not None else float("inf"))
        drained = next((t for t, total in samples if total >= acked), None)
        ceiling_after, duplicates_after = ceiling_rate(args, port, ingest_key, CEILING_SEEDS[1])
    return {
        "rate": posted / (ended - start), "posted": posted, "lags": lags, "reads": reads,
        "drain": (drained - ended) if drained is not None else None, "rss": rss,
        "rss_series": rss_series, "replaced": replaced, "churn": churn,
        "ceilings": (ceiling_before, ceiling_after),
        "duplicates": (sum(d for _, _, d in acks), duplicates_before, duplicates_after),
        "ceiling": max(ceiling_before, ceiling_after),
        "wal": wal,
    }  # fmt: skip


def wal_totals() -> tuple[int, int, int]:
    """The server's WAL written so far (bytes, full-page images) and its checkpoints (timed and
    requested): whole-cluster counters, so the soak's deltas are its own on a quiet server."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT wal_bytes::bigint, wal_fpi FROM pg_stat_wal")
        wal_bytes, fpi = cursor.fetchone()
        cursor.execute("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")
        return wal_bytes, fpi, cursor.fetchone()[0]


def table_churn() -> list[tuple]:
    """(table, live rows, dead row versions, VACUUMs, size in MB, updates, HOT updates) of the
    tables the catch-up updates in place, at the end of the load: what its VACUUMs
    (records.catchup.housekeeping.vacuum_if_churned) left behind, and how many updates wrote no
    index entry."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, n_live_tup, n_dead_tup, vacuum_count + autovacuum_count, "
            "pg_total_relation_size(relid) / 1048576.0, n_tup_upd, n_tup_hot_upd "
            "FROM pg_stat_user_tables "
            "WHERE relname IN ('records_rollup', 'records_run', 'records_streaksegment', "
            "'records_classification', 'records_tooldecision') ORDER BY relname"
        )
        return cursor.fetchall()


def _rolled_up(project) -> bool:
    from records.metrics.freshness import freshness

    return freshness()["pending_records"] == 0


def ceiling_rate(
    args, port: int, key: str, seed_base: int, seconds: float = CEILING_SECONDS
) -> tuple[float, int]:
    """bench/ingest.py's measure, here: the same clients posting back to back, no workers
    (records of their own: `seed_base` apart from every other posting's); returns the rate
    and the duplicates among them (a resend after a lost answer; anything more is a ceiling
    measured on records already stored, which costs ingest less)."""
    until = time.monotonic() + seconds
    shares = [(port, key, 0, until, c, seed_base, 10**9) for c in range(args.clients)]
    start = time.monotonic()
    with multiprocessing.get_context("fork").Pool(args.clients) as pool:
        acks = [a for client in pool.map(post_at_rate, shares) for a in client]
    rate = sum(n for _, n, _ in acks) / (max(t for t, _, _ in acks) - start)
    return rate, sum(d for _, _, d in acks)


def shuffled_backlog(args, project) -> tuple[float, float, float, float]:
    from records import catchup
    from records.contract.normalise import normalise
    from records.demo.generator import generate_records
    from records.models import Watermark
    from records.store.writer import store_records

    catchup.catch_up(max_seconds=3600)
    now = datetime.now(UTC)
    end = now.replace(microsecond=0)
    runs = max(1, args.backlog // 100)
    records = list(generate_records(records=args.backlog, runs=runs, seed=13, end=end, span=SPREAD))
    random.Random(13).shuffle(records)
    normalised = [normalise(r, now=now) for r in records]
    for i in range(0, len(normalised), 5000):
        store_records(project.pk, normalised[i : i + 5000], now)
    start = time.perf_counter()
    folded = catchup.catch_up(max_seconds=3600)
    seconds = time.perf_counter() - start
    # The recompute of the late minutes' streaks that ended the catch-up: its duration in ms
    # is what the lane's `streaks:` row keeps (catchup.fold_dirty_streaks).
    lanes = catchup.configured_lanes()
    streaks_ms = Watermark.objects.get(name=catchup.streaks_folded_name(0, lanes)).last_id
    copy = copy_ceiling(store_rows(project.pk, now, normalised))
    return folded / seconds, copy, seconds, streaks_ms / 1000


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=3000, help="records/s, all clients together")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--drain-limit", type=float, default=120, help="seconds to wait")
    parser.add_argument(
        "--read-pause",
        type=float,
        default=0.2,
        help="seconds between the reader's requests (0: back to back, a core's worth of reads)",
    )
    parser.add_argument(
        "--database", default="decisionboard_bench_soak", help="the scratch database (recreated)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the scratch database behind (to profile the pages on what the load left)",
    )
    parser.add_argument(
        "--random-ids",
        action="store_true",
        help="uuid4 record and run ids instead of the demo's counting ones",
    )
    args = parser.parse_args()
    global RANDOM_IDS
    RANDOM_IDS = args.random_ids
    exit_on_signals()  # a killed run stops its gunicorn and Celery children

    var = Path("/tmp") / args.database
    var.mkdir(exist_ok=True)
    os.environ["DECISIONBOARD_VAR_DIR"] = str(var)
    setup_django(args.database,
                 redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))  # fmt: skip
    project, ingest_key, read_key, session = setup(args)
    result = load(args, project, ingest_key, read_key, session, var)

    lags = result["lags"]
    p95_lag = _p(lags, 0.95)
    drain = result["drain"]
    ratio = result["rate"] / result["ceiling"]
    before, after = result["ceilings"]
    print(f"\nposted {result['posted']:,} records in {args.minutes:g} min at "
          f"{result['rate']:,.0f} rec/s ({args.clients} clients); ingest ceiling "
          f"{result['ceiling']:,.0f} rec/s (the higher of {before:,.0f} before the load and "
          f"{after:,.0f} after it); ratio {ratio:.2f} (against each: "
          f"{result['rate'] / before:.2f}, {result['rate'] / after:.2f})")  # fmt: skip
    figures: dict = {
        "options": vars(args),
        "posted": result["posted"],
        "rec_s": result["rate"],
        "ceiling_rec_s": result["ceiling"],
        "ceilings_rec_s": [before, after],
        "ratio": ratio,
        "lag_p50_s": _p(lags, 0.5),
        "lag_p95_s": p95_lag,
        "drain_s": drain,
    }
    print(
        "duplicates among the records acknowledged (resends after a lost answer): {:,} in "
        "the load, {:,} and {:,} in the ceilings".format(*result["duplicates"])
    )
    print(f"rollup lag p50 {_p(lags, 0.5):.2f} s, p95 {p95_lag:.2f} s (goal < 5 s); drain "
          + (f"{drain:.1f} s" if drain is not None else f"not done in {args.drain_limit:.0f} s")
          + " (goal < 30 s)")  # fmt: skip
    kept = p95_lag < 5 and drain is not None and drain < 30
    print(
        f"  at this rate the rollups {'keep up' if kept else 'do NOT keep up'}; "
        f"sustained ratio {ratio:.3f} ({'met' if ratio >= 0.5 else 'NOT met'}; goal >= 0.5 at the "
        "highest rate that keeps up)"
    )
    reconnects = result["reads"].pop("(reconnects)", [0])[0]
    print(f"the reader's connection was closed by the server {reconnects} time(s) (sent again); "
          f"{args.read_pause:g} s between its requests")  # fmt: skip
    figures["reads"] = {
        name: {"calls": len(s), "p50_ms": _p(s, 0.5) * 1000, "p95_ms": _p(s, 0.95) * 1000}
        for name, s in result["reads"].items()
    }
    figures["rss_mb"] = {when: {"web": v[0], "worker": v[1]} for when, v in result["rss"].items()}
    figures["worker_processes_replaced"] = result["replaced"]
    for name, samples in result["reads"].items():
        p95 = _p(samples, 0.95) * 1000
        print(f"{name:12} {len(samples):5} calls  p50 {_p(samples, 0.5) * 1000:7.1f} ms  "
              f"p95 {p95:7.1f} ms  {'ok' if p95 < 150 else 'over 150 ms'}")  # fmt: skip
    for when, (web, worker, web_pss, worker_pss) in result["rss"].items():
        print(f"RSS {when:6}  web {web:7.0f} MB  default worker {worker:7.0f} MB  "
              f"(PSS {web_pss:5.0f} and {worker_pss:5.0f} MB)")  # fmt: skip
    print_rss_trend(result["rss_series"], args.minutes * 60)
    print(f"default worker: at least {result['replaced']} pool process(es) replaced during the "
          "load (new pids in the samples: past the memory bound after a task)")  # fmt: skip
    for table, live, dead, vacuums, mb, updates, hot in result["churn"]:
        print(f"{table:22} {live:9,} live rows, {dead:9,} dead versions, {vacuums:4} VACUUMs, "
              f"{mb:7.1f} MB with its indexes, {updates:10,} updates ({hot:10,} HOT)")  # fmt: skip
    wal_bytes, fpi, checkpoints = result["wal"]
    print(f"WAL during the load: {wal_bytes / 1e9:.2f} GB, {wal_bytes / result['posted']:,.0f} "
          f"bytes a record, {fpi:,} full-page images, {checkpoints} checkpoints")  # fmt: skip
    figures["wal_bytes"] = wal_bytes
    if args.backlog:
        rate, copy, seconds, streaks = shuffled_backlog(args, project)
        print(f"shuffled backlog of {args.backlog:,}: catch-up {rate:,.0f} rec/s ({seconds:.1f} s, "
              f"of which {streaks:.1f} s the streak recompute of the late minutes), copy "
              f"{copy:,.0f} rows/s, ratio {rate / copy:.3f} "
              f"({'met' if rate / copy >= 0.5 else 'NOT met'}; goal >= 0.5)")  # fmt: skip
        figures["backlog"] = {
            "catch_up_rec_s": rate,
            "copy_rows_s": copy,
            "seconds": seconds,
            "streaks_s": streaks,
            "ratio": rate / copy,
        }
    record_result("soak", figures)
    from django.db import connections

    connections.close_all()
    if not args.keep:
        drop_database(args.database)


if __name__ == "__main__":
    main()
