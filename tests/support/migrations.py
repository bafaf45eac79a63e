"""Migrating the test database to a given state and back."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder
from django.db.migrations.state import StateApps


def migrate(targets) -> StateApps:
    """Migrate to the targets. Returns the models as they stand there: today's models name
    columns that a schema migrated back to lacks, so rows are written and read through these."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def latest_migration() -> tuple[str, str]:
    row = MigrationRecorder(connection).migration_qs.filter(app="records").order_by("-id").first()
    return row.app, row.name


def forget_migration(app: str, name: str) -> None:
    """As if `app.name` were new code not yet migrated (the test's transaction restores it)."""
    MigrationRecorder(connection).migration_qs.filter(app=app, name=name).delete()
