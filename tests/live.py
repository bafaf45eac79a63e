"""Helpers for tests that drive the product's real processes over HTTP (test_serve,
test_worker_integration, test_queues, test_outage)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import requests

from workers import processes

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


@contextmanager
def web_server(
    tmp_path: Path, *, port: int | None = None, database: str | None = None
) -> Iterator[str]:
    """gunicorn (one worker) serving the product on 127.0.0.1 for the block; yields its base URL.

    The test database unless `database` names another (one that is down, say); no worker nudges.
    """
    from tests.conftest import database_url
    from workers import processes

    port = port or processes.free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database or database_url(),
        DECISIONBOARD_VAR_DIR=str(tmp_path),
        DECISIONBOARD_NUDGE_WORKERS="0",
    )
    command = processes.web_command(f"127.0.0.1:{port}", 1)
    with processes.running(command, env=env, log=tmp_path / f"web-{port}.log"):
        base = f"http://127.0.0.1:{port}"
        # Any answer will do: the server is up (a database that is down is the test's business).
        wait_until(
            lambda: requests.get(f"{base}/v1/traces", timeout=10) is not None, 30, "gunicorn"
        )
        yield base


@contextmanager
def redis_server(port: int, log: Path) -> Iterator:
    """A private redis-server on `port` for the duration of the block (a test may kill it)."""
    with processes.running(
        [
            shutil.which("redis-server"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        env=dict(os.environ),
        log=log,
    ) as proc:
        wait_until(lambda: _ping(port), 10, "redis-server")
        yield proc


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False
