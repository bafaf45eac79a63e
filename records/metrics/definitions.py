"""The metrics (docs/architecture.md, "Metrics"), computed from rollup rows only.

Each metric names the kinds whose rollups it reads, how a row is grouped (its natural grouping,
or by agent), and an accumulator that turns rows into a value and the number of records behind
it. `query_metric` reads the rows of one grain and returns the API shape.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from records.contract import rollup_keys, streak_segments
from records.contract.buckets import truncate
from records.contract.derive import VIOLATION_CODES
from records.contract.fallback_causes import LADDER_CAUSES
from records.contract.rollup_keys import (
    CLASSIFICATION,
    MODEL_CALL,
    NOTICE,
    OUTCOME,
    PICK_ERROR,
    PICK_LATENCY,
    PICKS,
    PROVIDER_ERROR,
    RECORD_KINDS,
    SELECTION,
    SELECTION_LINK,
    TURN,
    VERDICT,
    VIOLATION,
)
from records.contract.schema import SkipReason
from records.metrics import reader
from records.metrics.accumulators import (
    Calibration,
    Contribution,
    Metric,
    Quantile,
    Rate,
    Spend,
    SpendPerRun,
    Total,
)
from records.metrics.cost_metrics import COST_METRICS
from records.metrics.reader import Row
from records.models import Grain, StreakSegment

SKIP_REASONS: tuple[str, ...] = SkipReason.__args__
INTERVALS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
MAX_POINTS = 20_000


def _latency(q: float, kinds: tuple[str, ...], group: Callable[[Row], dict], name: str, doc: str):
    return Metric(
        name, kinds, lambda: Quantile(q), lambda r: [(group(r), (r.sketch, r.count))], doc=doc
    )


def _by_model(r: Row) -> dict:
    return {"model": r.model}


def _key(r: Row) -> dict[str, str]:
    return rollup_keys.decode(r.kind, r.key)


def _skip(r: Row) -> list:
    return [({"model": r.model}, (r.count if _key(r)["skip_reason"] else 0, r.count))]


def _skip_by_reason(r: Row) -> list:
    # Every pick and pick error is in the denominator of every reason's rate.
    reason = _key(r)["skip_reason"]
    return [
        ({"reason": each}, (r.count if reason == each else 0, r.count)) for each in SKIP_REASONS
    ]


def _ladder(r: Row) -> list:
    # CLASSIFICATION rows: one count per classification, in the bucket of its first rung-0
    # attempt, under its seat model (records.catchup.upserts.merge_classifications).
    fell_back = _key(r)["fell_back"] == "1"
    return [({"model": r.model}, (r.count if fell_back else 0, r.count))]


def _ladder_by_cause(r: Row) -> list:
    # Every classification is in the denominator of every cause's rate; a fallback folded
    # before causes were kept counts under none of them.
    k = _key(r)
    cause = k["cause"] if k["fell_back"] == "1" else None
    return [
        ({"reason": each}, (r.count if cause == each else 0, r.count)) for each in LADDER_CAUSES
    ]


def _verdicts(r: Row) -> list:
    return [({"model": r.model, "verdict": _key(r)["verdict"]}, (r.count, r.count))]


def _provider_errors(r: Row) -> list:
    k = _key(r)
    return [
        ({"provider": k["provider"], "model": r.model, "error": k["error"]}, (r.count, r.count))
    ]


def _invented(r: Row) -> list:
    k = _key(r)
    return [
        (
            {"decision": k["decision"], "protocol": k["protocol"]},
            (r.count if k["invented"] == "1" else 0, r.count),
        )
    ]


def _swap(r: Row) -> list:
    return [(_by_model(r), (r.count if _key(r)["selected"] != r.model else 0, r.count))]


def _agreement(r: Row) -> list:
    agreement = _key(r)["agreement"]
    return [({}, (r.count if agreement == "agree" else 0, r.count if agreement else 0))]


# Selection accuracy without a judge (records.catchup.tool_funnel): SELECTION_LINK rows, one count
# per tool decision (a pick joined with its iteration's outcome), under the classifier model.
def _selection_agreement(r: Row) -> list:
    agreement = _key(r)["agreement"]
    return [(_by_model(r), (r.count if agreement == "agree" else 0, r.count if agreement else 0))]


def _chosen_called(r: Row) -> list:
    return [(_by_model(r), (r.count if _key(r)["chosen_called"] == "1" else 0, r.count))]


def _calibration(r: Row) -> list:
    k = _key(r)
    if not k["agreement"]:
        return []
    agreeing = r.count if k["agreement"] == "agree" else 0
    return [(_by_model(r), (int(k["bin"]), r.count, agreeing, r.tokens_out))]


# Violations: VIOLATION rows count violating records (code "") and each code; the
# rate's denominator is every record.
def _violation_rate(r: Row) -> list:
    if r.kind != VIOLATION:
        return [(_by_model(r), (0, r.count))]
    return [(_by_model(r), (r.count, 0))] if not _key(r)["code"] else []


def _violation_rate_by_kind(r: Row) -> list:
    if r.kind != VIOLATION:
        return [({"kind": r.kind}, (0, r.count))]
    k = _key(r)
    return [({"kind": k["kind"]}, (r.count, 0))] if not k["code"] else []


def _violation_rate_by_code(r: Row) -> list:
    if r.kind != VIOLATION:
        return [({"code": code}, (0, r.count)) for code in VIOLATION_CODES]
    code = _key(r)["code"]
    return [({"code": code}, (r.count, 0))] if code else []


def _violations(r: Row) -> list:
    k = _key(r)
    if not k["code"]:
        return []
    return [({"kind": k["kind"], "code": k["code"], "model": r.model}, (r.count, r.count))]


# Notices by code, and by the detail fields their rollup key splits by
# (rollup_keys.NOTICE_SPLITS), as "detail.<field>"; alerts.notices counts other detail fields.
def _notices(r: Row) -> list:
    k = _key(r)
    group = {"code": k.pop("code"), "model": r.model, **{f"detail.{n}": v for n, v in k.items()}}
    return [(group, (r.count, r.count))]


_CALL = (MODEL_CALL,)


def _call_group(r: Row) -> dict:
    return {"provider": _key(r)["provider"], "model": r.model}


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        *(
            _latency(
                q,
                (PICK_LATENCY,),
                _by_model,
                f"classifier_latency_p{int(q * 100)}",
                "Quantile of latencyMs over picks and pick errors, by classifier model.",
            )
            for q in (0.5, 0.95, 0.99)
        ),
        Metric(
            "pick_error_rate",
            PICKS,
            Rate,
            lambda r: [(_by_model(r), (r.count if r.kind == PICK_ERROR else 0, r.count))],
            doc="pick_error / (pick + pick_error), by classifier model.",
        ),
        Metric(
            "narrowing_skip_rate",
            PICKS,
            Rate,
            _skip,
            group_bys=("model", "agent", "reason"),
            variants=(("reason", _skip_by_reason),),
            doc="(Picks + pick errors) with narrowedSkipped / (picks + pick errors); "
            "group_by=reason splits by skip reason.",
        ),
        Metric(
            "first_pick_agreement",
            (OUTCOME,),
            Rate,
            _agreement,
            group_bys=("agent",),
            doc="Outcomes with firstAgrees true / outcomes with firstAgrees present.",
        ),
        Metric(
            "selection_agreement",
            (SELECTION_LINK,),
            Rate,
            _selection_agreement,
            doc="Tool decisions (a pick and the outcome of its iteration) whose first call was "
            "the top-ranked tool (firstAgrees) / decisions with firstAgrees, by classifier model.",
        ),
        Metric(
            "chosen_called_rate",
            (SELECTION_LINK,),
            Rate,
            _chosen_called,
            doc="Tool decisions whose top-ranked tool was among the tools called / decisions, "
            "by classifier model.",
        ),
        Metric(
            "calibration_error",
            (SELECTION_LINK,),
            Calibration,
            _calibration,
            doc="Expected calibration error of the classifier's confidence against first-pick "
            "agreement, over ten confidence bins, by classifier model.",
        ),
        Metric(
            "swap_rate",
            (SELECTION,),
            Rate,
            _swap,
            doc="model_selection with selected_model != default_model, by default_model.",
        ),
        Metric(
            "ladder_fallback_rate",
            (CLASSIFICATION,),
            Rate,
            _ladder,
            group_bys=("model", "agent", "reason"),
            variants=(("reason", _ladder_by_cause),),
            doc="Classifications (run, toolCallId) with a rung-1 attempt / classifications, by "
            "seatModel, in the bucket of each classification's first rung-0 attempt; "
            "group_by=reason splits the fallbacks by cause, what the seat's last attempt came "
            "to: parse_error, timeout, error, unavailable (no cause given) or ruled.",
        ),
        Metric(
            "verdicts",
            (VERDICT,),
            Total,
            _verdicts,
            doc="Counts of allow / block / parse_error / unavailable by model.",
        ),
        Metric(
            "provider_errors",
            (PROVIDER_ERROR,),
            Total,
            _provider_errors,
            doc="provider.error counts by provider, model and error.",
        ),
        Metric(
            "invented_tool_rate",
            (TURN,),
            Rate,
            _invented,
            group_bys=("agent",),
            doc="Share of turns with invented tools, by decision kind and protocol.",
        ),
        *(
            _latency(
                q,
                _CALL,
                _call_group,
                f"model_call_latency_p{int(q * 100)}",
                "Quantile of model_call durationMs, by provider and model.",
            )
            for q in (0.5, 0.95, 0.99)
        ),
        Metric(
            "model_call_tokens",
            _CALL,
            Total,
            lambda r: [(_call_group(r), (r.tokens_in + r.tokens_out, r.count))],
            doc="Input + output tokens of model calls, by provider and model.",
        ),
        Metric(
            "violation_rate",
            (*RECORD_KINDS, VIOLATION),
            Rate,
            _violation_rate,
            group_bys=("model", "agent", "kind", "code"),
            variants=(("kind", _violation_rate_by_kind), ("code", _violation_rate_by_code)),
            doc="Records with a contract violation / records; group_by=kind or code splits it.",
        ),
        Metric(
            "violations",
            (VIOLATION,),
            Total,
            _violations,
            doc="Contract violations by record kind, code and model.",
        ),
        Metric(
            "notices",
            (NOTICE,),
            Total,
            _notices,
            doc="Notices by code and model (and the detail fields their key splits by).",
        ),
        Metric(
            "records",
            RECORD_KINDS,
            Total,
            lambda r: [({"kind": r.kind}, (r.count, r.count))],
            group_bys=("kind", "model", "agent"),
            doc="Records received, by kind.",
        ),
        *COST_METRICS,
    )
}

__all__ = [
    "METRICS",
    "Calibration",
    "Contribution",
    "Metric",
    "Quantile",
    "Rate",
    "Row",
    "Spend",
    "SpendPerRun",
    "Total",
]


class MetricError(ValueError):
    """A request the metric cannot answer; `param` names the query parameter at fault."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def _check(name: str, interval: str, group_by: str | None, start: datetime, end: datetime):
    metric = METRICS.get(name)
    if metric is None:
        raise MetricError("metric", f"unknown metric {name!r}; one of: {', '.join(METRICS)}")
    if interval not in INTERVALS:
        raise MetricError("interval", "must be one of: minute, hour, day")
    if group_by is not None and group_by not in metric.group_bys:
        raise MetricError("group_by", f"{name} groups by: {', '.join(metric.group_bys)}")
    if end <= start:
        raise MetricError("to", "must be after from")
    first = truncate(start, interval)
    if (end - first) / INTERVALS[interval] > MAX_POINTS:
        raise MetricError("interval", f"more than {MAX_POINTS:,} points; use a coarser interval")
    return metric


def fold_metric(
    name: str,
    rows: Iterable[Row],
    *,
    interval: str,
    start: datetime,
    end: datetime,
    group_by: str | None = None,
    models: list[str] | None = None,
) -> dict:
    """The API shape for metric `name` over `rows` (rows of other kinds skipped)."""
    metric = _check(name, interval, group_by, start, end)
    kinds = set(metric.kinds)
    contribute = dict(metric.variants).get(group_by, metric.contribute)
    points: dict[tuple, dict[datetime, Any]] = defaultdict(dict)
    shared: dict[datetime, Any] = {}  # Metric.shared_kinds' rows, by bucket
    share = group_by not in metric.shared_split
    for row in rows:
        if kinds and row.kind not in kinds:
            continue
        if share and row.kind in metric.shared_kinds:
            for _, args in contribute(row):
                shared.setdefault(row.bucket, metric.make()).add(*args)
            continue
        for group, args in contribute(row):
            if models and group.get("model", row.model) not in models:
                continue
            if group_by == "agent":
                group = {"agent": row.agent}
            elif group_by == "kind":
                group = {"kind": group.get("kind", row.kind)}
            elif group_by == "model" and "model" not in group:
                group = {"model": row.model}
            group_key = tuple(sorted(group.items()))
            acc = points[group_key].get(row.bucket)
            if acc is None:
                acc = points[group_key][row.bucket] = metric.make()
            acc.add(*args)

    if shared and not points and group_by is None:
        points[()] = {}  # runs but no spend: the one natural group still answers
    for by_time in points.values():
        for t, acc in shared.items():
            by_time.setdefault(t, metric.make()).merge(acc)
    series, totals = [], []
    for group_key in sorted(points):
        by_time = points[group_key]
        total = metric.make()
        out = []
        for t in sorted(by_time):
            value, count = by_time[t].result()
            total.merge(by_time[t])
            out.append({"t": t, "value": value, "count": count, **_extra(by_time[t])})
        value, count = total.result()
        group = api_group(dict(group_key))
        series.append({"group": group, "points": out})
        totals.append({"group": group, "value": value, "count": count, **_extra(total)})
    return {
        "metric": name,
        "interval": interval,
        "from": start,
        "to": end,
        "series": series,
        "totals": totals,
    }


def _extra(acc: Any) -> dict:
    """What an accumulator adds beside value and count (Spend: its unknown records)."""
    extra = getattr(acc, "extra", None)
    return extra() if extra is not None else {}


def api_group(group: dict) -> dict:
    """A group as the API shows it: a model not reported is null (stored as "")."""
    if "model" in group:
        return {**group, "model": rollup_keys.model_of(group["model"])}
    return group


def query_metric(
    *,
    project_id: int,
    name: str,
    interval: str,
    start: datetime,
    end: datetime,
    group_by: str | None = None,
    agents: list[str] | None = None,
    models: list[str] | None = None,
    releases: list[str] | None = None,
) -> dict:
    metric = _check(name, interval, group_by, start, end)
    rows = reader.read(
        project_id,
        interval,
        start,
        end,
        kinds=metric.kinds,
        agents=agents,
        releases=releases,
        sketch_kinds=metric.kinds if isinstance(metric.make(), Quantile) else (),
    )
    return fold_metric(
        name, rows, interval=interval, start=start, end=end, group_by=group_by, models=models
    )


# --- contract-broken streaks over time -----------------------------------------------------------


def streak_history(
    project_id: int, start: datetime, end: datetime, models: Iterable[str] | None = None
) -> dict[str, list[tuple[datetime, int, int]]]:
    """Per model, for each hour from `start` (on the hour) to `end`: (the hour, the streak at
    its end, the highest the streak reached within it).

    The streak at an hour is the fold of every segment up to it (records.contract.streak_segments):
    the day segments before `start`'s day, then that day's hour segments onwards. Two queries.
    """
    first_day = truncate(start, Grain.DAY)
    segments = StreakSegment.objects.filter(project_id=project_id)
    if models is not None:
        segments = segments.filter(model__in=list(models))
    states: dict[str, streak_segments.Segment] = defaultdict(lambda: streak_segments.EMPTY)
    for model, *fields in (
        segments.filter(grain=Grain.DAY, bucket__lt=first_day)
        .order_by("model", "bucket")
        .values_list("model", *streak_segments.FIELDS)
    ):
        states[model] = streak_segments.combine(states[model], streak_segments.Segment(*fields))
    hours: dict[str, dict[datetime, streak_segments.Segment]] = defaultdict(dict)
    for model, bucket, *fields in (
        segments.filter(grain=Grain.HOUR, bucket__gte=first_day, bucket__lt=end)
        .order_by("model", "bucket")
        .values_list("model", "bucket", *streak_segments.FIELDS)
    ):
        hours[model][bucket] = streak_segments.Segment(*fields)
    times = []
    t = first_day
    while t < end:
        times.append(t)
        t += timedelta(hours=1)
    out: dict[str, list[tuple[datetime, int, int]]] = {}
    for model in sorted(set(states) | set(hours)):
        state = states[model]
        points = []
        for t in times:
            segment = hours[model].get(t)
            peak = state.current
            if segment is not None:
                # The highest the streak reached within the hour: a run inside it, or the
                # streak carried in plus the hour's leading parse errors.
                peak = max(segment.longest, state.current + segment.prefix)
                state = streak_segments.combine(state, segment)
            if t >= start:
                points.append((t, state.current, peak))
        out[model] = points
    return out
