"""Helpers for tests that drive the product's real processes over HTTP (test_serve,
test_worker_integration)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import requests

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """predicate()'s first truthy value, polled for up to `timeout` s; a request that fails
    (the server not up yet, or too busy to answer in time) counts as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except requests.RequestException:
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_export_job(base: str, headers: dict, body: dict, timeout: float = 60) -> dict:
    """POST /api/v1/exports and wait for a worker to finish the job; returns it, done or
    failed."""
    created = requests.post(f"{base}/api/v1/exports", json=body, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    url = f"{base}/api/v1/exports/{created.json()['id']}"

    def finished() -> dict | None:
        job = requests.get(url, headers=headers, timeout=30).json()
        return job if job["status"] in ("done", "failed") else None

    return wait_until(finished, timeout, "the export job")


def task_received(log: Path, task: str) -> bool:
    """Whether the Celery worker that wrote `log` (loglevel INFO) received `task` of
    workers.tasks."""
    received = rf"Task workers\.tasks\.{task}\[[0-9a-f-]+\] received"
    return re.search(received, log.read_text()) is not None
