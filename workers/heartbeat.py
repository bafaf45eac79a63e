"""Is each queue served? Beat sends a heartbeat task to every queue; whichever worker consumes
that queue records when it ran it. The overview shows each queue's last heartbeat and says
which command to start when one is missing or stale.

A worker also records when it started on its queues (WorkersConfig's worker_ready), so that
right after a start, before beat's first heartbeat has come round, a queue reads as starting
rather than unserved."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from config.outage import DATABASE_UNAVAILABLE
from config.queues import Queue
from workers.models import Heartbeat, WorkerHost

# Beat sends one every 10 s (config.beat_schedule), expiring after 10 s; a minute without one means
# nobody serves the queue, beat is down, or every worker slot on the queue is held by a long
# task (two exports on `bin/start`'s jobs worker). A worker that started less than this ago
# and has had no heartbeat yet is still starting.
STALE_AFTER = timedelta(minutes=1)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueStatus:
    queue: str
    last_seen: datetime | None
    stale: bool
    # When a worker consuming the queue last started (None: none has said so).
    worker_started: datetime | None = None
    # A worker started on it within STALE_AFTER and no heartbeat has come since: too early to
    # call the queue unserved.
    starting: bool = False


def beat(queue: str = Queue.DEFAULT, now: datetime | None = None) -> datetime:
    now = now or timezone.now()
    Heartbeat.objects.update_or_create(name=str(queue), defaults={"last_seen": now})
    return now


def worker_started(queues: Iterable[str], now: datetime | None = None) -> datetime:
    """Record that a worker consuming `queues` is ready (queues not of config.queues are
    ignored)."""
    now = now or timezone.now()
    known = {q.value for q in Queue}
    for queue in sorted({str(q) for q in queues} & known):
        Heartbeat.objects.update_or_create(name=queue, defaults={"worker_started": now})
    return now


def record_worker_start(queues: Iterable[str]) -> None:
    """worker_started from a worker's main process as it becomes ready, in a thread of its own:
    the worker consumes at once whatever the database does (down, or slow to grant the rows'
    locks). Best effort: with the database down the queue reads as unserved until its first
    heartbeat."""
    now = timezone.now()
    threading.Thread(
        target=_record_worker_start, args=(list(queues), now), name="worker-start", daemon=True
    ).start()


def _record_worker_start(queues: list[str], now: datetime) -> None:
    try:
        worker_started(queues, now)
    except DATABASE_UNAVAILABLE as exc:
        logger.warning("could not record the worker's start: %s", exc)
    finally:
        connection.close()  # this thread's own


def status_of(
    queue: str, last_seen: datetime | None, started: datetime | None, now: datetime
) -> QueueStatus:
    stale = last_seen is None or now - last_seen > STALE_AFTER
    starting = (
        started is not None
        and (last_seen is None or last_seen < started)
        and now - started <= STALE_AFTER
    )
    return QueueStatus(queue, last_seen, stale, started, starting)


def queue_status(now: datetime | None = None) -> list[QueueStatus]:
    """Every queue of config.queues, with its last heartbeat (None if never) and its workers'
    last start, in one query."""
    now = now or timezone.now()
    rows = {
        name: (last_seen, started)
        for name, last_seen, started in Heartbeat.objects.filter(
            name__in=[q.value for q in Queue]
        ).values_list("name", "last_seen", "worker_started")
    }
    return [status_of(q.value, *rows.get(q.value, (None, None)), now) for q in Queue]


# A worker's main process says it is alive this often (WorkerHost rows); one silent for
# STALE_AFTER is reported as gone, and forgotten after FORGET_AFTER (a host taken out of
# service).
PRESENCE_EVERY = 10.0
FORGET_AFTER = timedelta(days=1)


def this_host() -> str:
    return settings.DECISIONBOARD["HOSTNAME"]


def present(worker: str, queues: Iterable[str], started: datetime, now: datetime | None = None):
    """Record that the Celery node `worker`, on this host, consumes `queues` now."""
    now = now or timezone.now()
    for queue in sorted({str(q) for q in queues}):
        WorkerHost.objects.update_or_create(
            worker=worker, queue=queue,
            defaults={"host": this_host(), "started_at": started, "last_seen": now},
        )  # fmt: skip
    WorkerHost.objects.filter(last_seen__lt=now - FORGET_AFTER).delete()


@dataclass(frozen=True)
class HostWorker:
    host: str
    worker: str
    queue: str
    last_seen: datetime
    stale: bool


def host_workers(now: datetime | None = None) -> list[HostWorker]:
    """Every worker of every host that said it was alive within FORGET_AFTER, by host."""
    now = now or timezone.now()
    rows = WorkerHost.objects.order_by("host", "worker", "queue").values_list(
        "host", "worker", "queue", "last_seen"
    )
    return [
        HostWorker(host, worker, queue, seen, now - seen > STALE_AFTER)
        for host, worker, queue, seen in rows
    ]


def start_presence(worker: str, queues: Iterable[str]) -> threading.Thread:
    """`present` every PRESENCE_EVERY seconds from a thread of the worker's main process, for
    as long as it runs (a killed worker stops saying so: its rows go stale)."""
    queues = list(queues)
    started = timezone.now()

    def run() -> None:
        while True:
            try:
                present(worker, queues, started)
            except DATABASE_UNAVAILABLE as exc:
                logger.warning("could not record the worker's presence: %s", exc)
                connection.close()
            threading.Event().wait(PRESENCE_EVERY)

    thread = threading.Thread(target=run, name="worker-presence", daemon=True)
    thread.start()
    return thread
