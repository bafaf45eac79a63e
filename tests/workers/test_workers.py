"""The Celery wiring. The broker itself is exercised for real in test_worker_integration.py."""

from __future__ import annotations

import workers.tasks  # noqa: F401  (registers the tasks, as the worker's autodiscovery does)
from config.celery import app
from config.queues import Queue


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


_FRAGMENTED_HEAP = """
import sys
from workers.memory import give_back_freed_memory

def rss_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024

base = rss_mb()
chunks = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]  # ~200 MB on the heap
pin = bytes(100_000)  # above them (no freed hole fits it): glibc cannot trim the top itself
grown = rss_mb()
del chunks
kept = rss_mb()
assert give_back_freed_memory()
print(base, grown, kept, rss_mb())
"""


def test_a_pool_process_gives_the_memory_a_task_freed_back_to_the_system():
    """What a pass built and freed no longer counts in the worker's resident size
    (workers.memory, called after every task)."""
    import subprocess
    import sys

    from django.conf import settings

    out = subprocess.run([sys.executable, "-c", _FRAGMENTED_HEAP], cwd=settings.BASE_DIR,
                         capture_output=True, text=True, check=True)  # fmt: skip
    base, grown, kept, trimmed = map(float, out.stdout.split())
    assert grown - base > 150  # the task's objects were resident
    assert kept - base > 150  # freed, glibc kept them
    assert trimmed - base < 50, (base, grown, kept, trimmed)  # given back


def test_every_task_ends_by_giving_freed_memory_back(monkeypatch):
    from celery.signals import task_postrun

    from workers import memory

    calls = []
    monkeypatch.setattr(memory, "_TRIM", lambda pad: calls.append(pad))
    monkeypatch.setattr(memory, "forget_peak_memory", lambda: calls.append("peak"))
    task_postrun.send(sender=None, task_id="t", task=None, state="SUCCESS")
    assert calls == [0, "peak"]


# In a forked process, as a pool process is (an exec'd one starts with the peak of the process
# that started it: Linux carries it over exec, not over fork).
_PEAK_FORGOTTEN = """
import os
from billiard.compat import mem_rss  # what billiard compares with worker_max_memory_per_child
from workers.memory import forget_peak_memory, give_back_freed_memory

if os.fork():
    os._exit(os.waitstatus_to_exitcode(os.wait()[1]))
base = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
chunks = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]  # ~200 MB, as a large pass
del chunks
give_back_freed_memory()
peak = mem_rss() / 1024
assert forget_peak_memory()
print(base, peak, mem_rss() / 1024, flush=True)
os._exit(0)
"""


def test_the_memory_bound_judges_what_a_pool_process_holds_after_its_task():
    """Billiard replaces a pool process whose ru_maxrss is above worker_max_memory_per_child
    after a task; after every task that peak is reset to the process's current size, so a large
    pass that freed its memory does not count against the bound, and a slow growth does."""
    import subprocess
    import sys

    from django.conf import settings

    out = subprocess.run([sys.executable, "-c", _PEAK_FORGOTTEN], cwd=settings.BASE_DIR,
                         capture_output=True, text=True, check=True)  # fmt: skip
    base, peak, after = map(float, out.stdout.split())
    assert peak - base > 150  # the peak still counted the pass
    assert after - base < 50, (base, peak, after)  # now only what is held


def test_a_task_keeps_its_connection_unless_it_failed(transactional_db, monkeypatch):
    """workers.connections: after a task that succeeded, the connection stays for the next one
    (within CONN_MAX_AGE); after one that failed or is retried (an outage), it is closed, so the
    next task starts on a new one. tests/live/test_worker_integration.py shows it in a real
    worker."""
    from django.db import connection

    from workers import connections

    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    connection.close()
    connections.before_task()
    connection.ensure_connection()
    kept = connection.connection
    connections.after_task(state="SUCCESS")
    connections.before_task()
    assert connection.connection is kept
    for state in ("RETRY", "FAILURE"):
        connections.after_task(state=state)
        assert connection.connection is None
        connection.ensure_connection()
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    connection.close()
    connection.ensure_connection()
    connections.after_task(state="SUCCESS")  # no persistent connections configured
    assert connection.connection is None


def test_a_task_run_eagerly_leaves_the_callers_connection_alone(db):
    """apply() runs a task in the caller's process, here inside the test's transaction: the
    connection it runs on is the caller's, closed by neither signal."""
    from django.db import connection

    from workers.tasks import heartbeat_task

    connection.ensure_connection()
    kept = connection.connection
    heartbeat_task.apply(("default",))
    assert connection.connection is kept
