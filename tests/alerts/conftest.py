"""Fixtures of the alert tests: webhook receivers on the loopback, and the setting that lets
rules post to them."""

from __future__ import annotations

import pytest

from tests.support.receivers import Receiver


@pytest.fixture
def receiver_factory():
    started = []

    def start(*statuses: int) -> Receiver:
        receiver = Receiver(list(statuses) or [200])
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.close()


@pytest.fixture
def allow_loopback(settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "ALERTS_ALLOW_PRIVATE_WEBHOOKS": True}
