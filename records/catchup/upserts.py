"""How a pass writes what its batch holds: rollup cells, run summaries, classifications and
the repeated notices, each in one statement staged with COPY on PostgreSQL."""

from __future__ import annotations

from collections import Counter, defaultdict

import orjson
from django.db import connection

from records.catchup.batch import FLAGS, GRAINS, Batch
from records.catchup.cells import Cell
from records.catchup.sql_helpers import db_time, parse_time, rows_by_keys
from records.contract import rollup_keys
from records.contract.buckets import truncate
from records.contract.derive import NOTICE_REPEATED
from records.contract.rollup_keys import (
    NOTICE,
    RETRACTING_KINDS,
    RUN_LAST,
)
from records.models import (
    Classification,
    Record,
    Rollup,
    Run,
)
from records.store.backends import backend


def runs_folded_before(batch: Batch) -> set[tuple[int, str]]:
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
    rows = rows_by_keys(RUN_TABLE, columns, ("bigint", "text"), (*columns, "record_count"),
                        list(wanted))  # fmt: skip
    return {(project, run_id) for project, run_id, folded in rows if folded}


def merge_classifications(batch: Batch) -> None:
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
        (first_ts, first_key, seat, agent, release, fell_back, seat_ts, seat_key,
         cause) = before or (None, "", "", "", "", False, None, "", "")  # fmt: skip
        for (
            attempt,
            ts,
            record_key,
            attempt_seat,
            attempt_agent,
            attempt_release,
            attempt_cause,
        ) in attempts:
            if attempt.endswith("1"):  # any attempt on rung 1, a re-ask too
                fell_back = True
                continue
            if attempt == "rung0" and (
                first_ts is None or (ts, record_key) < (first_ts, first_key)
            ):
                first_ts, first_key, seat, agent = ts, record_key, attempt_seat, attempt_agent
                release = attempt_release
            # The seat's last attempt (a re-ask too) says why the ladder walked on.
            if seat_ts is None or (ts, record_key) > (seat_ts, seat_key):
                seat_ts, seat_key, cause = ts, record_key, attempt_cause
        after = (first_ts, first_key, seat, agent, release, fell_back, seat_ts, seat_key, cause)
        if after == before:
            continue
        batch.add_classification(key[0], before, -1)
        batch.add_classification(key[0], after, +1)
        changed.append((*key, *after))
    _save_classifications(changed)


_CLASSIFICATION_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS classification_stage (
    project_id bigint, run_id text, tool_call_id text, first_ts timestamptz, first_key text,
    seat_model text, agent text, release text, fell_back boolean, seat_ts timestamptz,
    seat_key text, cause text
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
        backend().upsert_rows(
            cursor, _CLASSIFICATION, columns, rows, conflict,
            stage=(_CLASSIFICATION_STAGE, "classification_stage"), time_columns=(3, 9),
        )  # fmt: skip


_CLASSIFICATION_STATE = ("first_ts", "first_key", "seat_model", "agent", "release", "fell_back",
                         "seat_ts", "seat_key", "cause")  # fmt: skip


_CLASSIFICATION = Classification._meta.db_table


def _stored_classifications(keys: list[tuple]) -> dict[tuple, tuple]:
    """{(project, run_id, toolCallId): its _CLASSIFICATION_STATE} of the stored ones."""
    out: dict[tuple, tuple] = {}
    if not keys:
        return out
    key_columns = ("project_id", "run_id", "tool_call_id")
    rows = rows_by_keys(_CLASSIFICATION, key_columns, ("bigint", "text", "text"),
                        (*key_columns, *_CLASSIFICATION_STATE), keys)  # fmt: skip
    for project, run_id, call_id, first_ts, *state, seat_ts, seat_key, cause in rows:
        if first_ts is not None:  # SQLite: text
            first_ts = parse_time(first_ts)
        if seat_ts is not None:
            seat_ts = parse_time(seat_ts)
        out[(project, run_id, call_id)] = (first_ts, *state, seat_ts, seat_key, cause)
    return out


def flag_repeated_notices(batch: Batch, folded_upto: int) -> None:
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
            seen[(project, run_id, rollup_keys.decode(NOTICE, key)["code"])] += 1
    repeated: list[int] = []
    for key, notices in batch.once_notices.items():
        notices.sort()
        skip = 0 if seen[key] else 1  # the run's first notice of the code is no violation
        for record_id, minute, agent, model, release in notices[skip:]:
            repeated.append(record_id)
            batch.add_violations(key[0], minute, NOTICE, agent, model, [NOTICE_REPEATED], release)
            batch.runs[(key[0], key[1])].flags.add("violation")
    if repeated:
        flagged = list(Record.objects.filter(id__in=repeated).only("id", "derived"))
        for record in flagged:
            record.derived = {**record.derived, "violations": [NOTICE_REPEATED]}
            record.has_violation = True
        Record.objects.bulk_update(flagged, ["derived", "has_violation"], batch_size=1000)


_ROLLUP = Rollup._meta.db_table


_ROLLUP_COLUMNS = (
    "project_id, grain, bucket, kind, agent, model, key, release, count, tokens_in, tokens_out, "
    "latency_sum, sketch, cost_nano, cost_records, cost_unknown"
)
_ROLLUP_WIDTH = _ROLLUP_COLUMNS.count(",") + 1


_ROLLUP_ADD = f"""
ON CONFLICT (project_id, grain, bucket, kind, agent, model, key, release) DO UPDATE SET
    count = {_ROLLUP}.count + excluded.count,
    tokens_in = {_ROLLUP}.tokens_in + excluded.tokens_in,
    tokens_out = {_ROLLUP}.tokens_out + excluded.tokens_out,
    latency_sum = {_ROLLUP}.latency_sum + excluded.latency_sum,
    cost_nano = {_ROLLUP}.cost_nano + excluded.cost_nano,
    cost_records = {_ROLLUP}.cost_records + excluded.cost_records,
    cost_unknown = {_ROLLUP}.cost_unknown + excluded.cost_unknown,
"""


# Most kinds carry no latency: a cell without one keeps the stored sketch. On PostgreSQL the
# pass merged the stored sketch into its own (_merged_sketches); SQLite merges in the UPSERT.
def _rollup_conflict(store) -> str:
    return _ROLLUP_ADD + f"    sketch = {store.added_sketch(_ROLLUP)}\n"


# The stages are named by their shape, as ingest's is (records.store.writer.STAGE): a pooled
# connection may still hold the stage of an earlier release, of another shape.
_ROLLUP_STAGE_TABLE = f"rollup_stage_{_ROLLUP_WIDTH}"
_ROLLUP_STAGE = f"""
CREATE TEMP TABLE IF NOT EXISTS {_ROLLUP_STAGE_TABLE} (
    project_id bigint, grain text, bucket timestamptz, kind text, agent text, model text,
    key text, release text, count bigint, tokens_in bigint, tokens_out bigint,
    latency_sum double precision, sketch jsonb, cost_nano bigint, cost_records bigint,
    cost_unknown bigint
) ON COMMIT DELETE ROWS;
TRUNCATE {_ROLLUP_STAGE_TABLE}
"""


def merge_rollups(batch: Batch) -> None:
    """Add the batch's cells to the rollups, one UPSERT: counts and sums added by it, and the
    latency sketches merged before it (_merged_sketches)."""
    write_rollups(batch.grains())


def write_rollups(grains: dict[str, dict[tuple, Cell]]) -> None:
    """Add cells of every grain,
    {grain: {(project, bucket, kind, agent, model, key, release): cell}}."""
    sketches = _merged_sketches(grains)
    rows = []
    for grain, cells in grains.items():
        for (project, bucket, kind, agent, model, key, release), cell in cells.items():
            sketch = sketches.get((project, grain, bucket, kind, agent, model, key, release), "{}")
            rows.append((
                project, grain, bucket, kind, agent, model, key, release, cell.count,
                cell.tokens_in, cell.tokens_out, cell.latency_sum, sketch, cell.cost_nano,
                cell.cost_records, cell.cost_unknown,
            ))  # fmt: skip
    store = backend()
    with connection.cursor() as cursor:
        store.upsert_rows(
            cursor, _ROLLUP, _ROLLUP_COLUMNS.split(", "), rows, _rollup_conflict(store),
            stage=(_ROLLUP_STAGE, _ROLLUP_STAGE_TABLE), time_columns=(2,),
        )  # fmt: skip
        # A classification (or tool decision) that moved took its count back from a cell: a
        # cell left at zero is no rollup at all (and would differ from a pass that never saw
        # it there).
        emptied = [row for row in rows if row[3] in RETRACTING_KINDS and row[8] < 0]
        if emptied:
            cursor.executemany(
                f"DELETE FROM {_ROLLUP} WHERE project_id = %s AND grain = %s AND bucket = %s "
                "AND kind = %s AND agent = %s AND model = %s AND key = %s AND release = %s "
                "AND count = 0",
                [(*row[:2], db_time(row[2]), *row[3:8]) for row in emptied],
            )


_ROLLUP_KEY = ("project_id", "grain", "bucket", "kind", "agent", "model", "key", "release")


_ROLLUP_KEY_TYPES = ("bigint", "text", "timestamptz", "text", "text", "text", "text", "text")


def _merged_sketches(grains: dict[str, dict[tuple, Cell]]) -> dict[tuple, str]:
    """{(project, grain, bucket, kind, agent, model, key, release): sketch JSON} of the cells
    that hold latencies: on PostgreSQL with the stored sketch of the row merged in, read in one
    query.

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
    if out and backend().merges_sketches_in_python:
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


RUN_TABLE = Run._meta.db_table


_RUN_SET = """
    record_count = r.record_count + v.n,
    first_ts = CASE WHEN r.first_ts <= v.first_ts THEN r.first_ts ELSE v.first_ts END,
    last_ts = CASE WHEN r.last_ts >= v.last_ts THEN r.last_ts ELSE v.last_ts END,
    agent = CASE WHEN v.agent IS NOT NULL AND (r.agent IS NULL OR v.agent > r.agent)
                 THEN v.agent ELSE r.agent END,
    release = CASE WHEN v.release IS NOT NULL AND (r.release IS NULL OR v.release > r.release)
                   THEN v.release ELSE r.release END,
    kind_counts = json_add(r.kind_counts, v.kinds),
    models_seen = json_add(r.models_seen, v.models),
    has_swap = r.has_swap OR v.swap,
    has_fallback = r.has_fallback OR v.fallback,
    has_error = r.has_error OR v.error,
    has_contract_break = r.has_contract_break OR v.contract_break,
    has_violation = r.has_violation OR v.violation,
    cost_nano = r.cost_nano + v.cost_nano,
    cost_unknown = r.cost_unknown + v.cost_unknown
"""


_RUN_STAGE_COLUMNS = (
    "project_id, run_id, n, first_ts, last_ts, agent, kinds, models, swap, fallback, error, "
    "contract_break, violation, cost_nano, cost_unknown, release"
)
_RUN_STAGE_TABLE = f"run_stage_{_RUN_STAGE_COLUMNS.count(',') + 1}"
_RUN_STAGE = f"""
CREATE TEMP TABLE IF NOT EXISTS {_RUN_STAGE_TABLE} (
    project_id bigint, run_id text, n bigint, first_ts timestamptz, last_ts timestamptz,
    agent text, kinds jsonb, models jsonb, swap boolean, fallback boolean, error boolean,
    contract_break boolean, violation boolean, cost_nano bigint, cost_unknown bigint, release text
) ON COMMIT DELETE ROWS;
TRUNCATE {_RUN_STAGE_TABLE}
"""


_RUN_UPDATE = f"""
WITH before AS (
    SELECT r.id, r.agent, r.release, r.record_count, r.last_ts
    FROM {RUN_TABLE} AS r JOIN {_RUN_STAGE_TABLE} AS v
    ON r.project_id = v.project_id AND r.run_id = v.run_id
), updated AS (
    UPDATE {RUN_TABLE} AS r SET {_RUN_SET} FROM {_RUN_STAGE_TABLE} AS v
    WHERE r.project_id = v.project_id AND r.run_id = v.run_id
    RETURNING r.id, r.project_id, r.agent, r.release, r.last_ts
)
SELECT u.project_id, b.agent, u.agent, b.record_count, b.last_ts, u.last_ts, b.release, u.release
FROM updated AS u JOIN before AS b ON b.id = u.id
"""


def merge_runs(batch: Batch) -> None:
    """Widen each run's time range, count its records and fold in its summary; then move each
    run's RUN_LAST count to the buckets of its last record (_count_run_ends).

    A run's agent becomes the greatest agent of its records (ingest stores the greatest of its
    first batch's), so that a run that names several agents ends under the same one whatever
    order its records arrive in; its release likewise (ingest leaves it null).

    Sorted by (project, run_id) so that passes lock runs in one order; ingest only ever
    inserts new runs (ON CONFLICT DO NOTHING), so it never waits on these row locks. On
    PostgreSQL the statement returns each run's agent, count and last_ts from before it (both
    CTEs read the snapshot the statement started from); SQLite reads them first.
    """
    rows = [
        (project, run_id, sum(delta.kinds.values()), delta.first_ts, delta.last_ts, delta.agent,
         orjson.dumps(delta.kinds).decode(), orjson.dumps(delta.models).decode(),
         *(flag in delta.flags for flag in FLAGS), delta.cost_nano, delta.cost_unknown,
         delta.release)
        for (project, run_id), delta in sorted(batch.runs.items())
    ]  # fmt: skip
    store = backend()
    with connection.cursor() as cursor:
        if store.features.copies_into_stages:
            cursor.execute(_RUN_STAGE)
            store.insert_rows(cursor, _RUN_STAGE_TABLE, _RUN_STAGE_COLUMNS.split(", "), rows)
            cursor.execute(_RUN_UPDATE)
            ends = cursor.fetchall()
        else:
            columns = ("project_id", "run_id")
            stored = rows_by_keys(RUN_TABLE, columns, ("bigint", "text"),
                                  (*columns, "agent", "record_count", "last_ts", "release"),
                                  [row[:2] for row in rows])  # fmt: skip
            ends = []
            for project, run_id, agent, folded, last_ts, release in stored:
                last_ts = parse_time(last_ts)  # SQLite: as text
                delta = batch.runs[(project, run_id)]
                now_agent, now_release = agent, release
                if delta.agent is not None and (agent is None or delta.agent > agent):
                    now_agent = delta.agent
                if delta.release is not None and (release is None or delta.release > release):
                    now_release = delta.release
                ends.append((project, agent, now_agent, folded, last_ts,
                             max(last_ts, delta.last_ts), release, now_release))  # fmt: skip
            cursor.executemany(
                f"UPDATE {RUN_TABLE} AS r SET {_RUN_SET} FROM (SELECT %s AS project_id, "
                "%s AS run_id, %s AS n, %s AS first_ts, %s AS last_ts, %s AS agent, %s AS kinds, "
                "%s AS models, %s AS swap, %s AS fallback, %s AS error, %s AS contract_break, "
                "%s AS violation, %s AS cost_nano, %s AS cost_unknown, %s AS release) "
                "AS v WHERE r.project_id = v.project_id AND r.run_id = v.run_id",
                [(*row[:3], db_time(row[3]), db_time(row[4]), *row[5:]) for row in rows],
            )
    _count_run_ends(ends)


def _count_run_ends(ends: list[tuple]) -> None:
    """Count each run once in the buckets of its last record, under its agent and release: a run
    folded for the first time (no record counted before) adds 1 there; a run whose last record
    moved to another bucket of a grain, or whose agent or release changed, takes its 1 from where
    it was. `ends` are (project, agent before, agent now, records counted before, last_ts
    before, now, release before, release now)."""
    grains: dict[str, dict[tuple, Cell]] = {grain: defaultdict(Cell) for grain in GRAINS}
    for project, agent_before, agent, counted, before, now, release_before, release in ends:
        for grain, cells in grains.items():
            bucket = truncate(now, grain)
            if counted:
                old = truncate(before, grain)
                if old == bucket and agent_before == agent and release_before == release:
                    continue
                cells[(project, old, RUN_LAST, agent_before or "", "", "", release_before or "")
                      ].count -= 1  # fmt: skip
            cells[(project, bucket, RUN_LAST, agent or "", "", "", release or "")].count += 1
    grains = {grain: {k: c for k, c in cells.items() if c.count} for grain, cells in grains.items()}
    if any(grains.values()):
        write_rollups(grains)
