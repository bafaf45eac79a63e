"""What the product counts as it works: ingest outcomes, request latency, Celery task runs.

Counters and histograms only, kept in the machine's metrics folder (ops.multiprocess) so that
every gunicorn and Celery process adds to the same sums. The views and tasks call the small
functions below; what the product *is* at a moment (backlog, queue depths, heartbeats) is read
at scrape time instead (ops.state).

Label values come from a fixed vocabulary or from the installation's own names (projects,
routes, tasks), never from what a client posts, so that no client can mint new time series:
a rejected record's kind is `unknown` unless it names a known kind.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Count
from prometheus_client import Counter, Histogram

from config.outage import DATABASE_UNAVAILABLE
from records.kinds import KIND_NAMES
from records.models import Record
from records.normalise import NormalisedRecord

log = logging.getLogger(__name__)

ACCEPTED, DUPLICATE, REJECTED = "accepted", "duplicate", "rejected"
UNKNOWN_KIND = "unknown"
_KNOWN_KINDS = frozenset(KIND_NAMES)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

INGEST_RECORDS = Counter(
    "decisionboard_ingest_records",
    "Records posted, by project, kind and outcome: accepted (stored), duplicate (stored before, "
    "or repeated in its batch) or rejected (invalid); via api (/api/v1/records) or otlp.",
    ["project", "kind", "outcome", "via"],
)
OTLP_REJECTED_SPANS = Counter(
    "decisionboard_otlp_rejected_spans",
    "OTLP spans rejected (mapped to nothing, or a record from them was invalid), by project.",
    ["project"],
)
# Around the 150 ms goal of DESIGN §9, so that the share of requests under it can be read off.
HTTP_REQUEST_SECONDS = Histogram(
    "decisionboard_http_request_duration_seconds",
    "Time to answer a request (to the first byte of a streamed one), by method, URL route and "
    "status code.",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10),
)
TASK_SECONDS = Histogram(
    "decisionboard_task_duration_seconds",
    "Celery task runs by task and state (success, retry, failure): catch_up (one catch-up: "
    "passes until caught up), evaluate_alerts (an alert tick), deliver_notification, export.",
    ["task", "state"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)


def kind_label(kind: Any) -> str:
    return kind if kind in _KNOWN_KINDS else UNKNOWN_KIND


def _posted_kind(raw: Any) -> str:
    return kind_label(raw.get("kind") if isinstance(raw, dict) else None)


def split_by_kind(valid: Sequence[NormalisedRecord], accepted: int) -> tuple[Tally, Tally] | None:
    """(accepted, duplicates) by kind for a stored batch, from the store's two totals.

    The store keeps the first record of each key (records.store) and counts the rest as
    duplicates, so repeats inside the batch are known here; of the distinct keys, `accepted`
    were new. Which ones is plain unless several kinds share a batch of which some but not all
    were stored before: then None, and the caller asks the database.
    """
    first: dict[str, str] = {}
    repeated: Tally = Tally()
    for record in valid:
        if record.record_key in first:
            repeated[record.kind] += 1
        else:
            first[record.record_key] = record.kind
    distinct = Tally(first.values())
    stored_before = len(first) - accepted
    if stored_before == 0:
        return distinct, repeated
    if accepted == 0:
        return Tally(), repeated + distinct
    if len(distinct) == 1:
        (kind,) = distinct
        return Tally({kind: accepted}), repeated + Tally({kind: stored_before})
    return None


def _stored_now(project_id: int, keys: list[str], now: datetime) -> Tally:
    """Of `keys`, how many of each kind this batch stored: the store stamps them `now`."""
    stored: Tally = Tally()
    for start in range(0, len(keys), 500):  # SQLite's limit on parameters
        rows = (
            Record.objects.filter(
                project_id=project_id, record_key__in=keys[start : start + 500], received_at=now
            )
            .values_list("kind")
            .annotate(n=Count("id"))
        )
        stored.update(dict(rows))
    return stored


def count_ingest(
    via: str,
    project: Any,
    valid: Sequence[NormalisedRecord],
    accepted: int,
    now: datetime,
    rejected_kinds: Iterable[str],
) -> None:
    """Count one stored batch: its valid records as accepted or duplicate, and the rejected."""
    split = split_by_kind(valid, accepted)
    if split is None:
        keys = list(dict.fromkeys(r.record_key for r in valid))
        try:
            new = _stored_now(project.pk, keys, now)
        except DATABASE_UNAVAILABLE as exc:
            # The batch is committed and its answer must say so: leave this batch's accepted
            # and duplicate records uncounted rather than answer 503.
            log.warning("not counting a stored batch by kind: %s", exc)
            new, valid = Tally(), []
        duplicates = Tally(r.kind for r in valid)
        duplicates.subtract(new)
        split = new, +duplicates
    outcomes = ((ACCEPTED, split[0]), (DUPLICATE, split[1]), (REJECTED, Tally(rejected_kinds)))
    for outcome, by_kind in outcomes:
        for kind, n in by_kind.items():
            if n:
                INGEST_RECORDS.labels(project.name, kind, outcome, via).inc(n)


def count_api_ingest(
    project: Any,
    posted: Sequence[tuple[int, Any]],
    rejected: Iterable[dict],
    valid: Sequence[NormalisedRecord],
    stored: Any,
    now: datetime,
) -> None:
    """POST /api/v1/records: `posted` is the body's (index, raw record) pairs, `rejected` the
    answer's rejected entries (an NDJSON line that was not JSON has no raw record)."""
    raw_by_index = dict(posted)
    kinds = (_posted_kind(raw_by_index.get(entry["index"])) for entry in rejected)
    count_ingest("api", project, valid, stored.accepted, now, kinds)


def count_otlp_ingest(project: Any, result: Any, stored: Any, now: datetime) -> None:
    """POST /v1/traces: `result` is records.otlp's ExportResult."""
    kinds = (kind_label(kind) for kind in result.rejected_kinds)
    count_ingest("otlp", project, result.records, stored.accepted, now, kinds)
    if result.rejected_spans:
        OTLP_REJECTED_SPANS.labels(project.name).inc(result.rejected_spans)


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    method = method if method in _METHODS else "other"
    HTTP_REQUEST_SECONDS.labels(method, route, str(status)).observe(seconds)


def task_label(name: str) -> str:
    """workers.tasks.catch_up_task -> catch_up."""
    return name.rsplit(".", 1)[-1].removesuffix("_task")


def observe_task(name: str, state: str, seconds: float) -> None:
    TASK_SECONDS.labels(task_label(name), state.lower()).observe(seconds)
