"""Retention (Project.retention_days) and, on PostgreSQL, the records table partitioned by day;
the records' own index on project_id goes (the (project, ...) indexes serve it).

The existing table, with its data, becomes records_record partitioned by RANGE (ts): one
partition a UTC day for the days inside the retention window and two ahead, a default partition
for every other row (older rows are then expired from it in batches by records.store.retention). The
primary key becomes (id, ts), ids and their sequence carry on, and the (project, record_key)
uniqueness moves to records_recordkey, filled from the table, with the trigger that deletes a
record's key with it (records.store.partitions). The copy takes the time of rewriting the table once
(about 20 s a million records on a 2-core machine). SQLite keeps its plain table.

Self-contained on purpose: it does not import records.store.partitions, which may change later.
"""

from datetime import UTC, datetime, timedelta

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

TABLE = "records_record"
KEYS = "records_recordkey"
DAYS_AHEAD = 2

TRIGGER = f"""
CREATE OR REPLACE FUNCTION records_forget_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('decisionboard.keep_keys', true), '') <> 'on' THEN
        DELETE FROM {KEYS} WHERE project_id = OLD.project_id AND record_key = OLD.record_key;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER record_forget_key AFTER DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION records_forget_key();
"""


def _set_aside(cursor, old: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Rename the records table to `old` with its sequence and primary key, dropping its other
    indexes and constraints; returns their definitions (indexes, (name, FK definition))."""
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
        "AND indexname NOT IN (%s, 'record_key_unique')",
        [TABLE, f"{TABLE}_pkey"],
    )
    indexes = cursor.fetchall()
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype = 'f'",
        [TABLE],
    )
    foreign = cursor.fetchall()
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [TABLE])
    (sequence,) = cursor.fetchone()
    for name, _ in indexes:
        cursor.execute(f"DROP INDEX {name}")
    for name, _ in foreign:
        cursor.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT {name}")
    cursor.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS record_key_unique")
    cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {old}")
    cursor.execute(f"ALTER TABLE {old} RENAME CONSTRAINT {TABLE}_pkey TO {old}_pkey")
    cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {old}_id_seq")
    return [definition for _, definition in indexes], foreign


def _fill(cursor, old: str, indexes, foreign) -> None:
    """Copy `old` into the new records table, rebuild its indexes and constraints, carry the
    id sequence on and drop `old`."""
    cursor.execute(f"INSERT INTO {TABLE} SELECT * FROM {old}")
    for definition in indexes:
        cursor.execute(definition)
    for name, definition in foreign:
        cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} {definition}")
    cursor.execute(f"SELECT last_value, is_called FROM {old}_id_seq")
    last, called = cursor.fetchone()
    cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, %s)", [TABLE, last, called])
    cursor.execute(f"DROP TABLE {old} CASCADE")


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    old = f"{TABLE}_unpartitioned"
    days = getattr(settings, "DECISIONBOARD", {}).get("RETENTION_DAYS", 30)
    today = datetime.now(UTC).date()
    with schema_editor.connection.cursor() as cursor:
        indexes, foreign = _set_aside(cursor, old)
        cursor.execute(
            f"CREATE TABLE {TABLE} (LIKE {old} INCLUDING DEFAULTS INCLUDING IDENTITY "
            "INCLUDING STORAGE, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)"
        )
        cursor.execute(f"CREATE TABLE {TABLE}_default PARTITION OF {TABLE} DEFAULT")
        for n in range(-days, DAYS_AHEAD + 1):
            day = today + timedelta(days=n)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            cursor.execute(
                f"CREATE TABLE {TABLE}_p{day:%Y%m%d} PARTITION OF {TABLE} "
                "FOR VALUES FROM (%s) TO (%s)",
                [start, start + timedelta(days=1)],
            )
        cursor.execute(
            f"INSERT INTO {KEYS} (project_id, record_key) SELECT project_id, record_key FROM {old}"
        )
        _fill(cursor, old, indexes, foreign)
        cursor.execute(TRIGGER)
        cursor.execute(f"ANALYZE {TABLE}, {KEYS}")


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    old = f"{TABLE}_partitioned"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER record_forget_key ON {TABLE}")
        cursor.execute("DROP FUNCTION records_forget_key()")
        indexes, foreign = _set_aside(cursor, old)
        cursor.execute(
            f"CREATE TABLE {TABLE} (LIKE {old} INCLUDING DEFAULTS INCLUDING IDENTITY "
            "INCLUDING STORAGE, PRIMARY KEY (id))"
        )
        _fill(cursor, old, indexes, foreign)
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT record_key_unique UNIQUE (project_id, record_key)"
        )
        cursor.execute(f"TRUNCATE {KEYS}")


class Migration(migrations.Migration):
    dependencies = [
        ("records", "0009_tool_decisions"),
    ]

    operations = [
        migrations.AddField(
            model_name="project",
            name="retention_days",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Days of raw records kept for this project; empty for the global "
                "setting (DECISIONBOARD_RETENTION_DAYS). Rollups are kept longer "
                "(DECISIONBOARD_ROLLUP_RETENTION_DAYS).",
                null=True,
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
        migrations.CreateModel(
            name="RecordKey",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "project",
                        "record_key",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("record_key", models.CharField(max_length=200)),
                (
                    "project",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="records.project",
                    ),
                ),
            ],
        ),
        # Before the conversion, so that it is not rebuilt on the partitions: record_ts and the
        # other indexes lead with the project already.
        migrations.AlterField(
            model_name="record",
            name="project",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="records",
                to="records.project",
            ),
        ),
        migrations.RunPython(partition, unpartition),
    ]
