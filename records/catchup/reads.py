"""How a pass reads: the lane's records in chunks (a read-ahead thread on PostgreSQL), stored
rows by their keys, and the transaction settings of the catch-up's writes."""

from __future__ import annotations

from collections.abc import Iterator

from django.db import connection

from records.catchup.batch import FIELDS, json_fields
from records.models import (
    Record,
)
from records.store.backends import backend

CHUNK = 10_000


def fetch_records(after: int, upto: int, lane: int = 0, lanes: int = 1) -> Iterator[list[tuple]]:
    """The lane's records with after < id <= upto, as tuples of FIELDS, in chunks (raw SQL:
    the ORM's per-value conversion cost as much as the rest of the pass). The lane is a filter
    on the primary key's range scan, not an index of its own: no plan to go wrong without
    statistics, nothing more for ingest to maintain (bench/scale.py measures the lanes).

    Read through a server-side cursor on PostgreSQL: a pass holds its aggregates, never all
    its rows, so a large pass (what a shuffled backlog needs, see default_batch) costs the
    worker little memory.
    """
    store = backend()
    columns = ", ".join((*FIELDS, *json_fields(store)))
    sql = f"SELECT {columns} FROM {Record._meta.db_table} WHERE id > %s AND id <= %s"
    params = [after, upto]
    if lanes > 1:
        sql += " AND project_id %% %s = %s"
        params += [lanes, lane]
    with connection.chunked_cursor() as cursor:
        store.fast_timestamps(cursor)
        cursor.execute(sql, params)
        # On PostgreSQL the next chunk is read ahead by a thread while the pass folds this one.
        yield from store.chunks(cursor, CHUNK, time_column=FIELDS.index("ts"))


def next_record_id(after: int, upto: int) -> int | None:
    """The lowest record id in (after, upto], of any lane; None when there is none. The
    primary key's first entry past `after` (on PostgreSQL, each partition's index merged)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT min(id) FROM {Record._meta.db_table} WHERE id > %s AND id <= %s",
            [after, upto],
        )
        return cursor.fetchone()[0]
