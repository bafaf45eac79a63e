"""No column statistics on the records' JSON bodies (records.store.partitions.NO_STATISTICS).

ALTER TABLE on the partitioned parent reaches every partition there is; records.store.partitions
sets the same on each partition it creates after. A no-op on SQLite.
"""

from django.db import migrations

# As records.store.partitions.NO_STATISTICS was when written (a migration does not follow the code).
NO_STATISTICS = "ALTER COLUMN data SET STATISTICS 0, ALTER COLUMN derived SET STATISTICS 0"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE records_record {NO_STATISTICS}")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE records_record ALTER COLUMN data SET STATISTICS -1, "
            "ALTER COLUMN derived SET STATISTICS -1"
        )


class Migration(migrations.Migration):
    dependencies = [("records", "0012_tool_miss_run_index")]

    operations = [migrations.RunPython(forwards, backwards)]
