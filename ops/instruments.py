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

from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import Counter, Histogram

from records.contract.kinds import KIND_NAMES
from records.contract.normalise import NormalisedRecord

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
REDACTIONS = Counter(
    "decisionboard_redactions",
    "Values redacted from the free text of valid posted records before they were stored, by "
    "project and detector (a built-in one, `key` for a JSON key rule, or a project pattern's "
    "name); a resent duplicate is redacted, and counted, again.",
    ["project", "detector"],
)
OTLP_REJECTED_SPANS = Counter(
    "decisionboard_otlp_rejected_spans",
    "OTLP spans rejected (mapped to nothing, or a record from them was invalid), by project.",
    ["project"],
)
# The OTLP/gRPC receiver's calls, as HTTP_REQUEST_SECONDS counts the web's requests.
GRPC_REQUEST_SECONDS = Histogram(
    "decisionboard_grpc_request_duration_seconds",
    "Time to answer an OTLP/gRPC export (api/otlp_grpc.py), by gRPC status code (OK, "
    "UNAUTHENTICATED, RESOURCE_EXHAUSTED, UNAVAILABLE, ...).",
    ["method", "code"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10),
)
# Around the 150 ms goal, so that the share of requests under it can be read off.
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
# An alert tick (workers.tasks.evaluate_alerts_task) evaluates every active rule once; its
# duration is decisionboard_task_duration_seconds{task="evaluate_alerts"}, its deliveries
# decisionboard_alert_delivery_attempts and decisionboard_alert_notifications (ops.state).
ALERT_RULES_EVALUATED = Counter(
    "decisionboard_alert_rules_evaluated",
    "Alert rules evaluated by the alert ticks, by outcome: ok, or error (the rule could not be "
    "evaluated; its last_error says why).",
    ["outcome"],
)
ALERT_EVENTS = Counter(
    "decisionboard_alert_events",
    "Alert state changes (events) recorded by the alert ticks.",
)
ALERT_NOTIFICATIONS_ENQUEUED = Counter(
    "decisionboard_alert_notifications_enqueued",
    "Notifications handed to the delivery queue by the alert ticks: new ones, and queued ones "
    "whose task was lost.",
)


def kind_label(kind: Any) -> str:
    return kind if kind in _KNOWN_KINDS else UNKNOWN_KIND


def posted_kind(raw: Any) -> str:
    """The kind label of a posted raw record (`unknown` when it names none we know)."""
    return kind_label(raw.get("kind") if isinstance(raw, dict) else None)


def count_ingest(
    via: str,
    project: Any,
    valid: Sequence[NormalisedRecord],
    accepted_by_kind: dict[str, int],
    rejected_kinds: Iterable[str],
) -> None:
    """Count one stored batch: of its valid records, those the store took as new (its count
    by kind) as accepted and the rest as duplicates; and the rejected ones."""
    accepted = Tally(accepted_by_kind)
    if accepted.total() == len(valid):  # no duplicates, as in nearly every batch
        duplicates = Tally()
    else:
        duplicates = Tally(r.kind for r in valid)
        duplicates.subtract(accepted)
    outcomes = ((ACCEPTED, accepted), (DUPLICATE, duplicates), (REJECTED, Tally(rejected_kinds)))
    for outcome, by_kind in outcomes:
        for kind, n in by_kind.items():
            if n > 0:
                INGEST_RECORDS.labels(project.name, kind, outcome, via).inc(n)


def count_redactions(project: Any, valid: Sequence[NormalisedRecord]) -> None:
    """What the batch's redaction replaced, by detector. Detector names come from the built-in
    list and the project's own rules, never from a posted record."""
    found: Tally[str] = Tally()
    for record in valid:
        if record.redacted:
            found.update(record.redacted)
    for detector, n in found.items():
        REDACTIONS.labels(project.name, detector).inc(n)


def count_rejected_spans(project: Any, spans: int) -> None:
    """Spans of an OTLP export that mapped to nothing or to a rejected record."""
    if spans:
        OTLP_REJECTED_SPANS.labels(project.name).inc(spans)


def count_alert_tick(tick: Any) -> None:
    """One alert tick: `tick` is alerts.engine's Tick."""
    ALERT_RULES_EVALUATED.labels("ok").inc(tick.rules - tick.errors)
    ALERT_RULES_EVALUATED.labels("error").inc(tick.errors)
    ALERT_EVENTS.inc(tick.events)
    ALERT_NOTIFICATIONS_ENQUEUED.inc(tick.notifications)


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    method = method if method in _METHODS else "other"
    HTTP_REQUEST_SECONDS.labels(method, route, str(status)).observe(seconds)


def observe_grpc_request(method: str, code: str, seconds: float) -> None:
    GRPC_REQUEST_SECONDS.labels(method, code).observe(seconds)


def task_label(name: str) -> str:
    """workers.tasks.catch_up_task -> catch_up."""
    return name.rsplit(".", 1)[-1].removesuffix("_task")


def observe_task(name: str, state: str, seconds: float) -> None:
    TASK_SECONDS.labels(task_label(name), state.lower()).observe(seconds)
