"""The store's PostgreSQL answers (records.store.backends.store_interface says what each is)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime

import orjson
from django.db import connection

from records.store import partitions
from records.store.backends.store_interface import Features, StoreBackend
from records.store.locks import held_briefly


class PostgresqlStore(StoreBackend):
    name = "postgresql"
    features = Features(
        partitioned_records=True,
        concurrent_writes=True,
        vacuums=True,
        holds_cursors_outside_transactions=True,
        copies_into_stages=True,
        streak_segments_in_sql=True,
        role_settings=True,
        data_modifying_ctes=True,
    )
    # A pass holds its aggregates, never its rows (a server-side cursor): large passes are
    # what a shuffled backlog needs (bench/catchup.py).
    catchup_batch = 200_000
    codepoint_collation = ' COLLATE "C"'
    merges_sketches_in_python = True

    # --- session settings ---------------------------------------------------------------

    def commit_without_flush(self, cursor) -> None:
        # What the catch-up writes is derived from the records, which ingest commits durably,
        # and a pass moves its watermark in the same transaction as its rollups: a crash that
        # loses the last passes loses their watermark too, and they are done again.
        cursor.execute("SET LOCAL synchronous_commit = off")

    def on_one_core(self, cursor) -> None:
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")

    def fast_timestamps(self, cursor) -> None:
        """Django registers a Python subclass of psycopg's loader (to set the tzinfo it wants),
        and a Python loader never gets psycopg's C version: a column of timestamps costs
        far more a value (bench/catchup.py measures it). The C loader gives the connection's
        time zone, which Django sets to its own; so only where that is UTC, as Decisionboard
        runs (settings: USE_TZ, TIME_ZONE "UTC"), and the values are the same datetimes."""
        if connection.timezone_name != "UTC":
            return
        from psycopg.types.datetime import TimestamptzLoader

        # A psycopg class registered by name is swapped for its C version when there is one.
        cursor.cursor.adapters.register_loader("timestamptz", TimestamptzLoader)

    def register_functions(self, connection) -> None:
        return None  # json_add and freshness's functions come from migrations

    def set_role_defaults(self, connection, pooler: str) -> None:
        # Behind a transaction pooler no startup options reach the server (PgBouncer refuses
        # them), so the settings otherwise sent with each connection become the role's.
        if pooler != "transaction":
            return
        with connection.cursor() as cursor:
            cursor.execute("ALTER ROLE CURRENT_USER SET jit = off")

    # --- dialect ------------------------------------------------------------------------

    def json_text(self, column: str, *path: str) -> str:
        *inner, last = path
        return column + "".join(f"->'{key}'" for key in inner) + f"->>'{last}'"

    def json_value(self, column: str, key: str) -> str:
        return f"{column}->'{key}'"

    def json_as_text(self, column: str) -> str:
        return f"{column}::text"

    def in_values(self, column: str, values: Sequence) -> tuple[str, list]:
        return f"{column} = ANY(%s)", [list(values)]

    def time_param(self, when: datetime):
        return when

    def time_from_db(self, value) -> datetime:
        return value

    # --- scans and keyed reads ----------------------------------------------------------

    def chunks(self, cursor, size: int, time_column: int | None = None) -> Iterator[list[tuple]]:
        return read_ahead(cursor.cursor.fetchmany, size)

    def rows_by_keys(self, cursor, table: str, key_columns: tuple, key_types: tuple,
                     columns: tuple, keys: list[tuple]) -> list[tuple]:  # fmt: skip
        # The keys go as one JSON array of arrays, taken apart by the server: psycopg's dumping
        # of one array parameter per column, value by value in Python, was most of the cost of
        # these reads (an IN list per column would read every pairing of them). The server
        # guesses a function's rows (100), so the join stays index lookups.
        select = ", ".join(f"t.{name}" for name in columns)
        fields = ", ".join(f"(e->>{i})::{kind} AS k{i}" for i, kind in enumerate(key_types))
        on = " AND ".join(f"t.{name} = k.k{i}" for i, name in enumerate(key_columns))
        cursor.execute(
            f"SELECT {select} FROM {table} t JOIN (SELECT {fields} "
            f"FROM json_array_elements(%s::json) AS e) AS k ON {on}",
            [orjson.dumps(keys).decode()],
        )
        return cursor.fetchall()

    # --- bulk writes --------------------------------------------------------------------

    def insert_rows(self, cursor, table: str, columns: Sequence[str], rows: list[tuple]) -> None:
        with cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def upsert_rows(self, cursor, table: str, columns: Sequence[str], rows: list[tuple],
                    conflict: str, *, stage: tuple[str, str],
                    time_columns: Sequence[int] = ()) -> None:  # fmt: skip
        # Staged with COPY: the ORM's bulk upsert weighed on a backlog's catch-up
        # (bench/catchup.py).
        create, stage_table = stage
        cursor.execute(create)
        self.insert_rows(cursor, stage_table, columns, rows)
        names = ", ".join(columns)
        cursor.execute(
            f"INSERT INTO {table} ({names}) SELECT {names} FROM {stage_table} {conflict}"
        )

    def added_sketch(self, table: str) -> str:
        return f"CASE WHEN excluded.sketch = '{{}}' THEN {table}.sketch ELSE excluded.sketch END"

    # --- locks --------------------------------------------------------------------------

    def lock_transaction(self, cursor, key: int) -> None:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])

    def lock_row(self, cursor, table: str, pk: int) -> None:
        cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE", [pk])

    def committed_high_water(self, table: str, ingest_lock_key: int) -> int:
        # Ids are assigned when a row is inserted, so a batch still in flight can hold ids below
        # ones already committed. Ingest holds the lock shared for its transaction; taking it
        # exclusively waits for those in flight and holds new ones back for one max(id) read.
        with held_briefly("pg_advisory_xact_lock", ingest_lock_key), connection.cursor() as cur:
            cur.execute(f"SELECT coalesce(max(id), 0) FROM {table}")
            return cur.fetchone()[0]

    # --- batched deletes ----------------------------------------------------------------

    def delete_batch(self, table: str, where: str, params: list, row: str) -> tuple[str, list, int]:
        select = f"SELECT {row} FROM {table} WHERE {where} LIMIT {partitions.BATCH}"
        # The outer WHERE repeats the condition so that a partitioned parent prunes.
        sql = f"DELETE FROM {table} WHERE {row} = ANY(ARRAY({select})) AND {where}"
        return sql, [*params, *params], partitions.BATCH

    # --- freshness ----------------------------------------------------------------------

    # Functions of migration 0022 that keep their plans for the session: planned for each call
    # they cost far more than what they read.
    def newest_record(self, records: str) -> str:
        return "records_newest_id()"

    def first_record_above(self, records: str, mark: str) -> str:
        return f"records_first_above({mark})"


def read_ahead(fetch, size: int) -> Iterator[list]:
    """The chunks of `fetch(size)` until an empty one, the next one fetched by a thread while
    the caller folds this one: PostgreSQL reads and sends a chunk on its own core meanwhile,
    where a plain loop left the pass waiting for it. The caller must not use the connection
    until the generator is done (a pass only folds in memory meanwhile); the thread is over by
    then, whether the rows ran out or the caller stopped early."""
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
