"""The Celery wiring. The broker itself is exercised for real in test_worker_integration.py."""

from __future__ import annotations

import workers.tasks  # noqa: F401  (registers the tasks, as the worker's autodiscovery does)
from config.celery import app
from workers.queues import Queue


def test_beat_runs_the_catch_up_every_few_seconds_and_the_heartbeat():
    schedule = app.conf.beat_schedule
    assert schedule["catch-up-lane-0"]["task"] == "workers.tasks.catch_up_task"
    assert schedule["catch-up-lane-0"]["schedule"] <= 10
    # a heartbeat on every queue, so the overview can tell which one nobody serves
    heartbeats = {k: v for k, v in schedule.items() if v["task"] == "workers.tasks.heartbeat_task"}
    assert sorted(e["options"]["queue"] for e in heartbeats.values()) == sorted(Queue)
    assert all(e["args"] == (e["options"]["queue"],) for e in heartbeats.values())
    registered = set(app.tasks)
    assert {entry["task"] for entry in schedule.values()} <= registered


def test_long_and_slow_tasks_have_queues_of_their_own():
    def queue(task: str) -> str:
        return app.amqp.router.route({}, task)["queue"].name

    assert queue("workers.tasks.catch_up_task") == "default"
    assert queue("workers.tasks.heartbeat_task") == "default"
    assert queue("workers.tasks.evaluate_alerts_task") == "default"
    assert queue("workers.tasks.export_task") == "exports"
    assert queue("workers.tasks.deliver_notification_task") == "notifications"


def test_the_product_runs_a_worker_for_every_queue():
    from workers.processes import worker_commands

    commands = worker_commands("schedule")
    consumed = [c[c.index("--queues") + 1].split(",") for c in commands]
    assert sorted(q for queues in consumed for q in queues) == sorted(Queue)
    # beat runs once, with the worker that runs the catch-up passes
    assert ["--beat" in c for c in commands] == ["default" in q for q in consumed] == [True, False]
