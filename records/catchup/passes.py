"""The catch-up pass: fold newly committed records into rollups, run summaries and streaks.

Lanes: the projects are split into DECISIONBOARD_CATCHUP_LANES lanes (project id modulo the
count), each with a watermark of its own, so that one worker process per lane folds records in
parallel. Everything a pass writes is keyed by project, so lanes never write the same rows, and
N lanes give exactly the rollups of one. See `_switch_lanes` for a change of the count.

Driven by a database watermark, not by messages: a pass reads the records with an id above the
watermark (up to a safe high-water mark, see `_safe_high_water`), folds them in, and advances the
watermark in the same transaction. A pass that dies half way leaves nothing behind, and a second
pass over the same range cannot happen, so any number of passes, interrupted or repeated, give
the rollups of one clean pass.

Writes add to what is stored: counts are added by the UPSERT itself, run summaries merged by it
(json_add, records.store.sqlfunctions), latency sketches merged by the pass (_merged_sketches). Late
records simply land in their own bucket; a late verdict recomputes only its own minute's streak
segment (records.contract.streak_segments).
"""

from __future__ import annotations

import logging
import time
from contextlib import closing
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.db.models.functions import Mod
from django.utils import timezone

from records.catchup import tool_funnel
from records.catchup.batch import Batch
from records.catchup.housekeeping import analyze_if_grown, vacuum_if_churned
from records.catchup.lanes import (
    configured_lanes,
    lane_name,
    lane_watermarks,
    lock_watermark,
    parse_lane_name,
)
from records.catchup.marker_fold import mark_first_records
from records.catchup.reads import fetch_records, next_record_id
from records.catchup.sql_helpers import commit_without_flush
from records.catchup.streak_fold import fold_dirty_streaks, merge_streaks
from records.catchup.upserts import (
    flag_repeated_notices,
    merge_classifications,
    merge_rollups,
    merge_runs,
    runs_folded_before,
)
from records.gc_pause import gc_paused
from records.models import (
    PendingBatch,
    Record,
    Watermark,
)
from records.store.backends import backend
from records.store.locks import (
    INGEST_LOCK_KEY,
    LANE_SWITCH_LOCK_KEY,
    PASS_WAITER_LOCK_CLASS,
    held_briefly,
)

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    records: int
    last_id: int
    caught_up: bool  # reached a high-water mark read in this pass
    high: int = 0  # the safe high-water mark the pass folded towards (reusable: it stays safe)


# Records per pass at most (a lane's share of them with lanes). A pass costs in proportion to
# its records and to the rollup cells, runs and classifications they touch; a backlog in ts
# order touches few per record, but one spread over half an hour touches every minute's cells
# and every run in every pass, so fewer, larger passes catch a shuffled backlog up faster (less
# of a pass's state is read back by the next one; bench/catchup.py measures it). Rows are
# streamed (fetch_records), so the worker's memory grows with the cells, runs and decisions, not the
# rows; what a process keeps after its pass is what the worker's memory bound judges
# (WORKER_MAX_MEMORY_PER_CHILD, workers.memory).
# The size is the store backend's (catchup_batch): SQLite, one writer at a time, keeps passes
# short so that ingest waits little behind one.
def default_batch() -> int:
    return backend().catchup_batch


def catch_up(
    *,
    lane: int | None = None,
    lanes: int | None = None,
    batch_size: int | None = None,
    max_seconds: float = 50.0,
    streak_settle: float = 0.0,
    spacing: float = 0.0,
) -> int:
    """Run passes of `lane` (every lane in turn when None) until caught up (or out of time),
    then recompute the lane's dirty streak minutes unless it did so less than `streak_settle`
    seconds ago (0: always; see STREAK_SETTLE_SECONDS); returns how many records were folded.
    A pass waits until `spacing` seconds after the start of the lane's last pass that folded
    records (0: never; see PASS_SPACING_SECONDS)."""
    lanes = lanes or configured_lanes()
    batch_size = batch_size or default_batch()
    deadline = timezone.now() + timedelta(seconds=max_seconds)
    total = 0
    for one in range(lanes) if lane is None else (lane,):
        high = None  # a safe high-water mark stays safe: reread only once the lane reaches it
        while True:
            result = run_pass(batch_size, lane=one, lanes=lanes, high=high, spacing=spacing)
            total += result.records
            if result.caught_up or timezone.now() > deadline:
                break
            high = None if result.last_id >= result.high else result.high
        # The lane's own projects' minutes only.
        fold_dirty_streaks(lane=one, lanes=lanes, unless_within=streak_settle)
    analyze_if_grown()  # once per call, and skipped while another lane's call analyses
    vacuum_if_churned()
    return total


# How long after the start of a lane's last pass that folded records the next one may start
# (PostgreSQL). Under sustained ingest the passes ran back to back, each folding what arrived
# during the one before: about a second of records. A pass costs in proportion to the rollup
# cells, runs and decisions it touches as much as to its records, and records up to half an
# hour late touch most of the last half hour's cells in any pass, however small, so the same
# records fold faster in fewer, larger passes (bench/soak.py measures the lag and the worker's
# time). Spaced, a pass folds at least this long's records and
# the worker leaves more of the cores to ingest and the pages; a record waits at most this long
# more (the lag goal is 5 s at p95). A backlog is not held back: its passes take
# longer than this. Only the workers' catch-up task spaces its passes (a test, a rebuild or a
# benchmark folds at once); SQLite's passes, small and one writer at a time, never.
PASS_SPACING_SECONDS = 2.0


def run_pass(
    batch_size: int,
    *,
    lane: int = 0,
    lanes: int | None = None,
    high: int | None = None,
    spacing: float = 0.0,
) -> PassResult:
    """One pass of one lane: its projects' records in the next window of ids. `high`, a safe
    high-water mark an earlier pass read, spares the ingest lock (see _safe_high_water).

    With `spacing`, the pass first waits until that long after the start of the lane's last
    pass that folded records (at most that long in all), unless another process already waits
    to: then it returns at once and folds nothing, since the waiter's pass, which starts later
    and reads the high-water mark then, folds every record this one would have
    (PassResult.caught_up)."""
    lanes = lanes or configured_lanes()
    if not 0 <= lane < lanes:
        raise ValueError(f"lane {lane} of {lanes}")
    waited = 0.0
    while True:
        with transaction.atomic():
            watermark = lock_watermark(lane, lanes)
            if watermark is not None:
                wait = min(_spacing_left(watermark, spacing), spacing - waited)
                if wait <= 0:
                    return fold_lane_pass(watermark, lane, lanes, batch_size, high)
        if watermark is None:
            _switch_lanes(lanes, batch_size)  # the lanes are of another count (or none yet)
            continue
        # Without the lane's lock: another process's pass may start meanwhile, and then this
        # one waits on for what arrives during it, but never past `spacing` in all (a clock
        # ahead of this one must not hold the lane back). The waiter's lock is held for the
        # sleep only, so it is free before the pass: a task that gets the lane's lock after the
        # pass waits for the next one instead of leaving records to it.
        with held_briefly("pg_try_advisory_xact_lock", PASS_WAITER_LOCK_CLASS, lane) as waiter:
            if not waiter:
                return PassResult(0, watermark.last_id, True, watermark.last_id)
            time.sleep(wait)
        waited += wait


def _spacing_left(watermark: Watermark, spacing: float) -> float:
    """Seconds until `spacing` after the start of the lane's last pass that folded records,
    at most `spacing`."""
    if (
        spacing <= 0
        or watermark.last_fold_at is None
        or not backend().features.concurrent_writes  # one writer: passes never overlap
    ):
        return 0.0
    since = (timezone.now() - watermark.last_fold_at).total_seconds()
    return min(spacing, spacing - since)


def fold_lane_pass(watermark: Watermark, lane: int, lanes: int, batch_size: int, high: int | None):
    """Fold the lane's next window into the rollups and move its (locked) watermark."""
    commit_without_flush()
    fresh = high is None or high <= watermark.last_id  # another process may have passed it
    if fresh:
        high = _safe_high_water()
    # A range of ids, not "the next N rows": the query stays a plain index range scan
    # whatever the planner thinks of a freshly loaded table. Gaps (ids a conflicting
    # insert used up, other lanes' records) only make a pass smaller; so a lane's window
    # is `lanes` times as wide, about batch_size records of its own.
    last_id = min(high, watermark.last_id + batch_size * lanes)
    started = watermark.last_pass_at = timezone.now()
    batch = Batch()
    count = 0
    with gc_paused():
        # Closed at once if folding fails: its read-ahead thread is done before the rollback.
        with closing(fetch_records(watermark.last_id, last_id, lane, lanes)) as chunks:
            for rows in chunks:
                count += len(rows)
                for row in rows:
                    batch.add(row)
        if count:
            batch.runs_folded_before = runs_folded_before(batch)
            merge_classifications(batch)
            # records.catchup.tool_funnel: tool decisions and their rollup rows
            hourly = tool_funnel.fold(batch)
            flag_repeated_notices(batch, watermark.last_id)
            merge_rollups(batch)
            if hourly is not None:
                merge_rollups(hourly)
            if batch.definition_hourly:  # the model calls' TOOL_DEFINITIONS rows, hours and days
                merge_rollups(tool_funnel.HourlyCells(batch.definition_hourly))
            merge_streaks(batch, last_id)
            # records.catchup.marker_fold: the releases' first records, one statement a pass
            mark_first_records(watermark.last_id, last_id, lane, lanes)
            merge_runs(batch)  # last: holds the run rows' locks for the shortest time
        # Freed while the collector is still paused: back on, its first collection would
        # otherwise walk every object the pass still held (none was ever collected young).
        del batch
    if not count and last_id < high:
        # A window without a record of the lane, below the safe high-water mark: ids nothing
        # holds (a rolled-back batch's, a conflicting insert's, records past retention) or
        # other lanes'. Nothing can arrive there any more, so the lane goes on from the next
        # record instead of walking a gap of millions of ids one window a pass.
        following = next_record_id(last_id, high)
        last_id = high if following is None else following - 1
    if last_id > watermark.last_id:
        _forget_folded_batches(last_id, lane, lanes)
    watermark.last_id = last_id
    if count:
        watermark.last_fold_at = started
    watermark.save(update_fields=["last_id", "last_pass_at", "last_fold_at"])
    return PassResult(count, last_id, fresh and last_id >= high, high)


def _forget_folded_batches(upto: int, lane: int, lanes: int) -> None:
    """Delete the lane's PendingBatch rows folded up to `upto`: what a project's freshness
    reads is then only what waits (records.metrics.freshness.project_freshness)."""
    folded = PendingBatch.objects.filter(last_id__lte=upto)
    if lanes > 1:
        folded = folded.alias(lane=Mod("project_id", lanes)).filter(lane=lane)
    folded.delete()


def ensure_lanes(lanes: int) -> None:
    """Make the catch-up's lanes `lanes` of them (the first pass's job, or a switch's), for work
    that holds a lane's row as a pass does (records.catchup.reprice) before any pass ran."""
    _switch_lanes(lanes, default_batch())


def _switch_lanes(lanes: int, batch_size: int) -> None:
    """Make the lanes `lanes` of them, without losing or double-counting a record.

    A record is folded when its id is at most its lane's watermark, so lanes of one count
    cannot simply be renamed into lanes of another: project p's records up to lane_old(p)'s
    mark are folded, and the new lane of p has no way to know which. So the switch happens at a
    point every old lane has reached: the old lanes behind the highest watermark are first
    folded up to it (their own passes, capped there; other workers' passes may help meanwhile),
    then, in one transaction that holds every old lane's row, the old rows go and the new
    lanes start from that one mark. Lane rows of one count only ever exist at a time.

    Workers disagreeing on the count (a rolling restart) switch it back and forth until they
    agree; each switch is as safe as this one, only wasted work.
    """
    while True:
        with transaction.atomic():
            with connection.cursor() as cursor:  # SQLite: the write transaction serialises
                backend().lock_transaction(cursor, LANE_SWITCH_LOCK_KEY)
            # Waits for the passes in flight, which hold their lane's row.
            rows = list(lane_watermarks().select_for_update().order_by("name"))
            counts = {parse_lane_name(row.name)[1] for row in rows}
            if lanes in counts:
                if len(rows) != lanes:  # never by this code: someone deleted a lane's row
                    raise RuntimeError(f"{lanes} catch-up lanes, {len(rows)} watermarks")
                return  # another process switched first
            if len(counts) > 1:
                raise RuntimeError(f"watermarks of several lane counts: {sorted(counts)}")
            top = max((row.last_id for row in rows), default=0)
            behind = [row.name for row in rows if row.last_id < top]
            if not behind:
                passed = [row.last_pass_at for row in rows if row.last_pass_at]
                lane_watermarks().delete()
                Watermark.objects.bulk_create(
                    Watermark(name=lane_name(lane, lanes), last_id=top,
                              last_pass_at=max(passed, default=None))
                    for lane in range(lanes)
                )  # fmt: skip
                log.info("catch-up lanes: %s from %s on, at record id %s", lanes, counts, top)
                return
        for name in behind:
            old_lane, old_lanes = parse_lane_name(name)
            while True:
                with transaction.atomic():
                    watermark = Watermark.objects.select_for_update().filter(name=name).first()
                    if watermark is None or watermark.last_id >= top:
                        break  # switched meanwhile, or there
                    fold_lane_pass(watermark, old_lane, old_lanes, batch_size, top)


def _safe_high_water() -> int:
    """The highest record id below which every record is committed.

    PostgreSQL assigns ids when a row is inserted, so a batch still in flight can hold ids below
    ones already committed. Ingest holds INGEST_LOCK_KEY shared for its transaction; taking it
    exclusively here waits for those in flight and holds new ones back for one max(id) read
    (in a savepoint of the pass's transaction, released at once: records.store.locks).
    SQLite runs one writer at a time, and this transaction is it.
    """
    return backend().committed_high_water(Record._meta.db_table, INGEST_LOCK_KEY)
