"""Best-effort nudges from the web process to the workers; never on the acknowledgement path."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)
DEBOUNCE_SECONDS = 1


def request_catch_up(project_id: int | None = None) -> bool:
    """Ask a worker to fold in new records of this project (its catch-up lane; every lane when
    None) soon; at most once a second per lane and cache.

    Beat runs the same task every few seconds anyway, so a lost nudge only adds latency: any
    broker error is logged and swallowed, and ingest answers as if nothing happened.
    """
    if not settings.DECISIONBOARD["NUDGE_WORKERS"]:
        return False
    from records.catchup import configured_lanes, lane_of
    from workers.tasks import catch_up_task

    lane = None if project_id is None else lane_of(project_id, configured_lanes())
    try:
        if not cache.add(f"catch-up-requested:{lane}", 1, timeout=DEBOUNCE_SECONDS):
            return False
        catch_up_task.apply_async((lane,), expires=60, retry=False)
    except Exception as exc:  # Redis down or unreachable: the beat and the watermark cover it
        log.warning("could not enqueue catch-up (%s); the next beat will run it", exc)
        return False
    return True
