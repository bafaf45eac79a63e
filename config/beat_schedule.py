"""The beat schedule: one entry per periodic task, each with why it runs that often."""

from __future__ import annotations

from config.queues import Queue


def beat_schedule(lanes: int) -> dict:
    """The schedule of an installation with `lanes` catch-up lanes (DECISIONBOARD_CATCHUP_LANES)."""
    return {**_catch_up(lanes), **BEAT_SCHEDULE}


def _catch_up(lanes: int) -> dict:
    # Folds new records into rollups, run summaries and streaks: one task per lane, so that idle
    # worker processes take the lanes in parallel (records.catchup.passes). Ingest also nudges the
    # lane of the project it stored for; this catches up whatever a lost nudge or a broker outage
    # left behind.
    return {
        f"catch-up-lane-{lane}": {
            "task": "workers.tasks.catch_up_task",
            "schedule": 5.0,
            "args": (lane,),
            "options": {"queue": Queue.DEFAULT, "expires": 5.0},
        }
        for lane in range(lanes)
    }


BEAT_SCHEDULE = {
    # One per queue: proves beat and a worker on that queue are both alive; the overview shows
    # how long ago each last ran (workers.heartbeat).
    **{
        f"heartbeat-{queue}": {
            "task": "workers.tasks.heartbeat_task",
            "schedule": 10.0,
            "args": (queue.value,),
            "options": {"queue": queue, "expires": 10.0},
        }
        for queue in Queue
    },
    # Deletes export files past their expiry (DECISIONBOARD_EXPORT_TTL_HOURS) and fails export
    # jobs whose worker vanished; a quarter of an hour late is harmless for either.
    "expire-exports": {
        "task": "workers.tasks.expire_exports_task",
        "schedule": 900.0,
        "options": {"queue": Queue.DEFAULT, "expires": 900.0},
    },
    # Expires records, rollups and runs past retention (records.store.retention), and on PostgreSQL
    # creates the days' partitions ahead. Retention counts whole days, so hourly drops a day
    # within the hour of midnight UTC; a run that misses a partition's lock retries next hour.
    "expire-records": {
        "task": "workers.tasks.expire_records_task",
        "schedule": 3600.0,
        "options": {"queue": Queue.DEFAULT, "expires": 3600.0},
    },
    # Evaluates every alert rule from the rollups; rules count in whole minutes, so once a
    # minute is as often as a state can change. A tick that overruns is not stacked on.
    "evaluate-alerts": {
        "task": "workers.tasks.evaluate_alerts_task",
        "schedule": 60.0,
        "options": {"queue": Queue.DEFAULT, "expires": 60.0},
    },
}
