"""The catch-up's small database helpers: stored rows read by their keys, times in the database's
form, and the settings of the catch-up's own transactions."""

from __future__ import annotations

from datetime import datetime

import orjson
from django.db import connection


def commit_without_flush() -> None:
    """Let this transaction's commit return before its WAL reaches the disk (PostgreSQL).

    What the catch-up writes is derived from the records, which ingest commits durably, and a
    pass moves its watermark in the same transaction as its rollups: a crash that loses the
    last passes (a fraction of a second of them) loses their watermark too, and they are done
    again from the records. The wait for the flush was a few percent of every pass.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")


def parse_time(value) -> datetime:
    return connection.ops.convert_datetimefield_value(value, None, connection)


def rows_by_keys(table: str, key_columns: tuple, key_types: tuple, columns: tuple,
                 keys: list[tuple]) -> list[tuple]:  # fmt: skip
    """The rows of `table` whose `key_columns` are one of `keys`, as tuples of `columns`: one
    query on PostgreSQL, and chunks of OR-ed keys on SQLite.

    On PostgreSQL the keys go as one JSON array of arrays, taken apart by the server: psycopg's
    dumping of one array parameter per column, value by value in Python, was most of the cost
    of these reads (an IN list per column would read every pairing of them). The server
    guesses a function's rows (100), so the join stays index lookups whatever the statistics.
    """
    select = ", ".join(f"t.{name}" for name in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            fields = ", ".join(f"(e->>{i})::{kind} AS k{i}" for i, kind in enumerate(key_types))
            on = " AND ".join(f"t.{name} = k.k{i}" for i, name in enumerate(key_columns))
            cursor.execute(
                f"SELECT {select} FROM {table} t JOIN (SELECT {fields} "
                f"FROM json_array_elements(%s::json) AS e) AS k ON {on}",
                [orjson.dumps(keys).decode()],
            )
            return cursor.fetchall()
        rows = []
        match = "(" + " AND ".join(f"t.{name} = %s" for name in key_columns) + ")"
        for start in range(0, len(keys), 300):
            chunk = keys[start : start + 300]
            cursor.execute(
                f"SELECT {select} FROM {table} t WHERE {' OR '.join([match] * len(chunk))}",
                [value for key in chunk for value in key],
            )
            rows += cursor.fetchall()
        return rows


def on_one_core(cursor) -> None:
    """No parallel workers for the rest of this transaction's queries (PostgreSQL). Background
    work keeps to one core: as a parallel query (a Gather Merge of two workers) the streak
    recompute took both cores of a 2-core machine for seconds at a time while pages and ingest
    waited for them (bench/soak.py)."""
    cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")


def db_time(value: datetime):
    return connection.ops.adapt_datetimefield_value(value)
