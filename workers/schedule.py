"""The beat schedule: one entry per periodic task, each with why it runs that often."""

from __future__ import annotations

from workers.queues import Queue

BEAT_SCHEDULE = {
    # Folds new records into rollups, run summaries and streaks. Ingest also nudges it after each
    # commit; this catches up whatever a lost nudge or a broker outage left behind.
    "catch-up": {
        "task": "workers.tasks.catch_up_task",
        "schedule": 5.0,
        "options": {"queue": Queue.DEFAULT, "expires": 5.0},
    },
    # Proves beat and a worker are both alive; the overview shows how long ago it last ran.
    "heartbeat": {
        "task": "workers.tasks.heartbeat_task",
        "schedule": 10.0,
        "options": {"queue": Queue.DEFAULT, "expires": 10.0},
    },
}
