"""The real pipeline: gunicorn and a Celery worker with beat, as separate processes, on Redis.

The web and the worker run as subprocesses against the test database, so what the test sees is
what an operator would: records posted over HTTP, folded in by a real worker, read back through
the metrics API.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
import requests
from django.db import connection

from records.models import ApiKey, Project
from tests.support.factories import record
from tests.support.live import product, redis_server, task_received, wait_until
from tests.support.services import need_service
from workers import processes

RANGE = {"from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z", "interval": "day"}


@pytest.fixture
def keys(transactional_db):
    project = Project.objects.create(name="acme")
    return ApiKey.issue(project, ApiKey.Scope.INGEST)[1], ApiKey.issue(project, ApiKey.Scope.READ)[
        1
    ]


def post(base: str, key: str, records: list[dict]) -> requests.Response:
    return requests.post(
        f"{base}/api/v1/records",
        json={"records": records},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def metric_total(base: str, key: str, name: str) -> float:
    body = requests.get(
        f"{base}/api/v1/metrics/{name}",
        params=RANGE,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ).json()
    return sum(t["value"] for t in body["totals"])


def test_a_real_worker_on_redis_serves_the_metrics_api(tmp_path, keys):
    redis_url = os.environ.get("REDIS_URL")
    need_service(bool(redis_url), "Redis (set REDIS_URL)")
    ingest_key, read_key = keys
    with product(tmp_path, redis_url) as base:
        picks = [record("tool_choice.pick", data={"latencyMs": 100.0 + i}) for i in range(50)]
        swaps = [record("model_selection", data={"selected_model": "gpt-5"}) for _ in range(10)]
        assert post(base, ingest_key, picks + swaps).json()["accepted"] == 60
        wait_until(lambda: metric_total(base, read_key, "records") == 60, 60, "the rollups")
        assert metric_total(base, read_key, "swap_rate") == 1.0
        p50 = metric_total(base, read_key, "classifier_latency_p50")
        assert p50 == pytest.approx(124.0, rel=0.01)  # lower median of 100..149
    # The catch-up passes run on the default worker only (config.queues).
    assert task_received(tmp_path / "worker.log", "catch_up_task")
    assert not task_received(tmp_path / "jobs-worker.log", "catch_up_task")


def test_ingest_survives_a_redis_outage_and_the_worker_catches_up(tmp_path, keys):
    need_service(shutil.which("redis-server") is not None, "redis-server")
    ingest_key, read_key = keys
    redis_port = processes.free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    with (
        redis_server(redis_port, tmp_path / "redis-1.log") as redis_proc,
        product(tmp_path, redis_url) as base,
    ):
        assert post(base, ingest_key, [record() for _ in range(20)]).json()["accepted"] == 20
        wait_until(lambda: metric_total(base, read_key, "records") == 20, 60, "the first rollups")

        os.killpg(redis_proc.pid, signal.SIGKILL)
        redis_proc.wait()
        started = time.monotonic()
        during = post(base, ingest_key, [record() for _ in range(30)])
        assert during.status_code == 200 and during.json()["accepted"] == 30
        assert time.monotonic() - started < 10, "ingest waited on the broker"

        # An export job cannot be queued: a 503 that says what to do, and the job is failed at
        # once rather than left queued for ever.
        auth = {"Authorization": f"Bearer {read_key}"}
        refused = requests.post(
            f"{base}/api/v1/exports", json={"format": "csv"}, headers=auth, timeout=30
        )
        assert refused.status_code == 503
        assert "GET /api/v1/export" in refused.json()["detail"]
        jobs = requests.get(f"{base}/api/v1/exports", headers=auth, timeout=30).json()["results"]
        assert [(j["status"], "could not be reached" in j["error"]) for j in jobs] == [
            ("failed", True)
        ]

        with redis_server(redis_port, tmp_path / "redis-2.log"):
            wait_until(
                lambda: metric_total(base, read_key, "records") == 50,
                90,
                "the worker to catch up after Redis returned",
            )


def _tasks_received(*logs: Path) -> int:
    return sum(len(re.findall(r"Task workers\.tasks\.\w+\[[0-9a-f-]+\] received", log.read_text()))
               for log in logs)  # fmt: skip


def _sessions_opened() -> int:
    """Connections ever opened to the test database (PostgreSQL's own count, which a backend
    reports at least once a second)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def test_the_workers_keep_their_database_connections_from_task_to_task(tmp_path, keys):
    """Celery's Django fixup closes the connections after every task; the workers keep them
    (workers.connections), so beat's ticks do not each open a PostgreSQL connection."""
    redis_url = os.environ.get("REDIS_URL")
    need_service(bool(redis_url), "Redis (set REDIS_URL)")
    need_service(connection.vendor == "postgresql", "PostgreSQL (set DATABASE_URL)")
    logs = (tmp_path / "worker.log", tmp_path / "jobs-worker.log")
    with product(tmp_path, redis_url):
        wait_until(lambda: _tasks_received(*logs) >= 4, 60, "the workers' first tasks")
        time.sleep(2)  # the stats of the connections opened so far are reported
        tasks, sessions = _tasks_received(*logs), _sessions_opened()
        time.sleep(22)  # catch-ups every 5 s, a heartbeat of each queue every 10 s
        tasks, sessions = _tasks_received(*logs) - tasks, _sessions_opened() - sessions
    assert tasks >= 8
    # Each of the 4 pool processes opens at most one connection in the meantime (CONN_MAX_AGE
    # is a minute); closing them after each task opened one a task.
    assert sessions <= 4, (tasks, sessions)
