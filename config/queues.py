"""The Celery queues, named in one place, and which task goes to which.

Three kinds of work with different clocks, so that none waits behind another:

- `default`: short and frequent — catch-up passes (the freshness of every metric), heartbeats,
  the alert evaluation tick, export expiry. Never behind a long job.
- `notifications`: alert deliveries, each bounded by the transport's timeout (10 s) and retried
  with backoff; a slow webhook must hold up neither the rollups nor an export.
- `exports`: export jobs, minutes long at a million records, and re-pricing after a price
  override changed (as long, over a busy model's records).

A plain `celery -A config worker` consumes all three (TASK_QUEUES), so that a newcomer's one
worker runs everything; `--queues` narrows a worker to some of them. `manage.py serve` runs a
worker with beat on `default` and a second one, two tasks at a time, on the two others
(workers.processes.worker_commands): there, two exports running at once hold notifications back
until one ends. In production run one worker process (or more) per queue.
"""

from __future__ import annotations

from enum import StrEnum

from kombu import Exchange
from kombu import Queue as KombuQueue


class Queue(StrEnum):
    DEFAULT = "default"
    NOTIFICATIONS = "notifications"
    EXPORTS = "exports"


# Every queue declared, so that a worker started without --queues consumes them all (Celery's
# default is task_default_queue alone). Each as Celery would create it on demand: a direct
# exchange of its own name, routed by its name, so messages already queued stay compatible.
TASK_QUEUES = [KombuQueue(q.value, Exchange(q.value), routing_key=q.value) for q in Queue]

# Tasks not named here go to `default` (CELERY_TASK_DEFAULT_QUEUE).
ROUTES = {
    "workers.tasks.deliver_notification_task": {"queue": Queue.NOTIFICATIONS},
    "workers.tasks.export_task": {"queue": Queue.EXPORTS},
    "workers.tasks.reprice_override_task": {"queue": Queue.EXPORTS},
}
