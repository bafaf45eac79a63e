"""Which queues a real Celery worker consumes (config.queues): all of them unless told."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from config.queues import Queue
from tests.support.live import redis_server, wait_until
from tests.support.services import database_url, need_service
from workers import processes
from workers.models import Heartbeat
from workers.processes import BIN

ALL = sorted(q.value for q in Queue)


def _celery(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "celery"), "-A", "config", *args],
        cwd=processes.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _consumed(env: dict, name: str) -> list[str] | None:
    """The queues the worker `name` reports consuming, or None while it does not answer."""
    out = _celery(env, "inspect", "active_queues", "-d", name, "--json", "--timeout", "2")
    if out.returncode != 0:
        return None
    replies = json.loads(out.stdout.strip().splitlines()[-1])
    return sorted(q["name"] for q in replies[name]) if name in replies else None


@pytest.mark.parametrize(("queues", "expected"), [(None, ALL), ("default", ["default"])])
def test_a_plain_worker_consumes_every_queue_and_queues_narrows_it(
    tmp_path, transactional_db, queues, expected
):
    need_service(shutil.which("redis-server") is not None, "redis-server")
    port = processes.free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        REDIS_URL=f"redis://127.0.0.1:{port}/0",
        DECISIONBOARD_VAR_DIR=str(tmp_path),
    )
    name = f"plain@{os.uname().nodename}"
    # Exactly what a newcomer types, plus a name to ask it by; --queues only when narrowing.
    worker = [str(BIN / "celery"), "-A", "config", "worker", "--hostname", name, "-c", "1"]
    if queues:
        worker += ["--queues", queues]
    with (
        redis_server(port, tmp_path / "redis.log"),
        processes.running(worker, env=env, log=tmp_path / "worker.log"),
    ):
        consumed = wait_until(lambda: _consumed(env, name), 60, "the worker to answer")
        assert consumed == expected
        # And it runs what is sent to each of them: a heartbeat per queue, recorded in the
        # database by whichever worker took it.
        for queue in expected:
            sent = _celery(
                env, "call", "workers.tasks.heartbeat_task", "--args", json.dumps([queue]),
                "--queue", queue,
            )  # fmt: skip
            assert sent.returncode == 0, sent.stderr
        wait_until(
            lambda: sorted(Heartbeat.objects.values_list("name", flat=True)) == expected,
            60,
            f"a heartbeat on {expected}",
        )


def _pool_processes(master: int) -> set[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return {int(pid) for pid in children}


def test_a_worker_process_past_the_memory_bound_is_replaced_after_its_task(
    tmp_path, transactional_db
):
    need_service(shutil.which("redis-server") is not None, "redis-server")
    port = processes.free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        REDIS_URL=f"redis://127.0.0.1:{port}/0",
        DECISIONBOARD_VAR_DIR=str(tmp_path),
        # Below what a pool process needs just to start: every task ends with a replacement.
        DECISIONBOARD_WORKER_MAX_MEMORY_MB="32",
    )
    worker = [str(BIN / "celery"), "-A", "config", "worker", "--hostname", "bounded@%h", "-c", "1"]
    with (
        redis_server(port, tmp_path / "redis.log"),
        processes.running(worker, env=env, log=tmp_path / "worker.log") as master,
    ):
        before = wait_until(lambda: _pool_processes(master.pid), 60, "the pool process")
        sent = _celery(env, "call", "workers.tasks.heartbeat_task", "--args", '["default"]')
        assert sent.returncode == 0, sent.stderr
        wait_until(lambda: Heartbeat.objects.exists(), 60, "the task to run")
        after = wait_until(
            lambda: (pool := _pool_processes(master.pid)) and pool != before and pool,
            30,
            "the pool process to be replaced",
        )
        assert len(after) == 1 and not after & before
