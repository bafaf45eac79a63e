"""Each record key gets the UTC day of its record (RecordKey.day) and an index on it, so that
expiring a day deletes its keys by that index (records.store.partitions.drop_expired) instead of
looking each key of the detached partition up in the keys' primary key.

The existing keys are given their record's day by a join on (project_id, record_key) with the
records table (every partition, the default one included); a key whose record no longer exists
(the records of a partition detached but not dropped when a crash stopped an expiry) is deleted,
as the expiry would have. Every key row is rewritten: the keys table and its primary key grow
to about twice their size, the old half dead until a VACUUM makes it reusable (the next
expiry's records.store.retention.vacuum_keys runs one, the dead rows then being as many as the live
ones; or run `VACUUM records_recordkey` after the upgrade). It holds the keys table, so ingest, for its duration: 1.5 s for 200,000 keys on a
2-core machine (7.4 µs a key, bench/migrate.py; the join reads the whole records table, so a
large installation takes minutes). SQLite keeps no keys: there the column is added to an empty
table.

Self-contained on purpose: it does not import records.store.partitions, which may change later.
"""

from django.db import migrations, models

BACKFILL = """
UPDATE records_recordkey k SET day = (r.ts AT TIME ZONE 'UTC')::date
FROM records_record r WHERE r.project_id = k.project_id AND r.record_key = k.record_key
"""


def backfill(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(BACKFILL)
        cursor.execute("DELETE FROM records_recordkey WHERE day IS NULL")


class Migration(migrations.Migration):
    dependencies = [("records", "0014_catchup_tables_no_project_index")]

    operations = [
        migrations.AddField(
            model_name="recordkey", name="day", field=models.DateField(null=True)
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AlterField(model_name="recordkey", name="day", field=models.DateField()),
        migrations.AddIndex(
            model_name="recordkey",
            index=models.Index(fields=["day"], name="record_key_day"),
        ),
    ]
