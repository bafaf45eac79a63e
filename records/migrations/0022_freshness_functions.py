"""records_newest_id() and records_first_above(id): freshness's two reads of the records table
with their plans kept per session (records.store.sqlfunctions.POSTGRES_FRESHNESS). SQLite needs none."""

from django.db import migrations

from records.store.sqlfunctions import POSTGRES_FRESHNESS, POSTGRES_FRESHNESS_DROP


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRES_FRESHNESS)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRES_FRESHNESS_DROP)


class Migration(migrations.Migration):

    dependencies = [
        ("records", "0021_rollup_kind_bucket"),
    ]

    operations = [
        migrations.RunPython(create, drop),
    ]
