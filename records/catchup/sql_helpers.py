"""The catch-up's small database helpers: stored rows read by their keys, times in the database's
form, and the settings of the catch-up's own transactions; each asks the store backend
(records.store.backends) for what differs between the databases."""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from records.store.backends import backend


def commit_without_flush() -> None:
    """Let this transaction's commit return before its WAL reaches the disk (PostgreSQL).

    What the catch-up writes is derived from the records, which ingest commits durably, and a
    pass moves its watermark in the same transaction as its rollups: a crash that loses the
    last passes (a fraction of a second of them) loses their watermark too, and they are done
    again from the records.
    """
    with connection.cursor() as cursor:
        backend().commit_without_flush(cursor)


def parse_time(value) -> datetime:
    """A timestamp read by a raw statement (SQLite hands it over as text)."""
    return backend().time_from_db(value)


def rows_by_keys(table: str, key_columns: tuple, key_types: tuple, columns: tuple,
                 keys: list[tuple]) -> list[tuple]:  # fmt: skip
    """The rows of `table` whose `key_columns` are one of `keys`, as tuples of `columns`: one
    query on PostgreSQL (the keys as one JSON parameter), chunks of OR-ed keys on SQLite."""
    with connection.cursor() as cursor:
        return backend().rows_by_keys(cursor, table, key_columns, key_types, columns, keys)


def on_one_core(cursor) -> None:
    """No parallel workers for the rest of this transaction's queries (PostgreSQL). Background
    work keeps to one core: as a parallel query (a Gather Merge of two workers) the streak
    recompute took both cores of a 2-core machine for seconds at a time while pages and ingest
    waited for them (bench/soak.py)."""
    backend().on_one_core(cursor)


def db_time(value: datetime):
    return connection.ops.adapt_datetimefield_value(value)
