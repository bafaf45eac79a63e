"""Count the runs already folded in the rollups, in the buckets of their last records.

From now on the catch-up keeps a `derived.run_last` rollup row per (bucket, agent) counting the
runs whose last record is in the bucket (records.contract.rollup_keys.RUN_LAST), and the overview sums those
instead of counting the runs table over its period (which grew with the runs: ~50 ms for 54,000
runs in a soak, read from disk). This gives the runs the catch-up already folded (a record
counted) their counts, at every grain, reading every run once in Python (its time on tens of
millions of runs was not measured). Backwards deletes them.
"""

from collections import Counter
from datetime import UTC

from django.db import migrations

RUN_LAST = "derived.run_last"


def _buckets(ts):
    ts = ts.astimezone(UTC).replace(second=0, microsecond=0)
    hour = ts.replace(minute=0)
    return (("minute", ts), ("hour", hour), ("day", hour.replace(hour=0)))


def forwards(apps, schema_editor):
    Run = apps.get_model("records", "Run")
    Rollup = apps.get_model("records", "Rollup")
    db = schema_editor.connection.alias
    counts: Counter = Counter()
    runs = Run.objects.using(db).filter(record_count__gt=0)
    for project, agent, last_ts in runs.values_list("project_id", "agent", "last_ts").iterator(
        10_000
    ):
        for grain, bucket in _buckets(last_ts):
            counts[(project, grain, bucket, agent or "")] += 1
    Rollup.objects.using(db).bulk_create(
        (
            Rollup(project_id=project, grain=grain, bucket=bucket, kind=RUN_LAST, agent=agent,
                   model="", key="", count=n)  # fmt: skip
            for (project, grain, bucket, agent), n in counts.items()
        ),
        batch_size=1000,
    )


def backwards(apps, schema_editor):
    Rollup = apps.get_model("records", "Rollup")
    Rollup.objects.using(schema_editor.connection.alias).filter(kind=RUN_LAST).delete()


class Migration(migrations.Migration):
    dependencies = [("records", "0017_pick_latency_rollups")]

    operations = [migrations.RunPython(forwards, backwards)]
