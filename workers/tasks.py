"""Celery tasks: one-line wrappers around plain functions that take ids, never instances.

Only errors a retry can fix are retried: a transport's temporary failure, and the database
being unreachable or restarting (config.outage.DATABASE_UNAVAILABLE), which a few seconds
often fix. Anything else is a bug a retry would only repeat.
"""

from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.db import transaction

from alerts import delivery, engine
from alerts.transports import TransportError
from config.outage import DATABASE_UNAVAILABLE
from ops.instruments import count_alert_tick
from records import catchup
from records.store import retention
from workers import export_jobs, heartbeat

log = logging.getLogger(__name__)

# A catch-up cut short by an outage retries after 1, 2, 4, 8 s. A retry keeps the expiry of the
# message it retries, so beat's (sent every 5 s, expiring in 5 s) give way to the next tick
# instead of piling up through a long outage; an ingest nudge's (60 s) retries in full.
CATCH_UP_RETRIES = 4


def catch_up_backoff(retries: int) -> int:
    return 2**retries


@shared_task(ignore_result=True)
def heartbeat_task(queue: str = "default") -> None:
    heartbeat.beat(queue)


@shared_task(bind=True, ignore_result=True, max_retries=CATCH_UP_RETRIES)
def catch_up_task(self, lane: int | None = None) -> None:
    # lane None: every lane in turn (a message from before lanes, or a manual run).
    lanes = catchup.configured_lanes()
    if lane is not None and lane >= lanes:
        # Sent by a beat or web process that counts more lanes than this worker (a rolling
        # change of DECISIONBOARD_CATCHUP_LANES): the lanes this worker knows cover every project.
        log.warning("catch-up lane %s: this worker has %s lanes; skipped", lane, lanes)
        return
    try:
        catchup.catch_up(
            lane=lane,
            lanes=lanes,
            streak_settle=catchup.STREAK_SETTLE_SECONDS,
            spacing=catchup.PASS_SPACING_SECONDS,
        )
    except DATABASE_UNAVAILABLE as exc:
        # Each pass moves the watermark in its own transaction, so a pass the outage cut short
        # left nothing behind: the retry resumes from the watermark. (Celery logs the retry.)
        raise self.retry(exc=exc, countdown=catch_up_backoff(self.request.retries)) from None


@shared_task(ignore_result=True)
def export_task(job_id: int) -> None:
    export_jobs.run_export(job_id)


@shared_task(ignore_result=True)
def expire_exports_task() -> None:
    export_jobs.expire_exports()


@shared_task(ignore_result=True)
def expire_records_task() -> None:
    retention.expire()


@shared_task(bind=True, ignore_result=True, max_retries=delivery.ATTEMPTS - 1)
def deliver_notification_task(self, event_id: int, channel_id: int) -> None:
    # Only errors a retry can fix are retried, with exponential backoff; each try is recorded.
    final = self.request.retries >= self.max_retries
    try:
        delivery.deliver(event_id, channel_id, final=final)
    except TransportError as exc:
        if not (exc.permanent or final):
            raise self.retry(countdown=delivery.backoff(self.request.retries)) from None
    except DATABASE_UNAVAILABLE as exc:
        # The event and the attempts live in the database: try the whole delivery again later.
        raise self.retry(exc=exc, countdown=delivery.backoff(self.request.retries)) from None


def enqueue_delivery(event_id: int, channel_id: int) -> None:
    deliver_notification_task.apply_async((event_id, channel_id), retry=False)


@shared_task(ignore_result=True)
def evaluate_alerts_task() -> None:
    count_alert_tick(engine.evaluate_all(enqueue=enqueue_delivery))


@shared_task(bind=True, ignore_result=True, max_retries=CATCH_UP_RETRIES)
def reprice_override_task(self, project_id: int, model: str, provider: str, since_iso: str):
    try:
        catchup.reprice(project_id, model, provider, datetime.fromisoformat(since_iso))
    except DATABASE_UNAVAILABLE as exc:
        # Each chunk is its own transaction and pricing again is idempotent: a retry redoes
        # the chunk the error cut short and finds the earlier ones already priced.
        raise self.retry(exc=exc, countdown=catch_up_backoff(self.request.retries)) from None


def enqueue_reprice(project_id: int, model: str, provider: str, since: datetime) -> None:
    """Price the project's records of `model` (from `provider`, "" for any) from `since` on
    again, once the transaction that changed its price override commits (on none, at once).

    The task waits until every process has read the overrides again
    (PRICE_OVERRIDE_CACHE_SECONDS, and a second for a batch being stored at that moment): the
    records a process priced with the overrides it still kept are priced again too."""
    args = (project_id, model, provider or "", since.isoformat())
    countdown = settings.DECISIONBOARD["PRICE_OVERRIDE_CACHE_SECONDS"]
    countdown = countdown + 1 if countdown else 0

    def send() -> None:
        try:
            reprice_override_task.apply_async(args, countdown=countdown, retry=False)
        except Exception:  # the override is saved: say loudly which records keep the old price
            log.exception("could not enqueue the re-pricing of %s; records keep their cost", args)

    transaction.on_commit(send)
