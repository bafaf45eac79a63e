"""The catch-up pass: fold newly committed records into rollups, run summaries and streaks.

Driven by a database watermark, not by messages: a pass reads the records with an id above the
watermark (up to a safe high-water mark, see `_safe_high_water`), folds them in, and advances the
watermark in the same transaction. A pass that dies half way leaves nothing behind, and a second
pass over the same range cannot happen, so any number of passes, interrupted or repeated, give
the rollups of one clean pass.

Writes never read what they add to: counts are added and sketches merged by the UPSERT itself
(json_add, records.sqlfunctions). Late records simply land in their own bucket; a late verdict
recomputes only its own minute's streak segment (records.streaks).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import orjson
from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from records import keys, streaks, tools
from records.derive import NOTICE_REPEATED, ONCE_PER_RUN_NOTICES
from records.keys import CLASSIFICATION, NOTICE, RETRACTING_KINDS, VERDICT, VIOLATION
from records.models import (
    Classification,
    Grain,
    Record,
    Rollup,
    Run,
    Streak,
    StreakSegment,
    ToolDecision,
    Watermark,
)
from records.sketch import Sketch
from records.store import INGEST_LOCK_KEY

log = logging.getLogger(__name__)

WATERMARK = "rollups"
GRAINS = (Grain.MINUTE, Grain.HOUR, Grain.DAY)
_FIELDS = (
    "id", "project_id", "kind", "agent", "model", "rollup_key", "ts", "latency_ms", "tokens_in",
    "tokens_out", "run_id", "record_key", "outcome", "named_models", "is_swap", "is_fallback",
    "is_error", "is_contract_break", "has_violation",
)  # fmt: skip
_FLAGS = ("swap", "fallback", "error", "contract_break", "violation")
# Read from the JSON only where present: a verdict's toolCallId (its classification) and the
# violation codes of a flagged record.
_JSON_FIELDS = {
    "postgresql": (
        f"CASE WHEN kind = '{VERDICT}' THEN data->>'toolCallId' END",
        "CASE WHEN has_violation THEN derived->'violations' END",
    ),
    "sqlite": (
        f"CASE WHEN kind = '{VERDICT}' THEN json_extract(data, '$.toolCallId') END",
        "CASE WHEN has_violation THEN json_extract(derived, '$.violations') END",
    ),
}


@dataclass
class PassResult:
    records: int
    last_id: int
    caught_up: bool


@dataclass
class _Cell:
    count: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_sum: float = 0.0
    sketch: Sketch = field(default_factory=Sketch)

    def merge(self, other: _Cell) -> None:
        self.count += other.count
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.latency_sum += other.latency_sum
        self.sketch.merge(other.sketch)


@dataclass
class _RunDelta:
    kinds: Counter = field(default_factory=Counter)
    models: Counter = field(default_factory=Counter)
    flags: set = field(default_factory=set)
    first_ts: datetime | None = None
    last_ts: datetime | None = None


def truncate(ts: datetime, grain: str) -> datetime:
    ts = ts.replace(second=0, microsecond=0)
    if grain == Grain.MINUTE:
        return ts
    ts = ts.replace(minute=0)
    return ts if grain == Grain.HOUR else ts.replace(hour=0)


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

    def add(self, row: tuple) -> None:
        (record_id, project, kind, agent, model, key, ts, latency, t_in, t_out, run_id,
         record_key, outcome, named, *flags, tool_call_id, violations) = row  # fmt: skip
        minute = truncate(ts, Grain.MINUTE)
        cell = self.cells[(project, minute, kind, agent or "", model or "", key)]
        cell.count += 1
        cell.tokens_in += t_in or 0
        cell.tokens_out += t_out or 0
        if latency is not None:
            cell.latency_sum += latency
            cell.sketch.add(latency)
        run = self.runs[(project, run_id)]
        run.first_ts = ts if run.first_ts is None else min(run.first_ts, ts)
        run.last_ts = ts if run.last_ts is None else max(run.last_ts, ts)
        run.kinds[kind] += 1
        for name in _models_named(model, named):
            run.models[name] += 1
        run.flags.update(name for name, on in zip(_FLAGS, flags, strict=True) if on)
        if violations:
            if isinstance(violations, str):  # SQLite hands JSON over as text
                violations = orjson.loads(violations)
            self.add_violations(project, minute, kind, agent, model, violations)
        if kind == VERDICT and model:
            self.verdicts[(project, model, minute)].append((outcome, ts, record_key))
            fields = keys.decode(VERDICT, key)
            if tool_call_id:
                self.attempts[(project, run_id, tool_call_id)].append(
                    (fields["attempt"], ts, record_key, fields["seat"], agent or "")
                )
        elif kind == NOTICE:
            code = keys.decode(NOTICE, key)["code"]
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
                merged[(project, truncate(bucket, grain), *rest)].merge(cell)
            out[grain] = merged
        return out


def catch_up(*, batch_size: int | None = None, max_seconds: float = 50.0) -> int:
    """Run passes until caught up (or out of time); returns how many records were folded in."""
    batch_size = batch_size or (20_000 if connection.vendor == "postgresql" else 5_000)
    deadline = timezone.now() + timedelta(seconds=max_seconds)
    total = 0
    while True:
        result = run_pass(batch_size)
        total += result.records
        if result.caught_up or timezone.now() > deadline:
            fold_dirty_streaks()
            analyze_if_grown()
            return total


# PostgreSQL plans from table statistics that autovacuum keeps, when it runs (it is off on some
# machines) and always some time after a burst. Without them a plan can turn an index lookup
# into a scan, so the catch-up analyses the tables it grows once it has folded in a fifth of
# the records the planner knows of, and at least ANALYZE_MIN_RECORDS, since it last did.
ANALYZE_MIN_RECORDS = 50_000
_ANALYZED = "analyzed"  # a Watermark row: how far the records were folded at the last ANALYZE


def analyze_if_grown(*, min_records: int = ANALYZE_MIN_RECORDS) -> bool:
    """ANALYZE the records, rollups, runs, classifications and streak segments if the records
    folded in grew enough since the last time; returns whether it did (PostgreSQL only)."""
    if connection.vendor != "postgresql":
        return False
    folded = Watermark.objects.filter(name=WATERMARK).values_list("last_id", flat=True).first() or 0
    mark, _ = Watermark.objects.get_or_create(name=_ANALYZED)
    tables = (Record, Rollup, Run, Classification, StreakSegment, ToolDecision)
    with connection.cursor() as cursor:
        # The records the planner knows of (-1 before any ANALYZE): grown by a fifth of that.
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [Record._meta.db_table])
        known = max(cursor.fetchone()[0], 0)
        if folded - mark.last_id < max(min_records, known / 5):
            return False
        cursor.execute("ANALYZE " + ", ".join(t._meta.db_table for t in tables))
    mark.last_id = folded
    mark.last_pass_at = timezone.now()
    mark.save(update_fields=["last_id", "last_pass_at"])
    log.info("analyzed the catch-up's tables at record id %s", folded)
    return True


def run_pass(batch_size: int) -> PassResult:
    with transaction.atomic():
        watermark = _lock_watermark()
        high = _safe_high_water()
        # A range of ids, not "the next N rows": the query stays a plain index range scan
        # whatever the planner thinks of a freshly loaded table. Gaps (ids a conflicting
        # insert used up) only make a pass smaller.
        last_id = min(high, watermark.last_id + batch_size)
        rows = _fetch(watermark.last_id, last_id)
        watermark.last_pass_at = timezone.now()
        if rows:
            batch = _Batch()
            for row in rows:
                batch.add(row)
            _merge_classifications(batch)
            tools.fold(batch, watermark.last_id, last_id)  # records.tools: tool funnel rows
            _flag_repeated_notices(batch, watermark.last_id)
            _merge_rollups(batch)
            _merge_streaks(batch)
            _merge_runs(batch)  # last: holds the run rows' locks for the shortest time
        watermark.last_id = last_id
        watermark.save(update_fields=["last_id", "last_pass_at"])
    return PassResult(len(rows), last_id, last_id >= high)


def _fetch(after: int, upto: int) -> list[tuple]:
    """The records with after < id <= upto, as tuples of _FIELDS (raw SQL: the ORM's per-value
    conversion cost as much as the rest of the pass)."""
    columns = ", ".join((*_FIELDS, *_JSON_FIELDS[connection.vendor]))
    sql = f"SELECT {columns} FROM {Record._meta.db_table} WHERE id > %s AND id <= %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [after, upto])
        rows = cursor.fetchall()
    if connection.vendor == "postgresql":
        return rows  # timestamptz arrives as an aware datetime
    ts_at = _FIELDS.index("ts")
    parse = connection.ops.convert_datetimefield_value
    return [(*r[:ts_at], parse(r[ts_at], None, connection), *r[ts_at + 1 :]) for r in rows]


def _models_named(model: str | None, named: str | None) -> list[str]:
    if named:
        return [keys.unescape(n) for n in named.strip("|").split("|")]
    return [model] if model else []


def _merge_classifications(batch: _Batch) -> None:
    """Fold this pass's verdict attempts into their classifications (DESIGN §4, ladder
    fallback rate) and move each changed classification's count in the CLASSIFICATION rollups.

    One read of the stored classifications per project, one upsert: never a read per record.
    """
    if not batch.attempts:
        return
    stored = _stored_classifications(list(batch.attempts))
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


def _stored_classifications(keys: list[tuple]) -> dict[tuple, tuple]:
    """{(project, run_id, toolCallId): its _CLASSIFICATION_STATE} of the stored ones, in one
    query (on PostgreSQL, the keys joined as arrays: an IN list of runs and one of calls read
    every pairing of the two)."""
    out: dict[tuple, tuple] = {}
    columns = ", ".join(f"c.{name}" for name in ("project_id", "run_id", "tool_call_id",
                                                  *_CLASSIFICATION_STATE))  # fmt: skip
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            projects, runs, calls = (list(column) for column in zip(*keys, strict=True))
            cursor.execute(
                f"SELECT {columns} FROM {_CLASSIFICATION} c JOIN unnest(%s::bigint[], "
                "%s::text[], %s::text[]) AS k(project_id, run_id, call_id) ON "
                "c.project_id = k.project_id AND c.run_id = k.run_id "
                "AND c.tool_call_id = k.call_id",
                [projects, runs, calls],
            )
            rows = cursor.fetchall()
        else:
            rows = []
            for start in range(0, len(keys), 300):
                chunk = keys[start : start + 300]
                where = " OR ".join(["(project_id = %s AND run_id = %s AND tool_call_id = %s)"]
                                    * len(chunk))  # fmt: skip
                cursor.execute(
                    f"SELECT {columns} FROM {_CLASSIFICATION} c WHERE {where}",
                    [value for key in chunk for value in key],
                )
                rows += cursor.fetchall()
    for project, run_id, call_id, first_ts, *state in rows:
        if first_ts is not None and connection.vendor != "postgresql":  # SQLite: text
            first_ts = connection.ops.convert_datetimefield_value(first_ts, None, connection)
        out[(project, run_id, call_id)] = (first_ts, *state)
    return out


def _flag_repeated_notices(batch: _Batch, folded_upto: int) -> None:
    """A once-per-run notice seen again in its run is a violation (DESIGN §3): every such
    notice after the run's first, in arrival (id) order, is flagged and counted.

    One read per project of the runs' notices already folded in (ids up to `folded_upto`).
    """
    if not batch.once_notices:
        return
    seen: Counter = Counter()
    wanted: dict[int, set] = defaultdict(set)
    for project, run_id, _ in batch.once_notices:
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


def _lock_watermark() -> Watermark:
    # Row lock on PostgreSQL; on SQLite the IMMEDIATE transaction already serialises passes.
    Watermark.objects.get_or_create(name=WATERMARK)
    return Watermark.objects.select_for_update().get(name=WATERMARK)


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
_ROLLUP_CONFLICT = f"""
ON CONFLICT (project_id, grain, bucket, kind, agent, model, key) DO UPDATE SET
    count = {_ROLLUP}.count + excluded.count,
    tokens_in = {_ROLLUP}.tokens_in + excluded.tokens_in,
    tokens_out = {_ROLLUP}.tokens_out + excluded.tokens_out,
    latency_sum = {_ROLLUP}.latency_sum + excluded.latency_sum,
    -- most kinds carry no latency: skip the merge when there is nothing to add
    sketch = CASE WHEN excluded.sketch = '{{}}' THEN {_ROLLUP}.sketch
                  ELSE json_add({_ROLLUP}.sketch, excluded.sketch) END
"""
_ROLLUP_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS rollup_stage (
    project_id bigint, grain text, bucket timestamptz, kind text, agent text, model text,
    key text, count bigint, tokens_in bigint, tokens_out bigint, latency_sum double precision,
    sketch jsonb
) ON COMMIT DELETE ROWS;
TRUNCATE rollup_stage
"""


def _merge_rollups(batch: _Batch) -> None:
    rows = []
    for grain, cells in batch.grains().items():
        for (project, bucket, kind, agent, model, key), cell in cells.items():
            rows.append((
                project, grain, bucket, kind, agent, model, key, cell.count, cell.tokens_in,
                cell.tokens_out, cell.latency_sum, orjson.dumps(cell.sketch.to_json()).decode(),
            ))  # fmt: skip
    # Nothing is read before writing: the UPSERT adds counts and merges sketches itself.
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_ROLLUP_STAGE)
            with cursor.cursor.copy(f"COPY rollup_stage ({_ROLLUP_COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(
                f"INSERT INTO {_ROLLUP} ({_ROLLUP_COLUMNS}) SELECT {_ROLLUP_COLUMNS} "
                f"FROM rollup_stage {_ROLLUP_CONFLICT}"
            )
        else:
            placeholders = ", ".join(["%s"] * 12)
            cursor.executemany(
                f"INSERT INTO {_ROLLUP} ({_ROLLUP_COLUMNS}) VALUES ({placeholders}) "
                f"{_ROLLUP_CONFLICT}",
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


_RUN = Run._meta.db_table
_RUN_SET = """
    record_count = r.record_count + v.n,
    first_ts = CASE WHEN r.first_ts <= v.first_ts THEN r.first_ts ELSE v.first_ts END,
    last_ts = CASE WHEN r.last_ts >= v.last_ts THEN r.last_ts ELSE v.last_ts END,
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
    kinds jsonb, models jsonb, swap boolean, fallback boolean, error boolean,
    contract_break boolean, violation boolean
) ON COMMIT DELETE ROWS;
TRUNCATE run_stage
"""
_RUN_STAGE_COLUMNS = (
    "project_id, run_id, n, first_ts, last_ts, kinds, models, swap, fallback, error, "
    "contract_break, violation"
)


def _merge_runs(batch: _Batch) -> None:
    """Widen each run's time range, count its records and fold in its summary.

    Sorted by (project, run_id) so that passes lock runs in one order; ingest only ever
    inserts new runs (ON CONFLICT DO NOTHING), so it never waits on these row locks.
    """
    rows = [
        (project, run_id, sum(delta.kinds.values()), delta.first_ts, delta.last_ts,
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
            cursor.execute(
                f"UPDATE {_RUN} AS r SET {_RUN_SET} FROM run_stage AS v "
                "WHERE r.project_id = v.project_id AND r.run_id = v.run_id"
            )
        else:
            cursor.executemany(
                f"UPDATE {_RUN} AS r SET {_RUN_SET} FROM (SELECT %s AS project_id, %s AS run_id, "
                "%s AS n, %s AS first_ts, %s AS last_ts, %s AS kinds, %s AS models, %s AS swap, "
                "%s AS fallback, %s AS error, %s AS contract_break, %s AS violation) AS v "
                "WHERE r.project_id = v.project_id AND r.run_id = v.run_id",
                [(*row[:3], _db_time(row[3]), _db_time(row[4]), *row[5:]) for row in rows],
            )


def _merge_streaks(batch: _Batch) -> None:
    """Minute segments from this batch's verdicts, then hours, days and the streak above them.

    A minute whose new verdicts all sort after what it holds is combined at once. A minute that
    a verdict falls *inside* (a late verdict, or a minute already waiting) is only marked dirty:
    fold_dirty_streaks recomputes it from its raw verdicts once, at the end of the catch-up.
    Recomputing it in every pass instead read a shuffled backlog's verdicts again and again.
    """
    if not batch.verdicts:
        return
    minutes, late = _minute_segments(batch)
    _save_segments(Grain.MINUTE, minutes)
    _mark_dirty(late)
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


def fold_dirty_streaks() -> int:
    """Recompute every dirty minute from its raw verdicts (those folded in: id <= the
    watermark), then the hours, days and streaks above; returns how many minutes. Holds the
    watermark's lock, so no pass runs meanwhile."""
    with transaction.atomic():
        watermark = _lock_watermark()
        dirty = list(
            StreakSegment.objects.filter(grain=Grain.MINUTE, dirty=True).values_list(
                "project_id", "model", "bucket"
            )
        )
        if not dirty:
            return 0
        raw = _raw_verdicts(dirty, watermark.last_id)
        minutes = {key: streaks.of_verdicts(raw.get(key, ())) for key in dirty}
        _save_segments(Grain.MINUTE, minutes)
        _fold_upwards(minutes)
    return len(dirty)


def _minute_segments(batch: _Batch) -> tuple[dict[tuple, streaks.Segment], list[tuple]]:
    """The minutes this batch's verdicts extend at their end, combined; and the late ones."""
    keys = list(batch.verdicts)
    stored = _load_segments(Grain.MINUTE, keys)
    out: dict[tuple, streaks.Segment] = {}
    late = []
    for key, verdicts in batch.verdicts.items():
        verdicts.sort(key=lambda v: (v[1], v[2]))
        before, dirty = stored.get(key, (streaks.EMPTY, False))
        if not dirty and (before.last_ts is None or (verdicts[0][1], verdicts[0][2]) > before.end):
            out[key] = streaks.combine(before, streaks.of_verdicts(verdicts))
        else:
            late.append(key)
    return out, late


def _mark_dirty(keys: list[tuple]) -> None:
    """Mark these (project, model, minute) segments dirty (each exists: a key is late only
    against a stored segment)."""
    if not keys:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {StreakSegment._meta.db_table} SET dirty = %s WHERE project_id = %s "
            "AND model = %s AND grain = %s AND bucket = %s",
            [(True, p, m, Grain.MINUTE, _db_time(b)) for p, m, b in keys],
        )


def _raw_verdicts(keys: list[tuple], last_id: int) -> dict[tuple, list]:
    """The verdicts (folded in: id <= last_id) of these (project, model, minute) keys, in
    (ts, key) order: one query per project over the spans their minutes make (adjacent minutes
    joined), so that a late minute from days ago does not read the days in between."""
    wanted = set(keys)
    by_project = _models_by_project(keys)
    out: dict[tuple, list] = defaultdict(list)
    for project, models in by_project.items():
        spans = Q()
        for start, end in _spans(sorted({k[2] for k in keys if k[0] == project})):
            spans |= Q(ts__gte=start, ts__lt=end)
        rows = (
            Record.objects.filter(spans, project_id=project, kind=VERDICT, model__in=models,
                                  id__lte=last_id)
            .order_by("ts", "record_key")
            .values_list("model", "ts", "record_key", "outcome")
        )  # fmt: skip
        for model, ts, record_key, outcome in rows.iterator(chunk_size=10_000):
            key = (project, model, truncate(ts, Grain.MINUTE))
            if key in wanted:
                out[key].append((outcome, ts, record_key))
    return out


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


def _models_by_project(keys) -> dict[int, set[str]]:
    """{project: its models} of (project, model, bucket) keys: one query per project."""
    out: dict[int, set[str]] = defaultdict(set)
    for project, model, _ in keys:
        out[project].add(model)
    return out


_SEGMENT_FIELDS = ("model", "bucket", *streaks.FIELDS)


def _fold_children(child: str, parent: str, keys: set[tuple]) -> dict[tuple, streaks.Segment]:
    """Each parent bucket's segment: the fold of its children, read in one query per project."""
    children: dict[tuple, list[streaks.Segment]] = defaultdict(list)
    span = timedelta(hours=1) if parent == Grain.HOUR else timedelta(days=1)
    by_project = _models_by_project(keys)
    for project, models in by_project.items():
        buckets = [b for p, _, b in keys if p == project]
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
    by_project = _models_by_project(keys)
    for project, models in by_project.items():
        buckets = {k[2] for k in keys if k[0] == project}
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
