"""Can this process serve? The checks behind /readyz, which `manage.py doctor` runs too.

Each answers in a second or so whatever is down: PostgreSQL gives up connecting after
POSTGRES_CONNECT_TIMEOUT (config.settings), Redis after ops.broker's timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from config.outage import DATABASE_UNAVAILABLE
from ops import broker
from records.store.backends import backend


@dataclass(frozen=True)
class Probe:
    name: str
    ok: bool
    detail: str


def database() -> Probe:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DATABASE_UNAVAILABLE as exc:
        return Probe("database", False, f"unreachable ({type(exc).__name__}: {exc})".strip())
    return Probe("database", True, f"{backend().name} reachable")


def unapplied_migrations() -> list[str]:
    """The migrations on disk that the database has not applied, as app.name, in order."""
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]


def migrations() -> Probe:
    try:
        pending = unapplied_migrations()
    except DATABASE_UNAVAILABLE as exc:
        return Probe("migrations", False, f"not checked: the database is unreachable ({exc})")
    if pending:
        return Probe("migrations", False, f"{len(pending)} not applied: {', '.join(pending)}")
    return Probe("migrations", True, "all applied")


def broker_probe() -> Probe:
    problem = broker.problem()
    if problem:
        return Probe("broker", False, problem)
    return Probe(
        "broker", True, "Redis reachable" if settings.REDIS_URL else "filesystem broker ready"
    )


def readiness() -> list[Probe]:
    """Database reachable, migrations applied, broker reachable: what /readyz answers."""
    db = database()
    if db.ok:
        applied = migrations()
    else:
        applied = Probe("migrations", False, "not checked: the database is unreachable")
    return [db, applied, broker_probe()]
