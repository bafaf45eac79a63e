"""Each pytest-xdist worker's own Redis database and var folder, set before Django reads its
settings (this module is loaded with `-p`, ahead of pytest-django's set-up).

pytest-django already gives each worker its own test database. Redis and the var folder are
shared otherwise: one worker's cache flush, Celery queue or filesystem broker would reach
another's tests. Worker gwN uses Redis database base + 1 + N; its var folder sits under the
checkout's var/ and links the collected static files, which are collected once under a lock.
"""

from __future__ import annotations

import os
from pathlib import Path

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def worker_redis_url(url: str, index: int) -> str:
    """`url` with its database number moved past the base by one plus the worker's index."""
    base, slash, database = url.rpartition("/")
    if not slash or not database.isdigit() or base.endswith("/"):
        return f"{url.rstrip('/')}/{1 + index}"
    return f"{base}/{int(database) + 1 + index}"


if WORKER.startswith("gw"):
    index = int(WORKER[2:])
    if os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], index)
    shared = Path(os.environ.get("DECISIONBOARD_VAR_DIR") or Path(__file__).parents[2] / "var")
    own = shared / "test-workers" / WORKER
    own.mkdir(parents=True, exist_ok=True)
    (shared / "static").mkdir(parents=True, exist_ok=True)
    if not (own / "static").is_symlink():
        (own / "static").symlink_to(shared.resolve() / "static", target_is_directory=True)
    os.environ["DECISIONBOARD_VAR_DIR"] = str(own)
