"""Notifications reach a real HTTP server on 127.0.0.1 and Django's mail backend.

The server is http.server in a thread, started by each test; the delivery task runs through
Celery's `apply()`, which runs the real task, retries included (without their countdown).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.utils import timezone

import workers.tasks  # noqa: F401  (registers the tasks)
from alerts import delivery, engine
from alerts.models import (
    AlertEvent,
    Channel,
    DeliveryAttempt,
    Notification,
    Rule,
)
from alerts.safety import UnsafeURL, check_webhook_url
from alerts.transports import SIGNATURE_HEADER
from workers.tasks import deliver_notification_task

pytestmark = pytest.mark.both_dbs


def make_rule(persona, **fields) -> Rule:
    defaults = {
        "name": "slow classifier",
        "metric": "classifier_latency_p95",
        "comparator": "gt",
        "threshold": 800.0,
        "window_minutes": 5,
        "group_by": "model",
    }
    return Rule.objects.create(project=persona.project, **{**defaults, **fields})


def make_event(rule: Rule, to_state: str = "firing", **fields) -> AlertEvent:
    defaults = {
        "group": "qwen3-8b",
        "from_state": "pending",
        "severity": "critical",
        "value": 1234.5,
        "count": 40,
        "threshold": rule.threshold,
        "comparator": rule.comparator,
        "window_minutes": rule.window_minutes,
        "notify": True,
        "at": timezone.now(),
    }
    return AlertEvent.objects.create(
        rule=rule, project_id=rule.project_id, to_state=to_state, **{**defaults, **fields}
    )


def webhook(persona, url: str, **fields) -> Channel:
    return Channel.objects.create(
        project=persona.project, name="ops hook", kind="webhook", url=url, **fields
    )


def deliver(event: AlertEvent, channel: Channel) -> Notification:
    deliver_notification_task.apply(args=(event.pk, channel.pk))
    return Notification.objects.get(event=event, channel=channel)


# --- webhooks ----------------------------------------------------------------------------------
def test_it_posts_a_signed_json_body_to_the_webhook(alice, allow_loopback, receiver_factory):
    receiver = receiver_factory(200)
    channel = webhook(alice, receiver.url)
    rule = make_rule(alice)
    event = make_event(rule)

    notification = deliver(event, channel)

    (request,) = receiver.requests
    assert request["path"] == "/hooks/decisionboard?x=1"
    assert request["headers"]["Content-Type"] == "application/json"
    expected = hmac.new(channel.secret.encode(), request["body"], hashlib.sha256).hexdigest()
    assert request["headers"][SIGNATURE_HEADER] == expected
    body = json.loads(request["body"])
    assert body["rule"]["name"] == "slow classifier"
    assert body["rule"]["id"] == rule.pk
    assert (body["group"], body["state"], body["previous_state"]) == (
        "qwen3-8b",
        "firing",
        "pending",
    )
    assert (body["value"], body["threshold"], body["window_minutes"]) == (1234.5, 800.0, 5)
    assert body["url"].endswith(f"/alerts/{rule.pk}/")
    assert body["resolved"] is False and body["project"] == "acme"
    assert notification.status == "sent" and notification.attempts == 1
    assert DeliveryAttempt.objects.get(notification=notification).ok


def test_a_tampered_body_does_not_match_the_signature(alice, allow_loopback, receiver_factory):
    receiver = receiver_factory(200)
    channel = webhook(alice, receiver.url)
    deliver(make_event(make_rule(alice)), channel)
    (request,) = receiver.requests
    tampered = request["body"].replace(b"1234.5", b"1.5")
    signature = hmac.new(channel.secret.encode(), tampered, hashlib.sha256).hexdigest()
    assert signature != request["headers"][SIGNATURE_HEADER]


def test_a_server_that_recovers_gets_the_notification_on_a_retry(
    alice, allow_loopback, receiver_factory
):
    receiver = receiver_factory(503, 503, 200)
    channel = webhook(alice, receiver.url)
    notification = deliver(make_event(make_rule(alice)), channel)

    assert len(receiver.requests) == 3
    assert notification.status == "sent" and notification.attempts == 3
    attempts = list(notification.delivery_attempts.order_by("number"))
    assert [(a.number, a.ok) for a in attempts] == [(1, False), (2, False), (3, True)]
    assert attempts[0].error.startswith("HTTP 503")
    channel.refresh_from_db()
    assert channel.consecutive_failures == 0 and not channel.disabled


def test_a_failing_server_is_retried_then_the_channel_is_disabled(
    alice, allow_loopback, receiver_factory
):
    receiver = receiver_factory(503)
    channel = webhook(alice, receiver.url)
    rule = make_rule(alice)

    first = deliver(make_event(rule), channel)
    assert first.status == "failed"
    assert first.attempts == delivery.ATTEMPTS == len(receiver.requests)
    channel.refresh_from_db()
    assert channel.consecutive_failures == delivery.ATTEMPTS and not channel.disabled

    second = deliver(make_event(rule), channel)
    channel.refresh_from_db()
    assert channel.disabled and channel.disabled_at is not None
    assert channel.consecutive_failures == delivery.DEFAULT_MAX_FAILURES
    assert second.status == "failed" and "channel disabled" in second.last_error
    assert "HTTP 503" in channel.last_error

    third = deliver(make_event(rule), channel)
    assert third.status == "skipped" and third.attempts == 0
    assert len(receiver.requests) == delivery.DEFAULT_MAX_FAILURES


def test_the_failure_limit_is_a_setting(alice, allow_loopback, receiver_factory, settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "ALERTS_CHANNEL_MAX_FAILURES": 2}
    receiver = receiver_factory(500)
    channel = webhook(alice, receiver.url)
    notification = deliver(make_event(make_rule(alice)), channel)
    channel.refresh_from_db()
    assert channel.disabled and notification.attempts == 2 == len(receiver.requests)


def test_retries_back_off_exponentially():
    assert [delivery.backoff(n) for n in range(delivery.ATTEMPTS - 1)] == [30, 60, 120, 240]


def test_a_client_error_is_not_retried(alice, allow_loopback, receiver_factory):
    receiver = receiver_factory(410)
    notification = deliver(make_event(make_rule(alice)), webhook(alice, receiver.url))
    assert notification.status == "failed" and notification.attempts == 1
    assert notification.delivery_attempts.get().permanent


def test_a_notification_is_delivered_once_however_often_its_task_runs(
    alice, allow_loopback, receiver_factory
):
    receiver = receiver_factory(200)
    channel = webhook(alice, receiver.url)
    event = make_event(make_rule(alice))
    deliver(event, channel)
    deliver(event, channel)
    assert len(receiver.requests) == 1


def test_an_unreachable_receiver_is_a_retryable_failure(alice, allow_loopback, receiver_factory):
    receiver = receiver_factory(200)
    url = receiver.url
    receiver.close()  # nothing listens there any more
    notification = deliver(make_event(make_rule(alice)), webhook(alice, url))
    assert notification.attempts == delivery.ATTEMPTS and notification.status == "failed"
    assert not notification.delivery_attempts.first().permanent


# --- safety ------------------------------------------------------------------------------------
def test_it_refuses_a_loopback_webhook_unless_the_setting_allows_it(alice, receiver_factory):
    receiver = receiver_factory(200)
    channel = webhook(alice, receiver.url)
    notification = deliver(make_event(make_rule(alice)), channel)
    assert receiver.requests == []
    assert notification.status == "failed" and notification.attempts == 1
    attempt = notification.delivery_attempts.get()
    assert attempt.permanent and "loopback, private or link-local" in attempt.error
    with pytest.raises(ValidationError) as caught:
        channel.full_clean()
    assert "url" in caught.value.message_dict


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8000/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
    ],
)
def test_it_refuses_internal_addresses(url):
    with pytest.raises(UnsafeURL):
        check_webhook_url(url)


def test_it_refuses_other_schemes_and_credentials_in_urls():
    for url in ("ftp://93.184.215.14/x", "file:///etc/passwd", "https://u:p@93.184.215.14/"):
        with pytest.raises(UnsafeURL):
            check_webhook_url(url)


def test_it_accepts_a_public_address_and_checks_every_address_a_name_resolves_to():
    assert check_webhook_url("https://93.184.215.14/hook") == ["93.184.215.14"]

    def two_answers(host, port, **kwargs):
        return [(2, 1, 6, "", ("93.184.215.14", port)), (2, 1, 6, "", ("10.0.0.5", port))]

    with pytest.raises(UnsafeURL, match="10.0.0.5"):
        check_webhook_url("https://hooks.example.com/x", resolver=two_answers)


def test_the_setting_allows_private_addresses(allow_loopback):
    assert check_webhook_url("http://127.0.0.1:9/x") == ["127.0.0.1"]


# --- email and tests ---------------------------------------------------------------------------
def test_it_emails_the_addresses_through_djangos_backend(alice, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    channel = Channel.objects.create(
        project=alice.project, name="on call", kind="email", addresses=["oncall@example.com"]
    )
    rule = make_rule(alice)
    event = make_event(rule, group="qwen3-8b\r\nBcc: victim@example.com")
    notification = deliver(event, channel)
    assert notification.status == "sent"
    (message,) = mail.outbox
    assert message.to == ["oncall@example.com"]
    assert message.subject.startswith("[Decisionboard] FIRING slow classifier")
    # The group is record text: a newline in it must not become a mail header.
    assert "\n" not in message.subject and "\r" not in message.subject
    assert f"/alerts/{rule.pk}/" in message.body and "Value: 1,234 ms" in message.body


def test_a_resolved_email_says_resolved(alice, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    channel = Channel.objects.create(
        project=alice.project, name="on call", kind="email", addresses=["oncall@example.com"]
    )
    deliver(make_event(make_rule(alice), to_state="ok", from_state="firing"), channel)
    assert mail.outbox[0].subject.startswith("[Decisionboard] RESOLVED slow classifier")


def test_send_test_reports_what_happened(alice, allow_loopback, receiver_factory):
    good = receiver_factory(200)
    assert delivery.send_test(webhook(alice, good.url)) is None
    assert json.loads(good.requests[0]["body"])["test"] is True
    bad = receiver_factory(500)
    channel = webhook(alice, bad.url)
    assert delivery.send_test(channel).startswith("HTTP 500")
    channel.refresh_from_db()
    assert channel.consecutive_failures == 0  # a test is the operator checking, not a strike


# --- from the engine to the receiver -------------------------------------------------------------
def test_the_engine_notifies_firing_and_resolved_and_requeues_a_lost_task(
    alice, allow_loopback, receiver_factory
):
    receiver = receiver_factory(200)
    channel = webhook(alice, receiver.url)
    rule = make_rule(
        alice, name="quiet agent", metric="records", comparator="lt", threshold=1, group_by=""
    )
    rule.channels.add(channel)
    now = timezone.now()

    def run_now(event_id, channel_id):
        deliver_notification_task.apply(args=(event_id, channel_id))

    # No records at all: a count of zero is below 1, so it fires.
    tick = engine.evaluate_all(now=now, enqueue=run_now)
    assert tick.events == 1 and tick.notifications == 1
    assert json.loads(receiver.requests[0]["body"])["state"] == "firing"

    # A task lost with its broker: the notification stays queued and a later tick resends it.
    lost = []
    rule.threshold = 0  # nothing is below 0: resolves
    rule.save()
    engine.evaluate_all(now=now + timedelta(minutes=1), enqueue=lambda e, c: lost.append((e, c)))
    assert len(lost) == 1 and len(receiver.requests) == 1
    engine.evaluate_all(now=now + timedelta(minutes=20), enqueue=run_now)
    assert len(receiver.requests) == 2
    resolved = json.loads(receiver.requests[1]["body"])
    assert resolved["state"] == "ok" and resolved["resolved"] is True
