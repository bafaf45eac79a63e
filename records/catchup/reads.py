"""How a pass reads: the lane's records in chunks (a read-ahead thread on PostgreSQL), stored
rows by their keys, and the transaction settings of the catch-up's writes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from django.db import connection

from records.catchup.batch import FIELDS, JSON_FIELDS
from records.catchup.sql_helpers import parse_time
from records.models import (
    Record,
)
from records.store.sqlfunctions import fast_timestamps

CHUNK = 10_000


def fetch_records(after: int, upto: int, lane: int = 0, lanes: int = 1) -> Iterator[list[tuple]]:
    """The lane's records with after < id <= upto, as tuples of FIELDS, in chunks (raw SQL:
    the ORM's per-value conversion cost as much as the rest of the pass). The lane is a filter
    on the primary key's range scan, not an index of its own: no plan to go wrong without
    statistics, nothing more for ingest to maintain (bench/scale.py measures the lanes).

    Read through a server-side cursor on PostgreSQL: a pass holds its aggregates, never all
    its rows, so a large pass (what a shuffled backlog needs, see DEFAULT_BATCH) costs the
    worker little memory.
    """
    columns = ", ".join((*FIELDS, *JSON_FIELDS[connection.vendor]))
    sql = f"SELECT {columns} FROM {Record._meta.db_table} WHERE id > %s AND id <= %s"
    params = [after, upto]
    if lanes > 1:
        sql += " AND project_id %% %s = %s"
        params += [lanes, lane]
    with connection.chunked_cursor() as cursor:
        fast_timestamps(cursor)
        cursor.execute(sql, params)
        if connection.vendor == "postgresql":
            yield from read_ahead(cursor.cursor.fetchmany, CHUNK)
        else:
            while rows := cursor.fetchmany(CHUNK):
                yield parse_ts(rows)


def read_ahead(fetch, size: int) -> Iterator[list]:
    """The chunks of `fetch(size)` until an empty one, the next one fetched by a thread while
    the caller folds this one: PostgreSQL reads and sends a chunk on its own core meanwhile,
    where a plain loop left the pass waiting for it (a tenth of a pass). The caller must not
    use the connection until the generator is done (a pass only folds in memory meanwhile);
    the thread is over by then, whether the rows ran out or the caller stopped early."""
    chunks: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                rows = fetch(size)
                chunks.put(rows)
                if not rows:
                    return
        except BaseException as exc:  # handed to the caller, raised there
            chunks.put(exc)

    reader = threading.Thread(target=read, name="catch-up read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            rows = chunks.get()
            if isinstance(rows, BaseException):
                with connection.wrap_database_errors:  # as Django's own cursor would raise it
                    raise rows
            if not rows:
                return
            yield rows
    finally:
        stop.set()
        while reader.is_alive():  # take what it still puts, so that it never blocks
            try:
                chunks.get(timeout=0.05)
            except queue.Empty:
                pass
        reader.join()


def parse_ts(rows: list[tuple]) -> list[tuple]:
    """SQLite hands timestamps over as text."""
    at = FIELDS.index("ts")
    return [(*r[:at], parse_time(r[at]), *r[at + 1 :]) for r in rows]
