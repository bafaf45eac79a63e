"""A pool process keeps its database connection from task to task, as a web thread does from
request to request.

Celery's Django fixup closes every connection before and after each task (unless
`DB_REUSE_MAX`, then every that many tasks), whatever CONN_MAX_AGE says: it stopped trusting
Django's `close_if_unusable_or_obsolete` after a task interrupted by a time limit in the middle
of a query left a connection that looked usable and was not (celery/celery#9824). So every
catch-up task — one a second per lane under load, the ingest nudges, plus beat's — opened a new
PostgreSQL connection: a backend forked and authenticated, and its first queries planned with
cold catalog caches over every partition of the records table.

Here the fixup's closing is left to `DB_REUSE_MAX` (settings: a backstop, every 1,000 tasks),
and around each task Django's own request rule applies: `close_old_connections()` before and
after it closes a connection past CONN_MAX_AGE (60 s) or one that had errors and fails its
check, and CONN_HEALTH_CHECKS checks a kept connection before the task's first query. The case
that made Celery give up cannot happen the same way here: no task has a time limit, and a task
that does not end in SUCCESS (an error, a retry after an outage) closes every connection as
the fixup did, so the next task starts on a new one. A task run eagerly (`apply()`, in the
caller's process and maybe inside its transaction) is left alone, as the fixup leaves it.
"""

from __future__ import annotations

from django.db import close_old_connections, connections


def _eager(task) -> bool:
    return bool(getattr(getattr(task, "request", None), "is_eager", False))


def before_task(task=None, **_kwargs) -> None:
    if not _eager(task):
        close_old_connections()


def after_task(task=None, state: str | None = None, **_kwargs) -> None:
    if _eager(task):
        return
    if state == "SUCCESS":
        close_old_connections()
        return
    for connection in connections.all(initialized_only=True):
        connection.close()
