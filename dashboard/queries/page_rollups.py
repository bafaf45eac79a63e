"""What the overview, models, classifiers and streaks pages show, read from rollups only.

A page reads its period's rollup rows through records.metrics.reader, the one reader of the metrics
API and the alert engine too, and folds every metric it draws from them with the metric definitions
of records.metrics.definitions, so it shows what GET /api/v1/metrics answers. Two reads keep that
inside the pages' budget at a million records a day:

- counts: rows summed over agents by the database (GROUP BY bucket, kind, model, key), without
  their sketches: an hour of such a project is a few hundred rollup rows, one per agent, and
  only the counts of most kinds are ever used;
- sketches: the rows of the latency kinds only (picks, model calls), sketch and all, merged here.

Streak sparklines fold StreakSegment rows (records.contract.streak_segments). Nothing here reads a
record. Functions return plain data (dicts, lists, numbers); the modules of dashboard.charts turn
them into figures.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dashboard.queries.cost_rollups import spend_of
from records.contract import rollup_keys
from records.contract.buckets import truncate
from records.contract.rollup_keys import (
    CLASSIFICATION,
    MODEL_CALL,
    NOTICE,
    OUTCOME,
    PICK_LATENCY,
    PICKS,
    PROVIDER_ERROR,
    RECORD_KINDS,
    RUN_LAST,
    SELECTION,
    VERDICT,
)
from records.contract.sketch import Sketch
from records.metrics import reader
from records.metrics.definitions import (
    INTERVALS,
    METRICS,
    Quantile,
    Row,
    fold_metric,
    streak_history,
)
from records.models import Grain, Streak


@dataclass(frozen=True)
class Period:
    """A page's time range: `span` long, in buckets of `interval`, ending with the current one;
    or, for a custom range (dashboard.web.timerange), the fixed buckets from `start` to `end`."""

    name: str
    label: str
    span: timedelta
    interval: str
    start: datetime | None = None
    end: datetime | None = None


# Minute buckets for the last hour, hour buckets up to a day, day buckets beyond: what a
# page reads grows with the number of rollup rows (some 400 an hour at a million records a
# day), so each period reads the coarsest grain that still draws a useful line.
PERIODS: dict[str, Period] = {
    p.name: p
    for p in (
        Period("1h", "last hour", timedelta(hours=1), "minute"),
        Period("6h", "last 6 hours", timedelta(hours=6), "hour"),
        Period("24h", "last 24 hours", timedelta(hours=24), "hour"),
        Period("7d", "last 7 days", timedelta(days=7), "day"),
        Period("30d", "last 30 days", timedelta(days=30), "day"),
        Period("90d", "last 90 days", timedelta(days=90), "day"),
    )
}
# The landing view (Grafana's default too): recent enough to act on, and the pages read a
# quarter of the rows of a day.
DEFAULT_PERIOD = "6h"
# A custom range's grain: the same rule as the presets (minutes up to a few hours, hours up to
# a few days, days beyond).
CUSTOM_GRAINS = ((timedelta(hours=3), "minute"), (timedelta(days=3), "hour"))


def _span_label(span: timedelta) -> str:
    days, seconds = span.days, span.seconds
    hours, minutes = seconds // 3600, seconds % 3600 // 60
    parts = [(days, "day"), (hours, "hour"), (minutes, "minute")]
    words = [f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in parts if n]
    return " ".join(words[:2]) or "0 minutes"


def custom_period(start: datetime, end: datetime) -> Period:
    """The whole buckets covering [start, end). Its name, start/end in ISO 8601's interval
    notation, is what get_period reads back (the pages pass periods by name)."""
    span = end - start
    interval = next((grain for limit, grain in CUSTOM_GRAINS if span <= limit), "day")
    start = truncate(start, interval)
    end = truncate(end - timedelta(microseconds=1), interval) + INTERVALS[interval]
    return Period(
        f"{start.isoformat()}/{end.isoformat()}",
        _span_label(end - start),
        end - start,
        interval,
        start,
        end,
    )


def get_period(name: str | None) -> Period:
    if name and "/" in name:
        try:
            start, end = (datetime.fromisoformat(part) for part in name.split("/", 1))
            if start.tzinfo is not None and end.tzinfo is not None and start < end:
                return custom_period(start, end)
        except (ValueError, OverflowError):
            pass
    return PERIODS.get(name or "", PERIODS[DEFAULT_PERIOD])


def overview_range(now: datetime, period_name: str) -> tuple[datetime, datetime]:
    """[start, end) of a period: whole buckets, the current (partial) one included."""
    period = get_period(period_name)
    if period.start is not None and period.end is not None:
        return period.start, period.end
    end = truncate(now, period.interval) + INTERVALS[period.interval]
    return end - period.span, end


# --- folding helpers over rows already read ------------------------------------------------------
ByKind = dict[str, list[Row]]


def by_kind(rows: Iterable[Row]) -> ByKind:
    """Rows by kind, so that each metric walks only the rows of its own kinds."""
    out: ByKind = defaultdict(list)
    for row in rows:
        out[row.kind].append(row)
    return out


def _rows_of(name: str, rows: ByKind) -> Iterator[Row]:
    kinds = METRICS[name].kinds or tuple(rows)
    for kind in kinds:
        yield from rows.get(kind, ())


def overall(name: str, rows: ByKind) -> tuple[float | None, int]:
    """One metric over all `rows`, every group merged: (value, records behind it)."""
    metric = METRICS[name]
    acc = metric.make()
    for row in _rows_of(name, rows):
        for _, args in metric.contribute(row):
            acc.add(*args)
    return acc.result()


def overall_series(name: str, rows: ByKind) -> list[tuple[datetime, float | None, int]]:
    """One metric per bucket, every group merged: [(bucket, value, count)] in time order."""
    metric = METRICS[name]
    by_bucket: dict[datetime, Any] = {}
    for row in _rows_of(name, rows):
        for _, args in metric.contribute(row):
            acc = by_bucket.get(row.bucket)
            if acc is None:
                acc = by_bucket[row.bucket] = metric.make()
            acc.add(*args)
    return [(t, *by_bucket[t].result()) for t in sorted(by_bucket)]


def latency_by_model(rows: Iterable[Row]) -> dict[str, dict[datetime, Sketch]]:
    """Latency sketches (PICK_LATENCY rows) merged per classifier model and bucket, over
    agents: the grouping of the classifier_latency metrics.

    Merged as the stored JSON ({bin: count}), and made Sketches once per model and bucket:
    parsing every row's bins was most of the overview's time.
    """
    counts: dict[str, dict[datetime, dict[str, int]]] = defaultdict(dict)
    for row in rows:
        sketch = row.sketch if isinstance(row.sketch, dict) else row.sketch.to_json()
        into = counts[row.model].get(row.bucket)
        if into is None:
            counts[row.model][row.bucket] = dict(sketch)
            continue
        for index, n in sketch.items():
            into[index] = into.get(index, 0) + n
    return {
        model: {t: Sketch.from_json(c) for t, c in by_t.items()} for model, by_t in counts.items()
    }


def merged(sketches: Iterable[Sketch]) -> Sketch:
    out = Sketch()
    for sketch in sketches:
        out.merge(sketch)
    return out


def grouped(name: str, rows: list[Row], start: datetime, end: datetime, interval: str, **kw):
    """fold_metric over rows already read: {"series": [...], "totals": [...]} as the API."""
    return fold_metric(name, rows, interval=interval, start=start, end=end, **kw)


# What the pages count by: summed over agents (the agent filter applies before the sum).
COUNT_COLUMNS = ("bucket", "kind", "model", "key")


def count_rows(
    project_id, interval, start, end, kinds, agents, keep=COUNT_COLUMNS, releases=None
) -> list[Row]:
    """Rows without sketches, summed by the database over agents and releases (and the columns
    not kept), of `releases` only when given."""
    return reader.read(project_id, interval, start, end, kinds=kinds, agents=agents, keep=keep,
                       releases=releases)  # fmt: skip


def sketch_rows(project_id, interval, start, end, kinds, agents, releases=None) -> list[Row]:
    """The stored rows of the latency kinds `kinds`, sketches parsed."""
    return reader.read(project_id, interval, start, end, kinds=kinds, agents=agents,
                       sketch_kinds=kinds, releases=releases)  # fmt: skip


# --- overview ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kpi:
    name: str
    label: str
    value: float | None
    previous: float | None
    count: int
    # How the value reads: "count", "ms" or "rate" (a share, compared in percentage points).
    unit: str
    # Whether a rise is bad news (latency, errors), for the colour of the change.
    rise_is_bad: bool = False

    @property
    def change(self) -> float | None:
        """Relative change for counts and latencies; the difference for rates (points)."""
        if self.value is None or self.previous is None:
            return None
        if self.unit == "rate":
            return self.value - self.previous
        if self.previous == 0:
            return None
        return (self.value - self.previous) / self.previous


# (metric, label, unit, a rise is bad)
KPI_METRICS = (
    ("records", "Records", "count", False),
    ("classifier_latency_p95", "Classifier p95 latency", "ms", True),
    ("pick_error_rate", "Pick error rate", "rate", True),
    ("narrowing_skip_rate", "Narrowing skip rate", "rate", True),
    ("swap_rate", "Swap rate", "rate", False),
    ("ladder_fallback_rate", "Ladder fallback rate", "rate", True),
    ("first_pick_agreement", "First-pick agreement", "rate", False),
)
OVERVIEW_SERIES = ("ladder_fallback_rate", "narrowing_skip_rate", "swap_rate", "pick_error_rate")
# The kinds the rate KPIs and series read, row by row; every other kind is only counted.
RATE_KINDS = tuple(
    sorted({k for name, *_ in KPI_METRICS if name != "records" for k in METRICS[name].kinds})
)


def overview(
    project_id: int,
    now: datetime,
    period_name: str,
    agents: list[str],
    releases: list[str] | None = None,
) -> dict:
    """KPIs of the period against the one before, and the period's time series.

    Four queries: records by kind and bucket over both periods (with the runs counted in the
    buckets of their last records: rollup_keys.RUN_LAST), the rows of the rate metrics in the period
    (by bucket) and in the one before (summed), and the pick latencies of both.
    """
    period = get_period(period_name)
    start, end = overview_range(now, period.name)
    previous_start = start - period.span
    interval = period.interval
    kinds = count_rows(project_id, interval, previous_start, end, (*RECORD_KINDS, RUN_LAST),
                       agents, keep=("bucket", "kind"), releases=releases)  # fmt: skip
    runs = [r for r in kinds if r.kind == RUN_LAST]
    records_now = [r for r in kinds if r.bucket >= start and r.kind != RUN_LAST]
    records_before = [r for r in kinds if r.bucket < start and r.kind != RUN_LAST]
    current = count_rows(project_id, interval, start, end, RATE_KINDS, agents, releases=releases)
    before = count_rows(
        project_id,
        interval,
        previous_start,
        start,
        RATE_KINDS,
        agents,
        keep=COUNT_COLUMNS[1:],
        releases=releases,
    )
    picks = latency_by_model(
        sketch_rows(project_id, interval, previous_start, end, (PICK_LATENCY,), agents, releases)
    )
    now_rows, before_rows = by_kind(current), by_kind(before)
    kpis = []
    for name, label, unit, rise_is_bad in KPI_METRICS:
        if name == "records":
            value, previous = _sum(records_now), _sum(records_before)
            count, previous_count = value, previous
        elif name == "classifier_latency_p95":
            now_sketch = merged(s for by_t in picks.values() for t, s in by_t.items() if t >= start)
            old_sketch = merged(s for by_t in picks.values() for t, s in by_t.items() if t < start)
            value, count = now_sketch.quantile(0.95), now_sketch.count
            previous, previous_count = old_sketch.quantile(0.95), old_sketch.count
        else:
            value, count = overall(name, now_rows)
            previous, previous_count = overall(name, before_rows)
        kpis.append(
            Kpi(
                name,
                label,
                value if count else None,
                previous if previous_count else None,
                count,
                unit,
                rise_is_bad,
            )
        )
    # Runs whose last record is in the period: those the rollups count (the others are a pass
    # away), summed over buckets instead of counted over the runs table.
    runs_now = sum(r.count for r in runs if r.bucket >= start)
    runs_before = sum(r.count for r in runs if r.bucket < start)
    kpis.insert(1, Kpi("runs", "Active runs", runs_now, runs_before, runs_now, "count"))
    # Spend comes with the same rows, each with its cost columns (dashboard.queries.cost_rollups).
    spend, spend_before = spend_of(records_now), spend_of(records_before)
    kpis.insert(2, Kpi("spend", "Spend", spend.nano if spend.records else None,
                       spend_before.nano if spend_before.records else None, spend.records,
                       "usd", rise_is_bad=True))  # fmt: skip
    records_by_kind = grouped("records", records_now, start, end, interval)
    latency = [
        {
            "group": {"model": model},
            "points": [
                {"t": t, "value": s.quantile(0.95), "count": s.count}
                for t, s in sorted(by_t.items())
                if t >= start
            ],
        }
        for model, by_t in sorted(picks.items())
    ]
    rates = {name: overall_series(name, now_rows) for name in OVERVIEW_SERIES}
    return {
        "period": period,
        "start": start,
        "end": end,
        "kpis": kpis,
        "records_by_kind": records_by_kind["series"],
        # Records that named no classifier model count in the KPI, not as a line.
        "latency_by_model": [s for s in latency if s["points"] and s["group"]["model"]],
        "rates": rates,
        "spend": spend,
    }


def _sum(rows: Iterable[Row]) -> int:
    return sum(r.count for r in rows)


# --- models ------------------------------------------------------------------------------------
START = "(start)"  # the "previous model" of a run's first step


def models_page(
    project_id: int,
    now: datetime,
    period_name: str,
    agents: list[str],
    releases: list[str] | None = None,
) -> dict:
    """Swap matrix, swaps over time, step-to-step model paths, refusals, model-call latency.

    Two queries: counts of selections and provider errors, and the model-call rows.
    """
    period = get_period(period_name)
    start, end = overview_range(now, period.name)
    rows = count_rows(project_id, period.interval, start, end, (SELECTION, PROVIDER_ERROR), agents,
                      releases=releases)  # fmt: skip
    calls_rows = sketch_rows(project_id, period.interval, start, end, (MODEL_CALL,), agents,
                             releases)  # fmt: skip
    matrix: Counter = Counter()  # (default, selected) -> selections
    paths: Counter = Counter()  # (previous, selected) -> steps
    refused: Counter = Counter()  # (provider, model) -> refused forced tool choices
    errors: Counter = Counter()  # (provider, model, error) -> provider errors
    for row in rows:
        key = rollup_keys.decode(row.kind, row.key)
        if row.kind == SELECTION:
            matrix[(row.model, key["selected"])] += row.count
            paths[(key["previous"] or START, key["selected"])] += row.count
        elif row.kind == PROVIDER_ERROR:
            errors[(key["provider"], row.model, key["error"])] += row.count
            if key["refused"] == "1":
                refused[(key["provider"], row.model)] += row.count
    calls: dict[tuple[str, str], dict] = {}
    for row in calls_rows:
        provider = rollup_keys.decode(MODEL_CALL, row.key)["provider"]
        cell = calls.setdefault(
            (provider, row.model), {"sketch": Quantile(0.5), "count": 0, "tokens": 0}
        )
        cell["sketch"].add(row.sketch)
        cell["count"] += row.count
        cell["tokens"] += row.tokens_in + row.tokens_out
    swaps = grouped("swap_rate", rows, start, end, period.interval, group_by="model")
    model_calls = [
        {
            "provider": provider,
            "model": model,
            "count": cell["count"],
            "p50": cell["sketch"].sketch.quantile(0.5),
            "p95": cell["sketch"].sketch.quantile(0.95),
            "tokens": cell["tokens"],
        }
        for (provider, model), cell in sorted(calls.items())
    ]
    return {
        "period": period,
        "start": start,
        "end": end,
        "matrix": dict(matrix),
        "paths": dict(paths),
        "swap_series": swaps["series"],
        "swap_totals": swaps["totals"],
        "refused": dict(refused),
        "errors": sorted(errors.items(), key=lambda item: (-item[1], item[0])),
        "model_calls": model_calls,
    }


# --- classifiers -------------------------------------------------------------------------------
_CLASSIFIER_COUNTS = (*PICKS, OUTCOME, VERDICT, NOTICE, CLASSIFICATION)
QUANTILES = (0.5, 0.95, 0.99)


def classifiers_page(
    project_id: int,
    now: datetime,
    period_name: str,
    agents: list[str],
    releases: list[str] | None = None,
) -> dict:
    """Everything about the classifiers over the period. Two queries: counts, pick sketches."""
    period = get_period(period_name)
    start, end = overview_range(now, period.name)
    rows = count_rows(project_id, period.interval, start, end, _CLASSIFIER_COUNTS, agents,
                      releases=releases)  # fmt: skip
    picks = sketch_rows(project_id, period.interval, start, end, (PICK_LATENCY,), agents,
                        releases)  # fmt: skip
    # Latency percentiles per classifier model and bucket: one merged sketch, three quantiles
    # (three fold_metric calls would merge every sketch three times).
    sketches = latency_by_model(picks)
    unavailable: Counter = Counter()  # (cause, disposition) -> classifier.unavailable notices
    role_defaulted: Counter = Counter()  # (reason, model) -> classifier.role_defaulted notices
    for row in rows:
        if row.kind != NOTICE:
            continue
        key = rollup_keys.decode(NOTICE, row.key)
        if key["code"] == "classifier.unavailable":
            unavailable[(key["cause"] or "unrecorded", key["disposition"])] += row.count
        elif key["code"] == "classifier.role_defaulted":
            role_defaulted[(key["reason"] or "unrecorded", row.model)] += row.count
    latency = {
        model: [(t, *(by_time[t].quantile(q) for q in QUANTILES)) for t in sorted(by_time)]
        for model, by_time in sorted(sketches.items())
    }
    totals = {model: merged(by_time.values()) for model, by_time in sorted(sketches.items())}
    latency_totals = [
        {
            "model": model,
            "count": sketch.count,
            **{f"p{round(q * 100)}": sketch.quantile(q) for q in QUANTILES},
        }
        for model, sketch in totals.items()
    ]
    rows_by_kind = by_kind(rows)
    # Picks and pick errors that named no classifier model: counted in every total and listed
    # in the tables, never drawn as a per-model line.
    unreported = sum(t["count"] for t in latency_totals if not t["model"])

    def fold(name: str, group_by: str | None = None) -> dict:
        return grouped(name, rows, start, end, period.interval, group_by=group_by)

    skips = fold("narrowing_skip_rate", "reason")
    return {
        "period": period,
        "start": start,
        "end": end,
        "latency": latency,
        "latency_totals": latency_totals,
        "unreported_model": unreported,
        "skip_series": skips["series"],
        "skip_totals": skips["totals"],
        "skip_overall": overall("narrowing_skip_rate", rows_by_kind),
        "pick_errors": fold("pick_error_rate", "model"),
        "agreement": overall_series("first_pick_agreement", rows_by_kind),
        "agreement_overall": overall("first_pick_agreement", rows_by_kind),
        "ladder": fold("ladder_fallback_rate", "model"),
        "ladder_causes": fold("ladder_fallback_rate", "reason")["totals"],
        "verdicts": fold("verdicts")["totals"],
        "unavailable": dict(unavailable),
        "role_defaulted": dict(role_defaulted),
    }


# --- streaks -----------------------------------------------------------------------------------
def streaks_page(project_id: int, now: datetime, period_name: str) -> dict:
    """Each model's streak, and per hour of the period (a preset or a custom range, in whole
    hours) its value at the end of the hour and the highest it reached within it
    (records.metrics.definitions.streak_history). Three queries."""
    period = get_period(period_name)
    if period.start is not None and period.end is not None:
        start = truncate(period.start, Grain.HOUR)
        end = truncate(period.end - timedelta(microseconds=1), Grain.HOUR) + timedelta(hours=1)
    else:
        end = truncate(now, Grain.HOUR) + timedelta(hours=1)
        start = end - period.span
    rows = list(
        Streak.objects.filter(project_id=project_id).order_by("-current", "-longest", "model")
    )
    history = streak_history(project_id, start, end)
    return {
        "period": period,
        "start": start,
        "end": end,
        "streaks": rows,
        "sparklines": {streak.model: history.get(streak.model, []) for streak in rows},
    }
