"""The Celery broker as an operator sees it: reachable or not, and how many messages wait.

Redis when REDIS_URL is set (kombu keeps each queue as a list named after it, plus one list per
priority step); otherwise the filesystem broker under var/broker, where a waiting message is a
file named `<time>_<uuid>.<queue>.msg` in the queue folder (workers.broker).
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from config.queues import Queue

# kombu's Redis transport: a message of priority p > 0 waits in "<queue>\x06\x16<p>".
_REDIS_PRIORITY_SEPARATOR = "\x06\x16"
_REDIS_PRIORITY_STEPS = (3, 6, 9)
_TIMEOUT = 1.0


def _redis():
    import redis

    return redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=_TIMEOUT, socket_timeout=_TIMEOUT
    )


def _queue_folder() -> Path:
    return Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])


def problem() -> str | None:
    """Why the broker cannot take a message now, or None when it can."""
    if settings.REDIS_URL:
        try:
            with _redis() as client:
                client.ping()
        except Exception as exc:  # redis-py raises several types; all mean "not reachable"
            return f"Redis at REDIS_URL is unreachable ({type(exc).__name__}: {exc})"
        return None
    folder = _queue_folder()
    if not folder.is_dir():
        return f"the broker folder {folder} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the broker folder {folder} is not writable"
    return None


def queue_depths() -> dict[str, int]:
    """Messages waiting in each queue of config.queues (not those a worker holds)."""
    queues = [q.value for q in Queue]
    if settings.REDIS_URL:
        with _redis() as client:
            pipe = client.pipeline(transaction=False)
            for queue in queues:
                pipe.llen(queue)
                for step in _REDIS_PRIORITY_STEPS:
                    pipe.llen(f"{queue}{_REDIS_PRIORITY_SEPARATOR}{step}")
            lengths = pipe.execute()
        per_queue = 1 + len(_REDIS_PRIORITY_STEPS)
        return {q: sum(lengths[i * per_queue : (i + 1) * per_queue]) for i, q in enumerate(queues)}
    depths = dict.fromkeys(queues, 0)
    with os.scandir(_queue_folder()) as entries:
        for entry in entries:
            parts = entry.name.rsplit(".", 2)
            if len(parts) == 3 and parts[2] == "msg" and parts[1] in depths:
                depths[parts[1]] += 1
    return depths
