"""The catch-up pass: fold newly committed records into rollups, run summaries and streaks.

Driven by a database watermark, not by messages: a pass reads the records with an id above the
watermark (up to a safe high-water mark, see `_safe_high_water`), folds them in, and advances the
watermark in the same transaction. A pass that dies half way leaves nothing behind, and a second
pass over the same range cannot happen, so any number of passes, interrupted or repeated, give
the rollups of one clean pass. Late records (an old `ts`) simply land in their old bucket; a late
verdict makes its model's streak be recomputed from that model's verdicts.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone

from records.models import Grain, Record, Rollup, Run, Streak, Watermark
from records.sketch import Sketch
from records.store import INGEST_LOCK_KEY
from records.streaks import StreakState, advance

log = logging.getLogger(__name__)

WATERMARK = "rollups"
VERDICT = "classifier.verdict"
MAX_MODELS_PER_RUN = 50
_FIELDS = (
    "id",
    "project_id",
    "kind",
    "agent",
    "model",
    "rollup_key",
    "ts",
    "latency_ms",
    "tokens_in",
    "tokens_out",
    "run_id",
    "record_key",
    "outcome",
    "is_swap",
    "is_fallback",
    "is_error",
    "is_contract_break",
)


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
    models: set = field(default_factory=set)
    flags: set = field(default_factory=set)


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
        self.verdicts: dict[tuple[int, str], list[tuple]] = defaultdict(list)

    def add(self, row: tuple) -> None:
        (
            _,
            project,
            kind,
            agent,
            model,
            key,
            ts,
            latency,
            t_in,
            t_out,
            run_id,
            record_key,
            outcome,
            swap,
            fallback,
            error,
            contract_break,
        ) = row
        cell = self.cells[
            (project, truncate(ts, Grain.MINUTE), kind, agent or "", model or "", key)
        ]
        cell.count += 1
        cell.tokens_in += t_in or 0
        cell.tokens_out += t_out or 0
        if latency is not None:
            cell.latency_sum += latency
            cell.sketch.add(latency)
        run = self.runs[(project, run_id)]
        run.kinds[kind] += 1
        if model:
            run.models.add(model)
        for flag, on in (
            ("swap", swap),
            ("fallback", fallback),
            ("error", error),
            ("contract_break", contract_break),
        ):
            if on:
                run.flags.add(flag)
        if kind == VERDICT and model:
            self.verdicts[(project, model)].append((ts, record_key, outcome))

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
            return total


def run_pass(batch_size: int) -> PassResult:
    with transaction.atomic():
        watermark = _lock_watermark()
        high = _safe_high_water()
        rows = list(
            Record.objects.filter(id__gt=watermark.last_id, id__lte=high)
            .order_by("id")
            .values_list(*_FIELDS)[:batch_size]
        )
        watermark.last_pass_at = timezone.now()
        if not rows:
            watermark.save(update_fields=["last_pass_at"])
            return PassResult(0, watermark.last_id, True)
        batch = _Batch()
        for row in rows:
            batch.add(row)
        last_id = rows[-1][0]
        _merge_rollups(batch)
        _merge_runs(batch)
        _merge_streaks(batch, last_id)
        watermark.last_id = last_id
        watermark.save(update_fields=["last_id", "last_pass_at"])
    return PassResult(len(rows), last_id, last_id >= high)


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


def _merge_rollups(batch: _Batch) -> None:
    for grain, cells in batch.grains().items():
        projects = {key[0] for key in cells}
        buckets = {key[1] for key in cells}
        existing = {
            (r.project_id, r.bucket, r.kind, r.agent, r.model, r.key): r
            for r in Rollup.objects.filter(project_id__in=projects, grain=grain, bucket__in=buckets)
        }
        changed, created = [], []
        for key, cell in cells.items():
            row = existing.get(key)
            if row is None:
                project, bucket, kind, agent, model, rollup_key = key
                row = Rollup(
                    project_id=project,
                    grain=grain,
                    bucket=bucket,
                    kind=kind,
                    agent=agent,
                    model=model,
                    key=rollup_key,
                )
                created.append(row)
            else:
                changed.append(row)
            stored = _Cell(
                row.count,
                row.tokens_in,
                row.tokens_out,
                row.latency_sum,
                Sketch.from_json(row.sketch),
            )
            stored.merge(cell)
            row.count, row.tokens_in, row.tokens_out = (
                stored.count,
                stored.tokens_in,
                stored.tokens_out,
            )
            row.latency_sum, row.sketch = stored.latency_sum, stored.sketch.to_json()
        Rollup.objects.bulk_create(created, batch_size=1000)
        Rollup.objects.bulk_update(
            changed, ["count", "tokens_in", "tokens_out", "latency_sum", "sketch"], batch_size=500
        )


def _merge_runs(batch: _Batch) -> None:
    by_project: dict[int, dict[str, _RunDelta]] = defaultdict(dict)
    for (project, run_id), delta in batch.runs.items():
        by_project[project][run_id] = delta
    for project, deltas in by_project.items():
        runs = list(Run.objects.filter(project_id=project, run_id__in=list(deltas)))
        for run in runs:
            delta = deltas[run.run_id]
            counts = Counter(run.kind_counts)
            counts.update(delta.kinds)
            run.kind_counts = dict(sorted(counts.items()))
            run.models_seen = sorted(set(run.models_seen) | delta.models)[:MAX_MODELS_PER_RUN]
            for flag in delta.flags:
                setattr(run, f"has_{flag}", True)
        Run.objects.bulk_update(
            runs,
            [
                "kind_counts",
                "models_seen",
                "has_swap",
                "has_fallback",
                "has_error",
                "has_contract_break",
            ],
            batch_size=500,
        )


def _merge_streaks(batch: _Batch, last_id: int) -> None:
    for (project, model), verdicts in batch.verdicts.items():
        verdicts.sort(key=lambda v: (v[0], v[1]))
        streak, _ = Streak.objects.get_or_create(project_id=project, model=model)
        first = verdicts[0]
        in_order = streak.last_ts is None or (first[0], first[1]) > (
            streak.last_ts,
            streak.last_key,
        )
        if in_order:
            state = StreakState(streak.current, streak.longest, streak.last_broken_at)
            sequence = verdicts
        else:
            # A verdict arrived late: fold the model's whole history again, in order, up to
            # this pass's last id (later ids belong to the next pass).
            log.info("late verdict for %s: recomputing its streak", model)
            state = StreakState()
            sequence = list(
                Record.objects.filter(
                    project_id=project, kind=VERDICT, model=model, id__lte=last_id
                )
                .order_by("ts", "record_key")
                .values_list("ts", "record_key", "outcome")
            )
        advance(state, ((outcome, ts) for ts, _, outcome in sequence))
        streak.current, streak.longest = state.current, state.longest
        streak.last_broken_at = state.last_broken_at
        streak.last_ts, streak.last_key = sequence[-1][0], sequence[-1][1]
        streak.save()


def freshness(*, project_id: int | None = None, now: datetime | None = None) -> dict:
    """How far the rollups lag the records: the watermark, what waits, and for how long."""
    now = now or timezone.now()
    watermark = Watermark.objects.filter(name=WATERMARK).first()
    last_id = watermark.last_id if watermark else 0
    pending = Record.objects.filter(id__gt=last_id)
    if project_id is not None:
        pending = pending.filter(project_id=project_id)
    oldest = pending.aggregate(t=Min("received_at"))["t"]
    return {
        "watermark_id": last_id,
        "pending_records": pending.count(),
        "lag_seconds": round((now - oldest).total_seconds(), 3) if oldest else 0.0,
        "last_pass_at": watermark.last_pass_at if watermark else None,
    }
