"""What the installation is at the moment of a scrape: read from the database and the broker.

Gauges here, never in the per-process files (ops.multiprocess): a number that describes the
installation (the catch-up's backlog, a queue's depth, a heartbeat's age) is the same whichever
web process is asked, and is never left behind by a process that died. Each group costs a few
indexed lookups or one grouped count over a small table. When the database or the broker cannot
be reached, its `*_up` gauge says 0 and the groups that need it are left out: the scrape itself
still answers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from alerts.models import DeliveryAttempt, Notification
from config import replicas
from config.outage import DATABASE_UNAVAILABLE
from ops import broker
from records.metrics.freshness import freshness
from workers.heartbeat import host_workers, queue_status
from workers.models import ExportJob

log = logging.getLogger(__name__)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def catch_up() -> Iterator:
    now = timezone.now()
    state = freshness(now)
    yield _gauge(
        "decisionboard_catchup_pending_records",
        "Records not yet folded into the rollups (an upper bound: the id span above the "
        "watermark).",
        state["pending_records"],
    )
    yield _gauge(
        "decisionboard_catchup_lag_seconds",
        "How long the oldest record not yet folded into the rollups has waited.",
        state["lag_seconds"],
    )
    yield _gauge(
        "decisionboard_catchup_watermark_id",
        "The id up to which records are folded into the rollups (its rate is the catch-up's "
        "throughput).",
        state["watermark_id"],
    )
    last = state["last_pass_at"]
    yield _gauge(
        "decisionboard_catchup_last_pass_age_seconds",
        "Seconds since the last catch-up pass of the stalest lane (+Inf: never).",
        (now - last).total_seconds() if last else math.inf,
    )
    # Each lane's (records.catchup.passes): the figures above are the worst lane's.
    lane_lag = GaugeMetricFamily(
        "decisionboard_catchup_lane_lag_seconds",
        "How long the oldest record of the lane's projects not yet folded in has waited.",
        labels=["lane"],
    )
    lane_mark = GaugeMetricFamily(
        "decisionboard_catchup_lane_watermark_id",
        "The id up to which the lane has folded its projects' records (its rate is the lane's "
        "throughput in ids).",
        labels=["lane"],
    )
    lane_age = GaugeMetricFamily(
        "decisionboard_catchup_lane_last_pass_age_seconds",
        "Seconds since the lane's last catch-up pass (+Inf: never).",
        labels=["lane"],
    )
    for lane in state["lanes"]:
        label = [str(lane["lane"])]
        lane_lag.add_metric(label, lane["lag_seconds"])
        lane_mark.add_metric(label, lane["watermark_id"])
        passed = lane["last_pass_at"]
        lane_age.add_metric(label, (now - passed).total_seconds() if passed else math.inf)
    yield from (lane_lag, lane_mark, lane_age)


def heartbeats() -> Iterator:
    now = timezone.now()
    ages = GaugeMetricFamily(
        "decisionboard_heartbeat_age_seconds",
        "Seconds since a worker last ran beat's heartbeat on the queue (+Inf: never); over 60 "
        "means no worker serves it, or beat is down.",
        labels=["queue"],
    )
    for status in queue_status(now):
        age = (now - status.last_seen).total_seconds() if status.last_seen else math.inf
        ages.add_metric([status.queue], age)
    yield ages
    # Each host's workers (DECISIONBOARD_HOSTNAME), whichever of them beat's heartbeats reach.
    seen = GaugeMetricFamily(
        "decisionboard_worker_seen_age_seconds",
        "Seconds since the worker (a Celery node on a host) last said it consumes the queue; "
        "over 60 means it is gone.",
        labels=["host", "worker", "queue"],
    )
    for worker in host_workers(now):
        seen.add_metric(
            [worker.host, worker.worker, worker.queue], (now - worker.last_seen).total_seconds()
        )
    yield seen


def exports() -> Iterator:
    jobs = GaugeMetricFamily(
        "decisionboard_export_jobs",
        "Export jobs by status (queued and running are the work in hand).",
        labels=["status"],
    )
    counts = dict(ExportJob.objects.values_list("status").annotate(n=Count("id")))
    for status in ExportJob.Status:
        jobs.add_metric([status.value], counts.get(status.value, 0))
    yield jobs


def alerts() -> Iterator:
    notifications = GaugeMetricFamily(
        "decisionboard_alert_notifications",
        "Alert notifications (one event told to one channel) by status; queued ones wait for "
        "delivery.",
        labels=["status"],
    )
    counts = dict(Notification.objects.values_list("status").annotate(n=Count("id")))
    for status in Notification.Status:
        notifications.add_metric([status.value], counts.get(status.value, 0))
    yield notifications
    attempts = CounterMetricFamily(
        "decisionboard_alert_delivery_attempts",
        "Delivery attempts recorded, by channel kind and outcome (ok, failed).",
        labels=["channel_kind", "outcome"],
    )
    rows = (
        DeliveryAttempt.objects.values_list("notification__channel__kind", "ok")
        .annotate(n=Count("id"))
        .order_by()
    )
    for kind, ok, n in rows:
        attempts.add_metric([kind, "ok" if ok else "failed"], n)
    yield attempts


def queues() -> Iterator:
    depths = GaugeMetricFamily(
        "decisionboard_queue_depth",
        "Messages waiting in each Celery queue (not those a worker holds).",
        labels=["queue"],
    )
    for queue, depth in broker.queue_depths().items():
        depths.add_metric([queue], depth)
    yield depths


def replica_health() -> Iterator:
    """Each replica's (DATABASE_REPLICA_URL): whether it answers, and how far behind it is."""
    up = GaugeMetricFamily(
        "decisionboard_replica_up", "Whether the replica answered (reads go to it).",
        labels=["replica"],
    )  # fmt: skip
    delay = GaugeMetricFamily(
        "decisionboard_replica_delay_seconds",
        "How long ago the primary committed the last transaction the replica has not replayed "
        "yet (0: it has replayed all it received); past DECISIONBOARD_REPLICA_MAX_LAG_SECONDS "
        "it is not read.",
        labels=["replica"],
    )
    for alias in replicas.replica_aliases():
        state = replicas.health(alias, fresh=True)
        up.add_metric([alias], 1 if state.ok else 0)
        if state.ok:
            delay.add_metric([alias], state.delay)
    yield from (up, delay)


class StateCollector:
    """A collector for a scrape's registry: the installation's state, read now, from the
    primary (a replica's view of the catch-up is behind by its own delay)."""

    def collect(self) -> Iterator:
        with replicas.reading_primary():
            yield from self._collect()
        yield from replica_health()

    def _collect(self) -> Iterator:
        try:
            database = list(catch_up()) + list(heartbeats()) + list(exports()) + list(alerts())
        except DATABASE_UNAVAILABLE as exc:
            log.warning("metrics: the database is unreachable: %s", exc)
            database = None
        yield _gauge(
            "decisionboard_database_up", "Whether the database answered this scrape.",
            1 if database is not None else 0,
        )  # fmt: skip
        yield from database or ()
        try:
            waiting = list(queues())
        except Exception as exc:  # redis-py and the filesystem raise several types
            log.warning("metrics: the broker is unreachable: %s", exc)
            waiting = None
        yield _gauge(
            "decisionboard_broker_up", "Whether the broker answered this scrape.",
            1 if waiting is not None else 0,
        )  # fmt: skip
        yield from waiting or ()
