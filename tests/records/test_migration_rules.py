"""Migrations do what they did when they were written, whatever the product's code becomes: none
imports the product's modules, and one that needs the stored records derived again asks for a
rebuild, which runs once after `migrate` with the code migrated to (records.catchup.rebuild)."""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from records import catchup
from records.catchup.rebuild import REBUILD_REQUESTED
from records.models import Record, Rollup, Watermark
from records.store.ingest import ingest
from tests.support.factories import record

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("records", "alerts", "api", "dashboard", "workers", "ops", "config")
# Django writes a field's default callable by its dotted path, so the migration imports the
# callable's module: the one kind of product import a migration may hold.
DEFAULT_CALLABLES = {"alerts/migrations/0001_initial.py": {"alerts.models"}}


def imported(path: Path) -> set[str]:
    """Every module the file imports, at its top or inside a function."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return modules


def migration_files() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (ROOT / package).glob("migrations/0*.py"))


def test_it_finds_the_migrations_it_checks():
    names = {path.relative_to(ROOT).as_posix() for path in migration_files()}
    assert "records/migrations/0001_initial.py" in names
    assert "alerts/migrations/0001_initial.py" in names


def test_it_keeps_every_migration_free_of_the_products_modules():
    offenders = {}
    for path in migration_files():
        name = path.relative_to(ROOT).as_posix()
        own = f"{path.parent.parent.name}.migrations"
        allowed = DEFAULT_CALLABLES.get(name, set())
        product = {
            module
            for module in imported(path)
            if module.split(".")[0] in PRODUCT
            and not module.startswith(own)
            and module not in allowed
        }
        if product:
            offenders[name] = sorted(product)
    assert offenders == {}


@pytest.mark.both_dbs
def test_a_rebuild_a_migration_asks_for_runs_once_after_migrate(transactional_db, alice):
    ingest(
        alice.project.pk,
        enumerate(record("classifier.verdict", run_id=f"run-{i}") for i in range(6)),
        now=timezone.now(),
    )
    catchup.catch_up()
    folded = sorted(Rollup.objects.values_list("grain", "kind", "key", "count"))
    assert folded
    # A derivation that changed since these records were stored: their columns say otherwise.
    Record.objects.update(outcome="stale", rollup_key="stale")
    Rollup.objects.update(key="stale")

    request = import_module("records.migrations.0006_violations_models_classifications")
    request.request_rebuild(apps, SimpleNamespace(connection=connection))
    assert Watermark.objects.filter(name=REBUILD_REQUESTED).exists()
    call_command("migrate", verbosity=0)

    assert not Watermark.objects.filter(name=REBUILD_REQUESTED).exists()
    assert set(Record.objects.values_list("outcome", flat=True)) == {"allow"}
    assert not Rollup.objects.exists()  # dropped, for the catch-up to fold again
    catchup.catch_up()
    assert sorted(Rollup.objects.values_list("grain", "kind", "key", "count")) == folded

    call_command("migrate", verbosity=0)  # nothing asked: nothing rebuilt
    assert sorted(Rollup.objects.values_list("grain", "kind", "key", "count")) == folded


@pytest.mark.both_dbs
def test_a_migration_on_an_empty_database_asks_for_no_rebuild(transactional_db):
    request = import_module("records.migrations.0009_tool_decisions")
    request.request_refold(apps, SimpleNamespace(connection=connection))
    assert not Watermark.objects.filter(name=REBUILD_REQUESTED).exists()
