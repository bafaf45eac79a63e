"""The keys of the PostgreSQL advisory locks the product takes, in one place so that no two
locks share one: the lane switch and the creation of a day's partition once did, so a lane
switch waited for partition creators and they for it (tests/records/catchup/test_pass_spacing.py
keeps them apart).

Single-key locks (one bigint), except PASS_WAITER_LOCK_CLASS, the class of the two-key form
(class, lane): PostgreSQL keeps the two key spaces apart.

Every lock is held by a transaction (pg_advisory_xact_lock*), never by a session: behind a
transaction pooler (PgBouncer, DATABASE_POOLER=transaction) consecutive transactions of one Django
connection may run on different server sessions, so a session lock could be taken on one and
its unlock sent to another, and stay held. A lock needed for less than its transaction is taken
in a savepoint and released by rolling the savepoint back (`held_briefly`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

# Ingest transactions hold it shared; the catch-up takes it exclusively for the instant it reads
# max(id) (records.store.writer, records.catchup.passes._safe_high_water).
INGEST_LOCK_KEY = 0x44420001
# Creators of partitions queue on it instead of racing to CREATE one name
# (records.store.partitions).
PARTITION_LOCK_KEY = 0x44420002
# Serialises changes of the catch-up lane count (records.catchup.passes._switch_lanes).
LANE_SWITCH_LOCK_KEY = 0x44420003
# With the lane: held by the one process waiting out a lane's pass spacing
# (records.catchup.passes.run_pass).
PASS_WAITER_LOCK_CLASS = 0x44420004

SINGLE_KEYS = (INGEST_LOCK_KEY, PARTITION_LOCK_KEY, LANE_SWITCH_LOCK_KEY)


@contextmanager
def held_briefly(function: str, *keys: int) -> Iterator[bool]:
    """The advisory lock `function` (pg_advisory_xact_lock, pg_try_advisory_xact_lock, ...) of
    `keys`, held for the block only: taken in a savepoint of the current transaction (or of one
    opened for the block) and released by rolling the savepoint back at its end, so the rest of
    the caller's transaction goes on without it. Yields whether it was taken (always true for
    the waiting forms). Whatever the block reads inside the savepoint survives the rollback in
    Python, not in the database: the block must not write."""
    with transaction.atomic():
        savepoint = transaction.savepoint()
        try:
            with connection.cursor() as cursor:
                placeholders = ", ".join(["%s"] * len(keys))
                cursor.execute(f"SELECT {function}({placeholders})", list(keys))
                taken = cursor.fetchone()[0]
            yield taken is not False  # the waiting forms return void (None)
        finally:
            transaction.savepoint_rollback(savepoint)
