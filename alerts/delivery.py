"""Delivering one event to one channel: the payload, the attempt record, the failure count.

`deliver()` is what the delivery task runs on each try; the task decides whether to try again
(only for retryable errors, with `backoff()`). Every try is a DeliveryAttempt row. Failed tries
in a row are counted on the channel, over all its notifications, and past the limit the channel
is disabled: it is shown as such and receives nothing until an operator enables it again.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from alerts.evaluate import OK
from alerts.models import AlertEvent, Channel, DeliveryAttempt, Notification, Rule
from alerts.transports import TransportError, transport_for

log = logging.getLogger(__name__)

ATTEMPTS = 5  # per notification: the first try and four retries
BACKOFF_SECONDS = 30  # doubled on each retry: 30 s, 1, 2 and 4 min
DEFAULT_MAX_FAILURES = 10  # failed attempts in a row before a channel is disabled


def backoff(retries: int) -> int:
    """Seconds to wait before retry number `retries + 1`."""
    return BACKOFF_SECONDS * 2**retries


def max_failures() -> int:
    return int(settings.DECISIONBOARD.get("ALERTS_CHANNEL_MAX_FAILURES", DEFAULT_MAX_FAILURES))


def rule_url(rule_id: int) -> str:
    try:
        path = reverse("dash-alert-edit", args=[rule_id])
    except NoReverseMatch:  # pages not mounted (an API-only deployment)
        path = f"/alerts/{rule_id}/"
    return settings.SITE_URL.rstrip("/") + path


def event_payload(event: AlertEvent) -> dict:
    """The JSON a webhook receives and an email is written from."""
    rule = event.rule
    return {
        "event_id": event.pk,
        "project": event.project.name,
        "rule": {
            "id": rule.pk,
            "name": rule.name,
            "metric": rule.metric,
            "condition": rule.describe(),
        },
        "group_by": rule.group_by,
        "group": event.group,
        "state": event.to_state,
        "previous_state": event.from_state,
        "severity": event.severity,
        "reason": event.reason,
        "resolved": event.resolved,
        "value": event.value,
        "count": event.count,
        "threshold": event.threshold,
        "comparator": event.comparator,
        "window_minutes": event.window_minutes,
        "at": event.at.isoformat(),
        "url": rule_url(rule.pk),
        "test": False,
        # A release regression: the measure, both values, the change, its interval, the link.
        "detail": event.detail or {},
    }


def test_payload(channel: Channel, rule: Rule | None = None, now: datetime | None = None) -> dict:
    now = now or timezone.now()
    return {
        "event_id": None,
        "project": channel.project.name,
        "rule": {
            "id": rule.pk if rule else None,
            "name": rule.name if rule else f"test of channel {channel.name}",
            "metric": rule.metric if rule else "",
            "condition": rule.describe() if rule else "",
        },
        "group_by": "",
        "group": "",
        "state": "firing",
        "previous_state": OK,
        "severity": "",
        "reason": "test",
        "resolved": False,
        "value": None,
        "count": 0,
        "threshold": rule.threshold if rule else None,
        "comparator": rule.comparator if rule else "",
        "window_minutes": rule.window_minutes if rule else None,
        "at": now.isoformat(),
        "url": rule_url(rule.pk) if rule else settings.SITE_URL,
        "test": True,
    }


def send_test(channel: Channel) -> str | None:
    """Send a test notification now; None when it went through, else what went wrong.

    It neither counts toward nor resets the channel's failures: it is the operator checking.
    """
    try:
        transport_for(channel).notify(test_payload(channel))
    except TransportError as exc:
        return exc.message
    return None


def deliver(event_id: int, channel_id: int, *, final: bool = True) -> Notification | None:
    """One try at telling a channel about an event; raises TransportError if it failed.

    `final` says no retry follows, so a failure marks the notification failed. A notification
    already sent, failed or skipped is left alone, so a duplicated task delivers nothing twice.
    """
    try:
        event = AlertEvent.objects.select_related("rule", "project").get(pk=event_id)
        channel = Channel.objects.select_related("project").get(pk=channel_id)
    except (AlertEvent.DoesNotExist, Channel.DoesNotExist):
        log.info("event %s or channel %s is gone; nothing to deliver", event_id, channel_id)
        return None
    now = timezone.now()
    notification, _ = Notification.objects.get_or_create(
        event=event, channel=channel, defaults={"created_at": now, "updated_at": now}
    )
    if notification.status != Notification.Status.QUEUED:
        return notification
    if channel.disabled:
        notification.status = Notification.Status.SKIPPED
        notification.updated_at = now
        notification.save(update_fields=["status", "updated_at"])
        return notification

    started = time.perf_counter()
    error: TransportError | None = None
    try:
        transport_for(channel).notify(event_payload(event))
    except TransportError as exc:
        error = exc
    duration_ms = (time.perf_counter() - started) * 1000
    now = timezone.now()

    with transaction.atomic():
        notification.attempts += 1
        DeliveryAttempt.objects.create(
            notification=notification,
            number=notification.attempts,
            at=now,
            ok=error is None,
            permanent=bool(error and error.permanent),
            error=error.message if error else "",
            duration_ms=round(duration_ms, 3),
        )
        if error is None:
            Channel.objects.filter(pk=channel.pk).update(
                consecutive_failures=0, last_error="", last_attempt_at=now
            )
            notification.status = Notification.Status.SENT
            notification.last_error = ""
        else:
            Channel.objects.filter(pk=channel.pk).update(
                consecutive_failures=F("consecutive_failures") + 1,
                last_error=error.message[:2000],
                last_attempt_at=now,
            )
            disabled = Channel.objects.filter(
                pk=channel.pk, disabled=False, consecutive_failures__gte=max_failures()
            ).update(disabled=True, disabled_at=now)
            if disabled:
                log.warning("channel %s disabled after %s failures", channel.pk, max_failures())
                # Retrying into a disabled channel would only be skipped: stop here.
                error = TransportError(f"{error.message} (channel disabled)", permanent=True)
            notification.last_error = error.message[:2000]
            if final or error.permanent:
                notification.status = Notification.Status.FAILED
        notification.updated_at = now
        notification.save(update_fields=["attempts", "status", "last_error", "updated_at"])
    if error is not None:
        raise error
    return notification
