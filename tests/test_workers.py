"""The Celery wiring. The broker itself is exercised for real in test_worker_integration.py."""

from __future__ import annotations

import workers.tasks  # noqa: F401  (registers the tasks, as the worker's autodiscovery does)
from config.celery import app


def test_beat_runs_the_catch_up_every_few_seconds_and_the_heartbeat():
    schedule = app.conf.beat_schedule
    assert schedule["catch-up"]["task"] == "workers.tasks.catch_up_task"
    assert schedule["catch-up"]["schedule"] <= 10
    assert schedule["heartbeat"]["task"] == "workers.tasks.heartbeat_task"
    registered = set(app.tasks)
    assert {entry["task"] for entry in schedule.values()} <= registered
