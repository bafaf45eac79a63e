"""json_add(a, b): two flat JSON objects of counts added key by key, inside the database.

Rollup sketches and run kind counts are such objects; merging them in the UPSERT means a
catch-up pass never reads the rows it adds to. PostgreSQL gets the function from migration
0004; SQLite connections get this Python version registered when they open.
"""

from __future__ import annotations

import json

POSTGRES_JSON_ADD = """
CREATE OR REPLACE FUNCTION json_add(a jsonb, b jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(key, total), '{}'::jsonb)
    FROM (
        SELECT key, sum(value::numeric) AS total
        FROM (SELECT * FROM jsonb_each_text(coalesce(a, '{}'::jsonb))
              UNION ALL
              SELECT * FROM jsonb_each_text(coalesce(b, '{}'::jsonb))) AS pairs
        GROUP BY key
    ) AS sums
$$
"""
POSTGRES_DROP = "DROP FUNCTION IF EXISTS json_add(jsonb, jsonb)"


def json_add(a: str | None, b: str | None) -> str:
    out = json.loads(a) if a else {}
    for key, value in (json.loads(b) if b else {}).items():
        out[key] = out.get(key, 0) + value
    return json.dumps(out, separators=(",", ":"))


def fast_timestamps(cursor) -> None:
    """Have this (Django) cursor load timestamptz with psycopg's C loader.

    Django registers a Python subclass of psycopg's loader (to set the tzinfo it wants), and a
    Python loader never gets psycopg's C version: a column of timestamps costs several times as much
    a value, a real share of a catch-up pass (bench/catchup.py). The C loader gives the connection's
    time zone, which Django sets to its own; so only where that is UTC, as Decisionboard runs
    (settings: USE_TZ, TIME_ZONE "UTC"), and the values are the same datetimes, tzinfo included.
    """
    from django.db import connection

    if connection.vendor != "postgresql" or connection.timezone_name != "UTC":
        return
    from psycopg.types.datetime import TimestamptzLoader

    # A psycopg class registered by name is swapped for its C version when there is one.
    cursor.cursor.adapters.register_loader("timestamptz", TimestamptzLoader)


def register_sqlite(sender, connection, **kwargs) -> None:
    if connection.vendor == "sqlite":
        connection.connection.create_function("json_add", 2, json_add, deterministic=True)


# Freshness (records.metrics.freshness.freshness) asks, on every scrape of /metrics, for the newest
# record id and the first record above a watermark: two index probes of the primary key, but
# over the records table's every day partition, which PostgreSQL planned afresh for each call,
# the planning costing many times the execution and growing with the partitions. A
# PL/pgSQL function keeps the plan of its statement for the session (the web's connections
# persist: CONN_MAX_AGE), always the generic one, which walks every partition's index as the
# custom one would: nothing about the watermark lets a plan prune a partition. Adding or
# dropping a day partition invalidates the plan. SQLite runs the statements as they are.
POSTGRES_FRESHNESS = """
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
POSTGRES_FRESHNESS_DROP = (
    "DROP FUNCTION IF EXISTS records_newest_id(); "
    "DROP FUNCTION IF EXISTS records_first_above(bigint)"
)


def set_role_defaults(using: str = "default", **kwargs) -> None:
    """Behind a transaction pooler (DATABASE_POOLER=transaction) no startup options reach the
    server (PgBouncer refuses them), so the session settings config.settings otherwise sends
    with each connection (jit=off) become the role's defaults, for the sessions the pooler
    opens from now on. Run after `migrate`; a role may always set its own."""
    from django.conf import settings
    from django.db import connections

    conn = connections[using]
    if conn.vendor != "postgresql" or settings.DATABASE_POOLER != "transaction":
        return
    with conn.cursor() as cursor:
        cursor.execute("ALTER ROLE CURRENT_USER SET jit = off")
