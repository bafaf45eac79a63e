"""What a rule reads: its metric over rollup rows, per group, over a window of minutes.

A rule's metric is one of `records.metrics.definitions.METRICS` or the contract-broken streak. The
accumulators and row contributions are those of records.metrics.definitions, so a rule's value over
a window is what GET /api/v1/metrics/{metric} answers as the total over the same minutes (a test
holds the two to it). The engine does not call `query_metric` once per rule: that reads every row of
the metric's kinds and filters models in Python, so a thousand rules would read the same rows a
thousand times. Instead `read_window` reads a project's rows once per tick and window through
records.metrics.reader (the reader of the API and the pages) and `fold` computes each rule from
them; the preview slides the same fold over a day of `read_rows`.

A window of N minutes is N whole minute buckets ending with the current, partial, one; a window
over an hour is whole hours and reads hour buckets the same way (H hour buckets ending with the
current one), so that a day-long window reads 24 rows a group instead of 1,440.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from records.contract import rollup_keys
from records.contract.buckets import truncate
from records.contract.rollup_keys import CLASSIFICATION, PICK_LATENCY, PICKS, VERDICT
from records.contract.sketch import Sketch
from records.metrics import reader
from records.metrics.definitions import METRICS, Quantile, Rate, Row, Total
from records.metrics.reader import as_sketch, merge_into
from records.models import Grain

STREAK = "contract_broken_streak"
# A rule that compares each agent's newest release with the one before it (alerts.release_watch)
# rather than reading a window.
RELEASE_REGRESSION = "release_regression"
MAX_WINDOW_MINUTES = 24 * 60
HOUR = 60


class Family(StrEnum):
    LATENCY = "latency"
    RATE = "rate"
    COUNT = "count"
    STREAK = "streak"
    REGRESSION = "regression"


def _family(name: str) -> Family:
    if name == STREAK:
        return Family.STREAK
    if name == RELEASE_REGRESSION:
        return Family.REGRESSION
    acc = METRICS[name].make()
    if isinstance(acc, Quantile):
        return Family.LATENCY
    # A share that is not a plain ratio (records.metrics.definitions.Calibration) says so with
    # `is_rate`.
    return Family.RATE if isinstance(acc, Rate) or getattr(acc, "is_rate", False) else Family.COUNT


RULE_METRICS: dict[str, Family] = {
    name: _family(name) for name in (*METRICS, STREAK, RELEASE_REGRESSION)
}
# Metrics read from somewhere other than a window of rollup rows.
UNWINDOWED = (STREAK, RELEASE_REGRESSION)

# Dimensions a metric splits its values by besides model and agent, which a rule may pin with
# `match` (e.g. {"verdict": "block"}); unpinned, they are added up.
MATCH_KEYS: dict[str, tuple[str, ...]] = {
    "narrowing_skip_rate": ("reason",),
    "verdicts": ("verdict",),
    "provider_errors": ("provider", "error"),
    "invented_tool_rate": ("decision", "protocol"),
    "model_call_latency_p50": ("provider",),
    "model_call_latency_p95": ("provider",),
    "model_call_latency_p99": ("provider",),
    "model_call_tokens": ("provider",),
    "violation_rate": ("code",),
    "violations": ("kind", "code"),
    "notices": ("code",),
    "cost": ("provider", "kind"),
}
# Metrics whose runs are counted per agent, not per model (records.metrics.cost_metrics): a
# rule reads them for an agent or the whole project.
NOT_PER_MODEL = ("cost_per_run",)
# A notices rule may also match the notice's `detail` fields, as {"detail.<field>": "value"}
# beside its {"code": ...} (alerts.notices counts them).
DETAIL = "detail."
DETAIL_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")


def metric_kinds(metric: str) -> tuple[str, ...]:
    """The record kinds a metric reads; () is every kind (the `records` metric)."""
    return () if metric in UNWINDOWED else METRICS[metric].kinds


def group_bys(metric: str) -> tuple[str, ...]:
    if metric == STREAK:
        return ("model",)
    if metric == RELEASE_REGRESSION:
        return ()  # its groups are the measures that regressed
    allowed = ("agent",) if metric in NOT_PER_MODEL else ("model", "agent")
    return tuple(g for g in METRICS[metric].group_bys if g in allowed)


def classifier_applies(metric: str) -> bool:
    kinds = metric_kinds(metric)
    classifier_kinds = {*PICKS, PICK_LATENCY, VERDICT, CLASSIFICATION}
    return metric == STREAK or bool(kinds) and set(kinds) <= classifier_kinds


def _classifier_of(row: Row) -> str:
    """The classifier a row is about: the pick's classifier model, a verdict's seat model, or
    a classification's (whose row model is its seat)."""
    if row.kind == VERDICT:
        return rollup_keys.decode(VERDICT, row.key)["seat"] or row.model
    return row.model


@dataclass(frozen=True, slots=True)
class Query:
    metric: str
    agent: str = ""
    model: str = ""
    classifier: str = ""
    kind: str = ""
    match: tuple[tuple[str, str], ...] = ()
    group_by: str = ""

    @property
    def family(self) -> Family:
        return RULE_METRICS[self.metric]

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.kind,) if self.kind else metric_kinds(self.metric)


def query_errors(query: Query) -> dict[str, list[str]]:
    """Field errors of a rule's metric, filters and grouping (empty when it can be evaluated)."""
    if query.metric not in RULE_METRICS:
        return {"metric": [f"unknown metric; one of: {', '.join(RULE_METRICS)}"]}
    errors: dict[str, list[str]] = {}
    if query.metric == RELEASE_REGRESSION:
        for name in ("model", "classifier", "kind", "group_by"):
            if getattr(query, name):
                errors[name] = ["a release regression rule compares every measure of an agent"]
        if query.match:
            errors["match"] = ["a release regression rule has no dimension to match on"]
        return errors
    if query.group_by and query.group_by not in group_bys(query.metric):
        allowed = ", ".join(group_bys(query.metric)) or "nothing"
        errors["group_by"] = [f"{query.metric} groups by: {allowed}"]
    if query.classifier and not classifier_applies(query.metric):
        errors["classifier"] = ["applies to classifier metrics (picks, verdicts, streaks) only"]
    kinds = metric_kinds(query.metric)
    if query.kind and (query.metric == STREAK or kinds and query.kind not in kinds):
        errors["kind"] = [f"{query.metric} reads: {', '.join(kinds) or 'no record kinds'}"]
    if query.model and query.metric in NOT_PER_MODEL:
        errors["model"] = [f"{query.metric} is kept per agent, not per model"]
    if query.agent and query.metric == STREAK:
        errors["agent"] = ["streaks are kept per model, not per agent"]
    allowed = MATCH_KEYS.get(query.metric, ())
    bad = [k for k, _ in query.match if k not in allowed and not _is_detail(query.metric, k)]
    if bad:
        errors["match"] = [
            f"{query.metric} can match on: {', '.join(allowed)}"
            + (' and "detail.<field>"' if query.metric == "notices" else "")
            if allowed
            else f"{query.metric} has no dimension to match on"
        ]
    elif any(_is_detail(query.metric, k) for k, _ in query.match) and "code" not in dict(
        query.match
    ):
        errors["match"] = ['matching a notice\'s detail needs its "code" too']
    return errors


def _is_detail(metric: str, key: str) -> bool:
    return (
        metric == "notices"
        and key.startswith(DETAIL)
        and DETAIL_FIELD.fullmatch(key[len(DETAIL) :]) is not None
    )


def window_grain(minutes: int) -> Grain:
    return Grain.MINUTE if minutes <= HOUR else Grain.HOUR


def window_errors(minutes: int) -> list[str]:
    if not 1 <= minutes <= MAX_WINDOW_MINUTES:
        return [f"must be between 1 and {MAX_WINDOW_MINUTES}"]
    if minutes > HOUR and minutes % HOUR:
        return ["a window over an hour is whole hours (120, 180, ...)"]
    return []


def window_start(now: datetime, minutes: int) -> datetime:
    """The first bucket of the window that ends with the bucket holding `now`."""
    if window_grain(minutes) == Grain.MINUTE:
        return truncate(now, Grain.MINUTE) - timedelta(minutes=minutes - 1)
    return truncate(now, Grain.HOUR) - timedelta(hours=minutes // HOUR - 1)


# --- folding rows -------------------------------------------------------------------------------
def fold(query: Query, rows: Iterable[Row], *, since: datetime | None = None) -> dict[str, Any]:
    """Accumulators per group over `rows` (those before `since` skipped)."""
    out: dict[str, Any] = {}
    make = METRICS[query.metric].make
    for group, _, args in _contributions(query, rows, since):
        acc = out.get(group)
        if acc is None:
            acc = out[group] = make()
        acc.add(*args)
    return out


def fold_by_minute(query: Query, rows: Iterable[Row]) -> dict[str, dict[datetime, Any]]:
    """Accumulators per group and minute bucket, for sliding windows."""
    out: dict[str, dict[datetime, Any]] = defaultdict(dict)
    make = METRICS[query.metric].make
    for group, bucket, args in _contributions(query, rows, None):
        acc = out[group].get(bucket)
        if acc is None:
            acc = out[group][bucket] = make()
        acc.add(*args)
    return dict(out)


def _contributions(
    query: Query, rows: Iterable[Row], since: datetime | None
) -> Iterator[tuple[str, datetime, tuple]]:
    metric = METRICS[query.metric]
    match = dict(query.match)
    # A pinned dimension that has its own variant (every pick is in the denominator of every
    # skip reason's rate) reads the rows through that variant.
    variants = dict(metric.variants)
    contribute = next((variants[k] for k in match if k in variants), metric.contribute)
    kinds = set(query.kinds)
    for row in rows:
        if since is not None and row.bucket < since:
            continue
        if kinds and row.kind not in kinds:
            continue
        if query.agent and row.agent != query.agent:
            continue
        if query.classifier and _classifier_of(row) != query.classifier:
            continue
        for group, args in contribute(row):
            if query.model and group.get("model", row.model) != query.model:
                continue
            if match and any(group.get(k) != v for k, v in match.items()):
                continue
            if query.group_by == "agent":
                key = row.agent
            elif query.group_by == "model":
                key = group.get("model", row.model)
            else:
                key = ""
            yield key, row.bucket, args


class Sliding:
    """One accumulator over a window that moves a minute at a time: add the new, drop the old.

    Rates and counts subtract; sketches subtract their bin counts, which is exact because
    minute sketches merge by adding bins. Merging the window afresh each minute would cost
    window-size merges per minute of a day.
    """

    def __init__(self, make) -> None:
        self.acc = make()

    def add(self, other: Any) -> None:
        self.acc.merge(other)

    def remove(self, other: Any) -> None:
        acc = self.acc
        if isinstance(acc, Rate):
            acc.num -= other.num
            acc.den -= other.den
        elif isinstance(acc, Total):
            acc.value -= other.value
            acc.count -= other.count
        elif isinstance(acc, Quantile):
            bins = acc.sketch.bins
            acc.sketch.zero -= other.sketch.zero
            for index, count in other.sketch.bins.items():
                left = bins[index] - count
                if left:
                    bins[index] = left
                else:
                    del bins[index]
        elif hasattr(acc, "remove"):  # an accumulator that knows how (metrics.Calibration)
            acc.remove(other)
        else:
            raise TypeError(f"cannot slide a window over {type(acc).__name__}")

    def result(self) -> tuple[float | None, int]:
        return self.acc.result()


def slide(
    query: Query, buckets: dict[datetime, Any], times: list[datetime], minutes: int
) -> list[tuple[float | None, int]]:
    """(value, count) of the window ending at each of `times` (minutes, sorted), from the
    minute accumulators `buckets`."""
    make = METRICS[query.metric].make
    window = Sliding(make)
    out = []
    step = timedelta(minutes=1)
    lo = hi = None  # the window holds the buckets in [lo, hi]
    for t in times:
        # Minute buckets, even for an hour window: at `t` its current hour held minutes to `t`.
        first = window_start(t, minutes)
        if hi is None or first > hi:  # no overlap with the previous window: start afresh
            window = Sliding(make)
            cursor = first
        else:
            while lo < first:
                if lo in buckets:
                    window.remove(buckets[lo])
                lo += step
            cursor = hi + step
        while cursor <= t:
            if cursor in buckets:
                window.add(buckets[cursor])
            cursor += step
        lo, hi = first, t
        out.append(window.result())
    return out


# --- reading rows ---------------------------------------------------------------------------
class RowIndex:
    """Rows by kind and model (and verdicts by classifier seat too), so that a rule on one model
    or classifier reads only its own rows."""

    def __init__(self, rows: Iterable[Row]) -> None:
        self.by_kind: dict[str, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
        self.verdicts_by_seat: dict[str, list[Row]] = defaultdict(list)
        for row in rows:
            self.by_kind[row.kind][row.model].append(row)
            if row.kind == VERDICT:
                self.verdicts_by_seat[_classifier_of(row)].append(row)

    def rows_for(self, query: Query) -> Iterator[Row]:
        kinds = query.kinds or tuple(self.by_kind)
        for kind in kinds:
            by_model = self.by_kind.get(kind)
            if not by_model:
                continue
            if query.model:
                yield from by_model.get(query.model, ())
            elif kind == VERDICT and query.classifier:
                # `classifier` is the seat of a verdict.
                yield from self.verdicts_by_seat.get(query.classifier, ())
            else:
                for rows in by_model.values():
                    yield from rows


def collapse(rows: Iterable[Row], since: datetime) -> list[Row]:
    """The rows from `since` on, added up per (kind, agent, model, key) and dated `since`.

    Every metric's contribution is linear in a row's count, tokens and sketch for a given kind,
    agent, model and key (records.metrics.definitions never reads the bucket), so the summed row
    folds to what its buckets fold to. Rules then fold one row per key however long their window: a
    day-long window over hour rows is 24 times fewer rows to fold, for every rule reading it.
    """
    cells: dict[tuple, list] = {}
    for row in rows:
        if row.bucket < since:
            continue
        key = (row.kind, row.agent, row.model, row.key)
        cell = cells.get(key)
        if cell is None:
            cells[key] = [row.count, row.tokens_in, row.tokens_out, row.sketch, False,
                          row.cost_nano, row.cost_records, row.cost_unknown]  # fmt: skip
            continue
        cell[0] += row.count
        cell[1] += row.tokens_in
        cell[2] += row.tokens_out
        cell[5] += row.cost_nano
        cell[6] += row.cost_records
        cell[7] += row.cost_unknown
        if row.sketch:
            if not cell[4]:  # a second sketch for this key: merge into a copy, not the row's
                cell[3], cell[4] = _sketch_copy(cell[3]), True
            merge_into(cell[3], row.sketch)
    return [
        Row(since, *key, count, t_in, t_out, sketch, 0.0, *costs)
        for key, (count, t_in, t_out, sketch, _, *costs) in cells.items()
    ]


def _sketch_copy(value: Sketch | dict) -> Sketch:
    sketch = as_sketch(value)
    return Sketch(dict(sketch.bins), sketch.zero)


_STEP = {Grain.MINUTE: timedelta(minutes=1), Grain.HOUR: timedelta(hours=1)}


def _split_kinds(queries: Iterable[Query]) -> tuple[list[str], list[str]]:
    """The kinds the queries read, and those of them whose sketches they need."""
    kinds: set[str] = set()
    sketch_kinds: set[str] = set()
    for query in queries:
        if query.metric in UNWINDOWED:
            continue
        kinds.update(query.kinds)
        if query.family == Family.LATENCY:
            sketch_kinds.update(query.kinds)
    return sorted(kinds), sorted(sketch_kinds)


def read_rows(
    project_id: int,
    queries: Iterable[Query],
    start: datetime,
    end: datetime,
    grain: Grain = Grain.MINUTE,
) -> list[Row]:
    """The rows of `grain` with buckets from `start` to `end` (both included) of the kinds the
    queries read, through records.metrics.reader: sketches only for the latency metrics' kinds,
    parsed, as they are folded again for every rule and every minute of a preview."""
    return _read(project_id, queries, start, end, grain, parse_sketches=True)


def read_window(
    project_id: int,
    queries: Iterable[Query],
    start: datetime,
    end: datetime,
    grain: Grain = Grain.MINUTE,
) -> list[Row]:
    """`collapse(read_rows(...), start)`: the window's rows added up per (kind, agent, model,
    key) and dated `start`, the database adding up what it can (records.metrics.reader)."""
    return _read(project_id, queries, start, end, grain, keep=("kind", "agent", "model", "key"))


def _read(project_id, queries, start, end, grain, **options) -> list[Row]:
    kinds, sketch_kinds = _split_kinds(queries)
    if not kinds:
        return []
    return reader.read(
        project_id,
        grain,
        start,
        end + _STEP[grain],
        kinds=kinds,
        sketch_kinds=sketch_kinds,
        **options,
    )
