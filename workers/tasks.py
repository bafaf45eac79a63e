"""Celery tasks: one-line wrappers around plain functions that take ids, never instances."""

from __future__ import annotations

from celery import shared_task

from alerts import delivery, engine
from alerts.transports import TransportError
from records import rollup
from workers import exports, heartbeat


@shared_task(ignore_result=True)
def heartbeat_task(queue: str = "default") -> None:
    heartbeat.beat(queue)


@shared_task(ignore_result=True)
def catch_up_task() -> None:
    rollup.catch_up()


@shared_task(ignore_result=True)
def export_task(job_id: int) -> None:
    exports.run_export(job_id)


@shared_task(ignore_result=True)
def expire_exports_task() -> None:
    exports.expire_exports()


@shared_task(bind=True, ignore_result=True, max_retries=delivery.ATTEMPTS - 1)
def deliver_notification_task(self, event_id: int, channel_id: int) -> None:
    # Only errors a retry can fix are retried, with exponential backoff; each try is recorded.
    final = self.request.retries >= self.max_retries
    try:
        delivery.deliver(event_id, channel_id, final=final)
    except TransportError as exc:
        if not (exc.permanent or final):
            raise self.retry(countdown=delivery.backoff(self.request.retries)) from None


def enqueue_delivery(event_id: int, channel_id: int) -> None:
    deliver_notification_task.apply_async((event_id, channel_id), retry=False)


@shared_task(ignore_result=True)
def evaluate_alerts_task() -> None:
    engine.evaluate_all(enqueue=enqueue_delivery)
