"""Rules on notices whose `detail` the rollups do not split by: a count scoped to the rule.

A `notices` rule matches a notice `code` and, optionally, `detail` fields ({"code":
"route.fallback_to_primary", "detail.cause": "timeout"}). The notice rollups are keyed by the code
and, for a few codes, by some detail fields (records.contract.rollup_keys.NOTICE_SPLITS); a rule
that matches only those reads the rollups with every other rule (alerts.windows). Any other detail
field is free-form, so no rollup can hold it without one row per value anybody ever sends: such a
rule counts the notice records of its code inside its window instead, one query per rule and tick,
through the partial index `record_notice_code` (project, rollup_key, ts) WHERE kind = 'notice'
(records migration 0009). The index makes the count read the rule's code within the window only,
never every notice of a busy day: a window is at most a day, and a code is a small share of the
notices.

The detail values compare as text: a number matches as written ("2"), a boolean as "true" on
PostgreSQL ("1" on SQLite). Counts are grouped by the bucket of the rule's window grain, agent
and model, as rollup rows, so the engine's fold and the preview's slide take them unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.db.models import Count, Q, TextField
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Trunc

from alerts.windows import DETAIL, Query, window_grain, window_start
from records.contract import rollup_keys
from records.contract.buckets import truncate
from records.contract.rollup_keys import NOTICE, NOTICE_SPLITS
from records.metrics.reader import Row
from records.models import Grain, Record

_STEP = {Grain.MINUTE: timedelta(minutes=1), Grain.HOUR: timedelta(hours=1)}


def _details(query: Query) -> dict[str, str]:
    return {k[len(DETAIL) :]: v for k, v in query.match if k.startswith(DETAIL)}


def is_scoped(query: Query) -> bool:
    """Whether the rule matches a detail field its code's rollups do not split by."""
    if query.metric != "notices":
        return False
    code = dict(query.match).get("code", "")
    return any(name not in NOTICE_SPLITS.get(code, ()) for name in _details(query))


def unscoped(query: Query) -> Query:
    """The query that folds scoped rows: the detail fields are already matched in SQL."""
    return replace(query, match=tuple((k, v) for k, v in query.match if not k.startswith(DETAIL)))


def _code_filter(code: str) -> Q:
    # records.contract.derive keys a notice by its code, then (for a few codes) the split fields.
    if code in NOTICE_SPLITS:
        return Q(rollup_key__startswith=rollup_keys.escape(code) + "|")
    return Q(rollup_key=rollup_keys.escape(code))


def scoped_rows(
    project_id: int, query: Query, start: datetime, end: datetime, grain: Grain
) -> list[Row]:
    """Counts of the rule's notices with ts in [start, end), by bucket of `grain`, agent and
    model, as NOTICE rows keyed by the code alone."""
    code = dict(query.match)["code"]
    records = Record.objects.filter(
        project_id=project_id, kind=NOTICE, ts__gte=start, ts__lt=end
    ).filter(_code_filter(code))
    if query.agent:
        records = records.filter(agent=query.agent)
    if query.model:
        records = records.filter(model=query.model)
    for i, (name, value) in enumerate(sorted(_details(query).items())):
        field = KeyTextTransform(name, KeyTransform("detail", "data"))
        records = records.annotate(**{f"detail_{i}": Cast(field, TextField())}).filter(
            **{f"detail_{i}": value}
        )
    counted = (
        records.annotate(bucket=Trunc("ts", str(grain), tzinfo=UTC))
        .values_list("bucket", "agent", "model")
        .annotate(n=Count("id"))
        .order_by()
    )
    key = rollup_keys.encode(NOTICE, {"code": code})
    return [
        Row(bucket, NOTICE, agent or "", model or "", key, n, 0, 0, {})
        for bucket, agent, model, n in counted
    ]


def window_rows(project_id: int, query: Query, minutes: int, now: datetime) -> list[Row]:
    """The scoped rows of a rule's window at `now` (the buckets alerts.windows reads)."""
    grain = window_grain(minutes)
    start = window_start(now, minutes)
    return scoped_rows(project_id, query, start, truncate(now, grain) + _STEP[grain], grain)
