"""records_newest_id() and records_first_above(id): freshness's two reads of the records table
with their plans kept per session. SQLite needs none."""

from django.db import migrations

# Freshness (records.metrics.freshness.freshness) asks, on every scrape of /metrics, for the newest
# record id and the first record above a watermark: two index probes of the primary key, but
# over the records table's every day partition, which PostgreSQL planned afresh for each call,
# the planning costing many times the execution and growing with the partitions. A
# PL/pgSQL function keeps the plan of its statement for the session (the web's connections
# persist: CONN_MAX_AGE), always the generic one, which walks every partition's index as the
# custom one would: nothing about the watermark lets a plan prune a partition. Adding or
# dropping a day partition invalidates the plan. SQLite runs the statements as they are.
FRESHNESS = """
CREATE OR REPLACE FUNCTION records_newest_id() RETURNS bigint
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN (SELECT r.id FROM records_record r ORDER BY r.id DESC LIMIT 1);
END
$$;
CREATE OR REPLACE FUNCTION records_first_above(after bigint) RETURNS text
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    -- "id received_at": the first record above `after`, both in one value.
    RETURN (SELECT CAST(r.id AS text) || ' ' || CAST(r.received_at AS text)
            FROM records_record r WHERE r.id > after ORDER BY r.id LIMIT 1);
END
$$;
"""
FRESHNESS_DROP = (
    "DROP FUNCTION IF EXISTS records_newest_id(); "
    "DROP FUNCTION IF EXISTS records_first_above(bigint)"
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FRESHNESS)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FRESHNESS_DROP)


class Migration(migrations.Migration):

    dependencies = [
        ("records", "0021_rollup_kind_bucket"),
    ]

    operations = [
        migrations.RunPython(create, drop),
    ]
