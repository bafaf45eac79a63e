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
(json_add, records.sqlfunctions), latency sketches merged by the pass (_merged_sketches). Late
records simply land in their own bucket; a late verdict recomputes only its own minute's streak
segment (records.streaks).
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import orjson
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Q
from django.db.models.functions import Mod
from django.utils import timezone

from records import keys, streaks, tools
from records.buckets import BUCKET_MEMO, bucket_of, minute_of, truncate
from records.derive import NOTICE_REPEATED, ONCE_PER_RUN_NOTICES
from records.keys import (
    CLASSIFICATION,
    NOTICE,
    OUTCOME,
    PICK,
    PICK_LATENCY,
    PICKS,
    RETRACTING_KINDS,
    RUN_LAST,
    TURN,
    VERDICT,
    VIOLATION,
)
from records.locks import INGEST_LOCK_KEY, LANE_SWITCH_LOCK_KEY, PASS_WAITER_LOCK_CLASS
from records.models import (
    Classification,
    Grain,
    PendingBatch,
    Record,
    Rollup,
    Run,
    Streak,
    StreakSegment,
    ToolDecision,
    Watermark,
)
from records.sketch import Sketch
from records.sqlfunctions import fast_timestamps

log = logging.getLogger(__name__)

WATERMARK = "rollups"  # one lane's watermark; lane i of n > 1 is "rollups:i/n" (lane_name)
GRAINS = (Grain.MINUTE, Grain.HOUR, Grain.DAY)
_FIELDS = (
    "id", "project_id", "kind", "agent", "model", "rollup_key", "ts", "latency_ms", "tokens_in",
    "tokens_out", "run_id", "record_key", "outcome", "named_models", "is_swap", "is_fallback",
    "is_error", "is_contract_break", "has_violation",
)  # fmt: skip
_FLAGS = ("swap", "fallback", "error", "contract_break", "violation")
# Read from the JSON only where present: a verdict's toolCallId (its classification), the
# violation codes of a flagged record, and for records.tools the iteration and JSON of picks and
# outcomes (their data) and turns (their derived fields).
_JSON_FIELDS = {
    "postgresql": (
        f"CASE WHEN kind = '{VERDICT}' THEN data->>'toolCallId' END",
        "CASE WHEN has_violation THEN derived->'violations' END",
        "iteration",
        f"CASE WHEN kind = '{TURN}' THEN derived::text "
        f"WHEN kind IN ('{PICK}', '{OUTCOME}') THEN data::text END",
    ),
    "sqlite": (
        f"CASE WHEN kind = '{VERDICT}' THEN json_extract(data, '$.toolCallId') END",
        "CASE WHEN has_violation THEN json_extract(derived, '$.violations') END",
        "iteration",
        f"CASE WHEN kind = '{TURN}' THEN derived "
        f"WHEN kind IN ('{PICK}', '{OUTCOME}') THEN data END",
    ),
}


@dataclass
class PassResult:
    records: int
    last_id: int
    caught_up: bool  # reached a high-water mark read in this pass
    high: int = 0  # the safe high-water mark the pass folded towards (reusable: it stays safe)


def configured_lanes() -> int:
    return settings.DECISIONBOARD["CATCHUP_LANES"]


def lane_of(project_id: int, lanes: int) -> int:
    """The lane of a project. Project ids are handed out in sequence, so the modulo deals the
    projects round robin; a hash would only shuffle them."""
    return project_id % lanes


def lane_name(lane: int, lanes: int) -> str:
    """The Watermark row of a lane; one lane keeps the name the single pass always had."""
    return WATERMARK if lanes == 1 else f"{WATERMARK}:{lane}/{lanes}"


def parse_lane_name(name: str) -> tuple[int, int]:
    """lane_name's inverse: (lane, lanes)."""
    if name == WATERMARK:
        return 0, 1
    lane, lanes = name.removeprefix(WATERMARK + ":").split("/")
    return int(lane), int(lanes)


def lane_watermarks():
    """The lanes' Watermark rows (of one lane count: see _switch_lanes), as a queryset."""
    return Watermark.objects.filter(Q(name=WATERMARK) | Q(name__startswith=WATERMARK + ":"))


def streaks_folded_name(lane: int, lanes: int) -> str:
    """The Watermark row whose last_pass_at is when the lane last folded its dirty streak
    minutes (fold_dirty_streaks); not a lane's watermark (lane_watermarks)."""
    return "streaks:" + lane_name(lane, lanes)


def folded_upto() -> int:
    """The id up to which every record is folded, whichever its lane: the lowest watermark."""
    return min(lane_watermarks().values_list("last_id", flat=True), default=0)


class _Cell:
    """One rollup row's sums. The latency sketch comes with the first latency: most kinds carry
    none, and a sketch for every cell of a pass cost time and memory for nothing."""

    __slots__ = ("count", "tokens_in", "tokens_out", "latency_sum", "sketch")

    def __init__(self) -> None:
        self.count = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.latency_sum = 0.0
        self.sketch: Sketch | None = None

    def add_latency(self, value: float) -> None:
        self.latency_sum += value
        if self.sketch is None:
            self.sketch = Sketch()
        self.sketch.add(value)

    def merge(self, other: _Cell) -> None:
        self.count += other.count
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.latency_sum += other.latency_sum
        if other.sketch is not None:
            if self.sketch is None:
                self.sketch = Sketch()
            self.sketch.merge(other.sketch)


@dataclass
class _RunDelta:
    kinds: Counter = field(default_factory=Counter)
    models: Counter = field(default_factory=Counter)
    flags: set = field(default_factory=set)
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    agent: str | None = None  # the greatest agent of the pass's records of the run


class _Batch:
    """Everything one pass adds, aggregated in memory before it touches the database."""

    def __init__(self) -> None:
        self.cells: dict[tuple, _Cell] = defaultdict(_Cell)  # minute grain
        self.runs: dict[tuple[int, str], _RunDelta] = defaultdict(_RunDelta)
        # (project, model, minute) -> [(verdict class, ts, record key)]
        self.verdicts: dict[tuple, list[tuple]] = defaultdict(list)
        # (project, run_id, toolCallId) -> [(attempt, ts, record key, seat model, agent)]
        self.attempts: dict[tuple, list[tuple]] = defaultdict(list)
        # (project, run_id, code) -> [(id, minute, agent, model)] of once-per-run notices
        self.once_notices: dict[tuple, list[tuple]] = defaultdict(list)
        # records.tools: the hourly tool cells, the picks' tool tallies, and (project, run_id,
        # iteration) -> [the earliest pick, the earliest outcome] of this pass's decisions
        self.tool_hourly: dict[tuple, _Cell] = defaultdict(_Cell)
        self.tool_tallies: dict[tuple, dict] = {}  # the picks' TOOL rows (records.tools)
        self.tool_sides: dict[tuple, list] = defaultdict(lambda: [None, None])
        # (project, run_id) of the runs that earlier passes folded records of: only those can
        # have stored state to read (_runs_folded_before)
        self.runs_folded_before: set[tuple[int, str]] = set()

    def add(self, row: tuple) -> None:
        (record_id, project, kind, agent, model, key, ts, latency, t_in, t_out, run_id,
         record_key, outcome, named, swap, fallback, error, contract_break, violation,
         tool_call_id, violations, iteration, body) = row  # fmt: skip
        # Per record, so written for speed: a pass calls this 100,000 times.
        minute = BUCKET_MEMO.get((ts.minute, ts.hour, ts.day, ts.month, ts.year)) or minute_of(ts)
        cell = self.cells[(project, minute, kind, agent or "", model or "", key)]
        cell.count += 1
        if t_in:
            cell.tokens_in += t_in
        if t_out:
            cell.tokens_out += t_out
        if latency is not None:
            if kind in PICKS:  # into its classifier model's PICK_LATENCY cell, not its own
                merged = self.cells[(project, minute, PICK_LATENCY, agent or "", model or "", "")]
                merged.count += 1
                merged.add_latency(latency)
            else:
                cell.add_latency(latency)
        run = self.runs[(project, run_id)]
        if run.first_ts is None:
            run.first_ts = run.last_ts = ts
        elif ts < run.first_ts:
            run.first_ts = ts
        elif ts > run.last_ts:
            run.last_ts = ts
        if agent and (run.agent is None or agent > run.agent):
            run.agent = agent
        run.kinds[kind] += 1
        if named:
            for name in _NAMED.get(named) or _models_named(model, named):
                run.models[name] += 1
        elif model:
            run.models[model] += 1
        if swap or fallback or error or contract_break or violation:
            flags = (swap, fallback, error, contract_break, violation)
            run.flags.update(name for name, on in zip(_FLAGS, flags, strict=True) if on)
        if violations:
            if isinstance(violations, str):  # SQLite hands JSON over as text
                violations = orjson.loads(violations)
            if kind == NOTICE:
                # A pass decides repeated notices itself (_flag_repeated_notices): a replay of
                # a notice it flagged before (a rebuild) must not count that code twice.
                violations = [code for code in violations if code != NOTICE_REPEATED]
            if violations:
                self.add_violations(project, minute, kind, agent, model, violations)
        if kind in tools.KINDS:
            tools.add(self, project, kind, agent, model, ts, run_id, record_key, iteration,
                      latency, error, body)  # fmt: skip
        elif kind == VERDICT and model:
            self.verdicts[(project, model, minute)].append((outcome, ts, record_key))
            fields = _DECODED.get((VERDICT, key)) or _decoded(VERDICT, key)
            if tool_call_id:
                self.attempts[(project, run_id, tool_call_id)].append(
                    (fields["attempt"], ts, record_key, fields["seat"], agent or "")
                )
        elif kind == NOTICE:
            code = (_DECODED.get((NOTICE, key)) or _decoded(NOTICE, key))["code"]
            if code in ONCE_PER_RUN_NOTICES:
                self.once_notices[(project, run_id, code)].append(
                    (record_id, minute, agent or "", model or "")
                )

    def add_violations(self, project, minute, kind, agent, model, codes) -> None:
        """One VIOLATION row per code, and one with code "" per violating record."""
        for code in ("", *codes):
            key = keys.encode(VIOLATION, {"kind": kind, "code": code})
            self.cells[(project, minute, VIOLATION, agent or "", model or "", key)].count += 1

    def add_classification(self, project, state: tuple | None, delta: int) -> None:
        """Add (or take back) a classification's one count in its first rung-0 minute."""
        if state is None or state[0] is None:
            return  # no rung-0 attempt yet: not counted anywhere
        first_ts, _, seat, agent, fell_back = state
        key = keys.encode(CLASSIFICATION, {"fell_back": int(fell_back)})
        minute = truncate(first_ts, Grain.MINUTE)
        self.cells[(project, minute, CLASSIFICATION, agent, seat, key)].count += delta

    def grains(self) -> dict[str, dict[tuple, _Cell]]:
        """The minute cells, and the same merged into hours and days."""
        out = {Grain.MINUTE: self.cells}
        for grain in (Grain.HOUR, Grain.DAY):
            merged: dict[tuple, _Cell] = defaultdict(_Cell)
            for (project, bucket, *rest), cell in self.cells.items():
                merged[(project, bucket_of(bucket, grain), *rest)].merge(cell)
            out[grain] = merged
        return out


# Records per pass at most (a lane's share of them with lanes). A pass costs in proportion to
# its records and to the rollup cells, runs and classifications they touch; a backlog in ts
# order touches few per record, but one spread over half an hour touches every minute's cells
# and every run in every pass, so fewer, larger passes catch a shuffled backlog up faster (less
# of a pass's state is read back by the next one; bench/catchup.py measures it). Rows are
# streamed (_fetch), so the worker's memory grows with the cells, runs and decisions, not the
# rows; what a process keeps after its pass is what the worker's memory bound judges
# (WORKER_MAX_MEMORY_PER_CHILD, workers.memory).
DEFAULT_BATCH = {"postgresql": 200_000, "sqlite": 5_000}


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
    batch_size = batch_size or DEFAULT_BATCH[connection.vendor]
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


# How often the workers' catch-up recomputes dirty streak minutes (fold_dirty_streaks) at most.
# A minute is dirty once a verdict arrives that sorts inside it, and recomputing it reads all of
# its parse errors again (and probes the verdicts around each: _SEGMENTS_SQL). Records that
# arrive up to half an hour late dirty every minute of that half hour in every pass, so
# recomputing after each catch-up call (one every second or two under load) read the last half
# hour's verdicts again and again, a large share of the worker's time in bench/soak.py; waiting
# longer than this bought no clear gain there. Counts,
# rates and latencies are not held back by it; a streak misses its late verdicts for this long
# (plus one beat tick, or longer by STREAK_COST_SHARE), and the streaks API says since when
# (`streaks.folded_at`, `streaks.dirty_minutes`).
STREAK_SETTLE_SECONDS = 10.0
# And at most this many times the last recompute's own duration after it ended, so that the
# recompute takes at most a fifth of the lane's time however many verdicts the late minutes
# hold (it reads every one of their parse errors: a backlog of late verdicts makes it long, and
# streaks then settle less often rather than the rollups falling behind).
STREAK_COST_SHARE = 4


# PostgreSQL plans from table statistics that autovacuum keeps, when it runs (it is off on some
# machines) and always some time after a burst. Without them a plan can turn an index lookup
# into a scan, so the catch-up analyses the tables it grows once it has folded in a fifth of
# the records the planner knows of, and at least ANALYZE_MIN_RECORDS, since it last did.
#
# It analyses what autovacuum would: the day partitions of the records that changed by a tenth
# since their last ANALYZE (or never had one), never the partitioned parent (whose ANALYZE
# samples every partition once more; autovacuum never analyses a parent either, and no query
# needs its statistics: bench/pages.py --no-analyze), and the tables the pass writes. The JSON
# bodies get no column statistics (records.partitions.NO_STATISTICS).
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
    if connection.vendor != "postgresql":
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
    if connection.vendor != "postgresql" or connection.in_atomic_block:
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
    waiting = False
    waited = 0.0
    try:
        while True:
            with transaction.atomic():
                watermark = _lock_watermark(lane, lanes)
                if watermark is not None:
                    wait = min(_spacing_left(watermark, spacing), spacing - waited)
                    if wait <= 0:
                        if waiting:
                            # Free before the pass: a task that gets the lane's lock after
                            # the pass must wait for the next one, not leave records to it.
                            _waiter_lock(lane, take=False)
                            waiting = False
                        return _fold(watermark, lane, lanes, batch_size, high)
            if watermark is None:
                _switch_lanes(lanes, batch_size)  # the lanes are of another count (or none yet)
                continue
            if not waiting:
                waiting = _waiter_lock(lane, take=True)
                if not waiting:
                    return PassResult(0, watermark.last_id, True, watermark.last_id)
            # Without the lane's lock: another process's pass may start meanwhile, and then this
            # one waits on for what arrives during it, but never past `spacing` in all (a clock
            # ahead of this one must not hold the lane back).
            time.sleep(wait)
            waited += wait
    finally:
        if waiting:
            try:
                _waiter_lock(lane, take=False)
            except DatabaseError:  # a lock left held would make every other task skip
                connection.close()  # the connection's locks end with it


def _spacing_left(watermark: Watermark, spacing: float) -> float:
    """Seconds until `spacing` after the start of the lane's last pass that folded records,
    at most `spacing`."""
    if spacing <= 0 or watermark.last_fold_at is None or connection.vendor != "postgresql":
        return 0.0
    since = (timezone.now() - watermark.last_fold_at).total_seconds()
    return min(spacing, spacing - since)


def _waiter_lock(lane: int, *, take: bool) -> bool:
    """Take (without waiting) or release the session lock of the lane's one spacing waiter."""
    with connection.cursor() as cursor:
        verb = "pg_try_advisory_lock" if take else "pg_advisory_unlock"
        cursor.execute(f"SELECT {verb}(%s, %s)", [PASS_WAITER_LOCK_CLASS, lane])
        return cursor.fetchone()[0]


def _fold(watermark: Watermark, lane: int, lanes: int, batch_size: int, high: int | None):
    """Fold the lane's next window into the rollups and move its (locked) watermark."""
    _commit_without_flush()
    fresh = high is None or high <= watermark.last_id  # another process may have passed it
    if fresh:
        high = _safe_high_water()
    # A range of ids, not "the next N rows": the query stays a plain index range scan
    # whatever the planner thinks of a freshly loaded table. Gaps (ids a conflicting
    # insert used up, other lanes' records) only make a pass smaller; so a lane's window
    # is `lanes` times as wide, about batch_size records of its own.
    last_id = min(high, watermark.last_id + batch_size * lanes)
    started = watermark.last_pass_at = timezone.now()
    batch = _Batch()
    count = 0
    with _collector_paused():
        # Closed at once if folding fails: its read-ahead thread is done before the rollback.
        with closing(_fetch(watermark.last_id, last_id, lane, lanes)) as chunks:
            for rows in chunks:
                count += len(rows)
                for row in rows:
                    batch.add(row)
        if count:
            batch.runs_folded_before = _runs_folded_before(batch)
            _merge_classifications(batch)
            tools.fold(batch)  # records.tools: tool decisions and their rollup rows
            _flag_repeated_notices(batch, watermark.last_id)
            _merge_rollups(batch)
            _merge_streaks(batch, last_id)
            _merge_runs(batch)  # last: holds the run rows' locks for the shortest time
        # Freed while the collector is still paused: back on, its first collection would
        # otherwise walk every object the pass still held (none was ever collected young).
        del batch
    if last_id > watermark.last_id:
        _forget_folded_batches(last_id, lane, lanes)
    watermark.last_id = last_id
    if count:
        watermark.last_fold_at = started
    watermark.save(update_fields=["last_id", "last_pass_at", "last_fold_at"])
    return PassResult(count, last_id, fresh and last_id >= high, high)


def _forget_folded_batches(upto: int, lane: int, lanes: int) -> None:
    """Delete the lane's PendingBatch rows folded up to `upto`: what a project's freshness
    reads is then only what waits (records.freshness.project_freshness)."""
    folded = PendingBatch.objects.filter(last_id__lte=upto)
    if lanes > 1:
        folded = folded.alias(lane=Mod("project_id", lanes)).filter(lane=lane)
    folded.delete()


def _commit_without_flush() -> None:
    """Let this transaction's commit return before its WAL reaches the disk (PostgreSQL).

    What the catch-up writes is derived from the records, which ingest commits durably, and a
    pass moves its watermark in the same transaction as its rollups: a crash that loses the
    last passes (a fraction of a second of them) loses their watermark too, and they are done
    again from the records. The wait for the flush was a few percent of every pass.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")


@contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused for a pass: a pass allocates millions of
    objects and keeps hundreds of thousands (its cells, runs and decisions), so the collector
    ran over them again and again, a real share of a shuffled backlog's catch-up
    (bench/catchup.py measures it).
    None of them is in a cycle: reference counting frees them as ever, and the collector, back
    on after the pass, finds whatever cycle a pass's queries left."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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
            if connection.vendor == "postgresql":  # SQLite: the write transaction serialises
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LANE_SWITCH_LOCK_KEY])
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
                    _fold(watermark, old_lane, old_lanes, batch_size, top)


_CHUNK = 10_000


def _fetch(after: int, upto: int, lane: int = 0, lanes: int = 1) -> Iterator[list[tuple]]:
    """The lane's records with after < id <= upto, as tuples of _FIELDS, in chunks (raw SQL:
    the ORM's per-value conversion cost as much as the rest of the pass). The lane is a filter
    on the primary key's range scan, not an index of its own: no plan to go wrong without
    statistics, nothing more for ingest to maintain (bench/scale.py measures the lanes).

    Read through a server-side cursor on PostgreSQL: a pass holds its aggregates, never all
    its rows, so a large pass (what a shuffled backlog needs, see DEFAULT_BATCH) costs the
    worker little memory.
    """
    columns = ", ".join((*_FIELDS, *_JSON_FIELDS[connection.vendor]))
    sql = f"SELECT {columns} FROM {Record._meta.db_table} WHERE id > %s AND id <= %s"
    params = [after, upto]
    if lanes > 1:
        sql += " AND project_id %% %s = %s"
        params += [lanes, lane]
    with connection.chunked_cursor() as cursor:
        fast_timestamps(cursor)
        cursor.execute(sql, params)
        if connection.vendor == "postgresql":
            yield from _read_ahead(cursor.cursor.fetchmany, _CHUNK)
        else:
            while rows := cursor.fetchmany(_CHUNK):
                yield _parse_ts(rows)


def _read_ahead(fetch, size: int) -> Iterator[list]:
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


def _parse_ts(rows: list[tuple]) -> list[tuple]:
    """SQLite hands timestamps over as text."""
    at = _FIELDS.index("ts")
    return [(*r[:at], _parse_time(r[at]), *r[at + 1 :]) for r in rows]


def _parse_time(value) -> datetime:
    return connection.ops.convert_datetimefield_value(value, None, connection)


def _models_named(model: str | None, named: str | None) -> list[str]:
    if named:
        if len(_NAMED) > 10_000:
            _NAMED.clear()
        models = _NAMED[named] = [keys.unescape(n) for n in named.strip("|").split("|")]
        return models
    return [model] if model else []


# The pass's memos of what it parses again and again: the few model lists records name, and
# the rollup keys of verdicts and notices (read only: shared by every record of the key).
_NAMED: dict[str, list[str]] = {}
_DECODED: dict[tuple[str, str], dict[str, str]] = {}


def _decoded(kind: str, key: str) -> dict[str, str]:
    """keys.decode(kind, key), memoised."""
    if len(_DECODED) > 10_000:
        _DECODED.clear()
    fields = _DECODED[(kind, key)] = keys.decode(kind, key)
    return fields


def _runs_folded_before(batch: _Batch) -> set[tuple[int, str]]:
    """The runs of the pass's classifications, tool decisions and once-per-run notices that
    earlier passes folded records of (their record_count, which only the pass moves, is above 0).

    A run new to the catch-up has no stored classification, tool decision or folded notice:
    ingest creates it with a count of 0, a rebuild sets it back to 0 as it drops that state, and
    retention deletes the state with the run or before it. So the reads of stored state ask for
    these runs only: most runs of a live pass are new (agents flush a run when it ends), and a
    pass's share of those reads was a tenth of it.
    """
    wanted = {key[:2] for key in batch.attempts}
    wanted.update(key[:2] for key in batch.tool_sides)
    wanted.update(key[:2] for key in batch.once_notices)
    if not wanted:
        return set()
    columns = ("project_id", "run_id")
    rows = rows_by_keys(_RUN, columns, ("bigint", "text"), (*columns, "record_count"),
                        list(wanted))  # fmt: skip
    return {(project, run_id) for project, run_id, folded in rows if folded}


def _merge_classifications(batch: _Batch) -> None:
    """Fold this pass's verdict attempts into their classifications (the ladder
    fallback rate) and move each changed classification's count in the CLASSIFICATION rollups.

    One read of the stored classifications per project, one upsert: never a read per record.
    """
    if not batch.attempts:
        return
    known = batch.runs_folded_before
    stored = _stored_classifications([key for key in batch.attempts if key[:2] in known])
    changed = []
    for key, attempts in batch.attempts.items():
        before = stored.get(key)
        first_ts, first_key, seat, agent, fell_back = before or (None, "", "", "", False)
        for attempt, ts, record_key, attempt_seat, attempt_agent in attempts:
            if attempt.endswith("1"):  # any attempt on rung 1, a re-ask too
                fell_back = True
            elif attempt == "rung0" and (
                first_ts is None or (ts, record_key) < (first_ts, first_key)
            ):
                first_ts, first_key, seat, agent = ts, record_key, attempt_seat, attempt_agent
        after = (first_ts, first_key, seat, agent, fell_back)
        if after == before:
            continue
        batch.add_classification(key[0], before, -1)
        batch.add_classification(key[0], after, +1)
        changed.append((*key, *after))
    _save_classifications(changed)


_CLASSIFICATION_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS classification_stage (
    project_id bigint, run_id text, tool_call_id text, first_ts timestamptz, first_key text,
    seat_model text, agent text, fell_back boolean
) ON COMMIT DELETE ROWS;
TRUNCATE classification_stage
"""


def _save_classifications(rows: list[tuple]) -> None:
    """Upsert (project, run_id, toolCallId, *_CLASSIFICATION_STATE) rows: staged with COPY on
    PostgreSQL (the ORM's bulk upsert was a fifth of a shuffled backlog's catch-up)."""
    if not rows:
        return
    columns = ("project_id", "run_id", "tool_call_id", *_CLASSIFICATION_STATE)
    updates = ", ".join(f"{name} = excluded.{name}" for name in _CLASSIFICATION_STATE)
    conflict = f"ON CONFLICT (project_id, run_id, tool_call_id) DO UPDATE SET {updates}"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_CLASSIFICATION_STAGE)
            names = ", ".join(columns)
            with cursor.cursor.copy(f"COPY classification_stage ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(
                f"INSERT INTO {_CLASSIFICATION} ({names}) SELECT {names} "
                f"FROM classification_stage {conflict}"
            )
        else:
            cursor.executemany(
                f"INSERT INTO {_CLASSIFICATION} ({', '.join(columns)}) "
                f"VALUES ({', '.join(['%s'] * len(columns))}) {conflict}",
                [(*row[:3], _db_time(row[3]) if row[3] else None, *row[4:]) for row in rows],
            )


_CLASSIFICATION_STATE = ("first_ts", "first_key", "seat_model", "agent", "fell_back")
_CLASSIFICATION = Classification._meta.db_table


def rows_by_keys(table: str, key_columns: tuple, key_types: tuple, columns: tuple,
                 keys: list[tuple]) -> list[tuple]:  # fmt: skip
    """The rows of `table` whose `key_columns` are one of `keys`, as tuples of `columns`: one
    query on PostgreSQL, and chunks of OR-ed keys on SQLite.

    On PostgreSQL the keys go as one JSON array of arrays, taken apart by the server: psycopg's
    dumping of one array parameter per column, value by value in Python, was most of the cost
    of these reads (an IN list per column would read every pairing of them). The server
    guesses a function's rows (100), so the join stays index lookups whatever the statistics.
    """
    select = ", ".join(f"t.{name}" for name in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            fields = ", ".join(f"(e->>{i})::{kind} AS k{i}" for i, kind in enumerate(key_types))
            on = " AND ".join(f"t.{name} = k.k{i}" for i, name in enumerate(key_columns))
            cursor.execute(
                f"SELECT {select} FROM {table} t JOIN (SELECT {fields} "
                f"FROM json_array_elements(%s::json) AS e) AS k ON {on}",
                [orjson.dumps(keys).decode()],
            )
            return cursor.fetchall()
        rows = []
        match = "(" + " AND ".join(f"t.{name} = %s" for name in key_columns) + ")"
        for start in range(0, len(keys), 300):
            chunk = keys[start : start + 300]
            cursor.execute(
                f"SELECT {select} FROM {table} t WHERE {' OR '.join([match] * len(chunk))}",
                [value for key in chunk for value in key],
            )
            rows += cursor.fetchall()
        return rows


def _stored_classifications(keys: list[tuple]) -> dict[tuple, tuple]:
    """{(project, run_id, toolCallId): its _CLASSIFICATION_STATE} of the stored ones."""
    out: dict[tuple, tuple] = {}
    if not keys:
        return out
    key_columns = ("project_id", "run_id", "tool_call_id")
    rows = rows_by_keys(_CLASSIFICATION, key_columns, ("bigint", "text", "text"),
                        (*key_columns, *_CLASSIFICATION_STATE), keys)  # fmt: skip
    for project, run_id, call_id, first_ts, *state in rows:
        if first_ts is not None and connection.vendor != "postgresql":  # SQLite: text
            first_ts = connection.ops.convert_datetimefield_value(first_ts, None, connection)
        out[(project, run_id, call_id)] = (first_ts, *state)
    return out


def _flag_repeated_notices(batch: _Batch, folded_upto: int) -> None:
    """A once-per-run notice seen again in its run is a violation: every such
    notice after the run's first, in arrival (id) order, is flagged and counted.

    One read per project of the runs' notices already folded in (ids up to `folded_upto`).
    """
    if not batch.once_notices:
        return
    seen: Counter = Counter()
    wanted: dict[int, set] = defaultdict(set)
    for project, run_id, _ in batch.once_notices:
        if (project, run_id) in batch.runs_folded_before:  # others have no notice folded in
            wanted[project].add(run_id)
    for project, run_ids in wanted.items():
        rows = Record.objects.filter(
            project_id=project, run_id__in=sorted(run_ids), kind=NOTICE, id__lte=folded_upto
        ).values_list("run_id", "rollup_key")
        for run_id, key in rows.iterator(chunk_size=10_000):
            seen[(project, run_id, keys.decode(NOTICE, key)["code"])] += 1
    repeated: list[int] = []
    for key, notices in batch.once_notices.items():
        notices.sort()
        skip = 0 if seen[key] else 1  # the run's first notice of the code is no violation
        for record_id, minute, agent, model in notices[skip:]:
            repeated.append(record_id)
            batch.add_violations(key[0], minute, NOTICE, agent, model, [NOTICE_REPEATED])
            batch.runs[(key[0], key[1])].flags.add("violation")
    if repeated:
        flagged = list(Record.objects.filter(id__in=repeated).only("id", "derived"))
        for record in flagged:
            record.derived = {**record.derived, "violations": [NOTICE_REPEATED]}
            record.has_violation = True
        Record.objects.bulk_update(flagged, ["derived", "has_violation"], batch_size=1000)


def _lock_watermark(lane: int = 0, lanes: int = 1) -> Watermark | None:
    """The lane's watermark, locked; None when the lanes are of another count (or none yet).
    Row lock on PostgreSQL; on SQLite the IMMEDIATE transaction already serialises passes."""
    return Watermark.objects.select_for_update().filter(name=lane_name(lane, lanes)).first()


def _safe_high_water() -> int:
    """The highest record id below which every record is committed.

    PostgreSQL assigns ids when a row is inserted, so a batch still in flight can hold ids below
    ones already committed. Ingest holds INGEST_LOCK_KEY shared for its transaction; taking it
    exclusively here waits for those in flight and holds new ones back for one max(id) read.
    SQLite runs one writer at a time, and this transaction is it.
    """
    if connection.vendor != "postgresql":
        return Record.objects.aggregate(m=Max("id"))["m"] or 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [INGEST_LOCK_KEY])
        try:
            cursor.execute(f"SELECT coalesce(max(id), 0) FROM {Record._meta.db_table}")
            return cursor.fetchone()[0]
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [INGEST_LOCK_KEY])


_ROLLUP = Rollup._meta.db_table
_ROLLUP_COLUMNS = ("project_id, grain, bucket, kind, agent, model, key, count, tokens_in, "
                   "tokens_out, latency_sum, sketch")  # fmt: skip
_ROLLUP_ADD = f"""
ON CONFLICT (project_id, grain, bucket, kind, agent, model, key) DO UPDATE SET
    count = {_ROLLUP}.count + excluded.count,
    tokens_in = {_ROLLUP}.tokens_in + excluded.tokens_in,
    tokens_out = {_ROLLUP}.tokens_out + excluded.tokens_out,
    latency_sum = {_ROLLUP}.latency_sum + excluded.latency_sum,
"""
# Most kinds carry no latency: a cell without one keeps the stored sketch. On PostgreSQL the
# pass merged the stored sketch into its own (_merged_sketches); SQLite merges in the UPSERT.
_ROLLUP_CONFLICT = {
    "postgresql": _ROLLUP_ADD
    + f"""
    sketch = CASE WHEN excluded.sketch = '{{}}' THEN {_ROLLUP}.sketch ELSE excluded.sketch END
""",
    "sqlite": _ROLLUP_ADD
    + f"""
    sketch = CASE WHEN excluded.sketch = '{{}}' THEN {_ROLLUP}.sketch
                  ELSE json_add({_ROLLUP}.sketch, excluded.sketch) END
""",
}
_ROLLUP_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS rollup_stage (
    project_id bigint, grain text, bucket timestamptz, kind text, agent text, model text,
    key text, count bigint, tokens_in bigint, tokens_out bigint, latency_sum double precision,
    sketch jsonb
) ON COMMIT DELETE ROWS;
TRUNCATE rollup_stage
"""


def _merge_rollups(batch: _Batch) -> None:
    """Add the batch's cells to the rollups, one UPSERT: counts and sums added by it, and the
    latency sketches merged before it (_merged_sketches)."""
    _write_rollups(batch.grains())


def _write_rollups(grains: dict[str, dict[tuple, _Cell]]) -> None:
    """Add cells of every grain, {grain: {(project, bucket, kind, agent, model, key): cell}}."""
    sketches = _merged_sketches(grains)
    rows = []
    for grain, cells in grains.items():
        for (project, bucket, kind, agent, model, key), cell in cells.items():
            sketch = sketches.get((project, grain, bucket, kind, agent, model, key), "{}")
            rows.append((
                project, grain, bucket, kind, agent, model, key, cell.count, cell.tokens_in,
                cell.tokens_out, cell.latency_sum, sketch,
            ))  # fmt: skip
    conflict = _ROLLUP_CONFLICT[connection.vendor]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_ROLLUP_STAGE)
            with cursor.cursor.copy(f"COPY rollup_stage ({_ROLLUP_COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(
                f"INSERT INTO {_ROLLUP} ({_ROLLUP_COLUMNS}) SELECT {_ROLLUP_COLUMNS} "
                f"FROM rollup_stage {conflict}"
            )
        else:
            placeholders = ", ".join(["%s"] * 12)
            cursor.executemany(
                f"INSERT INTO {_ROLLUP} ({_ROLLUP_COLUMNS}) VALUES ({placeholders}) {conflict}",
                [(*row[:2], _db_time(row[2]), *row[3:]) for row in rows],
            )
        # A classification (or tool decision) that moved took its count back from a cell: a
        # cell left at zero is no rollup at all (and would differ from a pass that never saw
        # it there).
        emptied = [row for row in rows if row[3] in RETRACTING_KINDS and row[7] < 0]
        if emptied:
            cursor.executemany(
                f"DELETE FROM {_ROLLUP} WHERE project_id = %s AND grain = %s AND bucket = %s "
                "AND kind = %s AND agent = %s AND model = %s AND key = %s AND count = 0",
                [(*row[:2], _db_time(row[2]), *row[3:7]) for row in emptied],
            )


_ROLLUP_KEY = ("project_id", "grain", "bucket", "kind", "agent", "model", "key")
_ROLLUP_KEY_TYPES = ("bigint", "text", "timestamptz", "text", "text", "text", "text")


def _merged_sketches(grains: dict[str, dict[tuple, _Cell]]) -> dict[tuple, str]:
    """{(project, grain, bucket, kind, agent, model, key): sketch JSON} of the cells that hold
    latencies: on PostgreSQL with the stored sketch of the row merged in, read in one query.

    Merging two sketches in SQL (json_add) is slow, most of a pass's UPSERT once its cells
    are already stored (a shuffled backlog, a live stream: bench/catchup.py); here it is
    cheap. Reading first is safe because nothing else writes a project's rollups while its
    lane's pass holds the lane (ingest never does). SQLite, one writer at a time and small,
    keeps the merge in the UPSERT.
    """
    out = {}
    for grain, cells in grains.items():
        for (project, bucket, *rest), cell in cells.items():
            if cell.sketch is not None and (cell.sketch.bins or cell.sketch.zero):
                out[(project, grain, bucket, *rest)] = cell.sketch.to_json()
    if out and connection.vendor == "postgresql":
        rows = rows_by_keys(_ROLLUP, _ROLLUP_KEY, _ROLLUP_KEY_TYPES, (*_ROLLUP_KEY, "sketch"),
                            list(out))  # fmt: skip
        for *key, stored in rows:
            if isinstance(stored, str):  # (Django has psycopg hand JSON over as text)
                stored = orjson.loads(stored)
            sketch = out[tuple(key)]
            for name, count in stored.items():
                sketch[name] = sketch.get(name, 0) + count
    return {key: orjson.dumps(sketch, option=orjson.OPT_SORT_KEYS).decode()
            for key, sketch in out.items()}  # fmt: skip


_RUN = Run._meta.db_table
_RUN_SET = """
    record_count = r.record_count + v.n,
    first_ts = CASE WHEN r.first_ts <= v.first_ts THEN r.first_ts ELSE v.first_ts END,
    last_ts = CASE WHEN r.last_ts >= v.last_ts THEN r.last_ts ELSE v.last_ts END,
    agent = CASE WHEN v.agent IS NOT NULL AND (r.agent IS NULL OR v.agent > r.agent)
                 THEN v.agent ELSE r.agent END,
    kind_counts = json_add(r.kind_counts, v.kinds),
    models_seen = json_add(r.models_seen, v.models),
    has_swap = r.has_swap OR v.swap,
    has_fallback = r.has_fallback OR v.fallback,
    has_error = r.has_error OR v.error,
    has_contract_break = r.has_contract_break OR v.contract_break,
    has_violation = r.has_violation OR v.violation
"""
_RUN_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS run_stage (
    project_id bigint, run_id text, n bigint, first_ts timestamptz, last_ts timestamptz,
    agent text, kinds jsonb, models jsonb, swap boolean, fallback boolean, error boolean,
    contract_break boolean, violation boolean
) ON COMMIT DELETE ROWS;
TRUNCATE run_stage
"""
_RUN_STAGE_COLUMNS = (
    "project_id, run_id, n, first_ts, last_ts, agent, kinds, models, swap, fallback, error, "
    "contract_break, violation"
)


_RUN_UPDATE = f"""
WITH before AS (
    SELECT r.id, r.agent, r.record_count, r.last_ts FROM {_RUN} AS r JOIN run_stage AS v
    ON r.project_id = v.project_id AND r.run_id = v.run_id
), updated AS (
    UPDATE {_RUN} AS r SET {_RUN_SET} FROM run_stage AS v
    WHERE r.project_id = v.project_id AND r.run_id = v.run_id
    RETURNING r.id, r.project_id, r.agent, r.last_ts
)
SELECT u.project_id, b.agent, u.agent, b.record_count, b.last_ts, u.last_ts
FROM updated AS u JOIN before AS b ON b.id = u.id
"""


def _merge_runs(batch: _Batch) -> None:
    """Widen each run's time range, count its records and fold in its summary; then move each
    run's RUN_LAST count to the buckets of its last record (_count_run_ends).

    A run's agent becomes the greatest agent of its records (ingest stores the greatest of its
    first batch's), so that a run that names several agents ends under the same one whatever
    order its records arrive in.

    Sorted by (project, run_id) so that passes lock runs in one order; ingest only ever
    inserts new runs (ON CONFLICT DO NOTHING), so it never waits on these row locks. On
    PostgreSQL the statement returns each run's agent, count and last_ts from before it (both
    CTEs read the snapshot the statement started from); SQLite reads them first.
    """
    rows = [
        (project, run_id, sum(delta.kinds.values()), delta.first_ts, delta.last_ts, delta.agent,
         orjson.dumps(delta.kinds).decode(), orjson.dumps(delta.models).decode(),
         *(flag in delta.flags for flag in _FLAGS))
        for (project, run_id), delta in sorted(batch.runs.items())
    ]  # fmt: skip
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_RUN_STAGE)
            with cursor.cursor.copy(f"COPY run_stage ({_RUN_STAGE_COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(_RUN_UPDATE)
            ends = cursor.fetchall()
        else:
            columns = ("project_id", "run_id")
            stored = rows_by_keys(_RUN, columns, ("bigint", "text"),
                                  (*columns, "agent", "record_count", "last_ts"),
                                  [row[:2] for row in rows])  # fmt: skip
            ends = []
            for project, run_id, agent, folded, last_ts in stored:  # SQLite: last_ts as text
                last_ts = connection.ops.convert_datetimefield_value(last_ts, None, connection)
                delta = batch.runs[(project, run_id)]
                now_agent = agent
                if delta.agent is not None and (agent is None or delta.agent > agent):
                    now_agent = delta.agent
                ends.append((project, agent, now_agent, folded, last_ts,
                             max(last_ts, delta.last_ts)))  # fmt: skip
            cursor.executemany(
                f"UPDATE {_RUN} AS r SET {_RUN_SET} FROM (SELECT %s AS project_id, %s AS run_id, "
                "%s AS n, %s AS first_ts, %s AS last_ts, %s AS agent, %s AS kinds, %s AS models, "
                "%s AS swap, %s AS fallback, %s AS error, %s AS contract_break, %s AS violation) "
                "AS v WHERE r.project_id = v.project_id AND r.run_id = v.run_id",
                [(*row[:3], _db_time(row[3]), _db_time(row[4]), *row[5:]) for row in rows],
            )
    _count_run_ends(ends)


def _count_run_ends(ends: list[tuple]) -> None:
    """Count each run once in the buckets of its last record, under its agent: a run folded for
    the first time (no record counted before) adds 1 there; a run whose last record moved to
    another bucket of a grain, or whose agent changed, takes its 1 from where it was. `ends`
    are (project, agent before, agent now, records counted before, last_ts before, now)."""
    grains: dict[str, dict[tuple, _Cell]] = {grain: defaultdict(_Cell) for grain in GRAINS}
    for project, agent_before, agent, counted, before, now in ends:
        for grain, cells in grains.items():
            bucket = truncate(now, grain)
            if counted:
                old = truncate(before, grain)
                if old == bucket and agent_before == agent:
                    continue
                cells[(project, old, RUN_LAST, agent_before or "", "", "")].count -= 1
            cells[(project, bucket, RUN_LAST, agent or "", "", "")].count += 1
    grains = {grain: {k: c for k, c in cells.items() if c.count} for grain, cells in grains.items()}
    if any(grains.values()):
        _write_rollups(grains)


def _merge_streaks(batch: _Batch, upto: int) -> None:
    """Minute segments from this batch's verdicts, then hours, days and the streak above them;
    `upto` is the watermark the pass moves to, which marks the minutes it makes late.

    A minute whose new verdicts all sort after what it holds is combined at once. A minute that
    a verdict falls *inside* (a late verdict, or a minute already waiting) is only marked dirty:
    fold_dirty_streaks recomputes it from its raw verdicts once, at the end of the catch-up.
    Recomputing it in every pass instead read a shuffled backlog's verdicts again and again.
    """
    if not batch.verdicts:
        return
    minutes, late = _minute_segments(batch)
    _save_segments(Grain.MINUTE, minutes)
    _mark_dirty(late, upto)
    _fold_upwards(minutes)


def _fold_upwards(minutes: Iterable[tuple]) -> None:
    """Hours and days above these (project, model, minute) keys, and the models' streaks."""
    minutes = list(minutes)
    if not minutes:
        return
    hours = {(p, m, truncate(b, Grain.HOUR)) for p, m, b in minutes}
    days = {(p, m, truncate(b, Grain.DAY)) for p, m, b in minutes}
    _save_segments(Grain.HOUR, _fold_children(Grain.MINUTE, Grain.HOUR, hours))
    _save_segments(Grain.DAY, _fold_children(Grain.HOUR, Grain.DAY, days))
    for project, model in sorted({(p, m) for p, m, _ in minutes}):
        total = streaks.fold(
            _segment(s)
            for s in StreakSegment.objects.filter(
                project_id=project, model=model, grain=Grain.DAY
            ).order_by("bucket")
        )
        Streak.objects.update_or_create(
            project_id=project, model=model,
            defaults={"current": total.current, "longest": total.longest,
                      "last_broken_at": total.last_broken_at},
        )  # fmt: skip


def fold_dirty_streaks(
    *, lane: int = 0, lanes: int | None = None, unless_within: float = 0.0
) -> int:
    """Recompute every dirty minute of the lane's projects from its raw verdicts (those folded
    in: id <= the lane's watermark; on PostgreSQL its parse errors and the verdicts around
    them, _SEGMENTS_SQL), then the hours, days and streaks above; returns how many
    minutes. Skipped (0) when the lane last did so less than `unless_within` seconds ago, or
    while another process recomputes the lane's minutes.

    The verdicts are read without the lane's watermark lock, so the lane's passes go on
    meanwhile: under half an hour of late verdicts a recompute reads all of their minutes,
    seconds of work, and passes that waited for it were most of the soak's rollup lag. The lock
    is taken only to store the result. A pass that marked a minute again meanwhile (dirty_upto
    past the watermark read here) brought it verdicts this recompute did not read: that minute
    stays dirty for the next one. Any other dirty minute has no verdict past that watermark (a
    pass only extends a minute that is not dirty), so what was computed is exact when stored,
    the end it keeps too (_mark_dirty moved it with every verdict folded in)."""
    lanes = lanes or configured_lanes()
    with transaction.atomic():
        folded = _lock_streaks_folded(lane, lanes)
        if folded is None:
            return 0  # another process is recomputing the lane's minutes
        started = time.monotonic()
        # The row keeps when the lane last recomputed (last_pass_at, at the end) and how long
        # that took in milliseconds (last_id).
        if unless_within and folded.last_pass_at:
            wait = max(unless_within, STREAK_COST_SHARE * folded.last_id / 1000)
            if timezone.now() - folded.last_pass_at < timedelta(seconds=wait):
                return 0
        _commit_without_flush()
        read = Watermark.objects.filter(name=lane_name(lane, lanes)).first()
        if read is None:
            return 0  # the lanes are switching: whichever lane then owns them folds them
        dirty = _lane_dirty_minutes(lane, lanes)
        if not dirty:
            return 0  # and the next dirty minute is folded at once
        minutes = _dirty_segments(dirty, read.last_id)
        if _lock_watermark(lane, lanes) is None:
            return 0  # switched meanwhile; the new lanes recompute every dirty minute
        for key in _lane_dirty_minutes(lane, lanes, after=read.last_id):
            minutes.pop(key, None)  # marked again since: stays dirty
        _save_segments(Grain.MINUTE, minutes)
        _fold_upwards(minutes)
        folded.last_pass_at = timezone.now()
        folded.last_id = round((time.monotonic() - started) * 1000)
        folded.save(update_fields=["last_pass_at", "last_id"])
    return len(minutes)


def _lock_streaks_folded(lane: int, lanes: int) -> Watermark | None:
    """The lane's streaks_folded_name row, locked for this transaction; None while another
    transaction holds it (PostgreSQL; SQLite's IMMEDIATE transaction serialises them)."""
    name = streaks_folded_name(lane, lanes)
    Watermark.objects.get_or_create(name=name)
    return Watermark.objects.select_for_update(skip_locked=True).filter(name=name).first()


def _lane_dirty_minutes(lane: int, lanes: int, *, after: int | None = None) -> dict[tuple, tuple]:
    """{(project, model, minute): its stored end (last_ts, last_key)} of the lane's dirty
    minutes; with `after`, only those a pass marked past that watermark (the dirty minutes'
    partial index)."""
    dirty = StreakSegment.objects.filter(grain=Grain.MINUTE, dirty=True)
    if after is not None:
        dirty = dirty.filter(dirty_upto__gt=after)
    if lanes > 1:
        dirty = dirty.alias(lane=Mod("project_id", lanes)).filter(lane=lane)
    rows = dirty.values_list("project_id", "model", "bucket", "last_ts", "last_key")
    return {(project, model, bucket): end for project, model, bucket, *end in rows}


def _minute_segments(batch: _Batch) -> tuple[dict[tuple, streaks.Segment], dict[tuple, tuple]]:
    """The minutes this batch's verdicts extend at their end, combined; and the late ones, each
    with its end after this batch: the later of the stored end and the batch's last verdict."""
    keys = list(batch.verdicts)
    stored = _load_segments(Grain.MINUTE, keys)
    out: dict[tuple, streaks.Segment] = {}
    late = {}
    for key, verdicts in batch.verdicts.items():
        verdicts.sort(key=lambda v: (v[1], v[2]))
        before, dirty = stored.get(key, (streaks.EMPTY, False))
        last = (verdicts[-1][1], verdicts[-1][2])
        if not dirty and (before.last_ts is None or (verdicts[0][1], verdicts[0][2]) > before.end):
            out[key] = streaks.combine(before, streaks.of_verdicts(verdicts))
        else:
            late[key] = last if before.last_ts is None else max(before.end, last)
    return out, late


def _mark_dirty(late: dict[tuple, tuple], upto: int) -> None:
    """Mark these (project, model, minute) segments dirty by the pass that moves the watermark
    to `upto` (each exists: a key is late only against a stored segment), and move each one's
    end, (last_ts, last_key), to the one given: a dirty minute's end stays that of every
    verdict folded into it, which its recompute keeps (_dirty_segments_in_sql)."""
    if not late:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {StreakSegment._meta.db_table} SET dirty = %s, dirty_upto = %s, "
            "last_ts = %s, last_key = %s "
            "WHERE project_id = %s AND model = %s AND grain = %s AND bucket = %s",
            [(True, upto, _db_time(ts), key, p, m, Grain.MINUTE, _db_time(b))
             for (p, m, b), (ts, key) in late.items()],
        )  # fmt: skip


def _dirty_segments(ends: dict[tuple, tuple], last_id: int) -> dict[tuple, streaks.Segment]:
    """The segments of these (project, model, minute) keys recomputed from their verdicts
    (folded in: id <= last_id); `ends` holds each one's stored end (_lane_dirty_minutes).

    One query per project over the spans their minutes make (adjacent minutes joined, so a late
    minute from days ago does not read the days in between). PostgreSQL computes the segments
    itself (_dirty_segments_in_sql); SQLite's verdicts come in (ts, key) order and streamed:
    each minute is folded as soon as the next begins, so the worker holds one minute's verdicts
    at a time, not a shuffled backlog's.
    """
    if connection.vendor == "postgresql":
        return _dirty_segments_in_sql(ends, last_id)
    out = {key: streaks.of_verdicts(()) for key in ends}
    pending: dict[tuple, list] = defaultdict(list)

    def fold_pending() -> None:
        for key, verdicts in pending.items():
            out[key] = streaks.of_verdicts(verdicts)
        pending.clear()

    for project, mine in _keys_by_project(ends).items():
        spans = _spans(sorted({b for _, b in mine}))
        sql, params = _verdicts_query(project, {m for m, _ in mine}, spans, last_id)
        current = None
        with connection.chunked_cursor() as cursor:
            fast_timestamps(cursor)
            cursor.execute(sql, params)
            while rows := cursor.fetchmany(_CHUNK):
                for model, ts, record_key, outcome in rows:
                    ts = _parse_time(ts)  # SQLite hands timestamps over as text
                    minute = minute_of(ts)
                    if minute != current:  # every verdict of the minutes before is in
                        fold_pending()
                        current = minute
                    key = (project, model, minute)
                    if key in ends:
                        pending[key].append((outcome, ts, record_key))
        fold_pending()
    return out


# records.streaks.of_verdicts of each (model, minute) of `keys`, computed by PostgreSQL from the
# minute's parse errors alone, each probing the verdicts around it, rather than from every verdict
# of the minute: a minute holds thousands of rulings and few parse errors, and under half an
# hour of late verdicts every minute of it is recomputed.
#
# In (ts, record key) order within a minute, the parse errors fall into runs that no ruling
# separates: `ruled_before` marks a parse error with a ruling between it and the parse error
# before it (or the minute's start), so the running count of those marks numbers the runs, run 0
# being the one before the minute's first ruling (the prefix); `open_end` marks the minute's last
# parse error when no ruling follows it (its run is the suffix). Each mark is one EXISTS over a
# range of the verdicts index record_verdict_model_ts that stops at the first ruling; the parse
# errors come from their own index, record_broken_ts. The minute's end, (last_ts, last_key), is
# not computed here: the stored segment's is kept (_mark_dirty moves it with each late verdict).
# `has_verdict` is false only for a minute whose verdicts are gone (its segment is then empty).
# The CTEs are MATERIALIZED and the parse errors' subquery has OFFSET 0 so that each probe runs
# once per row it is for, whatever the planner estimates without statistics.
_VERDICT_SQL = f"""
    SELECT FROM {Record._meta.db_table} r
    WHERE r.project_id = %(project)s AND r.kind = '{VERDICT}' AND r.model = {{model}}
      AND r.id <= %(last_id)s AND {{where}}"""
_RULING = f"r.outcome IN {tuple(sorted(streaks.RULED))}"
_SEGMENTS_SQL = f"""
WITH keys AS MATERIALIZED (
    SELECT * FROM unnest(%(models)s::text[], %(minutes)s::timestamptz[]) AS k(model, minute)
), broken AS MATERIALIZED (
    SELECT k.model, k.minute, b.ts, b.record_key
    FROM keys k CROSS JOIN LATERAL (
        SELECT ts, record_key COLLATE "C" AS record_key FROM {Record._meta.db_table} r
        WHERE r.project_id = %(project)s AND r.kind = '{VERDICT}'
          AND r.outcome = '{streaks.BROKEN}' AND r.model = k.model
          AND r.ts >= k.minute AND r.ts < k.minute + interval '1 minute' AND r.id <= %(last_id)s
        OFFSET 0
    ) AS b
), ordered AS MATERIALIZED (
    SELECT model, minute, ts, record_key,
           lag(ts) OVER w AS prev_ts, lag(record_key) OVER w AS prev_key,
           lead(ts) OVER w IS NULL AS is_last
    FROM broken WINDOW w AS (PARTITION BY model, minute ORDER BY ts, record_key)
), marked AS MATERIALIZED (
    SELECT o.model, o.minute, o.ts, o.record_key,
           EXISTS ({{ruled_before}}) AS ruled_before,
           o.is_last AND NOT EXISTS ({{ruled_after}}) AS open_end
    FROM ordered o
), runs AS MATERIALIZED (
    SELECT model, minute, run, count(*) AS broken, max(ts) AS broken_at,
           bool_or(open_end) AS open_end
    FROM (
        SELECT model, minute, ts, open_end,
               count(*) FILTER (WHERE ruled_before) OVER (
                   PARTITION BY model, minute ORDER BY ts, record_key ROWS UNBOUNDED PRECEDING
               ) AS run
        FROM marked
    ) AS numbered
    GROUP BY model, minute, run
), minutes AS MATERIALIZED (
    SELECT k.model, k.minute, EXISTS ({{any_verdict}}) AS has_verdict,
           EXISTS ({{any_ruling}}) AS has_ruling
    FROM keys k
)
SELECT k.model, k.minute, k.has_verdict, k.has_ruling,
       coalesce(sum(r.broken) FILTER (WHERE r.run = 0), 0)::int,
       coalesce(sum(r.broken) FILTER (WHERE r.open_end), 0)::int,
       coalesce(max(r.broken), 0)::int, max(r.broken_at)
FROM minutes k LEFT JOIN runs r ON r.model = k.model AND r.minute = k.minute
GROUP BY k.model, k.minute, k.has_verdict, k.has_ruling
""".format(
    ruled_before=_VERDICT_SQL.format(
        model="o.model",
        where=f"""{_RULING}
      AND r.ts >= coalesce(o.prev_ts, o.minute) AND r.ts <= o.ts
      AND (o.prev_ts IS NULL OR r.ts > o.prev_ts OR r.record_key COLLATE "C" > o.prev_key)
      AND (r.ts < o.ts OR r.record_key COLLATE "C" < o.record_key)""",
    ),
    ruled_after=_VERDICT_SQL.format(
        model="o.model",
        where=f"""{_RULING}
      AND r.ts >= o.ts AND r.ts < o.minute + interval '1 minute'
      AND (r.ts > o.ts OR r.record_key COLLATE "C" > o.record_key)""",
    ),
    any_verdict=_VERDICT_SQL.format(
        model="k.model",
        where="r.ts >= k.minute AND r.ts < k.minute + interval '1 minute'",
    ),
    any_ruling=_VERDICT_SQL.format(
        model="k.model",
        where=f"{_RULING} AND r.ts >= k.minute AND r.ts < k.minute + interval '1 minute'",
    ),
)  # fmt: skip


def on_one_core(cursor) -> None:
    """No parallel workers for the rest of this transaction's queries (PostgreSQL). Background
    work keeps to one core: as a parallel query (a Gather Merge of two workers) the streak
    recompute took both cores of a 2-core machine for seconds at a time while pages and ingest
    waited for them (bench/soak.py)."""
    cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")


def _dirty_segments_in_sql(ends: dict[tuple, tuple], last_id: int) -> dict[tuple, streaks.Segment]:
    """_dirty_segments on PostgreSQL: each minute's segment computed by the server from its
    parse errors and the stored end (_SEGMENTS_SQL), one query per project. Before, the server
    computed it over every verdict of the minute, and a recompute under half an hour of late
    verdicts read millions of them (bench/streaks.py measures the recompute)."""
    out = {key: streaks.EMPTY for key in ends}
    with connection.cursor() as cursor:
        on_one_core(cursor)
        fast_timestamps(cursor)
        for project, mine in _keys_by_project(ends).items():
            cursor.execute(
                _SEGMENTS_SQL,
                {"project": project, "last_id": last_id,
                 "models": [m for m, _ in mine], "minutes": [b for _, b in mine]},
            )  # fmt: skip
            for model, minute, has_verdict, *fields in cursor.fetchall():
                key = (project, model, minute)
                if has_verdict and ends[key][0] is not None:
                    out[key] = streaks.Segment(*fields, *ends[key])
    return out


def _keys_by_project(keys) -> dict[int, list[tuple[str, datetime]]]:
    """{project: its (model, bucket) pairs} of (project, model, bucket) keys: the reads of
    segments and verdicts take one query per project."""
    out: dict[int, list[tuple[str, datetime]]] = defaultdict(list)
    for project, model, bucket in keys:
        out[project].append((model, bucket))
    return out


def _verdicts_query(project: int, models, spans, last_id: int) -> tuple[str, list]:
    """The verdicts of these models in these [start, end) spans, folded in (id <= last_id), in
    (ts, record key) order (SQLite's recompute walks them: _dirty_segments).

    One branch a span, so that each is a range of the verdicts-only index
    record_verdict_model_ts whatever the planner knows: as one OR of the spans, PostgreSQL
    without statistics read all the project's verdicts of the day's partition and filtered the
    spans. The kind is a literal in the SQL (Django binds parameters on the client), which the
    partial index needs.
    """
    placeholders = ", ".join(["%s"] * len(models))
    branch = (
        f"SELECT model, ts, record_key, outcome FROM {Record._meta.db_table} "
        f"WHERE project_id = %s AND kind = '{VERDICT}' AND model IN ({placeholders}) "
        "AND id <= %s AND ts >= %s AND ts < %s"
    )
    sql = f"SELECT * FROM ({' UNION ALL '.join([branch] * len(spans))}) AS verdicts"
    sql += f" ORDER BY ts, record_key{_CODEPOINTS[connection.vendor]}"
    models = sorted(models)
    params = []
    for start, end in spans:
        params += [project, *models, last_id, _db_time(start), _db_time(end)]
    return sql, params


# Record keys in code point order, as Python compares them (streaks.of_verdicts): whatever the
# database's collation on PostgreSQL; SQLite's default (BINARY) already is.
_CODEPOINTS = {"postgresql": ' COLLATE "C"', "sqlite": ""}


def _spans(minutes: list[datetime], most: int = 50) -> list[tuple[datetime, datetime]]:
    """[start, end) spans covering the sorted `minutes`, adjacent ones joined; past `most`
    spans, the nearest are joined too (a bounded OR, reading a few minutes more)."""
    step = timedelta(minutes=1)
    spans = [[minutes[0], minutes[0] + step]]
    for minute in minutes[1:]:
        if minute <= spans[-1][1]:
            spans[-1][1] = minute + step
        else:
            spans.append([minute, minute + step])
    if len(spans) > most:  # close the smallest gaps, all in one go
        gaps = sorted(range(len(spans) - 1), key=lambda i: spans[i + 1][0] - spans[i][1])
        closed = set(gaps[: len(spans) - most])
        joined = [spans[0]]
        for i, span in enumerate(spans[1:]):
            if i in closed:
                joined[-1] = [joined[-1][0], span[1]]
            else:
                joined.append(span)
        spans = joined
    return [(start, end) for start, end in spans]


_SEGMENT_FIELDS = ("model", "bucket", *streaks.FIELDS)


def _fold_children(child: str, parent: str, keys: set[tuple]) -> dict[tuple, streaks.Segment]:
    """Each parent bucket's segment: the fold of its children, read in one query per project."""
    children: dict[tuple, list[streaks.Segment]] = defaultdict(list)
    span = timedelta(hours=1) if parent == Grain.HOUR else timedelta(days=1)
    for project, mine in _keys_by_project(keys).items():
        models = {m for m, _ in mine}
        buckets = [b for _, b in mine]
        rows = (
            StreakSegment.objects.filter(project_id=project, grain=child, model__in=models,
                                         bucket__gte=min(buckets), bucket__lt=max(buckets) + span)
            .order_by("bucket")
            .values_list(*_SEGMENT_FIELDS)
        )  # fmt: skip
        for model, bucket, *fields in rows.iterator(chunk_size=10_000):
            key = (project, model, truncate(bucket, parent))
            if key in keys:
                children[key].append(streaks.Segment(*fields))
    return {key: streaks.fold(children[key]) for key in keys}


def _load_segments(grain: str, keys: list[tuple]) -> dict[tuple, tuple[streaks.Segment, bool]]:
    """The stored segments of these keys, each with its dirty flag."""
    out = {}
    wanted = set(keys)
    for project, mine in _keys_by_project(keys).items():
        models, buckets = {m for m, _ in mine}, {b for _, b in mine}
        for s in StreakSegment.objects.filter(project_id=project, grain=grain, model__in=models,
                                              bucket__in=buckets):  # fmt: skip
            if (project, s.model, s.bucket) in wanted:
                out[(project, s.model, s.bucket)] = (_segment(s), s.dirty)
    return out


def _save_segments(grain: str, segments: dict[tuple, streaks.Segment]) -> None:
    StreakSegment.objects.bulk_create(
        [
            StreakSegment(project_id=project, model=model, grain=grain, bucket=bucket,
                          dirty=False, **{name: getattr(seg, name) for name in streaks.FIELDS})
            for (project, model, bucket), seg in segments.items()
        ],
        update_conflicts=True,
        unique_fields=["project", "model", "grain", "bucket"],
        update_fields=[*streaks.FIELDS, "dirty"],
        batch_size=1000,
    )  # fmt: skip


def _segment(s: StreakSegment) -> streaks.Segment:
    return streaks.Segment(*(getattr(s, name) for name in streaks.FIELDS))


def _db_time(value: datetime):
    return connection.ops.adapt_datetimefield_value(value)
