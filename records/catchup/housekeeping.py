"""What autovacuum would do for the catch-up's tables, done by the catch-up itself: ANALYZE
the grown record partitions and the pass's tables, VACUUM the churned ones."""

from __future__ import annotations

import logging

from django.db import connection, transaction
from django.utils import timezone

from records.catchup.lanes import folded_upto
from records.models import (
    Classification,
    PendingBatch,
    Record,
    Rollup,
    Run,
    Streak,
    StreakSegment,
    ToolDecision,
    Watermark,
)
from records.store.backends import backend

log = logging.getLogger(__name__)


# PostgreSQL plans from table statistics that autovacuum keeps, when it runs (it is off on some
# machines) and always some time after a burst. Without them a plan can turn an index lookup
# into a scan, so the catch-up analyses the tables it grows once it has folded in a fifth of
# the records the planner knows of, and at least ANALYZE_MIN_RECORDS, since it last did.
#
# It analyses what autovacuum would: the day partitions of the records that changed by a tenth
# since their last ANALYZE (or never had one), never the partitioned parent (whose ANALYZE
# samples every partition once more; autovacuum never analyses a parent either, and no query
# needs its statistics: bench/pages.py --no-analyze), and the tables the pass writes. The JSON
# bodies get no column statistics (records.store.partitions.NO_STATISTICS).
#
# With a sample of 7,500 rows (300 x ANALYZE_STATISTICS_TARGET) rather than PostgreSQL's default
# 30,000: the plans over these tables need the number of distinct runs, sessions, kinds and
# models and the spread of the times roughly (an index lookup or a range, not a scan), which
# that gives. Under sustained ingest into a new day the catch-up analyses it every fifth of
# growth, often enough that the default sample's ANALYZE takes a real share of a core, and
# the cost grows with the day partition; this sample keeps it small (bench/soak.py shows it).
# A column's own target (the JSON bodies' 0) still holds; an operator's or autovacuum's
# ANALYZE uses the server's default.
ANALYZE_MIN_RECORDS = 50_000


ANALYZE_STATISTICS_TARGET = 25


_ANALYZED = "analyzed"  # a Watermark row: how far the records were folded at the last ANALYZE


_ANALYZED_TABLES = (Rollup, Run, Classification, StreakSegment, ToolDecision)


def analyze_if_grown(*, min_records: int = ANALYZE_MIN_RECORDS) -> bool:
    """ANALYZE the grown record partitions and the pass's tables if the records folded in grew
    enough since the last time; returns whether it did (PostgreSQL only)."""
    if not backend().features.vacuums:
        return False
    folded = folded_upto()
    with transaction.atomic():
        Watermark.objects.get_or_create(name=_ANALYZED)
        # Lanes finish their calls at about the same time: one analyses, the others go on.
        mark = Watermark.objects.select_for_update(skip_locked=True).filter(name=_ANALYZED).first()
        if mark is None:
            return False
        with connection.cursor() as cursor:
            leaves = _record_partitions(cursor)
            # The records the planner knows of (none before any ANALYZE): grown by a fifth.
            known = sum(max(tuples, 0) for _, tuples, _ in leaves)
            if folded - mark.last_id < max(min_records, known / 5):
                return False
            tables = [
                name
                for name, tuples, changed in leaves
                if tuples < 0 or (changed and changed >= tuples / 10)
            ] or ([] if leaves else [Record._meta.db_table])
            tables += [t._meta.db_table for t in _ANALYZED_TABLES]
            cursor.execute(f"SET LOCAL default_statistics_target = {ANALYZE_STATISTICS_TARGET}")
            cursor.execute("ANALYZE " + ", ".join(tables))
            cursor.execute("RESET default_statistics_target")  # for the rest of a transaction
        mark.last_id = folded
        mark.last_pass_at = timezone.now()
        mark.save(update_fields=["last_id", "last_pass_at"])
    log.info("analyzed %s at record id %s", ", ".join(tables), folded)
    return True


# The tables the passes update in place (UPSERTs of rollups, runs, classifications, segments,
# tool decisions; the watermarks and streaks on every pass). Each update leaves the old row
# version behind, and without a VACUUM every index scan keeps visiting them: pass after pass
# the rollup table gathers several dead versions per live row and the metrics API's index
# scans of it slow down several times over. PostgreSQL may run without autovacuum, and a
# production one's autovacuum wakes once a minute, so the catch-up vacuums these tables itself
# once their dead versions pass autovacuum's own rule (a fifth of the live rows), at least
# VACUUM_MIN_DEAD of them. A VACUUM blocks neither reads nor writes; SKIP_LOCKED leaves a
# table another lane (or autovacuum) is vacuuming. The records partitions are not here:
# ingest only inserts into them.
VACUUM_MIN_DEAD = 5_000


_VACUUMED_TABLES = (*_ANALYZED_TABLES, Watermark, Streak, PendingBatch)


def vacuum_if_churned(*, min_dead: int = VACUUM_MIN_DEAD) -> list[str]:
    """VACUUM the pass's tables whose dead row versions outnumber a fifth of their live ones
    (and `min_dead`); returns the tables vacuumed (PostgreSQL only, outside a transaction)."""
    if not backend().features.vacuums or connection.in_atomic_block:
        return []
    with connection.cursor() as cursor:
        # The statistics' counters, which backends report at least once a second: cheap.
        cursor.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE relname = ANY(%s) "
            "AND n_dead_tup >= %s AND n_dead_tup > n_live_tup / 5 ORDER BY relname",
            [[t._meta.db_table for t in _VACUUMED_TABLES], min_dead],
        )
        churned = [name for (name,) in cursor.fetchall()]
        if churned:
            # On one core: parallel workers would take the cores the pages and ingest need.
            cursor.execute("VACUUM (SKIP_LOCKED, PARALLEL 0) " + ", ".join(churned))
    if churned:
        log.info("vacuumed %s", ", ".join(churned))
    return churned


def _record_partitions(cursor) -> list[tuple[str, float, int]]:
    """The records' partitions: (name, the rows the planner knows of (-1: never analysed),
    rows changed since the last ANALYZE)."""
    cursor.execute(
        "SELECT c.oid::regclass::text, c.reltuples, coalesce(s.n_mod_since_analyze, 0) "
        "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
        "WHERE i.inhparent = %s::regclass ORDER BY 1",
        [Record._meta.db_table],
    )
    return cursor.fetchall()
