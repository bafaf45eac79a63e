"""Pick latencies move from the pick rows to one PICK_LATENCY row per (bucket, agent, model).

Until now each pick and pick-error rollup row (one per skip reason) carried the latency sketch of
its records, and every read of a classifier latency merged them again: the overview, the
classifiers page and the metrics API spent most of their Python time there under load. The
catch-up now writes the merged sketch once, as a `derived.pick_latency` row with key "" and a
count of the latencies in it (records.contract.rollup_keys.PICK_LATENCY), and the pick rows carry none.

Forwards: the stored pick rows' sketches and latency sums are merged into those rows, grain by
grain and bucket by bucket (one bucket's rows in memory at a time), then cleared on the pick
rows, so that the table holds what a rebuild would write. Backwards: the merged rows are
deleted; the pick rows' sketches cannot be split out of them again, so the classifier latency of
data stored before is lost on a migration back (a rebuild, `manage.py rebuild_rollups`, writes
it again from the records).

It reads every stored pick row once, in Python, on either database; its time on a database that
keeps months of minute rollups was not measured.
"""

from collections import defaultdict

from django.db import migrations

PICKS = ("tool_choice.pick", "tool_choice.pick_error")
PICK_LATENCY = "derived.pick_latency"


def forwards(apps, schema_editor):
    Rollup = apps.get_model("records", "Rollup")
    db = schema_editor.connection.alias
    picks = (
        Rollup.objects.using(db)
        .filter(kind__in=PICKS)
        .order_by("project_id", "grain", "bucket")
        .values_list("project_id", "grain", "bucket", "agent", "model", "latency_sum", "sketch")
    )
    current = None
    cells: dict[tuple, list] = defaultdict(lambda: [0.0, {}])

    def flush():
        rows = []
        for (project, grain, bucket, agent, model), (latency_sum, sketch) in cells.items():
            if not sketch:
                continue
            rows.append(
                Rollup(
                    project_id=project,
                    grain=grain,
                    bucket=bucket,
                    kind=PICK_LATENCY,
                    agent=agent,
                    model=model,
                    key="",
                    count=sum(sketch.values()),
                    latency_sum=latency_sum,
                    sketch=sketch,
                )
            )
        Rollup.objects.using(db).bulk_create(rows, batch_size=1000)
        cells.clear()

    for project, grain, bucket, agent, model, latency_sum, sketch in picks.iterator(5000):
        if (project, grain, bucket) != current:
            flush()
            current = (project, grain, bucket)
        cell = cells[(project, grain, bucket, agent, model)]
        cell[0] += latency_sum
        for index, count in (sketch or {}).items():
            cell[1][index] = cell[1].get(index, 0) + count
    flush()
    Rollup.objects.using(db).filter(kind__in=PICKS).update(sketch={}, latency_sum=0)


def backwards(apps, schema_editor):
    Rollup = apps.get_model("records", "Rollup")
    Rollup.objects.using(schema_editor.connection.alias).filter(kind=PICK_LATENCY).delete()


class Migration(migrations.Migration):
    dependencies = [("records", "0016_updated_tables_fillfactor")]

    operations = [migrations.RunPython(forwards, backwards)]
