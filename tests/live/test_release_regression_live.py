"""A release that makes an agent decide worse, found by the product on its own: two releases'
records posted over HTTP, folded by a real worker, and the release regression rule's webhook
called by the worker's alert tick, once, naming the measure."""

from __future__ import annotations

import json
import os

import pytest
import requests

from alerts import engine
from alerts.models import AlertEvent, Notification
from records.models import ApiKey, PendingBatch, Project, ReleaseMarker
from tests.support.live import product, wait_until
from tests.support.receivers import Receiver
from tests.support.release_data import DAY_1, DAY_2, picks
from tests.support.services import need_service
from workers.tasks import evaluate_alerts_task

pytestmark = pytest.mark.live


@pytest.fixture
def project(transactional_db):
    return Project.objects.create(name="acme")


def test_a_planted_regression_calls_the_rules_webhook_once_with_the_measure(
    tmp_path, monkeypatch, project
):
    redis_url = os.environ.get("REDIS_URL")
    need_service(bool(redis_url), "Redis (set REDIS_URL)")
    # The receiver listens on the loopback, which webhooks may reach only when allowed.
    monkeypatch.setenv("DECISIONBOARD_ALERTS_ALLOW_PRIVATE_WEBHOOKS", "1")
    _, key = ApiKey.issue(project, ApiKey.Scope.ALL)
    headers = {"Authorization": f"Bearer {key}"}
    receiver = Receiver([200])
    try:
        with product(tmp_path, redis_url) as base:
            records = picks("v1", DAY_1, 2000, 80) + picks("v2", DAY_2, 2000, 160)
            for at in range(0, len(records), 1000):
                answer = requests.post(f"{base}/api/v1/records", headers=headers, timeout=60,
                                       json={"records": records[at : at + 1000]})  # fmt: skip
                assert answer.status_code == 200 and answer.json()["accepted"] == 1000
            # Every batch folded, not only the first of each release: the rule would otherwise
            # judge v2 on its first 1,000 picks, which hold all of its pick errors.
            wait_until(
                lambda: (
                    ReleaseMarker.objects.filter(project=project).count() == 2
                    and not PendingBatch.objects.filter(project=project).exists()
                ),
                60,
                "both releases marked and every batch folded by the catch-up",
            )
            channel = requests.post(f"{base}/api/v1/alert-channels", headers=headers, timeout=30,
                                    json={"name": "hook", "kind": "webhook",
                                          "url": receiver.url})  # fmt: skip
            assert channel.status_code == 201, channel.content
            rule = requests.post(f"{base}/api/v1/alert-rules", headers=headers, timeout=30,
                                 json={"name": "releases", "metric": "release_regression",
                                       "agent": "support-bot", "comparator": "lte",
                                       "threshold": 0.05, "min_records": 1000,
                                       "channels": [channel.json()["id"]]})  # fmt: skip
            assert rule.status_code == 201, rule.content
            # The tick beat sends once a minute, sent now rather than waited for.
            evaluate_alerts_task.delay()
            wait_until(lambda: receiver.requests, 90, "the rule's webhook")
            # Two more ticks find the same regression and notify nobody again.
            again: list = []
            for _ in range(2):
                engine.evaluate_all(enqueue=lambda event, channel: again.append(event))
            assert again == []
    finally:
        receiver.close()
    (call,) = receiver.requests
    body = json.loads(call["body"])
    assert (body["state"], body["group"]) == ("firing", "support-bot v2: pick error rate")
    detail = body["detail"]
    assert (detail["measure"], detail["release"], detail["previous_release"]) == (
        "pick_error_rate",
        "v2",
        "v1",
    )
    assert (detail["value_before"], detail["value_after"]) == (0.04, 0.08)
    assert detail["interval"][0] > 0 and detail["q_value"] < 0.05
    assert "/changes/?agent=support-bot&a=release%3Av1&b=release%3Av2" in detail["url"]
    assert AlertEvent.objects.filter(rule_id=rule.json()["id"]).count() == 1
    assert Notification.objects.filter(event__rule_id=rule.json()["id"]).count() == 1
