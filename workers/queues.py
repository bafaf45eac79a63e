"""The Celery queues, named in one place, and which task goes to which.

Three kinds of work with different clocks, so that none waits behind another:

- `default`: short and frequent — catch-up passes (the freshness of every metric), heartbeats,
  the alert evaluation tick, export expiry. Never behind a long job.
- `notifications`: alert deliveries, each bounded by the transport's timeout (10 s) and retried
  with backoff; a slow webhook must hold up neither the rollups nor an export.
- `exports`: export jobs, minutes long at a million records.

`manage.py serve` runs a worker with beat on `default` and a second one, two tasks at a time, on
the two others (workers.processes.worker_commands): there, two exports running at once hold
notifications back until one ends. In production run one worker process (or more) per queue.
"""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    DEFAULT = "default"
    NOTIFICATIONS = "notifications"
    EXPORTS = "exports"


# Tasks not named here go to `default` (CELERY_TASK_DEFAULT_QUEUE).
ROUTES = {
    "workers.tasks.deliver_notification_task": {"queue": Queue.NOTIFICATIONS},
    "workers.tasks.export_task": {"queue": Queue.EXPORTS},
}
