"""The contract-broken streaks of the catch-up: minute segments from a pass's verdicts, the
dirty minutes recomputed from their parse errors, folded into hours, days and the streak."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models.functions import Mod
from django.utils import timezone

from records.catchup.batch import Batch
from records.catchup.lanes import configured_lanes, lane_name, lock_watermark, streaks_folded_name
from records.catchup.reads import CHUNK
from records.catchup.sql_helpers import commit_without_flush, db_time, on_one_core, parse_time
from records.contract import streak_segments
from records.contract.buckets import minute_of, truncate
from records.contract.rollup_keys import (
    VERDICT,
)
from records.models import (
    Grain,
    Record,
    Streak,
    StreakSegment,
    Watermark,
)
from records.store.backends import backend

# How often the workers' catch-up recomputes dirty streak minutes (fold_dirty_streaks) at most.
# A minute is dirty once a verdict arrives that sorts inside it, and recomputing it reads all of
# its parse errors again (and probes the verdicts around each: SEGMENTS_SQL). Records that
# arrive up to half an hour late dirty every minute of that half hour in every pass, so
# recomputing after each catch-up call (one every second or two under load) read the last half
# hour's verdicts again and again, a large share of the worker's time in bench/soak.py; waiting
# longer than this bought no clear gain there. Counts,
# rates and latencies are not held back by it; a streak misses its late verdicts for this long
# (plus one beat tick, or longer by STREAK_COST_SHARE), and the streaks API says since when
# (`streak_segments.folded_at`, `streak_segments.dirty_minutes`).
STREAK_SETTLE_SECONDS = 10.0


# And at most this many times the last recompute's own duration after it ended, so that the
# recompute takes at most a fifth of the lane's time however many verdicts the late minutes
# hold (it reads every one of their parse errors: a backlog of late verdicts makes it long, and
# streaks then settle less often rather than the rollups falling behind).
STREAK_COST_SHARE = 4


def merge_streaks(batch: Batch, upto: int) -> None:
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
        total = streak_segments.fold(
            stored_segment(s)
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
    them, SEGMENTS_SQL), then the hours, days and streaks above; returns how many
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
        commit_without_flush()
        read = Watermark.objects.filter(name=lane_name(lane, lanes)).first()
        if read is None:
            return 0  # the lanes are switching: whichever lane then owns them folds them
        dirty = _lane_dirty_minutes(lane, lanes)
        if not dirty:
            return 0  # and the next dirty minute is folded at once
        minutes = dirty_segments(dirty, read.last_id)
        if lock_watermark(lane, lanes) is None:
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


def _minute_segments(
    batch: Batch,
) -> tuple[dict[tuple, streak_segments.Segment], dict[tuple, tuple]]:
    """The minutes this batch's verdicts extend at their end, combined; and the late ones, each
    with its end after this batch: the later of the stored end and the batch's last verdict."""
    keys = list(batch.verdicts)
    stored = _load_segments(Grain.MINUTE, keys)
    out: dict[tuple, streak_segments.Segment] = {}
    late = {}
    for key, verdicts in batch.verdicts.items():
        verdicts.sort(key=lambda v: (v[1], v[2]))
        before, dirty = stored.get(key, (streak_segments.EMPTY, False))
        last = (verdicts[-1][1], verdicts[-1][2])
        if not dirty and (before.last_ts is None or (verdicts[0][1], verdicts[0][2]) > before.end):
            out[key] = streak_segments.combine(before, streak_segments.of_verdicts(verdicts))
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
            [(True, upto, db_time(ts), key, p, m, Grain.MINUTE, db_time(b))
             for (p, m, b), (ts, key) in late.items()],
        )  # fmt: skip


def dirty_segments(ends: dict[tuple, tuple], last_id: int) -> dict[tuple, streak_segments.Segment]:
    """The segments of these (project, model, minute) keys recomputed from their verdicts
    (folded in: id <= last_id); `ends` holds each one's stored end (_lane_dirty_minutes).

    One query per project over the spans their minutes make (adjacent minutes joined, so a late
    minute from days ago does not read the days in between). PostgreSQL computes the segments
    itself (_dirty_segments_in_sql); SQLite's verdicts come in (ts, key) order and streamed:
    each minute is folded as soon as the next begins, so the worker holds one minute's verdicts
    at a time, not a shuffled backlog's.
    """
    if backend().features.streak_segments_in_sql:
        return _dirty_segments_in_sql(ends, last_id)
    out = {key: streak_segments.of_verdicts(()) for key in ends}
    pending: dict[tuple, list] = defaultdict(list)

    def fold_pending() -> None:
        for key, verdicts in pending.items():
            out[key] = streak_segments.of_verdicts(verdicts)
        pending.clear()

    for project, mine in _keys_by_project(ends).items():
        spans = minute_spans(sorted({b for _, b in mine}))
        sql, params = verdicts_query(project, {m for m, _ in mine}, spans, last_id)
        current = None
        with connection.chunked_cursor() as cursor:
            backend().fast_timestamps(cursor)
            cursor.execute(sql, params)
            while rows := cursor.fetchmany(CHUNK):
                for model, ts, record_key, outcome in rows:
                    ts = parse_time(ts)  # SQLite hands timestamps over as text
                    minute = minute_of(ts)
                    if minute != current:  # every verdict of the minutes before is in
                        fold_pending()
                        current = minute
                    key = (project, model, minute)
                    if key in ends:
                        pending[key].append((outcome, ts, record_key))
        fold_pending()
    return out


# records.contract.streak_segments.of_verdicts of each (model, minute) of `keys`, computed by
# PostgreSQL from the minute's parse errors alone, each probing the verdicts around it, rather than
# from every verdict of the minute: a minute holds thousands of rulings and few parse errors, and
# under half an hour of late verdicts every minute of it is recomputed.
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


_RULING = f"r.outcome IN {tuple(sorted(streak_segments.RULED))}"


SEGMENTS_SQL = f"""
WITH keys AS MATERIALIZED (
    SELECT * FROM unnest(%(models)s::text[], %(minutes)s::timestamptz[]) AS k(model, minute)
), broken AS MATERIALIZED (
    SELECT k.model, k.minute, b.ts, b.record_key
    FROM keys k CROSS JOIN LATERAL (
        SELECT ts, record_key COLLATE "C" AS record_key FROM {Record._meta.db_table} r
        WHERE r.project_id = %(project)s AND r.kind = '{VERDICT}'
          AND r.outcome = '{streak_segments.BROKEN}' AND r.model = k.model
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


def _dirty_segments_in_sql(
    ends: dict[tuple, tuple], last_id: int
) -> dict[tuple, streak_segments.Segment]:
    """dirty_segments on PostgreSQL: each minute's segment computed by the server from its
    parse errors and the stored end (SEGMENTS_SQL), one query per project. Before, the server
    computed it over every verdict of the minute, and a recompute under half an hour of late
    verdicts read millions of them (bench/streak_segments.py measures the recompute)."""
    out = {key: streak_segments.EMPTY for key in ends}
    with connection.cursor() as cursor:
        on_one_core(cursor)
        backend().fast_timestamps(cursor)
        for project, mine in _keys_by_project(ends).items():
            cursor.execute(
                SEGMENTS_SQL,
                {"project": project, "last_id": last_id,
                 "models": [m for m, _ in mine], "minutes": [b for _, b in mine]},
            )  # fmt: skip
            for model, minute, has_verdict, *fields in cursor.fetchall():
                key = (project, model, minute)
                if has_verdict and ends[key][0] is not None:
                    out[key] = streak_segments.Segment(*fields, *ends[key])
    return out


def _keys_by_project(keys) -> dict[int, list[tuple[str, datetime]]]:
    """{project: its (model, bucket) pairs} of (project, model, bucket) keys: the reads of
    segments and verdicts take one query per project."""
    out: dict[int, list[tuple[str, datetime]]] = defaultdict(list)
    for project, model, bucket in keys:
        out[project].append((model, bucket))
    return out


def verdicts_query(project: int, models, spans, last_id: int) -> tuple[str, list]:
    """The verdicts of these models in these [start, end) spans, folded in (id <= last_id), in
    (ts, record key) order (SQLite's recompute walks them: dirty_segments).

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
    # Record keys in code point order, as Python compares them (streak_segments.of_verdicts),
    # whatever the database's collation.
    sql += f" ORDER BY ts, record_key{backend().codepoint_collation}"
    models = sorted(models)
    params = []
    for start, end in spans:
        params += [project, *models, last_id, db_time(start), db_time(end)]
    return sql, params


def minute_spans(minutes: list[datetime], most: int = 50) -> list[tuple[datetime, datetime]]:
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


_SEGMENT_FIELDS = ("model", "bucket", *streak_segments.FIELDS)


def _fold_children(
    child: str, parent: str, keys: set[tuple]
) -> dict[tuple, streak_segments.Segment]:
    """Each parent bucket's segment: the fold of its children, read in one query per project."""
    children: dict[tuple, list[streak_segments.Segment]] = defaultdict(list)
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
                children[key].append(streak_segments.Segment(*fields))
    return {key: streak_segments.fold(children[key]) for key in keys}


def _load_segments(
    grain: str, keys: list[tuple]
) -> dict[tuple, tuple[streak_segments.Segment, bool]]:
    """The stored segments of these keys, each with its dirty flag."""
    out = {}
    wanted = set(keys)
    for project, mine in _keys_by_project(keys).items():
        models, buckets = {m for m, _ in mine}, {b for _, b in mine}
        for s in StreakSegment.objects.filter(project_id=project, grain=grain, model__in=models,
                                              bucket__in=buckets):  # fmt: skip
            if (project, s.model, s.bucket) in wanted:
                out[(project, s.model, s.bucket)] = (stored_segment(s), s.dirty)
    return out


def _save_segments(grain: str, segments: dict[tuple, streak_segments.Segment]) -> None:
    StreakSegment.objects.bulk_create(
        [
            StreakSegment(project_id=project, model=model, grain=grain, bucket=bucket, dirty=False,
                          **{name: getattr(seg, name) for name in streak_segments.FIELDS})
            for (project, model, bucket), seg in segments.items()
        ],
        update_conflicts=True,
        unique_fields=["project", "model", "grain", "bucket"],
        update_fields=[*streak_segments.FIELDS, "dirty"],
        batch_size=1000,
    )  # fmt: skip


def stored_segment(s: StreakSegment) -> streak_segments.Segment:
    return streak_segments.Segment(*(getattr(s, name) for name in streak_segments.FIELDS))
