"""Why a ladder fallback happened: a classification keeps what the seat's last attempt came to
(`cause`, with that attempt's time and record key to keep the latest whatever the arrival
order), and the CLASSIFICATION rollup key gains a `cause` field after `fell_back`.

The existing CLASSIFICATION rows get the key the catch-up now writes for a classification
without a cause ("0" becomes "0|", "1" becomes "1|"), so a pass that moves one of them takes
its count back from the row that holds it. Their cause reads "" until `manage.py
rebuild_rollups` folds the records again. Self-contained: the key's text is written here, not
imported.
"""

from django.db import migrations, models

CLASSIFICATION = "derived.classification"


def append_cause_field(apps, schema_editor):
    table = apps.get_model("records", "Rollup")._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE {table} SET "key" = "key" || %s WHERE kind = %s AND "key" IN (%s, %s)',
            ["|", CLASSIFICATION, "0", "1"],
        )


def drop_cause_field(apps, schema_editor):
    table = apps.get_model("records", "Rollup")._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        # Rows of one fell_back value but different causes merge back into one.
        cursor.execute(
            f'SELECT project_id, grain, bucket, agent, model, release, substr("key", 1, 1), '
            f"sum(count) FROM {table} WHERE kind = %s GROUP BY 1, 2, 3, 4, 5, 6, 7",
            [CLASSIFICATION],
        )
        merged = cursor.fetchall()
        cursor.execute(f"DELETE FROM {table} WHERE kind = %s", [CLASSIFICATION])
        for project, grain, bucket, agent, model, release, fell_back, count in merged:
            cursor.execute(
                f"INSERT INTO {table} (project_id, grain, bucket, kind, agent, model, release, "
                f'"key", count, tokens_in, tokens_out, latency_sum, sketch) '
                f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 0, 0, 0, '{{}}')",
                [project, grain, bucket, CLASSIFICATION, agent, model, release, fell_back, count],
            )


class Migration(migrations.Migration):
    dependencies = [
        ("records", "0038_rollup_release_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="classification",
            name="seat_ts",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="classification",
            name="seat_key",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="classification",
            name="cause",
            field=models.CharField(blank=True, db_default="", default="", max_length=20),
        ),
        migrations.RunPython(append_cause_field, drop_cause_field),
    ]
