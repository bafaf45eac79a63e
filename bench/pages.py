"""Server time of the operator pages on a large project.

    .venv/bin/python bench/pages.py [--records 1000000] [--runs 20000] [--requests 50]
                                    [--reuse] [--keep]

On a scratch PostgreSQL database (decisionboard_bench_pages, created and dropped here), seeds
`records` demo records in `runs` runs the way `seed_demo` does
(records.demo.generator.generate_records → records.contract.normalise.normalise →
records.store.writer.store_records in batches of 5,000), folds them into rollups with one catch-up
pass (records.catchup.passes.catch_up), runs VACUUM ANALYZE as autovacuum would after such a load,
adds 1,000 alert rules with five group states and an event each, then requests each page `requests`
times with Django's test Client in this process, logged in as a superuser, after freezing the
objects it holds as a web worker does (ops.heap). Server time is the time of `client.get`
(middleware, view, queries, template), without the HTTP layer.

The ceiling of each page is its SQL alone: the statements one request issued (captured with an
execute wrapper), replayed with the same parameters on the same connection in the same run and
every row fetched. `ratio` is the page's p95 over that p95: what the page costs beyond reading
its data (sessions, views, figures, templates).

Two runs of 500 records each (demo seeds 8 and 9) are added for the run comparison. Each run of
the main seed is posted as one of two releases (RELEASES, by a hash of its run id), for the
release comparison (/changes/, records.metrics.release_comparison: every rollup row of each).

Goal: p95 under 150 ms for the runs list, a run detail, the overview, the tools pages (the tools
list, the most-missed tool's page, selection accuracy, the narrowing what-if), the fallbacks and
sessions pages, a comparison of two 500-record runs and the comparison of the two releases.
`--reuse` keeps an already seeded database (same counts), `--keep` leaves it behind for a later
`--reuse`; `--database` (or BENCH_PAGES_DATABASE) names another scratch database (two benchmarks
on one server).
`--no-analyze` skips the VACUUM ANALYZE after the load, to time the plans PostgreSQL picks
without statistics (autovacuum off).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ADMIN_URL  # noqa: E402
from bench.results import record_result  # noqa: E402

NAME = os.environ.get("BENCH_PAGES_DATABASE", "decisionboard_bench_pages")
COMPARED = 500  # records in each of the two compared runs
RELEASES = ("bench-1", "bench-2")  # the main seed's runs, half in each
BATCH = 5_000


def _database_exists() -> bool:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        return bool(conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [NAME]).fetchone())


def _drop_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")


def _connect(reuse: bool) -> bool:
    """Point Django at the scratch database (recreated unless reused); True if it was reused."""
    import os
    from urllib.parse import urlsplit, urlunsplit

    from bench.common import setup_django

    if reuse and _database_exists():
        os.environ["DATABASE_URL"] = urlunsplit(urlsplit(ADMIN_URL)._replace(path=f"/{NAME}"))
        os.environ.pop("REDIS_URL", None)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return True
    setup_django(NAME)
    return False


def seed(records: int, runs: int, analyze: bool = True) -> None:
    from django.conf import settings
    from django.utils import timezone

    from records.catchup import catch_up
    from records.contract.normalise import Limits, NormalisedRecord, normalise
    from records.demo.generator import generate_records
    from records.models import Project
    from records.store.writer import store_records

    project, _ = Project.objects.get_or_create(name="bench")
    now = timezone.now()
    limits = Limits(
        max_data_bytes=settings.DECISIONBOARD["MAX_DATA_BYTES"],
        max_future=timedelta(seconds=settings.DECISIONBOARD["MAX_FUTURE_SECONDS"]),
    )
    started = time.perf_counter()
    pending: list[NormalisedRecord] = []
    stored = 0
    for raw in generate_records(records=records, runs=runs, seed=7, end=now.replace(microsecond=0)):
        raw["release"] = RELEASES[zlib.crc32(raw["run_id"].encode()) % len(RELEASES)]
        result = normalise(raw, now=now, limits=limits)
        assert isinstance(result, NormalisedRecord), result
        pending.append(result)
        if len(pending) >= BATCH:
            stored += store_records(project.id, pending, timezone.now()).accepted
            pending = []
    # Two runs of COMPARED records each, for the run comparison.
    for extra in (8, 9):
        for raw in generate_records(records=COMPARED, runs=1, seed=extra,
                                    end=now.replace(microsecond=0)):  # fmt: skip
            result = normalise(raw, now=now, limits=limits)
            assert isinstance(result, NormalisedRecord), result
            pending.append(result)
    if pending:
        stored += store_records(project.id, pending, timezone.now()).accepted
    seeded = time.perf_counter() - started
    started = time.perf_counter()
    folded = catch_up(max_seconds=3600)
    # What autovacuum does after a bulk load: statistics for the planner, and the visibility map
    # that lets the rollup and run reads skip the heap (rows of past hours no longer change).
    from django.db import connection

    if analyze:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    print(
        f"seeded {stored:,} records in {runs:,} runs in {seeded:.0f} s; "
        f"catch-up folded {folded:,} in {time.perf_counter() - started:.0f} s",
        flush=True,
    )


def percentiles_ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return statistics.median(ordered) * 1000, p95 * 1000


def timed(fn: Callable[[], object], n: int) -> list[float]:
    fn()  # warm: the first call fills caches (templates, plans) that every later one reuses
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _replay(queries: list[tuple[str, object]]) -> Callable[[], object]:
    """Run a page's SQL again, alone: the same statements, the same parameters, every row."""
    from django.db import connection

    def run() -> None:
        with connection.cursor() as cursor:
            for sql, params in queries:
                cursor.execute(sql, params)
                if cursor.description is not None:
                    cursor.fetchall()

    return run


RULES = 1_000


def _alert_rules(project) -> None:
    """RULES rules with five group states each (two firing) and an event per state, as an
    alerting setup of that size would have; made once per database."""
    from django.utils import timezone

    from alerts.models import AlertEvent, AlertState, Rule

    if Rule.objects.filter(project=project).count() >= RULES:
        return
    now = timezone.now()
    rules = Rule.objects.bulk_create(
        Rule(project=project, name=f"pick errors {i:04}", metric="pick_error_rate",
             group_by="model", comparator="gt", threshold=0.1, window_minutes=10)
        for i in range(RULES)
    )  # fmt: skip
    groups = [(rule, f"model-{j}", "firing" if j < 2 else "ok") for rule in rules for j in range(5)]
    AlertState.objects.bulk_create(
        AlertState(rule=rule, group=group, state=state, severity="critical", since=now,
                   value=0.2, count=50, updated_at=now)
        for rule, group, state in groups
    )  # fmt: skip
    AlertEvent.objects.bulk_create(
        AlertEvent(rule=rule, project=project, group=group, from_state="ok", to_state=state,
                   value=0.2, count=50, threshold=0.1, comparator="gt", window_minutes=10,
                   at=now)
        for rule, group, state in groups
    )  # fmt: skip
    from django.db import connection

    with connection.cursor() as cursor:  # as autovacuum would after such a burst of inserts
        cursor.execute("ANALYZE alerts_rule, alerts_alertstate, alerts_alertevent")


def measure(requests: int) -> list[tuple[str, float, float, float, float]]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from records.models import Project, Record, Run

    project = Project.objects.get(name="bench")
    user = get_user_model().objects.filter(username="bench-admin").first()
    if user is None:
        user = get_user_model().objects.create_superuser("bench-admin", None, "x")
    # A host in the default ALLOWED_HOSTS (the test client's "testserver" is not one).
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)

    # A run of the median size among those with picks, the largest run, the newest run's model.
    runs = Run.objects.filter(project=project)
    with_picks = runs.filter(kind_counts__has_key="tool_choice.pick").order_by("record_count", "id")
    typical = with_picks[with_picks.count() // 2]
    biggest = runs.order_by("-record_count", "id").first()
    iteration = (
        Record.objects.filter(project=project, run_id=typical.run_id, kind="tool_choice.pick")
        .order_by("iteration")
        .values_list("iteration", flat=True)[1]
    )
    newest = runs.order_by("-last_ts", "-id").first()
    model = next(iter(newest.models_seen or {"claude-haiku-4-5": 1}))
    from records.models import ToolMiss

    tool = (
        ToolMiss.objects.filter(project=project).order_by("-misses", "tool")
        .values_list("tool", flat=True).first() or "search_docs"
    )  # fmt: skip

    _alert_rules(project)
    compared = [f"demo-{seed}-run-000000" for seed in (8, 9)]
    session = runs.filter(session_id__isnull=False).order_by("-last_ts", "-id").first()
    import re
    from html import unescape

    listed = client.get("/sessions/").content.decode()
    after = re.search(r'<a class="next" href="\?([^"]+)"', listed)
    second = (
        dict(part.split("=", 1) for part in unescape(after.group(1)).split("&")) if after else {}
    )

    pages = [
        ("overview (last 6 hours)", "/", {}),
        ("overview, last 24 hours", "/", {"period": "24h"}),
        ("runs list", "/runs/", {}),
        ("runs list, filtered", "/runs/", {"model": model, "has": "swap,contract_break"}),
        ("runs list, by records", "/runs/", {"sort": "-record_count"}),
        (f"run detail ({typical.record_count} records)", f"/runs/{typical.run_id}/", {}),
        (f"run detail ({biggest.record_count} records)", f"/runs/{biggest.run_id}/", {}),
        ("pick drill-down", f"/runs/{typical.run_id}/picks/{iteration}/", {}),
        ("models", "/models/", {}),
        ("classifiers", "/classifiers/", {}),
        ("streaks", "/streaks/", {}),
        (f"alerts ({RULES:,} rules)", "/alerts/", {}),
        ("alerts, firing only", "/alerts/", {"state": "firing"}),
        (f"alert events ({RULES * 5:,})", "/alerts/events/", {}),
        ("exports", "/exports/", {}),
        ("tools (last 6 hours)", "/tools/", {}),
        ("tools, last 24 hours", "/tools/", {"period": "24h"}),
        (f"tool page ({tool})", f"/tools/{tool}/", {}),
        ("selection accuracy", "/selection/", {}),
        ("narrowing what-if", "/narrowing/", {}),
        ("narrowing what-if, 7 days", "/narrowing/", {"period": "7d"}),
        ("fallbacks (last 6 hours)", "/fallbacks/", {}),
        ("fallbacks, last 24 hours", "/fallbacks/", {"period": "24h"}),
        ("fallback chain of a run", f"/fallbacks/runs/{biggest.run_id}/", {}),
        ("sessions", "/sessions/", {}),
        ("sessions, page 2", "/sessions/", second),
        ("a session", f"/sessions/{session.session_id}/", {}),
        (f"run comparison (2×{COMPARED} records)", "/compare/",
         {"a": compared[0], "b": compared[1]}),
        ("release comparison", "/changes/",
         {"a": f"release:{RELEASES[0]}", "b": f"release:{RELEASES[1]}"}),
    ]  # fmt: skip
    # As a web worker does once it has loaded the app (gunicorn.conf.py): the objects held so far
    # (the app's, and the seeding's that are still alive) out of every full collection's walk.
    from ops.heap import freeze_startup_objects

    freeze_startup_objects(import_views=True)
    out = []
    for label, url, params in pages:
        captured: list[tuple[str, object]] = []

        def record(execute, sql, sql_params, many, context, captured=captured):
            captured.append((sql, sql_params))
            return execute(sql, sql_params, many, context)

        # Django's own query log is reset at every request start, so a wrapper records them.
        with connection.execute_wrapper(record):
            response = client.get(url, params)
        assert response.status_code == 200, (url, response.status_code)
        page = timed(lambda url=url, params=params: client.get(url, params), requests)
        query = timed(_replay(captured), requests)
        p50, p95 = percentiles_ms(page)
        q50, q95 = percentiles_ms(query)
        out.append((label, p50, p95, q95, p95 / q95))
        print(
            f"{label:32} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  | its {len(captured):2} queries "
            f"alone: p50 {q50:5.1f} ms  p95 {q95:5.1f} ms  | ratio (p95) {p95 / q95:4.1f}",
            flush=True,
        )
    return out


def main() -> None:
    global NAME
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--reuse", action="store_true", help="keep an already seeded database")
    parser.add_argument("--keep", action="store_true", help="do not drop the database at the end")
    parser.add_argument("--database", default=NAME, help="the scratch database's name")
    parser.add_argument(
        "--no-analyze", action="store_true", help="no VACUUM ANALYZE after the load"
    )
    args = parser.parse_args()
    NAME = args.database
    try:
        reused = _connect(args.reuse)
        from records.models import Record

        if not reused or Record.objects.count() != args.records + 2 * COMPARED:
            if reused:
                _drop_database()
                _connect(False)
            seed(args.records, args.runs, analyze=not args.no_analyze)
        results = measure(args.requests)
        goals = [
            r
            for r in results
            if r[0].startswith(("overview (", "runs list", "run detail", "fallbacks", "sessions",
                                "a session", "run comparison", "release comparison"))
        ]  # fmt: skip
        worst = max(goals, key=lambda r: r[2])
        print(
            f"worst p95 of the pages with a goal: {worst[2]:.1f} ms ({worst[0]}); "
            f"goal < 150 ms: {'met' if worst[2] < 150 else 'NOT met'}"
        )
        tools = [r for r in results if r[0].startswith(("tool", "selection", "narrowing"))]
        worst_tools = max(tools, key=lambda r: r[2])
        print(
            f"worst p95 of the tools pages: {worst_tools[2]:.1f} ms ({worst_tools[0]}); "
            f"goal < 150 ms: {'met' if worst_tools[2] < 150 else 'NOT met'}"
        )
        record_result(
            "pages",
            {
                "options": vars(args),
                "pages": {
                    label: {"p50_ms": p50, "p95_ms": p95, "queries_p95_ms": q95, "ratio": ratio}
                    for label, p50, p95, q95, ratio in results
                },
                "worst_p95_ms": worst[2],
                "worst_page": worst[0],
                "worst_tools_p95_ms": worst_tools[2],
                "worst_tools_page": worst_tools[0],
            },
        )
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            _drop_database()


if __name__ == "__main__":
    main()
