"""Is each queue served? Beat sends a heartbeat task to every queue; whichever worker consumes
that queue records when it ran it. The overview shows each queue's last heartbeat and says
which command to start when one is missing or stale."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from workers.models import Heartbeat
from workers.queues import Queue

# Beat sends one every 10 s (workers.schedule), expiring after 10 s; a minute without one means
# nobody serves the queue, beat is down, or every worker slot on the queue is held by a long
# task (two exports on `bin/start`'s jobs worker).
STALE_AFTER = timedelta(minutes=1)


@dataclass(frozen=True)
class QueueStatus:
    queue: str
    last_seen: datetime | None
    stale: bool


def beat(queue: str = Queue.DEFAULT, now: datetime | None = None) -> datetime:
    now = now or timezone.now()
    Heartbeat.objects.update_or_create(name=str(queue), defaults={"last_seen": now})
    return now


def queue_status(now: datetime | None = None) -> list[QueueStatus]:
    """Every queue of workers.queues, with its last heartbeat (None if never), in one query."""
    now = now or timezone.now()
    seen = dict(
        Heartbeat.objects.filter(name__in=[q.value for q in Queue]).values_list("name", "last_seen")
    )
    return [
        QueueStatus(q.value, seen.get(q.value), seen.get(q.value) is None
                    or now - seen[q.value] > STALE_AFTER)
        for q in Queue
    ]  # fmt: skip
