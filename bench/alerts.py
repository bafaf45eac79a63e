"""One alert evaluation tick over 1,000 rules and 200 models, against a SQL ceiling.

    .venv/bin/python bench/alerts.py [--records 1000000] [--rules 1000] [--models 200]
                                     [--database-url postgres://…/postgres]

1. Creates a scratch database (`decisionboard_bench_alerts`, dropped first) and migrates it.
2. Generates the demo records (records.demo.generator) ending now, and spreads them over `--models`
   model names by post-processing the generated dicts: each run's models get one of a few dozen
   variant suffixes chosen from the run id (qwen3-8b -> qwen3-8b-v07), so the six demo models
   become 200 and every run stays consistent with itself. Then ingests them (records.store.ingest:
   normalise, then COPY) in batches, and folds them into
   rollups with the workers' catch-up pass (records.catchup.passes.catch_up).
3. Creates the rules: most watch one model, some group by model or agent, with windows of 5
   minutes to a day, on every metric family including the contract-broken streak.
4. Times one tick (alerts.engine.evaluate_all) cold (every state created) and warm (a minute
   later, states updated), and as the ceiling one SQL aggregate over the same rollup rows the
   tick reads (GROUP BY kind, agent, model, key over the minute rows of the longest minute
   window and the hour rows of the longest hour window).

Prints `tick T s, ceiling C s, ratio R` as its last line (goal: the tick under 5 s).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import record_result  # noqa: E402

BENCH_DB = "decisionboard_bench_alerts"
WINDOWS = (5, 10, 15, 30, 60, 5, 10, 15, 30, 240, 1440)  # minutes; over 60 read hour rows
FOR_MINUTES = (0, 0, 2, 5)


def recreate_database(admin_url: str, reuse: bool = False) -> tuple[str, bool]:
    """The scratch database's URL, and whether it was kept from a previous --keep run."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone()
        if not (reuse and exists):
            conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {BENCH_DB}")
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(path=f"/{BENCH_DB}")), bool(reuse and exists)


def drop_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


class ModelSpreader:
    """Renames the demo's models into `total` names, one variant per run."""

    def __init__(self, base_models: list[str], total: int):
        per, extra = divmod(total, len(base_models))
        self.variants = {m: per + (i < extra) for i, m in enumerate(sorted(base_models))}

    def names(self, base: str) -> list[str]:
        return [f"{base}-v{v:02d}" for v in range(self.variants[base])]

    def rename(self, record: dict) -> dict:
        h = zlib.crc32(record["run_id"].encode())

        def new(name):
            if name not in self.variants:
                return name
            return f"{name}-v{h % self.variants[name]:02d}"

        data, kind = record["data"], record["kind"]
        if kind in ("tool_choice.pick", "tool_choice.pick_error"):
            if data["classifier"].get("model"):
                data["classifier"]["model"] = new(data["classifier"]["model"])
        elif kind == "model_selection":
            for key in ("default_model", "selected_model", "previous_model"):
                if data.get(key):
                    data[key] = new(data[key])
        elif kind == "classifier.verdict":
            data["model"] = new(data["model"])
            if data.get("seatModel"):
                data["seatModel"] = new(data["seatModel"])
        elif kind in ("model_call", "provider.error"):
            data["model"] = new(data["model"])
        elif kind == "notice" and isinstance(data.get("detail", {}).get("model"), str):
            data["detail"]["model"] = new(data["detail"]["model"])
        return record


def load(project, records: int, models: int, end: datetime) -> ModelSpreader:
    from records.catchup import catch_up
    from records.demo.cast import MODELS
    from records.demo.generator import generate_records
    from records.store.ingest import ingest

    spreader = ModelSpreader(list(MODELS), models)
    t0 = time.perf_counter()
    batch: list = []
    stored = 0
    now = datetime.now(UTC)

    def store(raws: list[dict]) -> int:
        result = ingest(project.pk, enumerate(raws), now=now)
        if result.rejected:
            raise SystemExit(f"the demo generated an invalid record: {result.rejected[0]}")
        return result.accepted

    for raw in generate_records(records=records, runs=max(1, records // 100), seed=11, end=end):
        batch.append(spreader.rename(raw))
        if len(batch) == 5000:
            stored += store(batch)
            batch = []
    if batch:
        stored += store(batch)
    print(
        f"generated, normalised and stored {stored:,} records in {time.perf_counter() - t0:.0f} s"
    )
    t0 = time.perf_counter()
    folded = catch_up(max_seconds=3600)
    print(f"rolled up {folded:,} records in {time.perf_counter() - t0:.0f} s", flush=True)
    return spreader


def make_rules(project, spreader: ModelSpreader, count: int, seed: int = 5) -> int:
    from alerts.models import Channel, Rule

    rng = random.Random(seed)
    classifiers = [
        n for b in ("claude-haiku-4-5", "qwen3-8b", "gpt-5-mini") for n in spreader.names(b)
    ]
    mains = [
        n for b in ("claude-sonnet-4-5", "gpt-5", "claude-opus-5-5") for n in spreader.names(b)
    ]
    # (metric, comparator, threshold range, the models it is about, extra fields)
    per_model = [
        ("classifier_latency_p95", "gt", (150, 900), classifiers, {}),
        ("classifier_latency_p99", "gt", (300, 1500), classifiers, {}),
        ("pick_error_rate", "gt", (0.02, 0.1), classifiers, {"min_records": 10}),
        ("narrowing_skip_rate", "gt", (0.1, 0.5), classifiers, {}),
        ("ladder_fallback_rate", "gt", (0.05, 0.3), classifiers, {}),
        ("verdicts", "gt", (0, 4), classifiers, {"match": {"verdict": "parse_error"}}),
        ("swap_rate", "gt", (0.1, 0.5), mains, {}),
        ("model_call_latency_p95", "gt", (2000, 8000), mains, {}),
        ("model_call_tokens", "gt", (20_000, 200_000), mains, {}),
        ("provider_errors", "gt", (0, 3), mains, {}),
    ]
    channel = Channel.objects.create(
        project=project, name="bench", kind="email", addresses=["bench@example.com"]
    )
    rules = []
    for i in range(count):
        common = {
            "project": project,
            "name": f"bench rule {i}",
            "window_minutes": WINDOWS[i % len(WINDOWS)],
            "for_minutes": FOR_MINUTES[i % len(FOR_MINUTES)],
            "no_data": ("ok", "nodata", "keep")[i % 3],
        }
        if i % 20 < 16:  # 80 %: one model
            metric, comparator, (lo, hi), models, extra = per_model[i % len(per_model)]
            fields = {"model": models[(i // len(per_model)) % len(models)], **extra}
        elif i % 20 < 19:  # 15 %: every model, grouped
            metric, comparator, (lo, hi), _, extra = per_model[i % len(per_model)]
            fields = {"group_by": "model", **extra}
        else:  # 5 %: per agent, or one value, or a streak
            metric, comparator, (lo, hi), fields = rng.choice(
                [
                    ("invented_tool_rate", "gt", (0.02, 0.1), {"group_by": "agent"}),
                    ("first_pick_agreement", "lt", (0.5, 0.8), {"group_by": "agent"}),
                    ("records", "lt", (5, 50), {"group_by": "agent", "kind": "model_call"}),
                    ("contract_broken_streak", "gte", (2, 5), {"group_by": "model"}),
                ]
            )
        rules.append(
            Rule(
                metric=metric,
                comparator=comparator,
                threshold=round(rng.uniform(lo, hi), 3),
                **fields,
                **common,
            )
        )
    rules = Rule.objects.bulk_create(rules, batch_size=500)
    Through = Rule.channels.through
    Through.objects.bulk_create(
        [Through(rule_id=r.pk, channel_id=channel.pk) for r in rules[::10]], batch_size=500
    )
    return len(rules)


def ceiling_seconds(
    project_id: int, grain: str, start: datetime, end: datetime, kinds: list[str]
) -> tuple[float, int]:
    """The median time of one GROUP BY over the rollup rows of `grain` in [start, end]."""
    from django.db import connection

    from records.models import Rollup

    sql = f"""
        SELECT kind, agent, model, key, sum(count), sum(tokens_in), sum(tokens_out), count(*)
        FROM {Rollup._meta.db_table}
        WHERE project_id = %s AND grain = %s AND bucket >= %s AND bucket <= %s
          AND kind = ANY(%s)
        GROUP BY kind, agent, model, key
    """
    times, rows = [], 0
    with connection.cursor() as cursor:
        for _ in range(3):
            t0 = time.perf_counter()
            cursor.execute(sql, [project_id, grain, start, end, kinds])
            result = cursor.fetchall()
            times.append(time.perf_counter() - t0)
            rows = sum(r[-1] for r in result)
    return statistics.median(times), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rules", type=int, default=1000)
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="reuse the records of a database kept with --keep (its rules are made afresh)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "BENCH_ADMIN_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        ),
        help="a PostgreSQL URL whose user may create databases",
    )
    args = parser.parse_args()

    os.environ["DATABASE_URL"], reused = recreate_database(args.database_url, args.reuse)
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from alerts.engine import evaluate_all
    from alerts.models import AlertEvent, AlertState, Channel, Notification, Rule
    from alerts.windows import window_grain, window_start
    from records.contract.buckets import truncate
    from records.models import Grain, Project

    try:
        call_command("migrate", verbosity=0)
        if reused:
            from records.demo.cast import MODELS
            from records.models import Rollup

            project = Project.objects.get(name="bench")
            Rule.objects.filter(project=project).delete()
            Channel.objects.filter(project=project).delete()
            end = Rollup.objects.filter(project=project).latest("bucket").bucket
            spreader = ModelSpreader(list(MODELS), args.models)
            print(f"reusing the records of {BENCH_DB}, which end at {end:%Y-%m-%d %H:%M}")
        else:
            project = Project.objects.create(name="bench")
            end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
            spreader = load(project, args.records, args.models, end)
        rules = make_rules(project, spreader, args.rules)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"created {rules:,} rules over {args.models} models")

        queued: list = []
        now = end + timedelta(seconds=30)
        cold = evaluate_all(now=now, enqueue=lambda e, c: queued.append((e, c)))
        warm = evaluate_all(
            now=now + timedelta(minutes=1), enqueue=lambda e, c: queued.append((e, c))
        )
        for name, tick in (("cold", cold), ("warm", warm)):
            print(
                f"{name} tick: {tick.rules} rules, {tick.errors} errors, {tick.events} events, "
                f"{tick.notifications} notifications queued in {tick.seconds:.2f} s"
            )
        assert cold.errors == warm.errors == 0, cold.failed or warm.failed
        states = AlertState.objects.count()
        firing = AlertState.objects.filter(state="firing").count()
        print(
            f"{states:,} group states ({firing:,} firing), {AlertEvent.objects.count():,} "
            f"events, {Notification.objects.count():,} notifications"
        )

        # The ceiling: what the tick reads, aggregated by the database alone (minute rows of
        # the longest minute window, hour rows of the longest hour window).
        at = now + timedelta(minutes=1)
        kinds = sorted({k for r in Rule.objects.all() for k in r.query().kinds})
        ceiling, described = 0.0, []
        for grain in (Grain.MINUTE, Grain.HOUR):
            windows = [
                w
                for w in Rule.objects.values_list("window_minutes", flat=True)
                if window_grain(w) == grain
            ]
            if not windows:
                continue
            start = window_start(at, max(windows))
            seconds, rows = ceiling_seconds(project.pk, grain, start, truncate(at, grain), kinds)
            ceiling += seconds
            described.append(f"{rows:,} {grain} rows ({max(windows)} min window)")
        print(
            f"ceiling: one SQL aggregate over the rollup rows the tick reads, "
            f"{' and '.join(described)}, {len(kinds)} kinds: {ceiling:.3f} s"
        )
        tick_seconds = max(cold.seconds, warm.seconds)
        print(
            f"tick {tick_seconds:.2f} s (goal < 5 s), ceiling {ceiling:.3f} s, "
            f"ratio {tick_seconds / ceiling:.1f}"
        )
        record_result(
            "alerts",
            {
                "options": {k: v for k, v in vars(args).items() if k != "database_url"},
                "rules": warm.rules,
                "cold_tick_s": cold.seconds,
                "warm_tick_s": warm.seconds,
                "tick_s": tick_seconds,
                "ceiling_s": ceiling,
                "ratio": tick_seconds / ceiling,
            },
        )
    finally:
        connection.close()
        if not args.keep:
            drop_database(args.database_url)


if __name__ == "__main__":
    main()
