"""What the store, the catch-up and the read path ask of the database, one small interface per
concern; records.store.backends holds a PostgreSQL and a SQLite implementation of each.

Callers never look at the connection's vendor: they ask `backend()` for the statement, the
capability or the step that differs, so that a difference between the two databases is
written once, here, beside its twin. Migrations keep their own branches (they run frozen).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Features:
    """What the database can do, where the product takes another road without it."""

    # Records are range-partitioned by day: retention drops partitions, ingest creates them.
    partitioned_records: bool
    # Writers run concurrently and lock rows; without (SQLite) the one write transaction at a
    # time already serialises what a lock would.
    concurrent_writes: bool
    # Dead row versions stay until a VACUUM, and plans follow ANALYZE statistics that the
    # catch-up keeps up itself.
    vacuums: bool
    # A named (server-side) cursor outside a transaction is WITH HOLD: the server fills it with
    # every row before the first fetch, so a long read streams inside a transaction.
    holds_cursors_outside_transactions: bool
    # Rows staged with COPY, then written by one set-based statement (an UPDATE ... RETURNING
    # the rows as they were); without, rows go one statement a row (executemany).
    copies_into_stages: bool
    # The streak segments computed by the database from the verdicts (window functions over a
    # lateral join); without, the verdicts are streamed and folded in Python.
    streak_segments_in_sql: bool
    # A transaction pooler's sessions get the role's settings (jit), not startup options.
    role_settings: bool
    # An UPDATE ... RETURNING inside a query's WITH: a read that writes in one statement.
    data_modifying_ctes: bool


class SessionSettings(ABC):
    """The settings of a connection and of the catch-up's transactions."""

    @abstractmethod
    def commit_without_flush(self, cursor) -> None:
        """Let this transaction's commit return before its log reaches the disk."""

    @abstractmethod
    def on_one_core(self, cursor) -> None:
        """No parallel workers for the rest of this transaction's queries."""

    @abstractmethod
    def fast_timestamps(self, cursor) -> None:
        """Have this (Django) cursor load timestamps with the driver's fastest loader."""

    @abstractmethod
    def register_functions(self, connection) -> None:
        """The SQL functions the store relies on that the database lacks (json_add), on a new
        connection; PostgreSQL gets them from migrations."""

    @abstractmethod
    def set_role_defaults(self, connection, pooler: str) -> None:
        """Make the session settings the role's defaults behind a transaction pooler."""


class SqlDialect(ABC):
    """Expressions and parameters written differently."""

    codepoint_collation: str  # appended to an ORDER BY column: order by code point

    @abstractmethod
    def json_text(self, column: str, *path: str) -> str:
        """The text at `path` of a JSON column (NULL where absent)."""

    @abstractmethod
    def json_value(self, column: str, key: str) -> str:
        """The JSON at `key` of a JSON column, as the driver hands JSON over."""

    @abstractmethod
    def json_as_text(self, column: str) -> str:
        """A whole JSON column as text."""

    @abstractmethod
    def in_values(self, column: str, values: Sequence) -> tuple[str, list]:
        """`column` is one of `values`: (the condition, its parameters)."""

    @abstractmethod
    def time_param(self, when: datetime):
        """A datetime as the database compares it in a raw statement."""

    @abstractmethod
    def time_from_db(self, value) -> datetime:
        """A timestamp column's value read by a raw statement, as a datetime."""


class RecordScans(ABC):
    """Long reads of the records, chunk by chunk."""

    @abstractmethod
    def chunks(self, cursor, size: int, time_column: int | None = None) -> Iterator[list[tuple]]:
        """The rows of the executed (chunked) `cursor` in lists of `size`, the `time_column`th
        value a datetime."""


class KeyedReads(ABC):
    """Stored rows looked up by many keys at once."""

    @abstractmethod
    def rows_by_keys(self, cursor, table: str, key_columns: tuple, key_types: tuple,
                     columns: tuple, keys: list[tuple]) -> list[tuple]:  # fmt: skip
        """The rows of `table` whose `key_columns` (of SQL types `key_types`) are one of
        `keys`, as tuples of `columns`."""


class BulkWrites(ABC):
    """Many rows written at once."""

    @abstractmethod
    def insert_rows(self, cursor, table: str, columns: Sequence[str], rows: list[tuple]) -> None:
        """Insert `rows` of `columns` (quoted names) into `table` (quoted)."""

    @abstractmethod
    def upsert_rows(self, cursor, table: str, columns: Sequence[str], rows: list[tuple],
                    conflict: str, *, stage: tuple[str, str],
                    time_columns: Sequence[int] = ()) -> None:  # fmt: skip
        """INSERT `rows` ... `conflict` (an ON CONFLICT clause). `stage` is (the statement that
        creates or empties a temporary table of `columns`, its name), where the database stages
        rows with COPY; `time_columns` are the indexes of datetime values."""

    @abstractmethod
    def added_sketch(self, table: str) -> str:
        """The SET expression of a rollup's latency sketch on conflict: the excluded one kept
        when the pass merged the stored sketch in already (merges_sketches_in_python), else
        the two added up in SQL (json_add)."""

    merges_sketches_in_python: bool


class Locking(ABC):
    """Locks of a transaction."""

    @abstractmethod
    def lock_transaction(self, cursor, key: int) -> None:
        """Hold the advisory lock `key` until this transaction ends; nothing where one write
        transaction at a time already serialises."""

    @abstractmethod
    def lock_row(self, cursor, table: str, pk: int) -> None:
        """Lock the row `pk` of `table` for update until this transaction ends."""

    @abstractmethod
    def committed_high_water(self, table: str, ingest_lock_key: int) -> int:
        """The highest id of `table` below which every row is committed."""


class BatchedDeletes(ABC):
    """Deletes of many rows, a batch a transaction."""

    @abstractmethod
    def delete_batch(self, table: str, where: str, params: list, row: str) -> tuple[str, list, int]:
        """(the statement that deletes one batch of `table`'s rows matching `where`, addressed
        by `row`, its parameters, the batch size)."""


class FreshnessReads(ABC):
    """The subqueries of freshness's one statement over the lanes' watermarks."""

    @abstractmethod
    def newest_record(self, records: str) -> str:
        """The newest record's id."""

    @abstractmethod
    def first_record_above(self, records: str, mark: str) -> str:
        """'id received_at' (text) of the first record whose id is above the column `mark`."""


class StoreBackend(
    SessionSettings,
    SqlDialect,
    RecordScans,
    KeyedReads,
    BulkWrites,
    Locking,
    BatchedDeletes,
    FreshnessReads,
):
    """One database's answers to every concern above."""

    name: str  # the connection's vendor
    features: Features
    catchup_batch: int  # records a catch-up pass folds at most
