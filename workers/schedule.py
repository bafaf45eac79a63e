"""The beat schedule: one entry per periodic task, each with why it runs that often."""

from __future__ import annotations

from workers.queues import Queue

BEAT_SCHEDULE = {
    # Proves beat and a worker are both alive; the overview shows how long ago it last ran.
    "heartbeat": {
        "task": "workers.tasks.heartbeat_task",
        "schedule": 10.0,
        "options": {"queue": Queue.DEFAULT, "expires": 10.0},
    },
}
