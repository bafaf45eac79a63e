"""The store's SQLite answers (records.store.backends.store_interface says what each is).

One writer at a time: the write transaction serialises what PostgreSQL locks, and no partition,
VACUUM or server-side cursor is there to manage."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from django.db import connection

from records.store.backends.store_interface import Features, StoreBackend


def json_add(a: str | None, b: str | None) -> str:
    """Two flat JSON objects of counts added key by key (PostgreSQL's is migration 0004's)."""
    out = json.loads(a) if a else {}
    for key, value in (json.loads(b) if b else {}).items():
        out[key] = out.get(key, 0) + value
    return json.dumps(out, separators=(",", ":"))


# Chunks of OR-ed keys: under SQLite's limit of bound parameters at any key width.
KEYS_A_QUERY = 300


class SqliteStore(StoreBackend):
    name = "sqlite"
    features = Features(
        partitioned_records=False,
        concurrent_writes=False,
        vacuums=False,
        holds_cursors_outside_transactions=False,
        copies_into_stages=False,
        streak_segments_in_sql=False,
        role_settings=False,
        data_modifying_ctes=False,
    )
    catchup_batch = 5_000
    codepoint_collation = ""  # SQLite's default BINARY collation
    merges_sketches_in_python = False  # one writer at a time and small: merged in the UPSERT

    # --- session settings ---------------------------------------------------------------

    def commit_without_flush(self, cursor) -> None:
        return None

    def on_one_core(self, cursor) -> None:
        return None

    def fast_timestamps(self, cursor) -> None:
        return None

    def register_functions(self, connection) -> None:
        connection.connection.create_function("json_add", 2, json_add, deterministic=True)

    def set_role_defaults(self, connection, pooler: str) -> None:
        return None

    # --- dialect ------------------------------------------------------------------------

    def json_text(self, column: str, *path: str) -> str:
        return f"json_extract({column}, '$.{'.'.join(path)}')"

    def json_value(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def json_as_text(self, column: str) -> str:
        return column

    def in_values(self, column: str, values: Sequence) -> tuple[str, list]:
        return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)

    def time_param(self, when: datetime):
        return connection.ops.adapt_datetimefield_value(when.astimezone(UTC))

    def time_from_db(self, value) -> datetime:
        return connection.ops.convert_datetimefield_value(value, None, connection)

    # --- scans and keyed reads ----------------------------------------------------------

    def chunks(self, cursor, size: int, time_column: int | None = None) -> Iterator[list[tuple]]:
        while rows := cursor.fetchmany(size):
            if time_column is None:
                yield rows
                continue
            at = time_column  # SQLite hands timestamps over as text
            yield [(*r[:at], self.time_from_db(r[at]), *r[at + 1 :]) for r in rows]

    def rows_by_keys(self, cursor, table: str, key_columns: tuple, key_types: tuple,
                     columns: tuple, keys: list[tuple]) -> list[tuple]:  # fmt: skip
        select = ", ".join(f"t.{name}" for name in columns)
        match = "(" + " AND ".join(f"t.{name} = %s" for name in key_columns) + ")"
        rows = []
        for start in range(0, len(keys), KEYS_A_QUERY):
            chunk = keys[start : start + KEYS_A_QUERY]
            cursor.execute(
                f"SELECT {select} FROM {table} t WHERE {' OR '.join([match] * len(chunk))}",
                [value for key in chunk for value in key],
            )
            rows += cursor.fetchall()
        return rows

    # --- bulk writes --------------------------------------------------------------------

    def insert_rows(self, cursor, table: str, columns: Sequence[str], rows: list[tuple]) -> None:
        marks = ", ".join(["%s"] * len(columns))
        cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

    def upsert_rows(self, cursor, table: str, columns: Sequence[str], rows: list[tuple],
                    conflict: str, *, stage: tuple[str, str],
                    time_columns: Sequence[int] = ()) -> None:  # fmt: skip
        adapt = connection.ops.adapt_datetimefield_value
        if time_columns:
            rows = [
                tuple(
                    adapt(v) if i in time_columns and v is not None else v
                    for i, v in enumerate(row)
                )
                for row in rows
            ]
        marks = ", ".join(["%s"] * len(columns))
        cursor.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) {conflict}", rows
        )

    def added_sketch(self, table: str) -> str:
        return (
            f"CASE WHEN excluded.sketch = '{{}}' THEN {table}.sketch "
            f"ELSE json_add({table}.sketch, excluded.sketch) END"
        )

    # --- locks --------------------------------------------------------------------------

    def lock_transaction(self, cursor, key: int) -> None:
        return None

    def lock_row(self, cursor, table: str, pk: int) -> None:
        return None

    def committed_high_water(self, table: str, ingest_lock_key: int) -> int:
        # This transaction is the one writer: every id below max(id) is committed.
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT coalesce(max(id), 0) FROM {table}")
            return cursor.fetchone()[0]

    # --- batched deletes ----------------------------------------------------------------

    def delete_batch(self, table: str, where: str, params: list, row: str) -> tuple[str, list, int]:
        batch = 5_000
        select = f"SELECT {row} FROM {table} WHERE {where} LIMIT {batch}"
        return f"DELETE FROM {table} WHERE {row} IN ({select})", list(params), batch

    # --- freshness ----------------------------------------------------------------------

    def newest_record(self, records: str) -> str:
        return f"(SELECT r.id FROM {records} r ORDER BY r.id DESC LIMIT 1)"

    def first_record_above(self, records: str, mark: str) -> str:
        return (
            f"(SELECT CAST(r.id AS text) || ' ' || CAST(r.received_at AS text) FROM {records} r "
            f"WHERE r.id > {mark} ORDER BY r.id LIMIT 1)"
        )
