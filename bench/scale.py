"""Decisionboard at scale on PostgreSQL: pages, database size, and catch-up lanes.

    .venv/bin/python bench/scale.py [--records 10000000] [--runs N/100] [--requests 30]
                                    [--lane-records 400000] [--lane-projects 8] [--lanes 1,2,4]
                                    [--skip-pages] [--keep]

On a scratch database (decisionboard_bench_scale, dropped at the end unless --keep):

1. `records` demo records over the last 30 days in `runs` runs, in one project (the worst case
   for its pages), loaded with COPY straight into the records table (bench.common.store_rows;
   runs created from them in one INSERT, as ingest would have), then folded in by one catch-up
   lane (its rate is printed) and VACUUM ANALYZEd, as autovacuum would after such a load.
2. p95 server time (Django's test Client in this process, as bench/pages.py) of the overview,
   the runs list, a run, the classifiers page and the metrics API, each as a ratio to the goal
   (150 ms), and of the comparison of two releases (/changes/; each run is posted as one of
   bench.pages.RELEASES, by a hash of its run id) against its own goal (300 ms): under 1 meets
   it.
3. The database's size per million records (and the records table's alone).
4. The time to expire the oldest day as records.store.retention does (bench/retention.py): DETACH,
   the day's keys deleted, DROP (goal < 1 s); the VACUUM of the keys after, timed apart.
5. Catch-up lanes: `lane-records` more records, spread evenly over `lane-projects` projects,
   COPYed on top (not analysed: the statistics lag a burst), are folded by 1, 2 and 4 lanes, each
   lane a process of its own running `records.catchup.passes.catch_up(lane=k)` as a Celery worker
   would, all started at one instant; the rollups are reset between counts. First, the lane's read
   of its records, `id` range then `project_id % n` filter (what records.catchup.reads.fetch_records
   does), is timed against an index on (project_id, id) built for the comparison. Prints each
   count's records/s, its ratio to one lane (goal: >= 1.6 with 2 lanes where cores allow) and the
   machine's cores, and per lane the rate of each process.

Timings on a shared machine are noisy: the ratios, measured in one run, are what to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import zlib
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ADMIN_URL, ROOT, setup_django, store_rows  # noqa: E402
from bench.pages import RELEASES  # noqa: E402
from bench.results import record_result  # noqa: E402

NAME = "decisionboard_bench_scale"
GOAL_MS = 150.0
CHANGES_GOAL_MS = 300.0  # the comparison of two releases reads every rollup row of each
SPAN = timedelta(days=30)
BATCH = 50_000


def _url() -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(ADMIN_URL)._replace(path=f"/{NAME}"))


def _drop_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")


# --- loading -------------------------------------------------------------------------------


def load(projects: list, records: int, runs: int, seed: int) -> tuple[int, int, float]:
    """`records` demo records over SPAN in `runs` runs, dealt to `projects` run by run, COPYed
    into the records table; then their runs. Returns (first id, last id, seconds)."""
    from django.db import connection
    from django.utils import timezone

    from records.contract.normalise import normalise
    from records.demo.generator import generate_records
    from records.store import partitions
    from records.store.writer import COLUMNS, RECORD_TABLE, RUN_TABLE

    now = timezone.now()
    end = now.replace(microsecond=0)
    columns = ", ".join(("project_id", "received_at", *COLUMNS))
    started = time.perf_counter()
    # The day partitions ingest would have made (records.store.partitions), so each day is its own.
    partitions.ensure_days(partitions.days_between(partitions.day_of(end - SPAN),
                                                   partitions.day_of(end)))  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(max(id), 0) FROM {RECORD_TABLE}")
        before = cursor.fetchone()[0]
    run_project: dict[str, int] = {}
    pending: dict[int, list] = {p.pk: [] for p in projects}

    def flush() -> None:
        with connection.cursor() as cursor:
            with cursor.cursor.copy(f"COPY {RECORD_TABLE} ({columns}) FROM STDIN") as copy:
                for project_id, rows in pending.items():
                    for row in store_rows(project_id, now, rows):
                        copy.write_row(row)
                    rows.clear()

    count = 0
    raw_records = generate_records(records=records, runs=runs, seed=seed, end=end, span=SPAN)
    for raw in raw_records:
        raw["release"] = RELEASES[zlib.crc32(raw["run_id"].encode()) % len(RELEASES)]
        project = run_project.setdefault(
            raw["run_id"], projects[len(run_project) % len(projects)].pk
        )
        pending[project].append(normalise(raw, now=now))
        count += 1
        if count % BATCH == 0:
            flush()
            if count % (BATCH * 20) == 0:
                print(f"  loaded {count:,} records", flush=True)
    flush()
    with connection.cursor() as cursor:
        # The runs ingest would have created on first sight (records.store.writer); the catch-up
        # counts their records and widens them.
        cursor.execute(
            f"INSERT INTO {RUN_TABLE} (project_id, run_id, parent_run_id, agent, session_id, "
            "first_ts, last_ts, record_count, created_at, kind_counts, models_seen, has_swap, "
            "has_fallback, has_error, has_contract_break, has_violation) "
            "SELECT project_id, run_id, max(parent_run_id), max(agent), max(session_id), min(ts), "
            "max(ts), 0, %s, '{}', '{}', false, false, false, false, false "
            f"FROM {RECORD_TABLE} WHERE id > %s GROUP BY project_id, run_id "
            "ON CONFLICT (project_id, run_id) DO NOTHING",
            [now, before],
        )
        cursor.execute(f"SELECT min(id), max(id) FROM {RECORD_TABLE} WHERE id > %s", [before])
        first, last = cursor.fetchone()
        # And the keys ingest keeps beside them (records.store.writer), which expiry cleans up too.
        cursor.execute(
            f"INSERT INTO {partitions.KEYS} (project_id, record_key, day) SELECT project_id, "
            f"record_key, (ts AT TIME ZONE 'UTC')::date FROM {RECORD_TABLE} "
            "WHERE id BETWEEN %s AND %s",
            [first, last],
        )
    return first, last, time.perf_counter() - started


def _set_lanes(lanes: int, last_id: int) -> None:
    """Every lane of `lanes` at `last_id` (what a switch leaves; not timed here)."""
    from records import catchup
    from records.models import Watermark

    catchup.lane_watermarks().delete()
    Watermark.objects.bulk_create(
        Watermark(name=catchup.lane_name(lane, lanes), last_id=last_id) for lane in range(lanes)
    )


# --- pages ---------------------------------------------------------------------------------


def measure_pages(project, requests: int) -> list[tuple[str, float]]:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.utils import timezone

    from bench.pages import percentiles_ms, timed
    from records.models import ApiKey, Record, Run

    user = get_user_model().objects.create_superuser("bench-admin", None, "x")
    client = Client(HTTP_HOST="127.0.0.1")  # a host of the default ALLOWED_HOSTS
    client.force_login(user)
    _, key = ApiKey.issue(project, ApiKey.Scope.READ)
    api = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {key}")
    runs = Run.objects.filter(project=project, kind_counts__has_key="tool_choice.pick")
    typical = runs.order_by("record_count", "id")[runs.count() // 2]
    assert Record.objects.filter(project=project, run_id=typical.run_id).exists()
    now = timezone.now().replace(microsecond=0)
    day = {"from": (now - timedelta(days=1)).isoformat(), "to": now.isoformat()}
    month = {"from": (now - SPAN).isoformat(), "to": now.isoformat()}
    releases = {"a": f"release:{RELEASES[0]}", "b": f"release:{RELEASES[1]}"}
    pages = [
        ("overview", client, "/", {}, GOAL_MS),
        ("runs list", client, "/runs/", {}, GOAL_MS),
        (f"a run ({typical.record_count} records)", client, f"/runs/{typical.run_id}/", {},
         GOAL_MS),
        ("classifiers", client, "/classifiers/", {}, GOAL_MS),
        ("metrics API, p95 latency by hour, 1 day", api,
         "/api/v1/metrics/classifier_latency_p95", {**day, "interval": "hour"}, GOAL_MS),
        ("metrics API, p95 latency by day, 30 days", api,
         "/api/v1/metrics/classifier_latency_p95", {**month, "interval": "day"}, GOAL_MS),
        ("comparison of the two releases", client, "/changes/", releases, CHANGES_GOAL_MS),
        ("release comparison API", api, "/api/v1/changes", releases, CHANGES_GOAL_MS),
    ]  # fmt: skip
    out = []
    for label, who, url, params, goal in pages:
        response = who.get(url, params)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
        _, p95 = percentiles_ms(
            timed(lambda who=who, url=url, params=params: who.get(url, params), requests)
        )
        out.append((label, p95, goal))
        print(f"  {label:44} p95 {p95:7.1f} ms  ratio to {goal:.0f} ms: {p95 / goal:.2f}",
              flush=True)  # fmt: skip
    return out


def database_size(records: int) -> None:
    from django.db import connection

    from bench.retention import size_per_million

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        total = cursor.fetchone()[0]
    # The partitioned parent has no storage of its own: its partitions, summed, are the table.
    size = size_per_million()
    per = 1_000_000 / records
    print(f"database size: {total / 2**20:,.0f} MiB, {total * per / 2**20:,.0f} MiB per million "
          f"records (the records table with its indexes: {size['records_mb']:,.0f} MiB per "
          f"million; their keys: {size['keys_mb']:,.0f} MiB per million)", flush=True)  # fmt: skip


# --- retention -----------------------------------------------------------------------------


def expire_one_day() -> dict:
    """Expire the oldest day of records as records.store.retention does (bench/retention.py: DETACH,
    the keys' cleanup, DROP), goal < 1 s; timed step by step."""
    from bench.retention import expire_oldest_day

    return expire_oldest_day()


# --- catch-up lanes ------------------------------------------------------------------------


def fetch_plans(
    first: int, last: int, lanes: int = 4, batch: int = 20_000, repeat: int = 5
) -> None:
    """The lane's read, as records.catchup.reads.fetch_records does it (id range, then project_id
    % lanes), against an index on (project_id, id) with the lane's projects listed, on records
    the planner has no statistics of."""
    from django.db import connection

    from records.models import Project

    window = (first, min(last, first + batch * lanes))
    mine = [p for p in Project.objects.values_list("id", flat=True) if p % lanes == 0]
    queries = {
        "id range, then project_id % n": (
            "SELECT id, project_id, ts FROM records_record WHERE id > %s AND id <= %s "
            "AND project_id %% %s = 0", [*window, lanes]),
        "(project_id, id) index, projects listed": (
            "SELECT id, project_id, ts FROM records_record WHERE project_id = ANY(%s) "
            "AND id > %s AND id <= %s", [mine, *window]),
    }  # fmt: skip
    with connection.cursor() as cursor:
        started = time.perf_counter()
        cursor.execute("CREATE INDEX bench_project_id ON records_record (project_id, id)")
        built = time.perf_counter() - started
        try:
            for label, (sql, params) in queries.items():
                cursor.execute("EXPLAIN " + sql, params)
                plan = cursor.fetchall()[0][0]
                times = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    cursor.execute(sql, params)
                    rows = len(cursor.fetchall())
                    times.append(time.perf_counter() - started)
                print(f"  lane read, {label:40} {statistics.median(times) * 1000:6.1f} ms for "
                      f"{rows:,} of {window[1] - window[0]:,} ids  plan: {plan.strip()[:70]}",
                      flush=True)  # fmt: skip
        finally:
            cursor.execute("DROP INDEX bench_project_id")
    print(f"  (building the (project_id, id) index took {built:.1f} s: ingest would keep it up)")


def _reset(projects: list, last_id: int, lanes: int) -> None:
    from django.db import transaction

    from records.models import Classification, Rollup, Run, Streak, StreakSegment, Watermark

    with transaction.atomic():
        for model in (Rollup, StreakSegment, Streak, Classification):
            model.objects.filter(project__in=projects).delete()
        Run.objects.filter(project__in=projects).update(
            record_count=0, kind_counts={}, models_seen={}, has_swap=False, has_fallback=False,
            has_error=False, has_contract_break=False, has_violation=False,
        )  # fmt: skip
        _set_lanes(lanes, last_id)
        # No ANALYZE in the middle of a timed run: every count runs on the same statistics.
        Watermark.objects.update_or_create(name="analyzed", defaults={"last_id": 2**62})


def fold_with_lanes(lanes: int, records: int) -> tuple[float, list[float], float]:
    """Every lane a process, all started at one instant; returns (records/s overall, each
    lane's records/s, the share of the lanes' wall time spent on their own CPU)."""
    start = time.time() + 4.0  # after every child has set Django up
    env = dict(os.environ, DATABASE_URL=_url(), DJANGO_SETTINGS_MODULE="config.settings")
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--lane-child", str(lane), str(lanes), str(start)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for lane in range(lanes)
    ]
    results = [json.loads(child.communicate()[0].strip().splitlines()[-1]) for child in children]
    assert all(child.returncode == 0 for child in children)
    folded = sum(r["folded"] for r in results)
    assert folded == records, (folded, records)
    seconds = max(r["end"] for r in results) - start
    cpu_share = sum(r["cpu"] for r in results) / sum(r["end"] - start for r in results)
    return folded / seconds, [r["folded"] / (r["end"] - start) for r in results], cpu_share


def lane_child(lane: int, lanes: int, start: float) -> None:
    import django

    django.setup()
    from django.db import connection

    from records import catchup

    connection.ensure_connection()
    time.sleep(max(0.0, start - time.time()))
    cpu = time.process_time()
    folded = catchup.catch_up(lane=lane, lanes=lanes, max_seconds=3600)
    # The worker's own CPU time: the rest of the wall time it waited on PostgreSQL (or a core).
    cpu = time.process_time() - cpu
    print(json.dumps({"folded": folded, "end": time.time(), "cpu": cpu}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=None, help="default: records / 100")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--lane-records", type=int, default=400_000)
    parser.add_argument("--lane-projects", type=int, default=8)
    parser.add_argument("--lanes", default="1,2,4", help="lane counts, in order; repeat some")
    parser.add_argument("--skip-pages", action="store_true", help="only the catch-up lanes")
    parser.add_argument("--keep", action="store_true", help="do not drop the database")
    parser.add_argument("--lane-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lane_child:
        lane, lanes, start = args.lane_child
        lane_child(int(lane), int(lanes), float(start))
        return
    os.environ["DECISIONBOARD_VAR_DIR"] = "/tmp/decisionboard-bench-scale"
    Path(os.environ["DECISIONBOARD_VAR_DIR"]).mkdir(exist_ok=True)
    try:
        run(args)
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            _drop_database()


def run(args) -> None:
    setup_django(NAME)
    from django.db import connection

    from records import catchup
    from records.models import Project

    cores = os.cpu_count()
    print(f"{cores} cores; PostgreSQL autovacuum {_show('autovacuum')}, "
          f"shared_buffers {_show('shared_buffers')}", flush=True)  # fmt: skip
    figures: dict = {"options": vars(args)}
    if not args.skip_pages:
        project = Project.objects.create(name="bench")
        runs = args.runs or max(1, args.records // 100)
        first, last, seconds = load([project], args.records, runs, seed=7)
        print(f"loaded {args.records:,} records in {runs:,} runs over 30 days in {seconds:.0f} s",
              flush=True)  # fmt: skip
        _set_lanes(1, first - 1)
        started = time.perf_counter()
        folded = catchup.catch_up(lanes=1, max_seconds=24 * 3600)
        seconds = time.perf_counter() - started
        print(f"one lane folded {folded:,} records in {seconds:.0f} s: {folded / seconds:,.0f} "
              "records/s", flush=True)  # fmt: skip
        figures["one_lane_rec_s"] = folded / seconds
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        pages = measure_pages(project, args.requests)
        worst = max(pages, key=lambda p: p[1] / p[2])
        ratio = worst[1] / worst[2]
        print(f"worst p95: {worst[1]:.1f} ms ({worst[0]}), ratio to its goal {ratio:.2f} "
              f"({'met' if ratio < 1 else 'NOT met'})", flush=True)  # fmt: skip
        figures.update(worst_p95_ms=worst[1], worst_page=worst[0], p95_to_goal=ratio,
                       pages_p95_ms={label: p95 for label, p95, _ in pages})  # fmt: skip
        database_size(args.records)
        expired = expire_one_day()
        print(f"expire one day ({expired['records']:,} records): {expired['expire_s']:.2f} s "
              f"(goal < 1 s): detach {expired['detach_s']:.3f} s, the day's keys deleted and the "
              f"partition dropped {expired['keys_and_drop_s']:.2f} s; VACUUM of the keys after "
              f"(maintenance, apart) {expired['vacuum_keys_s']:.2f} s", flush=True)  # fmt: skip
        figures["expire_one_day"] = expired

    lane_projects = [Project.objects.create(name=f"lane-{i}") for i in range(args.lane_projects)]
    first, last, seconds = load(lane_projects, args.lane_records,
                                max(1, args.lane_records // 100), seed=9)  # fmt: skip
    print(f"lanes: {args.lane_records:,} records over {args.lane_projects} projects loaded on top "
          f"(ids {first:,}..{last:,}) in {seconds:.0f} s", flush=True)  # fmt: skip
    fetch_plans(first, last)
    with connection.cursor() as cursor:
        # Every run reads pages already read once (hint bits set), not only the first run.
        cursor.execute("SELECT sum(length(record_key)) FROM records_record WHERE id >= %s", [first])
    rates: dict[int, list[float]] = {}
    for lanes in (int(n) for n in args.lanes.split(",")):
        _reset(lane_projects, first - 1, lanes)
        rate, per_lane, cpu_share = fold_with_lanes(lanes, args.lane_records)
        rates.setdefault(lanes, []).append(rate)
        print(f"catch-up with {lanes} lane(s): {rate:,.0f} records/s; per lane: "
              f"{', '.join(f'{r:,.0f}' for r in per_lane)} records/s; the lanes' own CPU "
              f"{cpu_share:.0%} of their time", flush=True)  # fmt: skip
    one = statistics.median(rates.get(1) or [1.0])
    print(f"catch-up lanes, median records/s and ratio to one lane [{cores} cores]: " + "; ".join(
        f"{lanes}: {statistics.median(r):,.0f} ({statistics.median(r) / one:.2f}x"
        f"{', goal >= 1.6' if lanes == 2 else ''})" for lanes, r in sorted(rates.items())
    ), flush=True)  # fmt: skip
    figures["lanes"] = {
        str(lanes): {
            "median_rec_s": statistics.median(r),
            "to_one_lane": statistics.median(r) / one,
        }
        for lanes, r in sorted(rates.items())
    }
    record_result("scale", figures)


def _show(setting: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {setting}")
        return cursor.fetchone()[0]


if __name__ == "__main__":
    main()
