"""The database's own functions and connection set-up that the store relies on.

json_add(a, b): two flat JSON objects of counts added key by key, inside the database. Rollup
sketches and run kind counts are such objects; merging them in the UPSERT means a catch-up pass
never reads the rows it adds to. PostgreSQL gets the function from migration 0004; SQLite
connections get this Python version registered when they open. Freshness's two reads of the
records table are PL/pgSQL functions of migration 0022 on PostgreSQL
(records.metrics.freshness says why).
"""

from __future__ import annotations

import json


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
