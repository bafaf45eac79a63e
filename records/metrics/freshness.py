"""How far the rollups lag the records, in constant time whatever the backlog
(docs/architecture.md, "Freshness").

Two answers, for two audiences.

A project (its pages, its metrics and streaks API answers: `project_freshness`) is told of its
own records only: whether any of them wait to be folded in, and how long the oldest has waited.
No count, and no record id. Its lane's pending count would be other projects' ingest volume
(several projects share a lane), an id span between its own records counts the other projects'
records interleaved with them, and record ids come from one sequence for the installation, so
the newest id or a watermark, read twice, tells how much everyone sent in between. A count of
the project's own waiting records would need a counter that every ingest batch of the project
updates (one hot row) or a count over its records; its lag, how long its oldest waiting record
has waited, needs neither. It comes from a row ingest inserts for each stored batch
(records.models.PendingBatch: the batch's newest id and arrival time) and the lane's pass
deletes once folded: one statement reads the lanes' watermark rows and, for each, the project's
first batch above the watermark (an index probe), whatever the backlog of this project or
another's.

The operator (ops.state's Prometheus gauges, bench: `freshness`) is told of the installation: the
catch-up (records.catchup.passes) folds records in id order in a few lanes of projects, each with a
watermark, so its lag is its worst lane's. Everything there comes from indexed lookups that cost the
same on ten records or ten million, with or without planner statistics: the lanes' watermark rows,
the newest id (max over the primary key) and each lane's oldest pending record (its first id above
the watermark, among a bounded window: LANE_WINDOW). Counting the pending records exactly would scan
them, on every scrape, while the backlog is largest; so the count is the span of ids from the oldest
pending record to the newest, an upper bound (ids used up by duplicate inserts and rolled-back
batches count too), and marked as an estimate when it may be one.
"""

from __future__ import annotations

from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connections, router
from django.db.models import OuterRef, Subquery
from django.db.models.functions import Mod
from django.utils import timezone

from records.metrics.reader import time_of
from records.models import (
    LANE_WATERMARK,
    Grain,
    PendingBatch,
    Record,
    StreakSegment,
    Watermark,
    configured_lanes,
    lane_of,
    parse_lane_name,
    streaks_folded_name,
)
from records.store.backends import backend


def project_freshness(project_id: int, now: datetime | None = None) -> dict:
    """A project's freshness, of its own records only: `pending` (some wait to be folded in),
    `lag_seconds` (how long the oldest of them has waited; 0 when none does) and
    `last_pass_at` (its lane's last catch-up pass, None before the first).

    One statement: the lanes' watermark rows, each with the project's first PendingBatch
    above it (an index probe). The rows are of one lane count at a time (the catch-up switches
    them in one transaction), so the project's is the one whose lane it falls in, whatever
    count this process is configured with; before the first pass there is none, and every
    batch waits.

    Read from a replica (config.replicas), the replica's delay is added to the lag: a batch
    it has not replayed yet is invisible there, so its wait would otherwise go uncounted."""
    now = now or timezone.now()
    first_waiting = PendingBatch.objects.filter(
        project_id=project_id, last_id__gt=OuterRef("last_id")
    ).order_by("last_id")
    rows = Watermark.objects.lanes().annotate(
        waiting_since=Subquery(first_waiting.values("received_at")[:1])
    )
    last_pass_at = waiting_since = None
    found = False
    for name, last_pass, since in rows.values_list("name", "last_pass_at", "waiting_since"):
        lane, lanes = parse_lane_name(name)
        if lane_of(project_id, lanes) == lane:
            last_pass_at, waiting_since, found = last_pass, since, True
    if not found:
        waiting_since = (
            PendingBatch.objects.filter(project_id=project_id)
            .order_by("last_id")
            .values_list("received_at", flat=True)
            .first()
        )
    lag = max(0.0, (now - waiting_since).total_seconds()) if waiting_since else 0.0
    alias = router.db_for_read(PendingBatch)
    if alias not in (None, DEFAULT_DB_ALIAS):
        lag += replica_position(connections[alias])[1]
    return {
        "pending": waiting_since is not None,
        "lag_seconds": round(lag, 3),
        "last_pass_at": last_pass_at,
    }


# A replica's replayed WAL position (as a number of bytes) and its delay: 0 while it has
# replayed everything it received and still receives (a primary idle for an hour leaves an
# hour-old last replayed commit behind, and nothing is missing), otherwise how long ago the
# primary committed the last transaction it replayed (infinite before the first). On the
# primary: its own position and 0.
_POSITION_SQL = """
SELECT CAST(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() - '0/0'
                 ELSE pg_current_wal_lsn() - '0/0' END AS bigint),
       CAST(CASE WHEN NOT pg_is_in_recovery() THEN 0
                 WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
                      AND EXISTS (SELECT FROM pg_stat_wal_receiver) THEN 0
                 ELSE coalesce(extract(epoch FROM clock_timestamp()
                                       - pg_last_xact_replay_timestamp()), 'Infinity')
            END AS float8)
"""


def replica_position(conn) -> tuple[int, float]:
    """(replayed WAL position, delay in seconds) of the database behind `conn` (a Django
    connection, PostgreSQL): see _POSITION_SQL."""
    with conn.cursor() as cursor:
        cursor.execute(_POSITION_SQL)
        replayed, delay = cursor.fetchone()
    return replayed or 0, delay


def describe(
    *,
    watermark_id: int,
    last_pass_at: datetime | None,
    newest_id: int,
    oldest_pending: tuple[int, datetime] | None,
    now: datetime,
) -> dict:
    """The freshness block of the pages and the metrics API, from what the pass knows.

    `oldest_pending` is (id, received_at) of the first record above the watermark, if any.
    """
    pending = newest_id - oldest_pending[0] + 1 if oldest_pending else 0
    return {
        "watermark_id": watermark_id,
        "newest_id": max(newest_id, watermark_id),
        "pending_records": pending,
        # 0 and 1 are exact: with one id in the span, the oldest pending record is the newest.
        "pending_estimated": pending > 1,
        "lag_seconds": (
            round(max(0.0, (now - oldest_pending[1]).total_seconds()), 3) if oldest_pending else 0.0
        ),
        "last_pass_at": last_pass_at,
    }


# How many records above a lane's watermark freshness looks through for the lane's own first
# one: a bounded read. A lane whose projects send fewer than one record in this many is given
# the first record above its watermark, whichever lane it is of: an overstatement, never less.
LANE_WINDOW = 1_000


def freshness(now: datetime | None = None) -> dict:
    """The catch-up's freshness: its worst lane's (the lowest watermark, the oldest pending
    record), and each lane's under "lanes". Indexed reads only, in one statement with one lane
    (the default; see _watermarks): every scrape of /metrics asks, and under load each round
    trip to the database waits for a core twice."""
    now = now or timezone.now()
    rows = _watermarks()
    newest = rows[0][3] if rows else _newest_id()
    lanes = []
    for name, last_id, last_pass_at, _, first_above in rows:
        lane, count = parse_lane_name(name)
        if newest <= last_id:
            oldest = None
        elif count == 1:
            oldest = first_above
        else:
            oldest = _oldest_pending(last_id, lane, count)
        lanes.append((lane, last_id, last_pass_at, oldest))
    lanes.sort(key=lambda lane: lane[0])
    if not lanes:  # before the first pass: one lane at 0
        lanes = [(0, 0, None, _oldest_pending(0, 0, 1) if newest else None)]
    pending = [oldest for *_, oldest in lanes if oldest]
    passes = [last_pass_at for _, _, last_pass_at, _ in lanes]
    out = describe(
        watermark_id=min(last_id for _, last_id, _, _ in lanes),
        # The stalest lane: a lane whose worker stopped shows, however busy the others are.
        last_pass_at=None if None in passes else min(passes),
        newest_id=newest,
        # The lowest pending id (the span of ids to the newest) and the longest wait.
        oldest_pending=(
            (min(p[0] for p in pending), min(p[1] for p in pending)) if pending else None
        ),
        now=now,
    )
    out["lanes"] = [
        {"lane": lane, **describe(watermark_id=last_id, last_pass_at=last_pass_at,
                                  newest_id=newest, oldest_pending=oldest, now=now)}
        for lane, last_id, last_pass_at, oldest in lanes
    ]  # fmt: skip
    return out


def _newest_id() -> int:
    return Record.objects.order_by("-id").values_list("id", flat=True).first() or 0


def _watermarks() -> list[tuple[str, int, datetime | None, int, tuple[int, datetime] | None]]:
    """(name, last_id, last_pass_at, the newest record id, (id, received_at) of the first record
    above last_id or None) of each lane's watermark row (Watermark.objects.lanes): index reads of
    the primary key, as subqueries of one statement.

    Written out once: the ORM took longer to compile it than the database to run it, and each
    subquery of the records plans over every day partition, so the first record's id and time
    come as one text ("id received_at"). On PostgreSQL the two subqueries are functions that
    keep their plans for the session (migration 0022): planned for
    each call they cost ten times what they read."""
    records, watermarks = Record._meta.db_table, Watermark._meta.db_table
    conn = connections[router.db_for_read(Watermark)]
    store = backend(conn)
    newest, first_above = (
        store.newest_record(records),
        store.first_record_above(records, "w.last_id"),
    )
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT w.name, w.last_id, CAST(w.last_pass_at AS text), {newest}, {first_above} "
            f"FROM {watermarks} w WHERE w.name = %s OR w.name LIKE %s",
            [LANE_WATERMARK, LANE_WATERMARK + ":%"],
        )
        rows = cursor.fetchall()
    return [
        (name, last_id, time_of(at) if at is not None else None, newest or 0,
         _id_and_time(pair) if pair else None)
        for name, last_id, at, newest, pair in rows
    ]  # fmt: skip


def _id_and_time(pair: str) -> tuple[int, datetime]:
    first, at = pair.split(" ", 1)
    return int(first), time_of(at)


def _oldest_pending(last_id: int, lane: int, lanes: int) -> tuple[int, datetime] | None:
    """(id, received_at) of the lane's first record above its watermark, read among the next
    LANE_WINDOW records (an index range scan of the primary key)."""
    above = Record.objects.filter(id__gt=last_id).order_by("id")
    if lanes > 1:
        window = above.values("id")[:LANE_WINDOW]
        own = (
            Record.objects.filter(id__in=window)
            .alias(lane=Mod("project_id", lanes))
            .filter(lane=lane)
            .order_by("id")
            .values_list("id", "received_at")
            .first()
        )
        if own is not None:
            return own
        if not above[LANE_WINDOW - 1 : LANE_WINDOW].exists():
            return None  # the lane has nothing above its watermark
    return above.values_list("id", "received_at").first()


def streaks_freshness(project_id: int) -> dict:
    """How settled a project's streaks are: the minutes whose late verdicts are not in them yet
    (dirty: the workers recompute them at most every STREAK_SETTLE_SECONDS of the catch-up), and
    when its lane last recomputed such minutes. Two indexed reads (the dirty minutes' partial
    index)."""
    lanes = configured_lanes()
    folded = (
        Watermark.objects.filter(name=streaks_folded_name(lane_of(project_id, lanes), lanes))
        .values_list("last_pass_at", flat=True)
        .first()
    )
    dirty = StreakSegment.objects.filter(project_id=project_id, grain=Grain.MINUTE, dirty=True)
    return {"dirty_minutes": dirty.count(), "folded_at": folded}
