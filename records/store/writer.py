"""Bulk insert of normalised records, idempotent on (project, record_key).

This is the ingest hot path, so it skips the ORM (whose bulk_create is ~10x slower than COPY on
PostgreSQL): PostgreSQL stages the batch with COPY, then one statement inserts the keys into
RecordKey (each with its record's day; ON CONFLICT DO NOTHING when some key was stored before,
see _insert_statement), the records whose key was new (into their day's partition,
records.store.partitions) and the new runs; SQLite takes its write
lock at BEGIN (transaction_mode IMMEDIATE), drops the keys already stored and inserts the rest
with executemany. Both commit before returning, and both count a key repeated inside the batch
as a duplicate. A run is created on first sight; the catch-up pass widens it and counts its
records. A batch that stored records also leaves a PendingBatch row, which its project's
freshness reads until the catch-up folds it. Records with usage are priced first
(records.store.ingest_pricing).

Records and their keys have no foreign key constraint on their project (a check at commit for
every row): a batch holds its project row with a key-share lock instead, taken once, and
deleting a project takes that row's update lock before its records are deleted
(`hold_project_for_delete`). Whichever comes second waits for the other to commit: a delete then
deletes the batch's records too, and a batch finds its project gone (ProjectGone) and stores
nothing.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError, connection, connections, transaction

from records.contract.normalise import NormalisedRecord
from records.models import PendingBatch, Project, Record, RecordKey, Run
from records.store import partitions, retention
from records.store.backends import backend
from records.store.ingest_pricing import price_records
from records.store.locks import INGEST_LOCK_KEY

RECORD_TABLE = Record._meta.db_table
RUN_TABLE = Run._meta.db_table
KEY_TABLE = RecordKey._meta.db_table
BATCH_TABLE = PendingBatch._meta.db_table
PROJECT_TABLE = Project._meta.db_table
# The columns a NormalisedRecord fills, in its field order, with the type each is staged as.
# `data` and `derived` are staged as their JSON text and cast to jsonb by the insert: psycopg
# writes text in C, where jsonb's binary format (a version byte, then the text) would need a
# dumper in Python for every value.
_TYPED_COLUMNS = (
    ("record_key", "text"),
    ("kind", "text"),
    ("run_id", "text"),
    ("ts", "timestamptz"),
    ("session_id", "text"),
    ("agent", "text"),
    ("parent_run_id", "text"),
    ("model", "text"),
    ("iteration", "int4"),
    ("latency_ms", "float8"),
    ("skip_reason", "text"),
    ("outcome", "text"),
    ("is_swap", "bool"),
    ("is_fallback", "bool"),
    ("is_error", "bool"),
    ("is_contract_break", "bool"),
    ("rollup_key", "text"),
    ("tokens_in", "int8"),
    ("tokens_out", "int8"),
    ("named_models", "text"),
    ("has_violation", "bool"),
    ("data", "text"),
    ("derived", "text"),
    ("cost_nano", "int8"),
    ("cost_source", "text"),
    ("release", "text"),
)
COLUMNS = tuple(name for name, _ in _TYPED_COLUMNS)
_COLUMN_TYPES = [pg_type for _, pg_type in _TYPED_COLUMNS]
_JSON_COLUMNS = ("data", "derived")
# The stage's name carries its shape: a connection that still holds the stage of an earlier
# release (a server connection a pooler keeps across a deploy) is never sent rows of another one.
STAGE = f"ingest_stage_{len(COLUMNS)}_{zlib.crc32(' '.join(_COLUMN_TYPES).encode()):08x}"
_STAGED_VALUES = ", ".join(f"{name}::jsonb" if name in _JSON_COLUMNS else name for name in COLUMNS)
# Kept by the workers (records.catchup.passes); a new run starts with them empty.
_RUN_SUMMARY_COLUMNS = (
    "kind_counts, models_seen, has_swap, has_fallback, has_error, has_contract_break, has_violation"
)
_STAGE_DDL = f"""
CREATE TEMP TABLE IF NOT EXISTS {STAGE} (
    {", ".join(f"{name} {pg_type}" for name, pg_type in _TYPED_COLUMNS)}
) ON COMMIT DELETE ROWS
"""


def _insert_statement(*, resend: bool) -> str:
    """The statement that stores the staged batch.

    A batch is first stored as all new (resend=False): its keys go in with a plain INSERT, and
    every staged row as a record. Only when that INSERT fails on a key stored before is the
    savepoint taken before it rolled back and the batch stored with ON CONFLICT DO NOTHING, the
    records whose key went in alone (resend=True): the conflict check costs every key a second
    search of the index and a WAL record of its own, paid then by the few batches that resend.
    """
    return f"""
WITH new_keys AS (
    -- The table is partitioned by ts, so the keys' uniqueness lives in RecordKey: a resend is a
    -- duplicate whatever its ts. In key order, so that two batches sharing keys lock alike.
    -- With its record's UTC day, its partition's: expiring the day deletes its keys by it.
    -- Byte order: any fixed order locks alike, and the database's collation would compare
    -- each pair of keys through the C library.
    INSERT INTO {KEY_TABLE} (project_id, record_key, day)
    SELECT %(project)s, record_key, (ts AT TIME ZONE 'UTC')::date
    FROM {STAGE} ORDER BY record_key COLLATE "C"
    {"ON CONFLICT (project_id, record_key) DO NOTHING RETURNING record_key" if resend else ""}
), ins AS (
    INSERT INTO {RECORD_TABLE} (project_id, received_at, {", ".join(COLUMNS)})
    SELECT %(project)s, %(now)s, {_STAGED_VALUES}
    FROM {STAGE} {"WHERE record_key IN (SELECT record_key FROM new_keys)" if resend else ""}
    RETURNING id, kind, run_id, ts, agent, session_id, parent_run_id
), batch AS (
    -- What the project's freshness reads (records.metrics.freshness): a row of its own,
    -- inserted, so that concurrent batches of one project never queue on a shared one.
    INSERT INTO {BATCH_TABLE} (project_id, last_id, received_at)
    SELECT %(project)s, max(id), %(now)s FROM ins HAVING count(*) > 0
), runs AS (
    -- New runs only: widening a run's time range and counting its records is the catch-up
    -- pass's job (records.catchup.passes). Runs already committed are left out before the
    -- INSERT: ON CONFLICT alone would check each against the unique index, and that check waits
    -- for a pass that has updated the run and not yet committed (a batch of a busy run then
    -- took as long as the rest of the pass). A plain read of the committed row never waits.
    -- The read is a scalar subquery, one probe of the unique index per run of the batch: a NOT
    -- EXISTS is planned as an anti-join, which on a table without statistics (nobody ran
    -- ANALYZE) may hash every run of the project, for every batch.
    INSERT INTO {RUN_TABLE}
        (project_id, run_id, parent_run_id, agent, session_id, first_ts, last_ts,
         record_count, created_at, {_RUN_SUMMARY_COLUMNS})
    SELECT %(project)s, run_id, max(parent_run_id), max(agent), max(session_id), min(ts),
           max(ts), 0, %(now)s, '{{}}', '{{}}', false, false, false, false, false
    FROM ins
    GROUP BY run_id
    HAVING (
        SELECT true FROM {RUN_TABLE} AS known
        WHERE known.project_id = %(project)s AND known.run_id = ins.run_id
    ) IS NULL
    ORDER BY run_id COLLATE "C"
    ON CONFLICT (project_id, run_id) DO NOTHING
    RETURNING 1
)
SELECT kind, count(*) FROM ins GROUP BY kind
"""


_PG_INSERT_NEW = _insert_statement(resend=False)
_PG_INSERT_RESEND = _insert_statement(resend=True)
# The unique index of RecordKey, named by the error a resent key raises.
_KEY_INDEX = f"{KEY_TABLE}_pkey"
_SQLITE_RUN_INSERT = f"""
INSERT INTO {RUN_TABLE}
    (project_id, run_id, parent_run_id, agent, session_id, first_ts, last_ts, record_count,
     created_at, {_RUN_SUMMARY_COLUMNS})
VALUES (%s, %s, %s, %s, %s, %s, %s, 0, %s, '{{}}', '{{}}', 0, 0, 0, 0, 0)
ON CONFLICT (project_id, run_id) DO NOTHING
"""


class ProjectGone(LookupError):
    """The project of a batch was deleted before the batch was stored (nothing was stored)."""


@dataclass(frozen=True)
class StoreResult:
    accepted: int
    duplicates: int
    # The new records by kind (together `accepted`), so the ingest counters need no query.
    accepted_by_kind: dict[str, int] = field(default_factory=dict)


def store_records(
    project_id: int, records: Sequence[NormalisedRecord], now: datetime
) -> StoreResult:
    """Insert what is new, count the rest as duplicates, and commit before returning."""
    unique: dict[str, NormalisedRecord] = {}
    for record in records:
        unique.setdefault(record.record_key, record)
    if not unique:
        return StoreResult(0, len(records))
    rows = list(unique.values())
    # Priced here, so that every way in (the records API, OTLP, the demo, a bench) stores cost.
    price_records(project_id, rows)
    store = backend()
    if store.features.partitioned_records:
        # Before the transaction: creating a partition takes locks that ingest must not hold.
        first, last = retention.partition_window(now)
        partitions.cover((r.ts for r in rows), first, last)
    # Its own transaction (not one of the caller's): the stage was emptied by the last commit.
    own_transaction = connection.get_autocommit() and not connection.in_atomic_block
    with transaction.atomic():
        if store.features.copies_into_stages:
            by_kind = _insert_postgresql(project_id, rows, now, stage_empty=own_transaction)
        else:
            by_kind = _insert_sqlite(project_id, rows, now)
    accepted = sum(by_kind.values())
    return StoreResult(accepted, len(records) - accepted, by_kind)


def record_row(record: NormalisedRecord, ts: object) -> tuple:
    """The COLUMNS of one record; `ts` as the database driver wants it."""
    return (
        record.record_key,
        record.kind,
        record.run_id,
        ts,
        record.session_id,
        record.agent,
        record.parent_run_id,
        record.model,
        record.iteration,
        record.latency_ms,
        record.skip_reason,
        record.outcome,
        record.is_swap,
        record.is_fallback,
        record.is_error,
        record.is_contract_break,
        record.rollup_key,
        record.tokens_in,
        record.tokens_out,
        record.named_models,
        record.has_violation,
        record.data_json,
        record.derived_json,
        record.cost_nano,
        record.cost_source,
        record.release,
    )


def _insert_postgresql(
    project_id: int, rows: list[NormalisedRecord], now: datetime, *, stage_empty: bool
) -> dict[str, int]:
    with connection.cursor() as cursor:
        # ON COMMIT DELETE ROWS only empties the stage at commit, and a caller may store several
        # batches in one transaction: then it is truncated first. Not otherwise: a TRUNCATE
        # gives the temporary table a new file and a new pg_class row version every batch.
        cursor.execute(
            f"SELECT id FROM {PROJECT_TABLE} WHERE id = %s FOR KEY SHARE; "
            f"SELECT pg_advisory_xact_lock_shared({INGEST_LOCK_KEY}); {_STAGE_DDL}"
            + ("" if stage_empty else f"; TRUNCATE {STAGE}"),
            [project_id],
        )
        if cursor.fetchone() is None:  # the first statement's answer
            raise ProjectGone(project_id)
        raw = cursor.cursor  # the psycopg cursor under Django's wrapper, for COPY
        # Binary: PostgreSQL reads the rows at about half the CPU of COPY's text format, and
        # psycopg writes them without escaping each text and JSON value.
        with raw.copy(f"COPY {STAGE} ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_COLUMN_TYPES)
            for record in rows:
                copy.write_row(record_row(record, record.ts))
        params = {"project": project_id, "now": now}
        try:
            cursor.execute(f"SAVEPOINT ingest_batch; {_PG_INSERT_NEW}", params)
        except IntegrityError as exc:
            if getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None) != _KEY_INDEX:
                raise
            cursor.execute(f"ROLLBACK TO SAVEPOINT ingest_batch; {_PG_INSERT_RESEND}", params)
        cursor.nextset()  # the answer of the insert, after the savepoint's
        return dict(cursor.fetchall())


def _insert_sqlite(project_id: int, rows: list[NormalisedRecord], now: datetime) -> dict[str, int]:
    ops = connection.ops
    with connection.cursor() as cursor:
        # The write lock, held since BEGIN, keeps a delete out until the commit.
        cursor.execute(f"SELECT 1 FROM {PROJECT_TABLE} WHERE id = %s", [project_id])
        if cursor.fetchone() is None:
            raise ProjectGone(project_id)
        existing: set[str] = set()
        keys = [r.record_key for r in rows]
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            cursor.execute(
                f"SELECT record_key FROM {RECORD_TABLE} WHERE project_id = %s AND record_key IN "
                f"({', '.join(['%s'] * len(chunk))})",
                [project_id, *chunk],
            )
            existing.update(key for (key,) in cursor.fetchall())
        new = [r for r in rows if r.record_key not in existing]
        if not new:
            return {}
        received = ops.adapt_datetimefield_value(now)
        placeholders = ", ".join(["%s"] * (len(COLUMNS) + 2))
        cursor.executemany(
            f"INSERT INTO {RECORD_TABLE} (project_id, received_at, {', '.join(COLUMNS)}) "
            f"VALUES ({placeholders})",
            [
                (project_id, received, *record_row(r, ops.adapt_datetimefield_value(r.ts)))
                for r in new
            ],
        )
        # The last row inserted, so the batch's newest record (the write lock is held since
        # BEGIN); before the runs' inserts move last_insert_rowid() on.
        cursor.execute(
            f"INSERT INTO {BATCH_TABLE} (project_id, last_id, received_at) "
            "VALUES (%s, last_insert_rowid(), %s)",
            [project_id, received],
        )
        runs: dict[str, list] = {}
        for r in sorted(new, key=lambda r: r.ts):
            if r.run_id not in runs:
                ts = ops.adapt_datetimefield_value(r.ts)
                runs[r.run_id] = [project_id, r.run_id, r.parent_run_id, r.agent, r.session_id,
                                  ts, ts, received]  # fmt: skip
            else:
                runs[r.run_id][6] = ops.adapt_datetimefield_value(r.ts)
        cursor.executemany(_SQLITE_RUN_INSERT, list(runs.values()))
        return dict(Counter(r.kind for r in new))


def hold_project_for_delete(sender, instance: Project, using: str, **kwargs) -> None:
    """pre_delete of Project, sent in the delete's transaction before its records are deleted:
    the row's update lock waits for the batches storing into the project to commit, and keeps
    new ones waiting until the delete commits (they then find the project gone)."""
    with connections[using].cursor() as cursor:  # SQLite: the write transaction serialises
        backend(connections[using]).lock_row(cursor, PROJECT_TABLE, instance.pk)
